"""The mock LLM provider (mocks/): shapes, timing, statistics, process handling.

Each test starts the real mock as a subprocess on a free 127.0.0.1 port.  Bounds are
tolerant: the machine is a shared, loaded 2-core box.
"""
import http.client
import json
import os
import select
import signal
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
from polling import wait_for

from mocks import __version__
from mocks.request_log import REQUEST_LOG_COLUMNS, RequestLog, read_request_log
from mocks.stats import diff_stats, read_stats

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PY = sys.executable
BODY = {"model": "gpt-test", "messages": [{"role": "user", "content": "Hello there, mock."}]}

# Each test starts the mock as a real process (its in-process statistics: test_mock_stats.py).
pytestmark = [pytest.mark.timeout(120), pytest.mark.integration]


# ----------------------------------------------------------------------------- helpers

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Mock:
    """A running ``python -m mocks.server``; stop() sends SIGTERM and waits."""

    def __init__(self, stats_dir, *args, workers=1):
        self.stats_dir = str(stats_dir)
        for _attempt in range(3):
            self.port = _free_port()
            cmd = [PY, "-m", "mocks.server", "--host", "127.0.0.1", "--port", str(self.port),
                   "--workers", str(workers), "--stats-dir", self.stats_dir, *args]
            self.proc = subprocess.Popen(cmd, cwd=REPO_DIR, stdout=subprocess.PIPE, text=True)
            self.line = self._read_line(30.0)
            if self.line:
                break
            self.proc.wait(10)  # port taken between probe and bind: try another
        assert self.line, "mock did not start"
        fields = dict(kv.split("=", 1) for kv in self.line.split() if "=" in kv)
        assert int(fields["port"]) == self.port and int(fields["pid"]) == self.proc.pid
        assert int(fields["workers"]) == workers
        self.workers = [c.pid for c in psutil.Process(self.proc.pid).children()]

    def _read_line(self, timeout_s):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return ""
            r, _, _ = select.select([self.proc.stdout], [], [], 0.1)
            if r:
                return self.proc.stdout.readline().strip()
        return ""

    def client(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)

    def stop(self, sig=signal.SIGTERM, timeout_s=20.0):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            for c in psutil.Process(self.proc.pid).children(recursive=True):
                c.kill()
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self.proc.stdout.close()


def call(conn, method, path, body=None, headers=None):
    """One request on a keep-alive connection: (status, headers, body, elapsed_s)."""
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    hdrs = {"Content-Type": "application/json"}
    hdrs.update(headers or {})
    t0 = time.perf_counter()
    conn.request(method, path, body=data, headers=hdrs)
    resp = conn.getresponse()
    raw = resp.read()
    return resp.status, resp.headers, raw, time.perf_counter() - t0


def stream(conn, path, body, headers=None):
    """Streaming request: (status, headers, [(t_since_send_s, line)]) read as lines arrive."""
    hdrs = {"Content-Type": "application/json"}
    hdrs.update(headers or {})
    t0 = time.perf_counter()
    conn.request("POST", path, body=json.dumps(body).encode(), headers=hdrs)
    resp = conn.getresponse()
    lines = []
    while True:
        line = resp.readline()
        if not line:
            break
        lines.append((time.perf_counter() - t0, line.decode().rstrip("\n")))
    return resp.status, resp.headers, lines


def sse_events(lines):
    """Group SSE lines into events: [(t, event_name_or_None, data_str)]."""
    out, event, t = [], None, None
    for ts, line in lines:
        if line.startswith("event: "):
            event, t = line[7:], ts
        elif line.startswith("data: "):
            out.append((t if event else ts, event, line[6:]))
            event = None
    return out


def alive(pid):
    try:
        p = psutil.Process(pid)
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids, timeout_s=10.0):
    wait_for(lambda: not any(alive(p) for p in pids), timeout_s)
    return [p for p in pids if alive(p)]


# shared mock for the shape tests: 20 ms latency, 5 chunks 30 ms apart
CHUNKS, DELAY_MS, TOKENS, LATENCY_MS = 5, 30, 16, 20


