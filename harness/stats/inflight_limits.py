"""The in-flight lane across runs: each figure per system and step (mean ± sd), the memory each
open request costs (the slope of RSS against open requests, with R²), where each system stops and
why, the instruments' label, the rule that a system failing a step is not run above it, and the
memory and replicas at a planned concurrency (planned rate × planned latency)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.model.inflight import STOP_ADDED_P99_S
from harness.stats.across import describe
from harness.stats.inflight_abandon import ABANDON_FIGURES
from harness.stats.inflight_lane import (
    ERROR_CAUSES,
    HELD_ADDED_P99_MS,
    HELD_OPEN_SHARE,
    INSTRUMENTS_ADDED_SHARE,
    inflight_steps,
    is_inflight,
)
from harness.stats.limit_lines import evidence as own_words

# Figures described across runs per system and step.
STEP_FIGURES = ("client_open_mean", "client_open_max", "mock_open_mean", "mock_open_max",
                "system_open_mean",
                "open_files_limit", "rss_mib", "open_fds", "system_processes",
                "upstream_connections",
                "requests_per_connection", "added_p50_ms", "added_p99_ms",
                "added_over_floor_p99_ms", "cpu_ms_per_request",
                "cpu_ms_per_frame", "system_cpu_percent", "failed",
                *(f"errors_{c}" for c in ERROR_CAUSES), *ABANDON_FIGURES)
# What stopped a system, judged from the step's evidence in this order.
CPU_BUSY_PERCENT = 90.0          # of the cores the system may use
FILES_NEAR_LIMIT_SHARE = 0.95    # descriptors at this share of the open-file limit
POOL_SHARE = 0.9                 # the mock saw at most this share of what the client held open
# Failures the system answered itself: a system that refuses fast (a 429 at its own cap) does not
# queue, so these name the stop before the gap between the client's and the mock's open counts.
ANSWERED = ("http_4xx", "http_5xx", "bad_body", "error_event", "truncated")
# Runs whose steps count: a run that failed held the steps before it failed.
ENDED = ("completed", "failed")
INSTRUMENTS = "instruments' limit"
CLIENT_LIMIT = "the load generator's own limit (not the system's)"
NOT_RUN = f"not run: failed the step below, or added over {STOP_ADDED_P99_S:g} s to it"
PARTLY_RUN = "not run in every run: a step below failed in some"
# What a step's most frequent failure class stopped it on: one phrase for every class.
STOP_WORDS: dict[str, str] = {
    "client_limit": CLIENT_LIMIT,
    "connect_refused": "refused connections", "connect_timeout": "connect timeouts",
    "reset_before_head": "resets before an answer",
    "closed_without_answer": "connections closed without an answer",
    "read_timeout": "timeouts awaiting the answer",
    "reset_during_body": "resets during the body",
    "closed_during_body": "connections closed during the body",
    "http_5xx": "5xx answers", "http_4xx": "4xx answers",
    "bad_body": "answers without a completion",
    "error_event": "error events in the stream",
    "truncated": "answers cut short without an error",
    "other": "errors"}
DEFAULT_PLANNED_RPS = 1000.0
DEFAULT_PLANNED_LATENCY_S = 10.0


@dataclass(frozen=True)
class Slope:
    mib_per_1000: float          # MiB of RSS per 1,000 open requests
    intercept_mib: float         # RSS at no open request, by the fit
    r2: float
    points: int

    def mib_at(self, open_requests: float) -> float:
        return self.intercept_mib + self.mib_per_1000 * open_requests / 1000.0


def rss_slope(open_requests, rss_mib) -> Slope:
    """Least squares of RSS (MiB) on open requests; NaN figures with fewer than two distinct x."""
    x, y = np.asarray(open_requests, float), np.asarray(rss_mib, float)
    keep = ~(np.isnan(x) | np.isnan(y))
    x, y = x[keep], y[keep]
    if len(np.unique(x)) < 2:
        return Slope(math.nan, math.nan, math.nan, int(len(x)))
    slope, intercept = np.polyfit(x, y, 1)
    residual = float(((y - (slope * x + intercept)) ** 2).sum())
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - residual / total if total > 0 else 1.0
    return Slope(float(slope) * 1000.0, float(intercept), r2, int(len(x)))


def steps_to_run(held: list[bool]) -> list[bool]:
    """The skip rule: every step up to and including the first that failed runs; none above it."""
    out, failed_below = [], False
    for ok in held:
        out.append(not failed_below)
        failed_below = failed_below or not ok
    return out


def instruments_held(steps: pd.DataFrame, floor: str) -> dict[int, bool]:
    """Per target: whether the floor (direct: the load generator and the mock alone) held it in
    every run that ended (completed or failed). A step it did not hold, and every step above it,
    is the instruments' limit, for every system."""
    base = steps[(steps["system"] == floor) & steps["status"].isin(ENDED)]
    out, below = {}, True
    for target in sorted(int(t) for t in steps["target_open"].unique()):
        mine = base[base["target_open"] == target]
        held = bool(len(mine)) and bool(mine["held"].astype(bool).all())
        out[target] = below and (held or not len(base))
        below = out[target]
    return out


