"""The feature-cost lane: what each feature adds over the same system's passthrough.

Systems named 'folder@feature' (gateways/<folder> called as its [features.<feature>] says) run
side by side in one study; each feature is compared with the same system's passthrough, and
with the floor (a system whose role is "floor") called in the same client dialect.
"""
from __future__ import annotations

import math
from dataclasses import asdict

import pandas as pd

from harness.model.gateway_spec import feature_of, folder_of
from harness.model.roles import Roles
from harness.stats.across import describe, verdict
from harness.stats.loading import Study
from harness.stats.rows import percentile, successful
from harness.stats.runs import run_summary, window_rows

PASSTHROUGH = "passthrough"
FEATURE_METRICS = ("latency_p50_ms", "latency_p99_ms", "cpu_ms_per_request")
STREAM_METRICS = ("ttft_p50_ms",)   # when the lane streamed


def feature_runs(study: Study, rs: pd.DataFrame | None = None) -> pd.DataFrame:
    """run_summary rows of the 'folder@feature' systems, with folder, feature, dialect, body size
    and stream (from each run's manifest), plus the run's time to first token when it streamed."""
    rs = run_summary(study) if rs is None else rs
    meta = []
    for run in study.runs:
        system = run.system
        if not feature_of(system):
            continue
        load = run.spec.load if run.spec else None
        ok = successful(window_rows(study, run))
        meta.append({"run_id": run.run_id, "folder": folder_of(system),
                     "feature": feature_of(system),
                     "dialect": run.request.dialect if run.request else "",
                     "request_bytes": load.request_bytes if load else 0,
                     "stream": load.stream if load else False,
                     "ttft_p50_ms": percentile(ok["ttft_ms"], 50) if len(ok) else math.nan})
    if not meta:
        return pd.DataFrame()
    return rs.merge(pd.DataFrame(meta), on="run_id", how="inner")


def feature_cost(study: Study, rs: pd.DataFrame | None = None,
                 floors: tuple[str, ...] | None = None) -> pd.DataFrame:
    """One row per (system@feature, metric): the feature's completed runs against the same
    system's passthrough runs (added = difference of means, its sd from both sets' sds, and the
    Welch + 10% verdict), and the latency added over the floor in the same dialect. ``floors``:
    the systems with the floor role (default: the study's). ``is_passthrough`` and ``is_floor``
    mark the rows every other is compared with (no verdict)."""
    runs = feature_runs(study, rs)
    if runs.empty:
        return pd.DataFrame()
    floors = Roles.of(study.manifest).floors if floors is None else floors
    done = runs[runs["status"] == "completed"]
    metrics = list(FEATURE_METRICS) + (list(STREAM_METRICS) if done["stream"].any() else [])
    out = []
    for system in pd.unique(runs["system"]):
        sub = done[done["system"] == system]
        mine = runs[runs["system"] == system].iloc[0]
        base = done[(done["folder"] == mine["folder"]) & (done["feature"] == PASSTHROUGH)]
        floor = done[done["system"].isin(floors) & (done["dialect"] == mine["dialect"])]
        is_passthrough, is_floor = mine["feature"] == PASSTHROUGH, system in floors
        for metric in metrics:
            a = sub[metric].astype("float64")
            b = base[metric].astype("float64")
            da, db, dd = describe(a), describe(b), describe(floor[metric].astype("float64"))
            rec = {"system": system, "folder": mine["folder"], "feature": mine["feature"],
                   "dialect": mine["dialect"], "request_bytes": int(mine["request_bytes"]),
                   "stream": bool(mine["stream"]), "metric": metric,
                   "n": da["n"], "mean": da["mean"], "sd": da["sd"],
                   "n_passthrough": db["n"], "passthrough_mean": db["mean"], "passthrough_sd": db["sd"],
                   "added_mean": da["mean"] - db["mean"],
                   "added_sd": math.hypot(da["sd"], db["sd"]) if da["n"] >= 2 and db["n"] >= 2 else math.nan,
                   "vs_floor_mean": (da["mean"] - dd["mean"]) if metric != "cpu_ms_per_request" else math.nan,
                   "n_not_completed": int((runs["system"] == system).sum() - len(sub)),
                   "is_passthrough": is_passthrough, "is_floor": is_floor}
            v = (asdict(verdict(a, b, metric)) if not (is_passthrough or is_floor)
                 else dict(ratio=math.nan, ratio_sd=math.nan, diff=math.nan, diff_low=math.nan,
                           diff_high=math.nan, p_value=math.nan, outcome=None, basis=None))
            rec.update({k: v[k] for k in ("ratio", "ratio_sd", "diff", "diff_low", "diff_high",
                                          "p_value", "outcome", "basis")})
            out.append(rec)
    return pd.DataFrame(out)