@pytest.fixture(scope="module")
def mock(tmp_path_factory):
    m = Mock(tmp_path_factory.mktemp("shared-stats"), "--latency-ms", str(LATENCY_MS),
             "--response-tokens", str(TOKENS), "--stream-chunks", str(CHUNKS),
             "--chunk-delay-ms", str(DELAY_MS))
    yield m
    assert m.stop() == 0


@pytest.fixture()
def conn(mock):
    c = mock.client()
    yield c
    c.close()


# ----------------------------------------------------------------------------- shapes

def test_version_and_stats_import_is_light():
    assert __version__ == "1.2.0"
    code = ("import sys, mocks.stats, mocks.worker_stats, mocks.request_log, mocks.faults, mocks.protocol, "
            "mocks.gc_control; assert 'aiohttp' not in sys.modules, 'aiohttp imported'")
    subprocess.run([PY, "-c", code], cwd=REPO_DIR, check=True, timeout=30)


def test_health_models_and_unknown_path(conn):
    status, hdrs, raw, _ = call(conn, "GET", "/health")
    assert status == 200 and json.loads(raw) == {"status": "ok"}
    assert hdrs["x-mock-request-id"]
    status, hdrs, raw, _ = call(conn, "GET", "/v1/models")
    models = json.loads(raw)
    assert status == 200 and models["object"] == "list"
    assert models["data"][0]["id"] == "mock-model" and models["data"][0]["object"] == "model"
    status, hdrs, raw, _ = call(conn, "GET", "/nope")
    assert status == 404 and hdrs["Content-Type"].startswith("application/json")
    assert "error" in json.loads(raw) and hdrs["x-mock-request-id"]
    status, hdrs, raw, _ = call(conn, "GET", "/v1/chat/completions")
    assert status == 405 and hdrs["x-mock-request-id"]


def test_openai_unary_shape(conn):
    status, hdrs, raw, elapsed = call(conn, "POST", "/v1/chat/completions", BODY)
    assert status == 200 and hdrs["Content-Type"].startswith("application/json")
    rid = hdrs["x-mock-request-id"]
    pid, seq = rid.split("-")
    assert int(pid) > 0 and int(seq) > 0
    d = json.loads(raw)
    assert d["object"] == "chat.completion" and d["model"] == "gpt-test"
    assert d["id"] == f"chatcmpl-{rid}" and isinstance(d["created"], int)
    choice = d["choices"][0]
    assert choice["index"] == 0 and choice["finish_reason"] == "stop"
    assert choice["message"]["role"] == "assistant"
    assert len(choice["message"]["content"].split()) == TOKENS
    u = d["usage"]
    assert u["completion_tokens"] == TOKENS and u["prompt_tokens"] >= 1
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    assert elapsed >= LATENCY_MS / 1000.0


def _openai_frames(lines):
    return [(t, data) for t, ev, data in sse_events(lines)]


def test_openai_stream_frames_and_spacing(conn):
    _, _, raw, _ = call(conn, "POST", "/v1/chat/completions", BODY)
    unary_text = json.loads(raw)["choices"][0]["message"]["content"]
    status, hdrs, lines = stream(conn, "/v1/chat/completions", dict(BODY, stream=True))
    assert status == 200 and hdrs["Content-Type"].startswith("text/event-stream")
    rid = hdrs["x-mock-request-id"]
    frames = _openai_frames(lines)
    assert frames[-1][1] == "[DONE]"
    chunks = [json.loads(d) for _, d in frames[:-1]]
    assert len(chunks) == 1 + CHUNKS + 1  # role, contents, finish (no usage frame asked)
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "gpt-test"
               and c["id"] == f"chatcmpl-{rid}" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    contents = chunks[1:-1]
    assert all(c["choices"][0]["finish_reason"] is None for c in contents)
    assert "".join(c["choices"][0]["delta"]["content"] for c in contents) == unary_text
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop" and chunks[-1]["choices"][0]["delta"] == {}
    _assert_spaced([t for t, _ in frames[1:1 + CHUNKS]])


def _assert_spaced(times, latency_ms=LATENCY_MS, delay_ms=DELAY_MS):
    """Content frame i (1-based) is written at >= head + i * delay and head >= send + latency,
    so it cannot arrive earlier than that after the send; and frames are not held back and
    sent together (the client may itself be scheduled late on a loaded box: half the
    nominal span is required)."""
    for i, t in enumerate(times, start=1):
        assert t >= (latency_ms + i * delay_ms) / 1000.0, (i, t)
    span = times[-1] - times[0]
    assert (len(times) - 1) * delay_ms / 1000.0 * 0.5 <= span <= len(times) * delay_ms / 1000.0 + 2.0, span


