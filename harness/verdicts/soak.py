"""Soak check: under steady load a system's RSS, open files and in-flight requests stay flat,
and return to idle once the load stops. Computed from samples.parquet and the run manifests.

    python -m harness soak STUDY_DIR
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

RSS_GROWTH_LIMIT = 0.10   # last quarter of the hold vs its first quarter
FD_RETURN_SLACK = 2       # descriptors above idle still counted as "returned" (lazy closes)


def _median(frame: pd.DataFrame, column: str) -> float:
    return float(frame[column].median()) if len(frame) else math.nan


def soak_summary(study) -> pd.DataFrame:
    rows = []
    for run in study.runs:
        phases = run.phases
        samples = study.samples[(study.samples.run_id == run.run_id) &
                                (study.samples.role == "system")].sort_values("t_unix_s")
        if samples.empty or phases.hold_start_t_unix_s is None:
            rows.append({"run_id": run.run_id, "system": run.system, "verdict": "missing",
                         "reasons": "no samples of a system process, or no hold phase"})
            continue
        hold_start, hold_end = phases.hold_start_t_unix_s, phases.hold_end_t_unix_s
        first_t = phases.warmup_start_t_unix_s or hold_start
        load_end = phases.load_end_t_unix_s or hold_end
        idle = samples[samples.t_unix_s < first_t]
        hold = samples[(samples.t_unix_s >= hold_start) & (samples.t_unix_s < hold_end)]
        after = samples[samples.t_unix_s > load_end + 1.0]
        quarter = max(1, len(hold) // 4)
        rss_first, rss_last = _median(hold.head(quarter), "rss_bytes"), _median(hold.tail(quarter), "rss_bytes")
        slope = (np.polyfit(hold.t_unix_s - hold_start, hold.rss_bytes, 1)[0] * 60
                 if len(hold) >= 3 else math.nan)
        fds_idle, fds_after = _median(idle, "num_fds"), (float(after.num_fds.iloc[-1]) if len(after) else math.nan)
        inflight_after = float(after.inflight_requests.iloc[-1]) if len(after) else math.nan
        growth = rss_last / rss_first - 1 if rss_first else math.nan
        reasons = []
        if not growth < RSS_GROWTH_LIMIT:
            reasons.append(f"RSS grew {growth:+.1%} across the hold (limit {RSS_GROWTH_LIMIT:.0%})")
        if not fds_after <= fds_idle + FD_RETURN_SLACK:
            reasons.append(f"open files {fds_after:.0f} after the load vs {fds_idle:.0f} idle")
        if not (math.isnan(inflight_after) or inflight_after == 0):
            reasons.append(f"{inflight_after:.0f} requests still in flight after the load")
        rows.append({
            "run_id": run.run_id, "system": run.system,
            "hold_s": hold_end - hold_start, "requests_in_hold": int(
                ((study.requests.run_id == run.run_id) & (study.requests.phase == "hold")).sum()),
            "rss_idle_mib": _median(idle, "rss_bytes") / 2**20,
            "rss_hold_first_quarter_mib": rss_first / 2**20, "rss_hold_last_quarter_mib": rss_last / 2**20,
            "rss_growth": growth, "rss_slope_mib_per_min": slope / 2**20,
            "rss_after_mib": (float(after.rss_bytes.iloc[-1]) / 2**20) if len(after) else math.nan,
            "fds_idle": fds_idle, "fds_hold_max": float(hold.num_fds.max()), "fds_after": fds_after,
            "inflight_hold_max": float(hold.inflight_requests.max()), "inflight_after": inflight_after,
            "verdict": "flat" if not reasons else "not flat", "reasons": "; ".join(reasons),
        })
    return pd.DataFrame(rows)
