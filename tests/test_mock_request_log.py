"""The mock's request log (mocks/request_log.py): its rows and their times and sizes, the
workers' logs merged, the buffer's cap and a failing disk.

Most tests start the real mock as a subprocess on a free 127.0.0.1 port.
"""
import json
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from mock_helpers import BODY, Mock, call, stream

from mocks.request_log import REQUEST_LOG_COLUMNS, RequestLog, read_request_log
from mocks.stats import read_stats

# The mock runs as a real process in most of these tests; all of them are in the integration lane.
pytestmark = [pytest.mark.timeout(120), pytest.mark.integration]


def _body_with_id(rid, stream=False):
    b = {"model": "gpt-test", "messages": [{"role": "user", "content": f"Hello there. [rid:{rid}]"}]}
    if stream:
        b["stream"] = True
    return b


def _raw_exchange(port, request_bytes):
    """One request on a raw socket: returns the raw response bytes (Content-Length body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(request_bytes)
        buf = b""
        while True:
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                head = buf[:end].lower()
                length = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
                if len(buf) >= end + 4 + length:
                    return buf
            chunk = s.recv(65536)
            assert chunk, "connection closed before the whole response"
            buf += chunk


def test_request_log_rows(tmp_path):
    """One row per request under the load generator's id, with consistent times and sizes."""
    m = Mock(tmp_path / "stats", "--latency-ms", "20", "--stream-chunks", "3", "--chunk-delay-ms", "10")
    try:
        c = m.client()
        t_before_ns = time.time_ns()
        st, hdrs, _, _ = call(c, "POST", "/v1/chat/completions", _body_with_id("u-1"))
        seq_u1 = hdrs["x-mock-request-id"]
        # the marker in the body wins over a header a gateway may have replaced
        call(c, "POST", "/v1/messages", _body_with_id("a-1"), {"x-request-id": "gateway-own"})
        call(c, "POST", "/v1/chat/completions", BODY, {"x-request-id": "h-1"})  # header only
        call(c, "POST", "/v1/chat/completions", BODY, {"x-request-id": "bad id,with comma"})
        st_s, _, lines = stream(c, "/v1/chat/completions", _body_with_id("s-1", stream=True))
        assert st_s == 200 and lines
        call(c, "POST", "/v1/chat/completions", b'{"model": [rid:e-1]')  # a 400
        call(c, "GET", "/health", headers={"x-request-id": "g-1"})
        t_after_ns = time.time_ns()
        c.close()
        body = json.dumps(_body_with_id("raw-1")).encode()
        req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body)) + body
        raw_resp = _raw_exchange(m.port, req)
    finally:
        assert m.stop() == 0
    df = read_request_log(m.stats_dir)
    assert list(df.columns) == [c for c, _ in REQUEST_LOG_COLUMNS]
    assert len(df) == 8
    assert list(df["request_id"]) == ["u-1", "a-1", "h-1", "", "s-1", "e-1", "g-1", "raw-1"]
    assert list(df["status_code"]) == [200, 200, 200, 200, 200, 400, 200, 200]
    assert df["mock_seq"].is_unique and df.loc[0, "mock_seq"] == seq_u1
    assert set(df["worker_pid"]) == {m.proc.pid} and (df["fault"] == "").all()
    assert (df["peer_port"] > 0).all()
    gen = df[df["status_code"] == 200].iloc[[0, 1, 2, 3, 4, 6]]
    assert (gen["hold_set_ns"] == 20_000_000).all()
    assert (gen["hold_applied_ns"] >= 20_000_000).all()  # never early
    # head written after body end + hold; times are wall clock within the client's window
    # (the write returns after the bytes left: up to a few ms later on a loaded machine)
    assert (gen["head_written_t_unix_ns"] - gen["body_end_t_unix_ns"] >= gen["hold_applied_ns"]).all()
    assert (df["body_end_t_unix_ns"].iloc[:7] > t_before_ns).all()
    assert (df["last_frame_written_t_unix_ns"].iloc[:7] < t_after_ns + 50_000_000).all()
    assert (df["arrival_lag_ns"] >= 0).all() and (df["write_ns"] >= 0).all()
    s1 = df[df["request_id"] == "s-1"].iloc[0]
    assert s1["last_frame_written_t_unix_ns"] - s1["head_written_t_unix_ns"] >= 2 * 10_000_000
    unary = df[df["request_id"] != "s-1"]
    assert (unary["last_frame_written_t_unix_ns"] == unary["head_written_t_unix_ns"]).all()
    raw = df[df["request_id"] == "raw-1"].iloc[0]
    assert raw["bytes_in"] == len(req) and raw["bytes_out"] == len(raw_resp)


def test_request_log_two_workers_merged(tmp_path):
    m = Mock(tmp_path / "stats", "--latency-ms", "1", workers=2)
    n = 60

    def one(i):
        c = m.client()  # a new connection each time: the kernel spreads them over workers
        try:
            return call(c, "POST", "/v1/chat/completions", _body_with_id(f"w-{i}"))[0]
        finally:
            c.close()

    try:
        with ThreadPoolExecutor(8) as ex:
            assert list(ex.map(one, range(n))) == [200] * n
    finally:
        assert m.stop() == 0
    df = read_request_log(m.stats_dir)
    assert sorted(df["request_id"]) == sorted(f"w-{i}" for i in range(n))
    assert set(df["worker_pid"]) <= set(m.workers) and len(set(df["worker_pid"])) == 2
    assert read_stats(m.stats_dir)["log_dropped"] == 0


def test_request_log_buffer_cap_and_write_failure_counted(tmp_path):
    log = RequestLog(str(tmp_path), pid=7, max_buffered=3)
    for i in range(5):
        log.record(f"r{i}", f"7-{i}", "/p", 200, "", 1, 0, 0, 2, 2, 10, 20, 0, 0, 1, 5, 0, 0, "complete")
    assert log.dropped == 2
    log.flush()
    df = read_request_log(str(tmp_path))
    assert list(df["request_id"]) == ["r0", "r1", "r2"]
    # a line still being written is not read
    with open(log.path, "ab") as f:
        f.write(b"r9,7-9,/p")
    assert len(read_request_log(str(tmp_path))) == 3
    log.record("r3", "7-3", "/p", 200, "", 1, 0, 0, 2, 2, 10, 20, 0, 0, 1, 5, 0, 0, "complete")
    os.close(log._fd)  # the disk "fails": the buffered line is dropped and counted
    with pytest.raises(OSError):
        log.flush()
    assert log.dropped == 3
    log._fd = -1


def test_read_request_log_empty_dir(tmp_path):
    df = read_request_log(str(tmp_path))
    assert len(df) == 0 and list(df.columns) == [c for c, _ in REQUEST_LOG_COLUMNS]
