"""The open-loop lane: per arrival-rate step, what was served and how late, and each system's sustained rate."""
from __future__ import annotations

import math
from typing import Iterable

import pandas as pd

from harness.model.manifests import RunManifest
from harness.model.roles import Roles
from harness.stats.across import describe
from harness.stats.loading import Study
from harness.stats.rows import percentile, successful

OPEN_LOOP_BOUNDS_MS = (5.0, 10.0, 50.0)   # declared bounds on the p99 added latency
KEPT_UP_SHARE = 0.95       # a step is kept up when at least this share of its offered rate was served,
LOSS_SHARE = 0.01          # at most this share of its slots were never sent or failed,
GROWTH_SHARE = 0.5         # and the median latency from the intended start did not grow through the
GROWTH_MIN_MS = 10.0       # step (last quarter vs first) by more than max(this share, this many ms)

OPEN_LOOP_DEFINITIONS: dict[str, str] = {
    "latency from the intended start": "the schedule's slot time to the last byte: the wait for "
                                       "a free user or a late load generator counts, so a slow "
                                       "system cannot hide by being sent less",
    "achieved rate": "successful responses completed inside the step's window / the step's length",
    "kept up": f"achieved ≥ {KEPT_UP_SHARE:.0%} of offered, at most {LOSS_SHARE:.0%} of the "
               f"step's slots unsent or failed, and the median latency from the intended start "
               f"in the step's last quarter not above its first quarter's by more than "
               f"max({GROWTH_SHARE:.0%}, {GROWTH_MIN_MS:g} ms)",
    "p99 added latency": "the step's p99 latency from the intended start minus the floor "
                         "system's at the same offered rate (mean over its completed runs)",
    "sustained under a bound": "the highest offered rate up to which every step was kept up with "
                               "its p99 added latency within the bound (0 = not even the lowest)",
}


def is_open_loop(run: RunManifest) -> bool:
    return run.spec is not None and bool(run.spec.load.open_loop_rates_per_s)


def open_loop_steps(study: Study, floor: str | None = None) -> pd.DataFrame:
    """One row per open-loop run and step: offered vs achieved rate, slots scheduled and sent,
    latency percentiles from the intended and from the actual start, the schedule's lag, p99
    added latency vs the floor (default: the study's floor system) at the same offered rate,
    and whether the step was kept up (``reasons`` says why not; see OPEN_LOOP_DEFINITIONS)."""
    floor = floor or Roles.of(study.manifest).floor
    out = []
    for run in study.runs:
        if not is_open_loop(run):
            continue
        load = run.spec.load
        step_s, hs = float(load.open_loop_step_s), run.phases.t("hold_start")
        if math.isnan(hs):
            continue
        rows = study.requests[study.requests["run_id"] == run.run_id]
        for index, rate in enumerate(load.open_loop_rates_per_s, 1):
            start = hs + (index - 1) * step_s
            out.append(_open_loop_step(run, rows[rows["step_index"] == index], index,
                                       float(rate), start, step_s))
    table = pd.DataFrame(out)
    if table.empty:
        return table
    base = table[(table["system"] == floor) & (table["status"] == "completed")]
    ref = base.groupby("offered_rps")["from_intended_p99_ms"].mean()
    table["p99_added_ms"] = table["from_intended_p99_ms"] - table["offered_rps"].map(ref)
    table["floor_kept_up"] = table["offered_rps"].map(base.groupby("offered_rps")["kept_up"].all())
    return table


