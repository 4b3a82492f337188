"""Whether each system served the load it was offered at the top of the ramp.

A closed loop of users that wait ``think_time_s`` between calls offers at most
``offered_rps`` (run_summary's bound: users / (think + the mock's hold)). A run *kept up* when
it completed and its hold throughput reached ``OFFERED_SHARE`` of that bound; a system kept up
when every one of its runs did. Without think time (a saturation study) nothing bounds the
offered load, so the question has no answer and the frame is empty.
"""
from __future__ import annotations

import math

import pandas as pd

from harness.stats.definitions import OFFERED_SHARE

COLUMNS = ["system", "runs", "completed", "kept_up_runs", "served_share_min", "offered_rps"]


def keeping_up(rs: pd.DataFrame, systems: list[str]) -> pd.DataFrame:
    """Per system with runs (in ``systems``' order): its runs, completed runs, runs that kept
    up, the lowest share of the offered load a completed run served, and the offered rate (the
    mean over its runs)."""
    if not len(rs) or "offered_rps" not in rs.columns:
        return pd.DataFrame(columns=COLUMNS)
    out = []
    for system in systems:
        runs = rs[rs["system"] == system]
        offered = runs["offered_rps"].astype("float64")
        if not len(runs) or offered.isna().all():
            continue
        done = runs[runs["status"] == "completed"]
        share = (done["throughput_rps"].astype("float64") / done["offered_rps"].astype("float64"))
        out.append({"system": system, "runs": len(runs), "completed": len(done),
                    "kept_up_runs": int((share >= OFFERED_SHARE).sum()),
                    "served_share_min": float(share.min()) if len(share) else math.nan,
                    "offered_rps": float(offered.mean())})
    return pd.DataFrame(out, columns=COLUMNS)
