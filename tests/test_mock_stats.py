"""The mock's statistics in process: per-worker files merged, waited for while stale, and
differences between two snapshots exact; its garbage-collector modes in a fresh interpreter."""
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from mocks.stats import diff_stats, merge_worker_snapshots, read_stats
from mocks.worker_stats import WorkerStats


def test_read_stats_waits_for_fresh_files(tmp_path):
    d = str(tmp_path)
    a, b = WorkerStats(60, pid=111), WorkerStats(60, pid=222)
    a.count, b.count = 3, 4
    a.write(d)
    b.write(d)
    t = time.time()

    def later():
        time.sleep(0.3)
        b.count = 5
        b.write(d)
        time.sleep(0.1)
        a.write(d)

    th = threading.Thread(target=later)
    th.start()
    t0 = time.monotonic()
    s = read_stats(d, fresher_than_t_unix_s=t, timeout_s=5.0)
    waited = time.monotonic() - t0
    th.join()
    assert s["fresh"] and s["count"] == 8 and s["workers"] == 2 and 0.3 <= waited < 4.0
    # bounded: a file that never refreshes ends the wait at the timeout, marked stale
    t0 = time.monotonic()
    s = read_stats(d, fresher_than_t_unix_s=time.time() + 100, timeout_s=0.3)
    assert not s["fresh"] and sorted(s["stale_workers"]) == [111, 222]
    assert 0.3 <= time.monotonic() - t0 < 2.0
    # a final file (worker exited) is complete, hence fresh
    a.final = b.final = True
    a.write(d)
    b.write(d)
    s = read_stats(d, fresher_than_t_unix_s=time.time() + 100, timeout_s=1.0)
    assert s["fresh"] and s["final"] and s["count"] == 8


def test_diff_stats_exact():
    w = WorkerStats(60, pid=1)
    for ns in (60_001_000, 60_015_000, 61_000_000):
        w.record_hold(ns)
        w.count += 1
        w.record_response("/v1/chat/completions", 200)
    w.record_response("/v1/messages", 400)
    earlier = merge_worker_snapshots([w.snapshot()])
    holds = [60_002_000, 60_004_000, 60_020_000, 62_500_000]
    for ns in holds:
        w.record_hold(ns)
        w.count += 1
        w.record_response("/v1/chat/completions", 200)
    w.record_response("/v1/chat/completions", 400)
    later = merge_worker_snapshots([w.snapshot()])
    d = diff_stats(later, earlier)
    assert d["schema_version"] == 1 and d["count"] == 4 and d["errors"] == 1
    assert d["by_path"] == {"/v1/chat/completions": 5}
    assert d["hold_histogram_us"] == {"60000": 2, "60020": 1, "62500": 1}
    assert d["hold_ms"]["max"] == 62.5  # new maximum: exact
    assert d["hold_ms"]["mean"] == pytest.approx(sum(holds) / 4 / 1e6, abs=1e-4)
    assert 60.0 <= d["hold_ms"]["p50"] <= 60.01
    assert set(d) >= {"count", "by_path", "errors", "hold_ms", "hold_histogram_us", "latency_ms", "workers"}
    assert set(d["hold_ms"]) == {"p50", "p90", "p99", "max", "mean"}
    empty = diff_stats(later, later)
    assert empty["count"] == 0 and empty["hold_histogram_us"] == {} and empty["hold_ms"]["p50"] is None
    with pytest.raises(ValueError):
        diff_stats(earlier, later)
    json.dumps(d)  # serialisable as mock_stats.json


