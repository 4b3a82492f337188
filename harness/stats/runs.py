"""Per-run figures: the measured window, latency percentiles, throughput, CPU and memory, and whether a run shows capacity or behaviour."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from harness.model.manifests import RunManifest
from harness.model.roles import Roles
from harness.stats import gateway_time
from harness.stats.definitions import (
    DEFAULT_BIN_USERS,
    ERROR_KINDS,
    LOCUST_CPU_LIMIT_PERCENT,
    MOCK_CPU_LIMIT_FRACTION,
    MOCK_HOLD_TOLERANCE_MS,
    OFFERED_SHARE,
    OTHER_CPU_LIMIT_PERCENT,
    PERCENTILES,
)
from harness.stats.loading import (
    Study,
    as_float,
    cpu_count,
    load_avg_before,
    locust_processes,
    mock_latency_ms,
    mock_workers,
)
from harness.stats.outcomes import Label
from harness.stats.rows import percentile, successful


def _interp(t: np.ndarray, v: np.ndarray, at: float) -> float:
    if t.size == 0 or math.isnan(at):
        return math.nan
    if at < t[0] or at > t[-1]:
        # outside the sampled span: only the nearest sample within 1.5 s is trusted
        nearest = t[0] if at < t[0] else t[-1]
        if abs(at - nearest) > 1.5:
            return math.nan
    return float(np.interp(at, t, v))


def users_bin(users: pd.Series | np.ndarray, bin_users: int = DEFAULT_BIN_USERS) -> np.ndarray:
    """The lower edge of each user count's bin: floor(users / bin_users) * bin_users."""
    u = np.asarray(users, dtype="int64")
    return (u // int(bin_users)) * int(bin_users)


def window_rows(study: Study, run: RunManifest) -> pd.DataFrame:
    """The rows of a run sent inside its measured window [hold_start, hold_end)."""
    lo, hi = run.phases.t("hold_start"), run.phases.t("hold_end")
    rows = study.requests[study.requests["run_id"] == run.run_id]
    if math.isnan(lo) or math.isnan(hi):
        return rows.iloc[0:0]
    t = rows["start_t_unix_s"]
    return rows[(t >= lo) & (t < hi)]


def _floor_bins(study: Study, floor: str | None, bin_users: int) -> pd.DataFrame | None:
    """Per users-bin, the floor's window percentiles, averaged over its completed runs."""
    per_run = []
    for run in study.runs:
        if floor is None or run.system != floor or run.status != "completed":
            continue
        ok = successful(window_rows(study, run))
        if not len(ok):
            continue
        b = users_bin(ok["users"], bin_users)
        for edge, grp in ok.groupby(b):
            per_run.append({"bin": int(edge), "run_id": run.run_id,
                            **{f"p{q}": percentile(grp["latency_ms"], q) for q in PERCENTILES}})
    if not per_run:
        return None
    return pd.DataFrame(per_run).groupby("bin")[[f"p{q}" for q in PERCENTILES]].mean()


# --- capacity or behaviour -----------------------------------------------------------------------

# Over 60 lines on purpose: one rule a paragraph, in the order a reader checks them.
def classify(row: Mapping, faulted: bool = False) -> tuple[Label, list[str]]:
    """(the run's Label, the reasons) for one run_summary row (or a dict with the
    same keys). Capacity needs positive evidence for every criterion; missing data is a reason.
    faulted: the run's provider failed on purpose (a fault scenario), so its failed requests are
    its subject, not its limit."""
    if row.get("status") != "completed":
        status = row.get("status")
        if status == "running":
            return Label.FAILED, ["run still running (not finished when the study was read)"]
        return Label.FAILED, [f"run {status}: {row.get('reason') or 'no reason recorded'}"]
    reasons: list[str] = []
    peak = as_float(row.get("locust_cpu_peak_percent"))
    procs = as_float(row.get("locust_processes"))
    procs = procs if procs > 0 else 1.0   # NaN compares False
    limit = LOCUST_CPU_LIMIT_PERCENT * procs
    if math.isnan(peak):
        reasons.append("Locust CPU was not sampled")
    elif peak >= limit:
        reasons.append(f"Locust CPU peaked at {peak:.0f}% (limit {limit:.0f}% for "
                       f"{procs:.0f} process{'es' if procs != 1 else ''}): the load generator "
                       "limited the load")
    if bool(row.get("locust_cpu_warning")):
        reasons.append("Locust printed its high-CPU warning")
    hold99, set_ms = as_float(row.get("mock_hold_p99_ms")), as_float(row.get("mock_latency_ms"))
    if math.isnan(hold99) or math.isnan(set_ms):
        reasons.append("the mock's hold-time p99 is unknown")
    elif hold99 - set_ms > MOCK_HOLD_TOLERANCE_MS:
        reasons.append(f"the mock's hold-time p99 was {hold99:.2f} ms for a set {set_ms:g} ms "
                       f"(+{hold99 - set_ms:.2f} ms > {MOCK_HOLD_TOLERANCE_MS:g} ms): the mock "
                       "was slowed")
    mpeak, mlimit = as_float(row.get("mock_cpu_peak_percent")), as_float(row.get("mock_cpu_limit_percent"))
    if math.isnan(mpeak):
        reasons.append("the mock's CPU was not sampled")
    elif not math.isnan(mlimit) and mpeak >= mlimit:
        reasons.append(f"the mock's CPU peaked at {mpeak:.0f}% (limit {mlimit:.0f}%)")
    load, cores = as_float(row.get("load_avg_before")), as_float(row.get("cpu_count"))
    if math.isnan(load) or math.isnan(cores):
        reasons.append("the load average before the run is unknown")
    elif load >= cores:
        reasons.append(f"the load average before the run was {load:.2f} on {cores:.0f} cores: "
                       "the machine was already busy")
    other = as_float(row.get("other_cpu_mean_percent"))
    if not math.isnan(other) and other > OTHER_CPU_LIMIT_PERCENT:
        reasons.append(f"other processes on the machine used {other:.0f}% CPU on average during "
                       f"the window (> {OTHER_CPU_LIMIT_PERCENT:.0f}%)")
    failures = sum(int(as_float(row.get(f"errors_{k}")) or 0) for k in ERROR_KINDS
                   if not math.isnan(as_float(row.get(f"errors_{k}"))))
    if failures and not faulted:
        parts = [f"{int(row.get(f'errors_{k}'))} {k}" for k in ERROR_KINDS
                 if as_float(row.get(f"errors_{k}")) > 0]
        reasons.append(f"{failures} failed request{'s' if failures != 1 else ''} "
                       f"({', '.join(parts)})")
    # identity is the correctness check; the count match is its cross-check (and the only
    # check of runs from before identity existed)
    ident = row.get("identity_problem")
    if ident:
        reasons.append(ident)
    cm = row.get("count_match")
    if cm is not None and not (isinstance(cm, float) and math.isnan(cm)) and not bool(cm):
        reasons.append("the mock's count does not match the successful rows")
    offered, tput = as_float(row.get("offered_rps")), as_float(row.get("throughput_rps"))
    if not math.isnan(offered) and not math.isnan(tput) and tput >= OFFERED_SHARE * offered:
        reasons.append(f"the users' think time capped the load at ~{offered:.0f} req/s and the "
                       f"system served {tput:.0f} req/s: the offered load, not the system, set "
                       "the throughput")
    return (Label.BEHAVIOUR if reasons else Label.CAPACITY), reasons


def _identity_problem(run: RunManifest) -> str:
    """What the identity join found wrong, "" when every successful row matched one mock row.
    Under provider faults an id the mock saw more than once is a retry, the system's answer to
    the fault: the lane reports it as amplification, not as a problem."""
    i = run.checks.identity
    if i is None or i.ok:
        return ""
    faulted = run.spec is not None and bool(run.spec.mock.fault_scenario)
    parts = [f"{n} {what}" for n, what in (
        (i.client_without_mock, "successful row(s) the mock never saw"),
        (i.mock_without_client, "mock row(s) no client sent"),
        (0 if faulted else i.ids_seen_more_than_once, "id(s) the mock saw more than once"),
        (i.client_without_id, "row(s) without an id")) if n]
    return "identity: " + ", ".join(parts) if parts else ""


# --- per run -------------------------------------------------------------------------------------

def other_cpu(run: RunManifest, samples: pd.DataFrame, start: float, end: float) -> tuple[float, float]:
    """(machine CPU, CPU of processes not ours) as window means, % of one core. With several
    hosts, hosts that report the same hostname are one machine (network namespaces share it):
    a machine's own figure comes from any of its hosts, ours is summed over all of them; the
    busiest machine is reported."""
    w = samples[(samples["t_unix_s"] >= start) & (samples["t_unix_s"] < end)]
    machine_of = {h: (run.hosts[h].before.get("hostname") if h in run.hosts else None) or h
                  for h in pd.unique(w["host"])}
    worst = (math.nan, math.nan)
    for name in sorted(set(machine_of.values()), key=str):
        hosts = [h for h, m in machine_of.items() if m == name]
        here = w[w["host"].isin(hosts)]

        def mean_of(rows: pd.DataFrame) -> float:
            v = rows["cpu_percent"].to_numpy(dtype="float64")
            v = v[~np.isnan(v)]
            return float(v.mean()) if v.size else math.nan
        machine = mean_of(here[here["role"] == "machine"])
        if math.isnan(machine):
            continue
        # isin, not ==: samples of an artifact version without hosts hold None, which == misses
        ours = [mean_of(here[(here["role"] == role) & here["host"].isin([h])])
                for role in ("system", "mock", "standby", "locust", "capture") for h in hosts]
        other = machine - sum(v for v in ours if not math.isnan(v))
        if math.isnan(worst[1]) or other > worst[1]:
            worst = (machine, other)
    return worst


@dataclass(frozen=True)
class RunView:
    """What every group of per-run figures reads: one run's rows, samples and phases."""
    study: Study
    run: RunManifest
    rows: pd.DataFrame          # every request row of the run
    samples: pd.DataFrame
    window: pd.DataFrame        # the rows sent inside the measured window
    ok: pd.DataFrame            # the window's successful rows
    hold_start: float
    hold_end: float
    load_start: float           # warm-up start, else ramp start
    load_end: float

    @classmethod
    def of(cls, study: Study, run: RunManifest) -> "RunView":
        window = window_rows(study, run)
        warmup, ramp = run.phases.t("warmup_start"), run.phases.t("ramp_start")
        return cls(study, run, study.requests[study.requests["run_id"] == run.run_id],
                   study.samples[study.samples["run_id"] == run.run_id], window,
                   successful(window), run.phases.t("hold_start"), run.phases.t("hold_end"),
                   warmup if not math.isnan(warmup) else ramp, run.phases.t("load_end"))


def _identity_figures(v: RunView) -> dict:
    run, window_s = v.run, v.hold_end - v.hold_start
    return {
        "run_id": run.run_id, "system": run.system, "run_index": run.run_index,
        "round": run.round, "position": run.position, "status": run.status or "unknown",
        "reason": run.reason, "comparison_key": run.comparison_key,
        "window_start_t_unix_s": v.hold_start, "window_end_t_unix_s": v.hold_end,
        "window_s": window_s, "requests_total": int(len(v.rows)),
        "requests_in_window": int(len(v.window)), "successful_in_window": int(len(v.ok)),
        "throughput_rps": (len(v.ok) / window_s) if window_s and window_s > 0 else math.nan,
    }


def _latency_figures(v: RunView) -> dict:
    latency = v.ok["latency_ms"].to_numpy(dtype="float64")
    rec: dict[str, Any] = {f"latency_p{q}_ms": percentile(latency, q) for q in PERCENTILES}
    rec["mock_latency_ms"] = mock = mock_latency_ms(v.study, v.run)
    rec.update({f"overhead_vs_mock_p{q}_ms": rec[f"latency_p{q}_ms"] - mock for q in PERCENTILES})
    return rec


def _overhead_vs_floor(v: RunView, floor: str | None, floor_bins: pd.DataFrame | None,
                       bin_users: int) -> dict:
    """Each percentile minus the floor's at the same users bin, weighted by the bins' rows; NaN
    with the reason when there is nothing to subtract."""
    missing = {q: math.nan for q in PERCENTILES}
    values, reason = missing, ""
    if floor is None:
        reason = "no floor system (gateway.toml role \"floor\") in this study"
    elif floor_bins is None:
        reason = (f"no completed {floor!r} run in this study"
                  if not any(r.system == floor for r in v.study.runs)
                  else f"no completed {floor!r} run with requests in its window")
    elif not len(v.ok):
        reason = "no successful requests in this run's window"
    else:
        acc, weight = {q: 0.0 for q in PERCENTILES}, 0
        for edge, grp in v.ok.groupby(users_bin(v.ok["users"], bin_users)):
            if int(edge) not in floor_bins.index:
                continue
            for q in PERCENTILES:
                acc[q] += len(grp) * (percentile(grp["latency_ms"], q)
                                      - floor_bins.loc[int(edge), f"p{q}"])
            weight += len(grp)
        if weight:
            values = {q: acc[q] / weight for q in PERCENTILES}
        else:
            reason = f"no {floor!r} window data at this run's user counts"
    return {**{f"overhead_vs_direct_p{q}_ms": values[q] for q in PERCENTILES},
            "overhead_vs_direct_reason": reason}


def _error_figures(v: RunView) -> dict:
    """Errors over the whole run by kind (an unknown kind counts as "other"), and the run's
    own checks."""
    kinds = v.rows["error_kind"].fillna("")
    unknown = int((~kinds.isin(["", *ERROR_KINDS])).sum())
    rec: dict[str, Any] = {f"errors_{k}": int((kinds == k).sum()) + (unknown if k == "other" else 0)
                           for k in ERROR_KINDS}
    rec["errors_total"] = int(sum(rec[f"errors_{k}"] for k in ERROR_KINDS))
    rec["errors_in_window"] = int(len(v.window) - len(v.ok))
    inflight = v.run.checks.inflight_at_stop
    rec["inflight_at_stop"] = float(inflight) if inflight is not None else math.nan
    rec["count_match"] = v.run.checks.count_match
    rec["identity_problem"] = _identity_problem(v.run)
    return rec


def _cpu_figures(v: RunView) -> dict:
    """The system role's CPU over the window (interpolated at its edges) per request sent in it."""
    system = v.samples[v.samples["role"] == "system"].sort_values("t_unix_s")
    reason = ""
    if not len(system):
        cpu = math.nan
        reason = "no samples of a system process (a system the client calls directly?)"
    else:
        t = system["t_unix_s"].to_numpy(dtype="float64")
        c = system["cpu_seconds_total"].to_numpy(dtype="float64")
        cpu = _interp(t, c, v.hold_end) - _interp(t, c, v.hold_start)
        if math.isnan(cpu):
            reason = "the samples do not cover the measured window"
    n = len(v.window)
    if not n and not reason:
        reason = "no requests in the window"
    return {"cpu_seconds_in_window": cpu,
            "cpu_ms_per_request": (cpu * 1000.0 / n) if n and not math.isnan(cpu) else math.nan,
            "cpu_reason": reason}


def _memory_figures(v: RunView) -> dict:
    """The system role's tree-summed RSS: idle before the load, peak, steady in the window,
    recovered after the load."""
    system = v.samples[v.samples["role"] == "system"].sort_values("t_unix_s")
    t = system["t_unix_s"].to_numpy(dtype="float64")
    rss = system["rss_bytes"].to_numpy(dtype="float64")

    def median(mask):
        return float(np.median(rss[mask])) if mask.any() else math.nan
    after = t >= v.load_end if not math.isnan(v.load_end) else np.zeros(t.shape, bool)
    return {
        "rss_idle_bytes": median(t < v.load_start) if not math.isnan(v.load_start) else math.nan,
        "rss_peak_bytes": float(rss.max()) if rss.size else math.nan,
        "rss_steady_bytes": (median((t >= v.hold_start) & (t < v.hold_end))
                             if not math.isnan(v.hold_start) else math.nan),
        "rss_recovered_bytes": float(rss[after][-1]) if after.any() else math.nan,
    }


def _self_overhead_figures(v: RunView) -> dict:
    reported = v.ok["self_overhead_ms"].to_numpy(dtype="float64")
    reported = reported[~np.isnan(reported)]
    return {"self_overhead_rows": int(reported.size),
            "self_overhead_p50_ms": percentile(reported, 50),
            "self_overhead_p95_ms": percentile(reported, 95)}


def _time_in_system_figures(v: RunView) -> dict:
    """Net of the mock per request, and on the wire (harness.stats.gateway_time)."""
    run_id = v.run.run_id
    mock_log = v.study.mock_requests(run_id) if v.study.has_mock_requests(run_id) else None
    return gateway_time.figures(v.run, v.ok, mock_log)


def _mock_hold_ms(v: RunView, quantile: str) -> float:
    """The mock's hold percentile from the run manifest, else from mock_stats.json."""
    held = getattr(v.run.mock, f"hold_ms_{quantile}")
    if held is None:
        held = (v.study.mock_stats.get(v.run.run_id, {}).get("hold_ms") or {}).get(quantile)
    return as_float(held)


def _limit_figures(v: RunView) -> dict:
    """What else might have limited the result: the load generator's and the mock's CPU, the
    mock's hold, the machine's other work."""
    def peak(role):
        s = v.samples[v.samples["role"] == role]
        if not math.isnan(v.load_start) and not math.isnan(v.load_end):
            s = s[(s["t_unix_s"] >= v.load_start) & (s["t_unix_s"] <= v.load_end)]
        values = s["cpu_percent"].to_numpy(dtype="float64")
        values = values[~np.isnan(values)]
        return float(values.max()) if values.size else math.nan
    # where the mock's own time goes on shared cores: waiting for a CPU, per request it saw
    wait, seen = v.run.mock.run_queue_wait_ms, v.run.mock.count
    machine, other = other_cpu(v.run, v.samples, v.hold_start, v.hold_end)
    return {
        "locust_cpu_peak_percent": peak("locust"),
        "locust_processes": locust_processes(v.study, v.run),
        "locust_cpu_warning": v.run.locust.cpu_warning,
        "mock_hold_p99_ms": _mock_hold_ms(v, "p99"),
        "mock_hold_p50_ms": _mock_hold_ms(v, "p50"),
        "mock_cpu_wait_per_request_ms": wait / seen if wait is not None and seen else math.nan,
        "mock_cpu_peak_percent": peak("mock"),
        "mock_cpu_limit_percent": 100.0 * mock_workers(v.study, v.run) * MOCK_CPU_LIMIT_FRACTION,
        "load_avg_before": load_avg_before(v.run, v.samples),
        "machine_cpu_mean_percent": machine,
        "other_cpu_mean_percent": other,
        "cpu_count": cpu_count(v.study),
    }


def _offered_figures(v: RunView) -> dict:
    """Closed-loop users that wait between calls offer at most users / (think + the fastest
    possible call: the mock's hold plus its stream). Not the measured latency: by Little's law
    a closed loop's throughput always equals users / (think + latency), so a slow system would
    look as if the think time, not it, had set its throughput."""
    if v.run.spec is None:
        return {"offered_rps": math.nan}
    load, mock = v.run.spec.load, v.run.spec.mock
    think, users = as_float(load.think_time_s), as_float(load.users)
    fastest_s = (as_float(mock.mock_latency_ms) + (
        as_float(mock.stream_chunks) * as_float(mock.chunk_delay_ms) if load.stream else 0.0)) / 1000.0
    return {"offered_rps": (users / (think + fastest_s) if think > 0 and not math.isnan(fastest_s)
                            else math.nan)}


# The groups of per-run figures, in run_summary's column order. A new per-run figure is a key
# of one of these (or a new group here), a Metric in harness.model.metrics, and its line in
# the table that shows it (README: adding a metric).
FIGURE_GROUPS: tuple[Callable[[RunView], dict], ...] = (
    _identity_figures, _latency_figures, _error_figures, _cpu_figures, _memory_figures,
    _self_overhead_figures, _time_in_system_figures, _limit_figures, _offered_figures)


def run_summary(study: Study, bin_users: int = DEFAULT_BIN_USERS,
                floor: str | None = None) -> pd.DataFrame:
    """One row per run (plan order) with every per-run figure (FIGURE_GROUPS, then the label
    classify gives it); see the package docstring. The overheads vs the floor are against
    ``floor`` (default: the study's floor system)."""
    floor = floor or Roles.of(study.manifest).floor
    floor_bins = _floor_bins(study, floor, bin_users)
    out = []
    for run in study.runs:
        view = RunView.of(study, run)
        rec: dict[str, Any] = {}
        for group in FIGURE_GROUPS:
            rec.update(group(view))
            if group is _latency_figures:
                rec.update(_overhead_vs_floor(view, floor, floor_bins, bin_users))
        spec = view.run.spec
        label, reasons = classify(rec, faulted=spec is not None and bool(spec.mock.fault_scenario))
        rec["label"] = label
        rec["label_reasons"] = "; ".join(reasons)
        out.append(rec)
    df = pd.DataFrame(out)
    if not len(df):
        return pd.DataFrame(columns=["run_id", "system", "run_index", "status", "label"])
    return df
