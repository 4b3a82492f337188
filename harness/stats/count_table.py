"""The counting lane's figures as a table: one row per system and case (harness/run/count_lane.py
writes them; the report shows them)."""
from __future__ import annotations

import pandas as pd

from harness.model.count_cases import families

COLUMNS = ("system", "version", "case", "instructions_per_request", "reads_per_request",
           "writes_per_request", "sends_per_request", "waits_per_request",
           "allocations_per_request", "rss_bytes", "missing")


def lane_frame(record: dict | None) -> pd.DataFrame:
    """Every build of a counts record, a row per case; a build that could not be counted is one
    row with no case and the reason in ``missing``."""
    rows = []
    for build in (record or {}).get("builds", []):
        head = {"system": build["label"], "version": build.get("version") or ""}
        if build.get("failed") or not build.get("cases"):
            rows.append({**head, "case": "", "missing": build.get("failed") or "no case counted"})
            continue
        for c in build["cases"]:
            fam = families(c.get("syscalls_per_request") or {})
            counted = c.get("instructions_per_request") is not None
            rows.append({**head, "case": c["case"],
                         "instructions_per_request": c.get("instructions_per_request"),
                         **({f"{k}_per_request": v for k, v in fam.items()} if counted else {}),
                         "allocations_per_request": c.get("allocations_per_request"),
                         "rss_bytes": c.get("rss_bytes"), "missing": c.get("missing") or ""})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def instructions_of(frame: pd.DataFrame, system: str, case: str = "plain") -> float | None:
    """One system's instructions per request in one case, or None when not counted."""
    sel = frame[(frame["system"] == system) & (frame["case"] == case)]
    if not len(sel) or pd.isna(sel["instructions_per_request"].iloc[0]):
        return None
    return float(sel["instructions_per_request"].iloc[0])
