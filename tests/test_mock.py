"""The mock LLM provider (mocks/) over HTTP: shapes, override headers, timing, and the counts
one shared mock keeps; the many-connections check end to end.  Its processes:
test_mock_processes.py; its request log: test_mock_request_log.py; its faults: test_mock_faults.py.

Each test starts the real mock as a subprocess on a free 127.0.0.1 port.  Bounds are
tolerant: the machine is a shared, loaded 2-core box.
"""
import json
import os
import socket
import statistics
import subprocess
import time

import pytest
from mock_helpers import BODY, PY, REPO_DIR, Mock, call, sse_events, stream
from polling import wait_for

from mocks import __version__
from mocks.stats import diff_stats, read_stats

# Each test starts the mock as a real process (its in-process statistics: test_mock_stats.py).
pytestmark = [pytest.mark.timeout(120), pytest.mark.integration]


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
    assert __version__ == "1.3.0"
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
    # a hold far longer than the client stays: it leaves during it even on a loaded machine
    with raw_request(json.dumps(BODY).encode(), b"x-mock-latency-ms: 1500\r\n"):
        time.sleep(0.05)  # the request is read; leave during the hold
    d = {}

    def both_counted():
        d.update(diff_stats(read_stats(mock.stats_dir, fresher_than_t_unix_s=time.time()), before))
        return d["incomplete"] == 2

    wait_for(both_counted, 5)
    assert d["incomplete"] == 2 and d["count"] == 0 and d["hold_count"] == 2


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



# ----------------------------------------------------------------------------- many connections

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
    assert t["hold_over_ms"]["p50"] >= 0.0          # the mock never answers before its hold
    assert r["mock_cpu_cores"] > 0.0
    assert r["gc_mode"] == "lean" and r["gc"]["pause_count"] == sum(r["gc"]["collections"].values())