def test_openai_stream_include_usage(conn):
    body = dict(BODY, stream=True, stream_options={"include_usage": True})
    status, _, lines = stream(conn, "/v1/chat/completions", body,
                              headers={"x-mock-chunk-delay-ms": "0"})
    frames = _openai_frames(lines)
    assert status == 200 and frames[-1][1] == "[DONE]"
    chunks = [json.loads(d) for _, d in frames[:-1]]
    assert len(chunks) == 1 + CHUNKS + 2
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == TOKENS
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"


def test_anthropic_unary_shape(conn):
    body = dict(BODY, max_tokens=100, system="Be brief.")
    status, hdrs, raw, _ = call(conn, "POST", "/v1/messages", body)
    assert status == 200
    rid = hdrs["x-mock-request-id"]
    d = json.loads(raw)
    assert d["type"] == "message" and d["role"] == "assistant" and d["model"] == "gpt-test"
    assert d["id"] == f"msg_{rid}" and d["stop_reason"] == "end_turn"
    assert d["content"][0]["type"] == "text" and len(d["content"][0]["text"].split()) == TOKENS
    assert d["usage"]["output_tokens"] == TOKENS and d["usage"]["input_tokens"] >= 1


def test_anthropic_stream_event_order(conn):
    _, _, raw, _ = call(conn, "POST", "/v1/messages", BODY)
    unary_text = json.loads(raw)["content"][0]["text"]
    status, hdrs, lines = stream(conn, "/v1/messages", dict(BODY, stream=True))
    assert status == 200 and hdrs["Content-Type"].startswith("text/event-stream")
    events = sse_events(lines)
    names = [e for _, e, _ in events]
    assert names == (["message_start", "content_block_start", "ping"] + ["content_block_delta"] * CHUNKS
                     + ["content_block_stop", "message_delta", "message_stop"])
    datas = [json.loads(d) for _, _, d in events]
    assert all(d["type"] == n for d, n in zip(datas, names))
    assert datas[0]["message"]["id"] == f"msg_{hdrs['x-mock-request-id']}"
    assert datas[0]["message"]["model"] == "gpt-test"
    deltas = [d["delta"]["text"] for d in datas if d["type"] == "content_block_delta"]
    assert "".join(deltas) == unary_text
    md = datas[-2]
    assert md["delta"]["stop_reason"] == "end_turn" and md["usage"]["output_tokens"] == TOKENS
    assert events[0][0] >= LATENCY_MS / 1000.0
    _assert_spaced([t for t, _, _ in events[3:3 + CHUNKS]])


BAD_CASES = [
    ("malformed", b'{"model": "x", "messages": [', None),
    ("not_object", b'[1, 2]', None),
    ("missing_model", json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode(), "model"),
    ("missing_messages", json.dumps({"model": "x"}).encode(), "messages"),
    ("messages_not_list", json.dumps({"model": "x", "messages": {"role": "user"}}).encode(), "messages"),
]