def _open_loop_step(run: RunManifest, rows: pd.DataFrame, index: int, rate: float, start: float,
                    step_s: float) -> dict:
    scheduled = math.ceil(rate * step_s - 1e-9)   # the slots k/rate < step_s the schedule offers
    ok = successful(rows)
    lag_ms = (rows["start_t_unix_s"] - rows["intended_start_t_unix_s"]).to_numpy(dtype="float64") * 1e3
    intended = ok["intended_start_t_unix_s"].to_numpy(dtype="float64")
    from_intended = (ok["start_t_unix_s"].to_numpy(dtype="float64") - intended) * 1e3 + \
        ok["latency_ms"].to_numpy(dtype="float64")
    end_t = ok["start_t_unix_s"].to_numpy(dtype="float64") + ok["latency_ms"].to_numpy(dtype="float64") / 1e3
    achieved = float(((end_t >= start) & (end_t < start + step_s)).sum()) / step_s
    quarter = step_s / 4.0
    first = percentile(from_intended[intended < start + quarter], 50)
    last = percentile(from_intended[intended >= start + step_s - quarter], 50)
    unsent, failed = scheduled - len(rows), len(rows) - len(ok)
    reasons = []
    if achieved < KEPT_UP_SHARE * rate:
        reasons.append(f"achieved {achieved:.0f} of {rate:g} req/s ({achieved / rate:.0%} < "
                       f"{KEPT_UP_SHARE:.0%})")
    if unsent > LOSS_SHARE * scheduled:
        reasons.append(f"{unsent} of {scheduled} slots never sent")
    if failed > LOSS_SHARE * scheduled:
        reasons.append(f"{failed} requests failed")
    if not math.isnan(first) and not math.isnan(last) and \
            last - first > max(GROWTH_MIN_MS, GROWTH_SHARE * first):
        reasons.append(f"latency from the intended start grew from {first:.1f} to {last:.1f} ms "
                       "through the step (a backlog)")
    waited = int(rows["waited_for_user"].sum())
    if waited:
        reasons.append(f"{waited} requests waited for a free user (more users would not change "
                       "the latency from the intended start, only who waits)")
    return {"run_id": run.run_id, "system": run.system,
            "run_index": run.run_index, "status": run.status, "step_index": index,
            "offered_rps": rate, "step_start_t_unix_s": start, "scheduled": scheduled,
            "sent": int(len(rows)), "unsent": unsent, "successful": int(len(ok)), "failed": failed,
            "waited_for_user": waited, "achieved_rps": achieved,
            "from_intended_p50_ms": percentile(from_intended, 50),
            "from_intended_p99_ms": percentile(from_intended, 99),
            "from_start_p50_ms": percentile(ok["latency_ms"], 50),
            "from_start_p99_ms": percentile(ok["latency_ms"], 99),
            "schedule_lag_p99_ms": percentile(lag_ms, 99),
            "from_intended_first_quarter_p50_ms": first, "from_intended_last_quarter_p50_ms": last,
            "kept_up": not [r for r in reasons if "waited for a free user" not in r],
            "reasons": "; ".join(reasons)}


def open_loop_capacity(steps: pd.DataFrame, floor: str | None,
                       bounds_ms: Iterable[float] = OPEN_LOOP_BOUNDS_MS) -> pd.DataFrame:
    """Per system, over completed runs: the highest offered rate sustained under each p99 added
    latency bound and the first offered rate it did not keep up with, each described across
    runs (``describe``), plus whether the floor also stopped there."""
    bounds = [float(b) for b in bounds_ms]
    per_run = []
    for run_id, g in steps[steps["status"] == "completed"].groupby("run_id", sort=False):
        g = g.sort_values("offered_rps")
        rec = {"system": g["system"].iloc[0], "run_id": run_id}
        failing = g[~g["kept_up"].astype(bool)]
        rec["stopped_at_rps"] = float(failing["offered_rps"].iloc[0]) if len(failing) else math.nan
        for b in bounds:
            within = g["kept_up"].astype(bool) & (g["p99_added_ms"] <= b)
            prefix = within.cumprod().astype(bool)   # every step up to it within the bound
            rec[f"sustained_{b:g}ms_rps"] = float(g["offered_rps"][prefix].max()) if prefix.any() else 0.0
        per_run.append(rec)
    per_run = pd.DataFrame(per_run)
    out = []
    floor_stop = (describe(per_run.loc[per_run["system"] == floor, "stopped_at_rps"])["min"]
                   if len(per_run) else math.nan)
    for system in pd.unique(steps["system"]):
        runs = per_run[per_run["system"] == system] if len(per_run) else per_run
        rec = {"system": system, "runs": int(len(runs)),
               "runs_kept_up_throughout": int(runs["stopped_at_rps"].isna().sum()) if len(runs) else 0,
               "highest_offered_rps": float(steps.loc[steps["system"] == system, "offered_rps"].max())}
        for name in ["stopped_at_rps"] + [f"sustained_{b:g}ms_rps" for b in bounds]:
            d = describe(runs[name]) if len(runs) else describe([])
            rec.update({f"{name}_n": d["n"], f"{name}_mean": d["mean"], f"{name}_sd": d["sd"]})
        stop = rec["stopped_at_rps_mean"]
        rec["floor_also_stopped"] = bool(system != floor and not math.isnan(floor_stop)
                                         and not math.isnan(stop) and stop >= floor_stop)
        out.append(rec)
    return pd.DataFrame(out)
