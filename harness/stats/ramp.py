"""Figures against the user count during the ramp, and memory over time."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.model.roles import Roles
from harness.stats.definitions import DEFAULT_BIN_USERS, PERCENTILES
from harness.stats.loading import Study, as_float, mock_latency_ms
from harness.stats.rows import percentile, successful
from harness.stats.runs import users_bin


def ramp_curve(study: Study, bin_users: int = DEFAULT_BIN_USERS,
               floor: str | None = None) -> pd.DataFrame:
    """Per system, run and users bin along [ramp_start, hold_end): the time spent in the bin
    (the gaps from each request's send to the next, so throughput = successful / time),
    latency and overhead percentiles over the bin's successful requests; the overheads vs
    the floor are against ``floor`` (default: the study's floor system)."""
    floor_bins = _floor_ramp_bins(study, floor or Roles.of(study.manifest).floor, bin_users)
    out = []
    for run in study.runs:
        rid = run.run_id
        lo, hi = run.phases.t("ramp_start"), run.phases.t("hold_end")
        rows = study.requests[study.requests["run_id"] == rid]
        if math.isnan(hi):   # a run that ended early: up to its failure (or its last request)
            hi = as_float(run.failed_t_unix_s)
            if math.isnan(hi) and len(rows):
                hi = float(np.nextafter(rows["start_t_unix_s"].max(), math.inf))
        if math.isnan(lo) or math.isnan(hi):
            continue
        rows = rows[(rows["start_t_unix_s"] >= lo) & (rows["start_t_unix_s"] < hi)]
        if not len(rows):
            continue
        rows = rows.sort_values("start_t_unix_s", kind="mergesort")
        t = rows["start_t_unix_s"].to_numpy(dtype="float64")
        gaps = np.diff(np.append(t, hi))
        bins = users_bin(rows["users"], bin_users)
        ok_mask = (rows["error_kind"].fillna("") == "").to_numpy()
        lat = rows["latency_ms"].to_numpy(dtype="float64")
        mlat = mock_latency_ms(study, run)
        for edge in np.unique(bins):
            m = bins == edge
            dur = float(gaps[m].sum())
            okl = lat[m & ok_mask]
            rec = {"run_id": rid, "system": run.system, "run_index": run.run_index,
                   "status": run.status, "users_bin": int(edge),
                   "users_mid": int(edge) + bin_users / 2.0, "requests": int(m.sum()),
                   "successful": int(okl.size), "duration_s": dur,
                   "throughput_rps": okl.size / dur if dur > 0 else math.nan}
            for q in PERCENTILES:
                p = percentile(okl, q)
                rec[f"latency_p{q}_ms"] = p
                rec[f"overhead_vs_mock_p{q}_ms"] = p - mlat
                d = (floor_bins.loc[int(edge), f"p{q}"]
                     if floor_bins is not None and int(edge) in floor_bins.index else math.nan)
                rec[f"overhead_vs_direct_p{q}_ms"] = p - d
            out.append(rec)
    cols = ["run_id", "system", "run_index", "status", "users_bin", "users_mid", "requests",
            "successful", "duration_s", "throughput_rps"] + [
        f"{k}_p{q}_ms" for k in ("latency", "overhead_vs_mock", "overhead_vs_direct")
        for q in PERCENTILES]
    return pd.DataFrame(out, columns=cols)


def _floor_ramp_bins(study: Study, floor: str | None, bin_users: int) -> pd.DataFrame | None:
    per = []
    for run in study.runs:
        if floor is None or run.system != floor or run.status != "completed":
            continue
        lo, hi = run.phases.t("ramp_start"), run.phases.t("hold_end")
        rows = study.requests[study.requests["run_id"] == run.run_id]
        rows = successful(rows[(rows["start_t_unix_s"] >= lo) & (rows["start_t_unix_s"] < hi)])
        for edge, grp in rows.groupby(users_bin(rows["users"], bin_users)):
            per.append({"bin": int(edge), **{f"p{q}": percentile(grp["latency_ms"], q) for q in PERCENTILES}})
    if not per:
        return None
    return pd.DataFrame(per).groupby("bin").mean()


def rss_timeline(study: Study) -> pd.DataFrame:
    """The system role's RSS per run over time, with seconds since the run's load started."""
    s = study.samples[study.samples["role"] == "system"].copy()
    starts = {}
    for run in study.runs:
        ws, rs = run.phases.t("warmup_start"), run.phases.t("ramp_start")
        starts[run.run_id] = ws if not math.isnan(ws) else rs
    s["load_start_t_unix_s"] = s["run_id"].map(starts).astype("float64")
    s["t_rel_s"] = s["t_unix_s"] - s["load_start_t_unix_s"]
    return s.sort_values(["system", "run_id", "t_unix_s"]).reset_index(drop=True)