def judged(steps: pd.DataFrame, floor: str, hold_s: float) -> pd.DataFrame:
    """``steps`` with each run's step judged held (INFLIGHT_DEFINITIONS["held"]): a system's
    added p99 beyond the floor's at the same step (its mean over the floor's runs that ran it)
    under HELD_ADDED_P99_MS, since the floor's own added time is the instruments'; the floor's
    own under INSTRUMENTS_ADDED_SHARE of the hold; every system of a study without the floor
    against the hold alone (harness.stats.inflight_lane.is_held)."""
    steps = steps.copy()
    is_floor = steps["system"] == floor
    base = steps[is_floor & steps["ran"].astype(bool)]
    floor_p99 = base.groupby("target_open")["added_p99_ms"].mean()
    over = steps["added_p99_ms"] - steps["target_open"].map(floor_p99)
    steps["added_over_floor_p99_ms"] = over.where(~is_floor)
    relative = ~is_floor & over.notna()
    bound = pd.Series(math.inf, index=steps.index)
    bound[relative] = over[relative] - HELD_ADDED_P99_MS
    bound[is_floor] = steps.loc[is_floor, "added_p99_ms"] - INSTRUMENTS_ADDED_SHARE * hold_s * 1e3
    judge = relative | is_floor
    if judge.any():
        mine = steps[judge]
        steps.loc[judge, "held"] = (
            mine["ran"].astype(bool) & (mine["failed"] == 0) & (bound[judge] < 0)
            & (mine["client_open_mean"] >= HELD_OPEN_SHARE * mine["target_open"]))
    return steps


def summary(steps: pd.DataFrame, floor: str) -> pd.DataFrame:
    """Per system and target: each STEP_FIGURES as mean and sd over its completed runs that ran
    the step, how many held it, and the label (held, failed, the instruments' limit, not run)."""
    by_floor = instruments_held(steps, floor)
    done = steps[steps["status"].isin(ENDED)]
    out = []
    for (system, target), g in done.groupby(["system", "target_open"], sort=False):
        ran = g[g["ran"].astype(bool)]
        rec = {"system": system, "target_open": int(target), "runs": int(len(g)),
               "runs_ran": int(len(ran)), "runs_held": int(ran["held"].astype(bool).sum())}
        for name in STEP_FIGURES:
            d = describe(ran[name]) if name in ran and len(ran) else describe([])
            rec[f"{name}_mean"], rec[f"{name}_sd"] = d["mean"], d["sd"]
        rec["open_agree"] = bool(len(ran) and ran["open_agree"].astype(bool).all())
        unfit = [u for u in g.get("unfit", pd.Series(dtype=str)).fillna("") if u]
        rec["unfit"] = unfit[0] if unfit and not len(ran) else ""
        failures = [r for r in ran.get("run_failed", pd.Series(dtype=str)).fillna("") if r]
        rec["run_failed"] = failures[0] if failures else ""
        examples = [e for e in ran.get("error_example", pd.Series(dtype=str)).fillna("") if e]
        rec["error_example"] = examples[0] if examples else ""
        rec["instruments_limited"] = not by_floor.get(int(target), True)
        over = rec.get("added_over_floor_p99_ms_mean", math.nan)
        if system != floor and not math.isnan(over):
            # the floor's tail varies by hundreds of ms between runs: a system is judged on its
            # mean p99 against the floor's mean, every run open and without a failed request
            held = bool(len(ran) == len(g) and all_open(ran).all() and over < HELD_ADDED_P99_MS)
        else:
            held = bool(len(ran) and rec["runs_held"] == len(ran) == len(g))
        # a step the instruments did not hold measures them, not the system: never "held"
        rec["held"] = held and not rec["instruments_limited"]
        rec["label"] = _label(rec, system == floor)
        out.append(rec)
    return pd.DataFrame(out)


def _label(rec: dict, is_floor: bool) -> str:
    if rec["unfit"]:  # the machine's open-file limits, checked before the load: never the system's
        return INSTRUMENTS
    if rec["runs_ran"] == 0:
        return NOT_RUN
    if rec["instruments_limited"]:  # never blamed on the system: direct did not hold it either
        return INSTRUMENTS
    if rec["held"]:
        return "held"
    if rec["run_failed"]:
        return "failed"
    if rec["runs_ran"] < rec["runs"] and rec["runs_held"] == rec["runs_ran"]:
        return PARTLY_RUN
    return "failed"


