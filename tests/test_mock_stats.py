"""The mock's statistics in process: per-worker files merged, waited for while stale, and
differences between two snapshots exact."""
import json
import threading
import time

import pytest

from mocks.stats import WorkerStats, diff_stats, merge_worker_snapshots, read_stats


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
