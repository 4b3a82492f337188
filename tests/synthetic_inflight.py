"""A synthetic in-flight lane with known answers: one row per run and step as
harness.stats.inflight_lane.run_steps gives them, each figure set by the test."""
from __future__ import annotations

import pandas as pd

from harness.stats import inflight_lane as I
from harness.stats import inflight_limits as L


def step(system, target, held, run=1, ran=True, **figures):
    """One run's step: every figure 1.0 unless set here or by ``figures``; RSS 40 MiB + 18 MiB
    per 1,000 open."""
    base = {name: 1.0 for name in L.STEP_FIGURES}
    base.update({"client_open_mean": float(target), "mock_open_mean": float(target),
                 "mock_open_max": float(target), "rss_mib": 40.0 + 18.0 * target / 1000,
                 "added_p99_ms": 5.0, "failed": 0, "open_files_limit": 20000.0,
                 "open_fds": 2.0 * target, "system_cpu_percent": 20.0})
    base.update({f"errors_{c}": 0 for c in I.ERROR_CAUSES})
    base["added_over_floor_p99_ms"] = float("nan")  # set by L.judged, from the floor's rows
    base.update(figures)
    return {"run_id": f"{system}-{run}", "system": system, "run_index": run, "status": "completed",
            "target_open": target, "ran": ran, "held": held,
            "open_agree": True, **base}


def lane() -> L.Lane:
    """direct and lean hold 1,000 to 5,000; capped holds 1,000 and stops at 2,500, the mock
    seeing 100 open upstream requests."""
    steps = pd.DataFrame([
        *(step("direct", t, True) for t in (1000, 2500, 5000)),
        *(step("lean", t, True, cpu_ms_per_request=0.2) for t in (1000, 2500, 5000)),
        step("capped", 1000, True, cpu_ms_per_request=0.5),
        step("capped", 2500, False, mock_open_mean=100.0, mock_open_max=100.0, failed=4,
             errors_read_timeout=4)])
    table = L.summary(steps, floor="direct")
    return L.Lane(steps, table, L.where_it_stops(table, cores=2.0), L.slopes(steps), 10.0, False)