def all_open(steps: pd.DataFrame) -> pd.Series:
    """Per run's step: its requests were really held open (it ran, no request failed, and at
    least HELD_OPEN_SHARE of the step was open at the client), however slow."""
    return (steps["ran"].astype(bool) & (steps["failed"].fillna(1) == 0)
            & (steps["client_open_mean"] >= HELD_OPEN_SHARE * steps["target_open"]))


def slopes(steps: pd.DataFrame) -> dict[str, Slope]:
    """Per system: MiB per 1,000 open over every step of every ended run whose requests were
    really held open (``all_open``): what an open request costs, whatever its latency; NaN
    figures when they were held at one step only."""
    held = steps[steps["status"].isin(ENDED) & all_open(steps)]
    # one step's runs differ in open requests by a few: a line through them is noise, not a slope
    return {system: (rss_slope(g["client_open_mean"], g["rss_mib"]) if g["target_open"].nunique() > 1
                     else Slope(math.nan, math.nan, math.nan, len(g)))
            for system, g in held.groupby("system", sort=False)}


def where_it_stops(table: pd.DataFrame, cores: float) -> pd.DataFrame:
    """Per system (from ``summary``): the highest step held with every step below it held, the
    next step and what stopped it there, with the evidence; "" when it held every step."""
    out = []
    for system, g in table.groupby("system", sort=False):
        g = g.sort_values("target_open")
        highest, stop = 0, None
        for rec in g.to_dict("records"):
            if not rec["held"]:
                stop = rec
                break
            highest = rec["target_open"]
        cause, evidence = ("", "") if stop is None else stop_cause(stop, cores)
        out.append({"system": system, "highest_held": highest,
                    "stopped_at": stop["target_open"] if stop else math.nan,
                    "cause": cause, "evidence": evidence})
    return pd.DataFrame(out)


def configuration(runs) -> str:
    """How one system's runs were configured: "sized" (its [scale] as its vendor documents),
    "as shipped", or "as shipped: <why>" when sized was asked and it has nothing to size."""
    said = []
    for run in runs:
        text = ("sized" if run.scale == "sized" and not run.scale_note
                else "as shipped" + (f": {run.scale_note}" if run.scale_note else ""))
        if text not in said:
            said.append(text)
    return "; ".join(said)


def with_own_words(stops: pd.DataFrame, steps: pd.DataFrame, runs) -> pd.DataFrame:
    """``stops`` with ``own_words``: at the step each system stopped at, the first line its
    gateway.toml's [limits] declares that its runs logged by that step's end, with its count
    (harness.stats.limit_lines), also added to the evidence."""
    stops = stops.copy()
    words = []
    for rec in stops.to_dict("records"):
        at = steps[(steps["system"] == rec["system"]) & (steps["target_open"] == rec["stopped_at"])]
        ends = dict(zip(at["run_id"], at["window_end_t_unix_s"]))
        words.append(own_words([r for r in runs if r.system == rec["system"]], ends)
                     if ends else "")
    stops["own_words"] = words
    stops["evidence"] = [f"{e}; its own log: {w}" if w and e else (w or e)
                         for e, w in zip(stops["evidence"], words)]
    return stops


def stop_cause(rec: dict, cores: float) -> tuple[str, str]:
    """What stopped a system at a step (a ``summary`` row), and the evidence."""
    if rec["label"] in (NOT_RUN, PARTLY_RUN):
        return "not run", rec["label"]
    if rec["label"] == INSTRUMENTS:
        return INSTRUMENTS, rec["unfit"] or "direct did not hold this step either"
    if rec["run_failed"]:
        return "the run failed", (f"{rec['run_failed'][:200]}; RSS {rec['rss_mib_mean']:,.0f} MiB, "
                                  f"{rec['open_fds_mean']:,.0f} descriptors before")
    client, mock = rec["client_open_mean_mean"], rec["mock_open_mean_mean"]
    # The limit is each process's, the count the whole tree's: a tree of several processes (its
    # workers) is taken to be at it only when its requests failed.
    processes = rec.get("system_processes_mean", math.nan)
    one = math.isnan(processes) or processes <= 1
    if (rec["open_fds_mean"] >= FILES_NEAR_LIMIT_SHARE * rec["open_files_limit_mean"]
            and (one or rec["failed_mean"] > 0)):
        return "open-file limit", (f"{rec['open_fds_mean']:.0f} descriptors open"
                                   + ("" if one else f" over {processes:.0f} processes")
                                   + f" of a limit of {rec['open_files_limit_mean']:.0f}"
                                   + ("" if one else " each"))
    errors = {c: rec[f"errors_{c}_mean"] for c in ERROR_CAUSES}
    top = max(errors, key=lambda c: (0 if math.isnan(errors[c]) else errors[c]))
    failed = (STOP_WORDS[top], (f"{errors[top]:,.0f} per run ({top})"
                                + (f"; e.g. {rec['error_example'][:160]!r}"
                                   if rec["error_example"] else "")))
    if errors[top] > 0 and top in ANSWERED:
        return failed
    if mock < POOL_SHARE * client:
        return "connection-pool cap", (f"the mock saw at most {rec['mock_open_max_mean']:.0f} "
                                       f"open upstream requests while {client:.0f} were open at "
                                       f"the client: requests queue in the system")
    if errors[top] > 0:
        return failed
    if rec["system_cpu_percent_mean"] >= CPU_BUSY_PERCENT * cores:
        return "CPU", f"{rec['system_cpu_percent_mean']:.0f}% CPU (of {cores:g} cores)"
    over = rec.get("added_over_floor_p99_ms_mean", math.nan)
    if not math.isnan(over):
        return "added latency", (f"added p99 {rec['added_p99_ms_mean']:.0f} ms, {over:.0f} ms "
                                 f"beyond direct's at this step (held: under "
                                 f"{HELD_ADDED_P99_MS:g} ms)")
    return "added latency", (f"added p99 {rec['added_p99_ms_mean']:.0f} ms ≥ "
                             f"{HELD_ADDED_P99_MS:g} ms")


