"""The mock (mocks/) as processes: several workers and their merged statistics, the GC modes,
SIGTERM with a stream in flight, a port already in use, and a worker's or the parent's death.

Each test starts the real mock as a subprocess on a free 127.0.0.1 port.
"""
import json
import os
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from mock_helpers import BODY, PY, REPO_DIR, Mock, call, wait_gone
from polling import wait_for

from mocks.stats import read_stats

# Each test starts the mock as a real process.
pytestmark = [pytest.mark.timeout(120), pytest.mark.integration]


# ----------------------------------------------------------------------------- stats

def test_two_workers_merged_stats_exact_and_clean_stop(tmp_path):
    m = Mock(tmp_path / "stats", "--latency-ms", "2", workers=2)
    assert len(m.workers) == 2
    n = 120

    def one(i):
        c = m.client()  # a new connection each time: the kernel spreads them over workers
        try:
            path = "/v1/chat/completions" if i % 2 else "/v1/messages"
            status, hdrs, _, _ = call(c, "POST", path, BODY)
            return status, hdrs["x-mock-request-id"]
        finally:
            c.close()

    try:
        with ThreadPoolExecutor(8) as ex:
            results = list(ex.map(one, range(n)))
        t_done = time.time()
        assert all(s == 200 for s, _ in results)
        rids = [r for _, r in results]
        assert len(set(rids)) == n
        assert {int(r.split("-")[0]) for r in rids} == set(m.workers)  # both served
        s = read_stats(m.stats_dir, fresher_than_t_unix_s=t_done)
        assert s["fresh"] and s["workers"] == 2 and sorted(s["worker_pids"]) == sorted(m.workers)
        assert s["count"] == n and s["hold_count"] == n
        assert s["by_path"] == {"/v1/chat/completions": n // 2, "/v1/messages": n // 2}
        assert sum(s["hold_histogram_us"].values()) == n and s["hold_ms"]["p50"] >= 2.0
        c = m.client()  # GET /stats merges all workers (the other's figures may lag <= 0.5 s)
        merged = {}

        def merged_all():
            merged.update(json.loads(call(c, "GET", "/stats")[2]))
            return merged["count"] == n

        wait_for(merged_all, 5)
        c.close()
        assert merged["count"] == n and merged["workers"] == 2
    finally:
        rc = m.stop()
    assert rc == 0
    assert wait_gone(m.workers, 5) == []
    final = read_stats(m.stats_dir)
    assert final["final"] and final["count"] == n


@pytest.mark.parametrize("mode,workers", [("lean", 1), ("lean", 2), ("default", 1)])
def test_gc_mode_and_pauses_in_the_stats(tmp_path, mode, workers):
    """Every worker runs the --gc mode it was given and records its collections; lean ones
    collect on their timer (each second), the others only when Python decides to."""
    m = Mock(tmp_path / "stats", "--latency-ms", "1", "--gc", mode, workers=workers)
    try:
        c = m.client()
        for _ in range(20):
            assert call(c, "POST", "/v1/chat/completions", BODY)[0] == 200
        c.close()
        time.sleep(1.5)   # more than one period of a lean worker's timer
        s = {}

        def fresh_stats():
            # a loaded machine may fire a timer late: lean, wait for it (bounded)
            s.update(read_stats(m.stats_dir, fresher_than_t_unix_s=time.time()))
            return mode != "lean" or (s["gc"]["timed"] >= workers
                                      and s["gc"]["collections"].get("1", 0) >= workers)
        wait_for(fresh_stats, 10.0)
    finally:
        assert m.stop() == 0
    assert s["fresh"] and s["config"]["gc"] == mode and s["workers"] == workers
    g = s["gc"]
    assert g["pause_count"] == sum(g["collections"].values())
    if mode == "lean":
        assert g["timed"] >= workers and g["collections"]["1"] >= workers and g["pause_ms"]["max"] > 0
    else:
        assert g["timed"] == 0


def test_stats_flushed_on_sigterm_after_inflight_stream_finishes(tmp_path):
    m = Mock(tmp_path / "stats", "--latency-ms", "0", "--stream-chunks", "6", "--chunk-delay-ms", "50")
    c = m.client()
    n = 40
    for _ in range(n):
        call(c, "POST", "/v1/chat/completions", BODY)
    # a stream in flight when SIGTERM arrives is allowed to finish (grace 1 s) and is counted
    sc = m.client()
    sc.request("POST", "/v1/chat/completions", body=json.dumps(dict(BODY, stream=True)).encode(),
               headers={"Content-Type": "application/json"})
    resp = sc.getresponse()
    assert resp.readline().startswith(b"data: ")  # the role frame: the stream is under way
    m.proc.send_signal(signal.SIGTERM)  # immediately: the periodic writer has not caught up
    rest = resp.read().decode()
    sc.close()
    c.close()
    assert m.stop() == 0
    assert rest.rstrip().endswith("data: [DONE]") and rest.count("data: ") == 6 + 2
    s = read_stats(m.stats_dir)
    assert s["final"] and s["count"] == n + 1 and s["workers"] == 1 and s["incomplete"] == 0


# ----------------------------------------------------------------------------- processes

@pytest.mark.parametrize("workers", [1, 2])
def test_port_in_use_fails_fast(tmp_path, workers):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # a listener we must not share
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = subprocess.run([PY, "-m", "mocks.server", "--port", str(port), "--workers", str(workers),
                            "--stats-dir", str(tmp_path)], cwd=REPO_DIR, capture_output=True,
                           text=True, timeout=30)
    assert p.returncode != 0 and "cannot listen" in p.stderr and p.stdout == ""


def test_worker_death_stops_everything(tmp_path):
    m = Mock(tmp_path / "stats", workers=2)
    victim, other = m.workers
    os.kill(victim, signal.SIGKILL)
    try:
        rc = m.proc.wait(15)
    finally:
        if m.proc.poll() is None:
            m.stop()
    m.proc.stdout.close()
    assert rc != 0
    assert wait_gone([victim, other], 5) == []


def test_killed_parent_takes_workers_down(tmp_path):
    m = Mock(tmp_path / "stats", workers=2)
    m.proc.kill()  # no chance to forward anything: workers must notice on their own
    m.proc.wait(10)
    m.proc.stdout.close()
    left = wait_gone(m.workers, 10)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == []
    s = read_stats(m.stats_dir)
    assert s["final"] and s["workers"] == 2  # they shut down gracefully (SIGTERM)
