"""The feature-cost lane: what each feature adds over the same system's passthrough."""
from __future__ import annotations

import math

import pandas as pd

from harness.model.gateway_spec import feature_of, folder_of
from harness.stats.across import describe, fmt_mean_sd, verdict
from harness.stats.loading import Study, system_order
from harness.stats.metrics import DEFAULT_DIRECT
from harness.stats.runs import _ok, _pct, run_summary, window_rows

PASSTHROUGH = "passthrough"
FEATURE_METRICS = (("latency_p50_ms", "median latency added (ms)", 2),
                   ("latency_p99_ms", "p99 latency added (ms)", 2),
                   ("cpu_ms_per_request", "CPU-ms per request added", 3))


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
        ok = _ok(window_rows(study, run))
        meta.append({"run_id": run.run_id, "folder": folder_of(system),
                     "feature": feature_of(system),
                     "dialect": run.request.dialect if run.request else "",
                     "request_bytes": load.request_bytes if load else 0,
                     "stream": load.stream if load else False,
                     "ttft_p50_ms": _pct(ok["ttft_ms"], 50) if len(ok) else math.nan})
    if not meta:
        return pd.DataFrame()
    return rs.merge(pd.DataFrame(meta), on="run_id", how="inner")


def feature_cost(study: Study, rs: pd.DataFrame | None = None,
                 direct: str = DEFAULT_DIRECT) -> pd.DataFrame:
    """One row per (system@feature, metric): the feature's completed runs against the same
    system's passthrough runs (added = difference of means, its sd from both sets' sds, and the
    Welch + 10% verdict), and the latency added over the direct baseline in the same dialect."""
    runs = feature_runs(study, rs)
    if runs.empty:
        return pd.DataFrame()
    done = runs[runs["status"] == "completed"]
    metrics = list(FEATURE_METRICS)
    if done["stream"].any():
        metrics.append(("ttft_p50_ms", "time to first token added (ms)", 2))
    out = []
    for system in pd.unique(runs["system"]):
        sub = done[done["system"] == system]
        mine = runs[runs["system"] == system].iloc[0]
        base = done[(done["folder"] == mine["folder"]) & (done["feature"] == PASSTHROUGH)]
        floor = done[(done["folder"] == direct) & (done["dialect"] == mine["dialect"])]
        for metric, label, _ in metrics:
            a = sub[metric].astype("float64")
            b = base[metric].astype("float64")
            da, db, dd = describe(a), describe(b), describe(floor[metric].astype("float64"))
            rec = {"system": system, "folder": mine["folder"], "feature": mine["feature"],
                   "dialect": mine["dialect"], "request_bytes": int(mine["request_bytes"]),
                   "stream": bool(mine["stream"]), "metric": metric, "label": label,
                   "n": da["n"], "mean": da["mean"], "sd": da["sd"],
                   "n_passthrough": db["n"], "passthrough_mean": db["mean"], "passthrough_sd": db["sd"],
                   "added_mean": da["mean"] - db["mean"],
                   "added_sd": math.hypot(da["sd"], db["sd"]) if da["n"] >= 2 and db["n"] >= 2 else math.nan,
                   "vs_direct_mean": (da["mean"] - dd["mean"]) if metric != "cpu_ms_per_request" else math.nan,
                   "n_not_completed": int((runs["system"] == system).sum() - len(sub))}
            if mine["feature"] == PASSTHROUGH or mine["folder"] == direct:
                rec.update(verdict="reference", reason="the passthrough every feature is compared with"
                           if mine["feature"] == PASSTHROUGH else "the direct baseline")
            else:
                v = verdict(a, b, metric)
                rec.update(verdict=v["verdict"], reason=v["reason"])
            out.append(rec)
    return pd.DataFrame(out)


def feature_cost_table(study: Study, cost: pd.DataFrame | None = None) -> pd.DataFrame:
    """The lane's headline: per system@feature, what it adds over the same system's passthrough
    ('mean ± sd'), and its median latency over the direct baseline in the same dialect."""
    cost = feature_cost(study) if cost is None else cost
    if cost.empty:
        return pd.DataFrame()
    rows = []
    direct_rows = cost["folder"] == DEFAULT_DIRECT
    present = set(cost.loc[~direct_rows, "system"])
    for system in [name for name in system_order(study) if name in present]:
        sub = cost[cost["system"] == system].set_index("metric")
        first = sub.iloc[0]
        row = {"system": system, "dialect": first["dialect"],
               "body (KiB)": round(first["request_bytes"] / 1024), "stream": bool(first["stream"]),
               "runs": int(first["n"])}
        for metric, label, digits in FEATURE_METRICS + (("ttft_p50_ms", "time to first token added (ms)", 2),):
            if metric not in sub.index:
                continue
            r = sub.loc[metric]
            if first["feature"] == PASSTHROUGH:
                row[label] = "reference"
            else:
                row[label] = fmt_mean_sd({"n": r["n"], "mean": r["added_mean"], "sd": r["added_sd"]}, digits)
        p50 = sub.loc["latency_p50_ms"]
        row["median latency over direct (ms)"] = ("—" if math.isnan(p50["vs_direct_mean"])
                                                  else f"{p50['vs_direct_mean']:.2f}")
        verdicts = sub[sub["verdict"] != "reference"]
        row["verdict (CPU-ms)"] = (sub.loc["cpu_ms_per_request", "verdict"]
                                   if first["feature"] != PASSTHROUGH and len(verdicts) else "—")
        rows.append(row)
    return pd.DataFrame(rows)