def planned_open(planned_rps: float = DEFAULT_PLANNED_RPS,
                 planned_latency_s: float = DEFAULT_PLANNED_LATENCY_S) -> float:
    """Little's law: requests open at once at a planned rate and latency."""
    return planned_rps * planned_latency_s


def stop_limit(cause: str, evidence: str) -> str:
    """What a system's stop (``where_it_stops``) says bounds the open requests of one replica:
    descriptors, a configured cap, CPU, or, for a stop by errors or latency, that stop; a system
    that held every step (or whose next step the instruments could not hold) is bounded only by
    the highest step measured."""
    if cause == "open-file limit" or (cause == INSTRUMENTS and "descriptors" in evidence):
        return "descriptors"
    if cause == "connection-pool cap":
        return "a configured cap"
    if cause == "CPU":
        return "CPU"
    if not cause or cause in (INSTRUMENTS, CLIENT_LIMIT):
        return "the highest step measured"
    return f"its stop ({cause})"


def replicas_at(open_requests: float, cores_needed: float, slope: Slope, highest_held: int,
                replica_cores: float, replica_gib: float,
                step_limit: str = "the highest step measured") -> dict:
    """Replicas of (replica_cores, replica_gib) for a planned load, and which limit decides:
    CPU (cores needed), memory (the fit's RSS at the open requests) or the open requests over the
    most one replica held, named by what stopped it above (``stop_limit``)."""
    memory_gib = slope.mib_at(open_requests) / 1024.0
    by_limit = {"CPU": cores_needed / replica_cores if replica_cores > 0 else math.nan,
                "memory": memory_gib / replica_gib if replica_gib > 0 else math.nan,
                "connections": open_requests / highest_held if highest_held > 0 else math.inf}
    known = {k: v for k, v in by_limit.items() if not math.isnan(v)}
    decides = max(known, key=known.get) if known else ""
    named = step_limit if decides == "connections" else decides
    replicas = math.ceil(known[decides] - 1e-9) if decides and math.isfinite(known[decides]) else math.nan
    return {"open_requests": open_requests, "memory_gib": memory_gib,
            "replicas": max(replicas, 1) if not math.isnan(replicas) else replicas,
            "decides": named, **{f"replicas_by_{k.lower()}": v for k, v in by_limit.items()}}


@dataclass(frozen=True)
class Lane:
    """A study's in-flight lane: every run's steps, the summary per system and step, where each
    system stops and its MiB per 1,000 open."""
    steps: pd.DataFrame
    table: pd.DataFrame
    stops: pd.DataFrame
    slopes: dict[str, Slope]
    hold_s: float
    stream: bool
    floor: str = ""              # the instruments' floor (direct): its figures beside each system's

    @property
    def empty(self) -> bool:
        return self.table.empty


def lane(study, floor: str, cores: float) -> Lane:
    """The lane of ``study`` (a harness.stats.loading.Study); empty when it has no in-flight run."""
    steps = inflight_steps(study)
    if steps.empty:
        return Lane(steps, pd.DataFrame(), pd.DataFrame(), {}, math.nan, False, floor)
    runs = [r for r in study.runs if is_inflight(r)]
    hold_s = float(runs[0].spec.load.inflight_hold_s)
    steps = judged(steps, floor, hold_s)
    table = summary(steps, floor)
    stops = with_own_words(where_it_stops(table, cores), steps, runs)
    stops["configuration"] = [configuration([r for r in runs if r.system == system])
                              for system in stops["system"]]
    return Lane(steps, table, stops, slopes(steps), hold_s, bool(runs[0].spec.load.stream), floor)