@pytest.mark.parametrize("case,raw,param", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_requests_openai_shape(conn, case, raw, param):
    status, hdrs, body, _ = call(conn, "POST", "/v1/chat/completions", raw)
    assert status == 400 and hdrs["x-mock-request-id"]
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error" and err["message"]
    assert err["param"] == param


@pytest.mark.parametrize("case,raw,param", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_requests_anthropic_shape(conn, case, raw, param):
    status, hdrs, body, _ = call(conn, "POST", "/v1/messages", raw)
    assert status == 400 and hdrs["x-mock-request-id"]
    d = json.loads(body)
    assert d["type"] == "error" and d["error"]["type"] == "invalid_request_error" and d["error"]["message"]


def test_errors_counted_and_request_ids_unique(mock, conn):
    before = read_stats(mock.stats_dir, fresher_than_t_unix_s=time.time())
    ids = []
    for path, body in [("/v1/chat/completions", BODY), ("/v1/chat/completions", b"{"),
                       ("/v1/messages", b"[]"), ("/v1/messages", BODY), ("/health", None)]:
        _, hdrs, _, _ = call(conn, "GET" if body is None else "POST", path, body)
        ids.append(hdrs["x-mock-request-id"])
    _, hdrs, _ = stream(conn, "/v1/chat/completions", dict(BODY, stream=True), {"x-mock-chunk-delay-ms": "0"})
    ids.append(hdrs["x-mock-request-id"])
    assert len(set(ids)) == len(ids)
    after = read_stats(mock.stats_dir, fresher_than_t_unix_s=time.time())
    d = diff_stats(after, before)
    assert d["errors"] == 2 and d["count"] == 3
    assert d["by_path"]["/v1/chat/completions"] == 3 and d["by_path"]["/v1/messages"] == 2
    assert d["by_path"]["/health"] == 1


def test_override_headers(conn):
    status, _, raw, elapsed = call(conn, "POST", "/v1/chat/completions", BODY,
                                   {"x-mock-response-tokens": "5", "x-mock-latency-ms": "150"})
    d = json.loads(raw)
    assert status == 200 and elapsed >= 0.150
    assert len(d["choices"][0]["message"]["content"].split()) == 5 and d["usage"]["completion_tokens"] == 5
    t0 = time.perf_counter()
    status, _, lines = stream(conn, "/v1/messages", dict(BODY, stream=True),
                              {"x-mock-chunks": "3", "x-mock-chunk-delay-ms": "0", "x-mock-latency-ms": "0",
                               "x-mock-response-tokens": "7"})
    fast = time.perf_counter() - t0
    names = [e for _, e, _ in sse_events(lines)]
    assert status == 200 and names.count("content_block_delta") == 3
    assert fast < (LATENCY_MS + CHUNKS * DELAY_MS) / 1000.0  # neither default latency nor delays
    texts = [json.loads(dd)["delta"]["text"] for _, e, dd in sse_events(lines) if e == "content_block_delta"]
    assert len("".join(texts).split()) == 7
    status, _, lines = stream(conn, "/v1/chat/completions", dict(BODY, stream=True),
                              {"x-mock-chunks": "2", "x-mock-chunk-delay-ms": "60"})
    frames = _openai_frames(lines)
    assert len(frames) == 1 + 2 + 1 + 1
    _assert_spaced([frames[1][0], frames[2][0]], delay_ms=60)
    status, _, raw, _ = call(conn, "POST", "/v1/chat/completions", BODY, {"x-mock-chunks": "many"})
    assert status == 400 and json.loads(raw)["error"]["param"] == "x-mock-chunks"


# ----------------------------------------------------------------------------- timing

def test_latency_accuracy_client_and_stats(tmp_path):
    """Sequential requests at the CLI latency (60 ms) and at a per-request 5 ms: never early,
    median within 3 ms, client-side and in the mock's stats.  A round is retried (up to 6
    rounds) only when the shared machine's noise pushes a median out (the client's own
    wake-ups are late under load); a mock that is systematically off fails every round."""
    m = Mock(tmp_path / "stats", "--latency-ms", "60")
    try:
        c = m.client()
        call(c, "POST", "/v1/chat/completions", BODY)  # pre-check, as the harness does
        for lat, n, path, hdrs in ((60.0, 20, "/v1/chat/completions", {}),
                                   (5.0, 15, "/v1/messages", {"x-mock-latency-ms": "5"})):
            for _round in range(6):
                before = read_stats(m.stats_dir, fresher_than_t_unix_s=time.time())
                elapsed = [call(c, "POST", path, BODY, hdrs)[3] * 1000 for _ in range(n)]
                d = diff_stats(read_stats(m.stats_dir, fresher_than_t_unix_s=time.time()), before)
                # never shorter than the latency, client side and mock side; counts exact
                assert min(elapsed) >= lat, elapsed
                assert d["count"] == n and d["latency_ms"] == 60.0 and d["fresh"]
                assert sum(d["hold_histogram_us"].values()) == n
                assert min(int(k) for k in d["hold_histogram_us"]) >= lat * 1000
                assert d["hold_ms"]["mean"] >= lat
                h = d["hold_ms"]
                assert h["p50"] <= h["p90"] <= h["p99"] <= h["max"]
                if statistics.median(elapsed) <= lat + 3.0 and h["p50"] <= lat + 3.0:
                    break
            assert lat <= statistics.median(elapsed) <= lat + 3.0, (lat, elapsed)
            assert lat <= d["hold_ms"]["p50"] <= lat + 3.0, (lat, d["hold_ms"])
        c.close()
    finally:
        assert m.stop() == 0


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
        time.sleep(1.5)
        t = time.time()
        s = read_stats(m.stats_dir, fresher_than_t_unix_s=t)
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


def test_client_gone_is_incomplete_not_counted(mock):
    """A stream the client abandons, and a unary request whose client left during the
    hold, are 'incomplete': held (in the histogram) but not counted as answered."""
    before = read_stats(mock.stats_dir, fresher_than_t_unix_s=time.time())

    def raw_request(body, extra=b""):
        s = socket.create_connection(("127.0.0.1", mock.port), timeout=10)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  + extra + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        return s

    with raw_request(json.dumps(dict(BODY, stream=True)).encode()) as s:
        assert b"x-mock-request-id" in s.recv(65536).lower()  # head (and role frame) arrived
    with raw_request(json.dumps(BODY).encode(), b"x-mock-latency-ms: 300\r\n"):
        time.sleep(0.05)  # the request is read; leave during the hold
    d = {}

    def both_counted():
        d.update(diff_stats(read_stats(mock.stats_dir, fresher_than_t_unix_s=time.time()), before))
        return d["incomplete"] == 2

    wait_for(both_counted, 5)
    assert d["incomplete"] == 2 and d["count"] == 0 and d["hold_count"] == 2


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


def test_live_read_stats_sees_a_request(mock, conn):
    call(conn, "POST", "/v1/chat/completions", BODY)
    t = time.time()
    before = read_stats(mock.stats_dir, fresher_than_t_unix_s=t)
    call(conn, "POST", "/v1/chat/completions", BODY)
    t = time.time()
    t0 = time.monotonic()
    after = read_stats(mock.stats_dir, fresher_than_t_unix_s=t, timeout_s=3.0)
    assert after["fresh"] and time.monotonic() - t0 < 2.0
    assert after["count"] == before["count"] + 1


# ----------------------------------------------------------------------------- processes

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


# ----------------------------------------------------------------------------- request log

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
        log.record(f"r{i}", f"7-{i}", "/p", 200, "", 1, 0, 0, 2, 2, 10, 20, 0, 0, 1)
    assert log.dropped == 2
    log.flush()
    df = read_request_log(str(tmp_path))
    assert list(df["request_id"]) == ["r0", "r1", "r2"]
    # a line still being written is not read
    with open(log.path, "ab") as f:
        f.write(b"r9,7-9,/p")
    assert len(read_request_log(str(tmp_path))) == 3
    log.record("r3", "7-3", "/p", 200, "", 1, 0, 0, 2, 2, 10, 20, 0, 0, 1)
    os.close(log._fd)  # the disk "fails": the buffered line is dropped and counted
    with pytest.raises(OSError):
        log.flush()
    assert log.dropped == 3
    log._fd = -1


def test_read_request_log_empty_dir(tmp_path):
    df = read_request_log(str(tmp_path))
    assert len(df) == 0 and list(df.columns) == [c for c, _ in REQUEST_LOG_COLUMNS]


def test_mock_check_reports_self_time():
    """python -m harness mock (the many-connections instrument check) runs end to end, small."""
    out = subprocess.run([PY, "-m", "harness", "mock", "--connections", "10", "--duration-s", "1",
                          "--ramp-s", "0.2", "--think-s", "0.05", "--latency-ms", "5"],
                         cwd=REPO_DIR, capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=REPO_DIR))
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["ok"] == r["answered"] > 0 and r["measured_requests"] > 0
    t = r["self_time_ms"]
    assert t["requests"] == r["measured_requests"] and t["hold_applied_ms"]["p50"] >= 5.0
    assert t["hold_over_ms"]["p50"] >= 0.0 and r["mock_cpu_cores"] >= 0.0
    assert r["gc_mode"] == "lean" and r["gc"]["pause_count"] == sum(r["gc"]["collections"].values())