def test_gc_pauses_merged_and_diffed_exactly():
    a, b = WorkerStats(60, pid=1), WorkerStats(60, pid=2)
    a.record_gc(0, 40_000, 3, timed=False)
    a.record_gc(1, 250_000, 0, timed=True)
    b.record_gc(2, 4_000_000, 12, timed=True)
    earlier = merge_worker_snapshots([a.snapshot(), b.snapshot()])
    g = earlier["gc"]
    assert g["collections"] == {"0": 1, "1": 1, "2": 1} and g["timed"] == 2 and g["collected"] == 15
    assert g["pause_count"] == 3 and g["pause_max_ns"] == 4_000_000 and g["pause_total_ms"] == 4.29
    assert g["pause_histogram_us"] == {"40": 1, "250": 1, "4000": 1} and g["pause_ms"]["max"] == 4.0
    a.record_gc(0, 30_000, 1, timed=False)
    a.record_gc(1, 600_000, 2, timed=True)
    d = diff_stats(merge_worker_snapshots([a.snapshot(), b.snapshot()]), earlier)["gc"]
    assert d["collections"] == {"0": 1, "1": 1, "2": 0} and (d["timed"], d["collected"]) == (1, 3)
    assert d["pause_count"] == 2 and d["pause_sum_ns"] == 630_000
    # the window's largest pause is bounded by its top bucket (the all-time maximum is older)
    assert d["pause_histogram_us"] == {"30": 1, "600": 1} and d["pause_max_ns"] == 610_000
    assert diff_stats(earlier, earlier)["gc"]["pause_ms"]["p50"] is None
    json.dumps(d)


def test_gc_is_none_for_a_mock_from_before_it():
    w = WorkerStats(60, pid=1)
    old = {k: v for k, v in w.snapshot().items() if k != "gc"}
    assert merge_worker_snapshots([old])["gc"] is None
    assert merge_worker_snapshots([old, w.snapshot()])["gc"] is None
    new = merge_worker_snapshots([w.snapshot()])
    assert diff_stats(new, merge_worker_snapshots([old]))["gc"] is None
    assert new["gc"]["collections"] == {"0": 0, "1": 0, "2": 0} and new["gc"]["pause_count"] == 0


GC_PROBE = """
import asyncio, gc, json, sys
import mocks.gc_control as gc_control
from mocks.worker_stats import WorkerStats

mode = sys.argv[1]
gc_control.GC_YOUNG_EVERY_S, gc_control.GC_FULL_EVERY_S = 0.05, 0.12
stats = WorkerStats(60)
watch = gc_control.start_gc_control(mode, stats)
frozen = gc.get_freeze_count()

async def main():
    timer = asyncio.create_task(gc_control.gc_timer(watch)) if mode == "lean" else None
    for _ in range(30):
        for _ in range(200):  # cyclic garbage, as an exception's traceback makes
            a = []; a.append(a)
        await asyncio.sleep(0.01)
    if timer is not None:
        timer.cancel()

asyncio.run(main())
print(json.dumps({"frozen": frozen, "threshold": gc.get_threshold(), "snap": stats.snapshot()["gc"]}))
"""


@pytest.mark.parametrize("mode", ["lean", "freeze", "default"])
def test_gc_modes_collect_where_they_should(mode):
    """lean: startup frozen, only the mock's timed passes (young and full), garbage freed;
    freeze and default: Python's own passes, none timed; every pass's pause recorded."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", GC_PROBE, mode], capture_output=True, text=True,
                         timeout=60, cwd=repo, env=dict(os.environ, PYTHONPATH=repo))
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    g = r["snap"]
    passes = sum(g["collections"].values())
    assert passes > 0 and g["pause_count"] == passes and g["pause_sum_ns"] > 0 and g["collected"] > 0
    assert (r["frozen"] > 1000) == (mode != "default")
    if mode == "lean":
        assert r["threshold"][0] == 100_000 and g["timed"] == passes
        assert g["collections"]["1"] > 0 and g["collections"]["2"] > 0 and g["collections"]["0"] == 0
        assert "gc full pass" in out.stderr
    else:
        assert g["timed"] == 0 and g["collections"]["0"] > 0 and r["threshold"][0] == 700


def test_the_run_manifest_summarises_the_mocks_gc():
    from harness.run.run import _gc_summary
    w = WorkerStats(60, {"gc": "lean"}, pid=1)
    w.record_gc(1, 300_000, 0, timed=True)
    w.record_gc(2, 2_500_000, 4, timed=True)
    during = diff_stats(merge_worker_snapshots([w.snapshot()]),
                        merge_worker_snapshots([WorkerStats(60, {"gc": "lean"}, pid=1).snapshot()]))
    assert _gc_summary(during) == {"gc_mode": "lean", "gc_passes": 2, "gc_pause_ms_total": 2.8,
                                   "gc_pause_ms_max": 2.5}
    old = {k: v for k, v in w.snapshot().items() if k != "gc"}
    assert _gc_summary(diff_stats(merge_worker_snapshots([old]), merge_worker_snapshots([old]))) == {}
