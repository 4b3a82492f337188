"""Hostile clients, the requests themselves, over raw sockets to a running Sluice: heads too large,
with too many headers or too long a URL; chunked bodies in tiny or endless chunks; bodies and
model values that cannot be routed; protocol corners (HEAD, CONNECT and Upgrade, HTTP/1.0 after
HTTP/1.1, requests pipelined after a closing one); config values that would split a head; what
is open to a stranger by default. Every limit answers with its status and closes, nothing hangs,
memory stays bounded."""
import json
import re
import socket
import time

import psutil
import pytest
from sluice_helpers import (
    AUTH,
    ENV,
    MSG,
    chat,
    count_responses,
    health_ms,
    raw_exchange,
    raw_post,
    request,
    rss,
    server_config,
)
from sluice_stub import wait_until

pytestmark = pytest.mark.integration


def _read_all(s, limit=10.0):
    """Everything until the peer closes (bounded by the socket timeout and ``limit``)."""
    buf = b""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except (socket.timeout, ConnectionResetError):
            break
        if not chunk:
            break
        buf += chunk
    return buf


# ------------------------------------------------------------------ head limits
def test_huge_header_value_431_and_close(make_sluice, stub):
    gw = make_sluice(server_config(stub.url), env=ENV)
    base = rss(gw.proc.pid)
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    try:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nx-big: ")
        sent = 0
        try:
            while sent < 32 << 20:
                s.sendall(b"a" * 65536)
                sent += 65536
        except (BrokenPipeError, ConnectionResetError):
            pass
        buf = _read_all(s)
    finally:
        s.close()
    assert buf.startswith(b"HTTP/1.1 431"), buf[:100]
    assert b"connection: close" in buf
    assert rss(gw.proc.pid) - base < 20e6
    assert health_ms(gw.port) < 1000


def test_too_many_headers_431(sluice):
    head = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"x-h%d: 1\r\n" % i for i in range(150)) + b"\r\n"
    buf = raw_exchange(sluice.port, head, until_closed=True)
    assert buf.startswith(b"HTTP/1.1 431")
    # many repeats of one name are bounded by the head size
    head = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"x-h: 1\r\n" * 100000 + b"\r\n"
    buf = raw_exchange(sluice.port, head, until_closed=True)
    assert buf.startswith(b"HTTP/1.1 431")


def test_long_url_414(sluice):
    buf = raw_exchange(sluice.port, b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", until_closed=True)
    assert buf.startswith(b"HTTP/1.1 414")
    s = socket.create_connection(("127.0.0.1", sluice.port), timeout=10)
    try:
        s.sendall(b"GET /")
        try:
            for _ in range(128):  # 8 MB, refused after the first 32 KiB
                s.sendall(b"a" * 65536)
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert _read_all(s).startswith(b"HTTP/1.1 414")
    finally:
        s.close()


# ------------------------------------------------------------------ chunked bodies
def _peak_rss(pid):
    """The process's peak resident set (VmHWM), in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_tiny_chunks_are_linear_and_bounded(make_sluice, stub):
    # 32-byte chunks, ~63,000 of them (under the 65,536 chunks a body may have): one object per
    # chunk kept would cost ~80 B per 32 payload bytes, ~5 MB for this 2 MB body
    gw = make_sluice(server_config(stub.url).replace("max_body_bytes = 65536", "max_body_bytes = 3000000"), env=ENV)
    pid = gw.proc.pid
    base = max(rss(pid), _peak_rss(pid))
    cpu0 = psutil.Process(pid).cpu_times()
    body = json.dumps({"model": "mock-model", "messages": MSG, "pad": "p" * 2_000_000}).encode()
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 32]), body[i:i + 32]) for i in range(0, len(body), 32))
    chunked += b"0\r\n\r\n"
    head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n" + AUTH + b"transfer-encoding: chunked\r\n\r\n"
    buf = raw_exchange(gw.port, head + chunked, timeout=60)
    assert buf.startswith(b"HTTP/1.1 200"), buf[:200]
    assert stub.requests[-1]["body"] == body  # the body arrived whole
    cpu1 = psutil.Process(pid).cpu_times()
    assert (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system) < 10.0
    grown = _peak_rss(pid) - base
    assert grown < 25e6, f"peak memory grew {grown / 1e6:.0f} MB for a 2 MB chunked body"


def test_oversize_chunked_body_413_without_draining(sluice):
    s = socket.create_connection(("127.0.0.1", sluice.port), timeout=10)
    try:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n" + AUTH + b"transfer-encoding: chunked\r\n\r\n")
        try:
            for _ in range(100):  # 100 x 64 KiB, far over the 64 KiB limit, never terminated
                s.sendall(b"10000\r\n" + b"x" * 65536 + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        buf = _read_all(s)
    finally:
        s.close()
    assert buf.startswith(b"HTTP/1.1 413") and b"connection: close" in buf


def test_early_413_whatever_the_header_case(sluice):
    for name in (b"CONTENT-LENGTH", b"content-Length"):
        s = socket.create_connection(("127.0.0.1", sluice.port), timeout=10)
        try:
            s.sendall(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\n" + name + b": 10000000\r\n\r\n")
            buf = _read_all(s)  # answered before any body byte was sent
        finally:
            s.close()
        assert buf.startswith(b"HTTP/1.1 413"), buf[:100]
        assert json.loads(buf.split(b"\r\n\r\n", 1)[1])["type"] == "error"  # Anthropic shape


# ------------------------------------------------------------------ failures inside a request
def test_deep_alias_body_is_answered(sluice):
    deep = b"[" * 300 + b"]" * 300
    # the model cannot be located in the bytes (two "model" keys): the body would be re-serialized
    body = b'{"messages": [], "x": ' + deep + b', "meta": {"model": "fast"}, "model": "fast"}'
    buf = raw_exchange(sluice.port, raw_post(body) + raw_post({"model": "mock-model", "messages": MSG}),
                       expect_responses=2)
    assert count_responses(buf) == 2
    assert buf.startswith(b"HTTP/1.1 400") and b"HTTP/1.1 200" in buf
    assert wait_until(lambda: sluice.state()["in_flight"] == 0)


def test_odd_model_values_are_answered(make_sluice, stub):
    gw = make_sluice(server_config(stub.url, "validate_json = false"), env=ENV)
    for body in (b'{"model": 5, "messages": []}', b'{"model": "\xff\xfe", "messages": []}',
                 b'{"model": null}', b'{"model": "fast", "model": 7}'):
        buf = raw_exchange(gw.port, raw_post(body), timeout=5)
        assert count_responses(buf) == 1, (body, buf)
        assert buf.startswith((b"HTTP/1.1 400", b"HTTP/1.1 404")), (body, buf[:100])
    assert gw.state()["in_flight"] == 0


def test_duplicate_keys_cannot_pass_the_model_list(make_sluice, stub):
    gw = make_sluice(server_config(stub.url, "validate_json = false"), env=ENV)
    n = len(stub.requests)
    body = b'{"model": "claude", "model": "mock-model", "messages": [{"role": "user", "content": "x"}]}'
    status, _, _ = chat(gw.port, body, key="sk-test-limited")
    assert status == 403  # the key's model list is read first: the last model is not allowed
    swapped = b'{"model": "mock-model", "model": "claude", "messages": [{"role": "user", "content": "x"}]}'
    status, _, _ = chat(gw.port, swapped, key="sk-test-limited")
    assert status == 400  # allowed by its last value, refused for the repeat
    assert len(stub.requests) == n


# ------------------------------------------------------------------ config values that would split a head
def test_config_values_with_line_breaks_are_refused(tmp_path):
    from sluice.config import Config, ConfigError
    base = {"providers": {"p": {"base_url": "http://h/v1"}}, "models": {"m": {"provider": "p"}}}
    for table, key, value in (("providers", "api_key", "a\r\nx-evil: 1"),
                              ("providers", "anthropic_version", "1\nx: y"),
                              ("models", "upstream_model", 'a"b'),
                              ("providers", "base_url", "http://h/v1 HTTP/1.1\r\nx")):
        data = json.loads(json.dumps(base))
        target = data[table]["p" if table == "providers" else "m"]
        target[key] = value
        with pytest.raises(ConfigError):
            Config(data)


# ------------------------------------------------------------------ protocol corners
def test_head_gets_no_body(sluice):
    buf = raw_exchange(sluice.port, b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n",
                       timeout=5, expect_responses=2)
    head, _, rest = buf.partition(b"\r\n\r\n")
    assert int(re.search(rb"content-length: (\d+)", head).group(1)) > 0
    assert rest.startswith(b"HTTP/1.1 200"), rest[:50]  # the next response follows the head directly


@pytest.mark.parametrize("req", [
    b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n"
    b"content-length: 2\r\n\r\n{}",
])
def test_upgrade_and_connect_get_one_response(sluice, req):
    buf = raw_exchange(sluice.port, req, until_closed=True, timeout=5)
    assert buf.count(b"HTTP/1.1 ") == 1 and buf.startswith((b"HTTP/1.1 400", b"HTTP/1.1 405")), buf


def test_http_version_is_read_per_request(sluice):
    # an HTTP/1.0 request after an HTTP/1.1 one on the same connection: HTTP/1.0 rules apply to
    # it (Sluice closes after an HTTP/1.0 request, keep-alive asked or not), so the third
    # request is not answered
    reqs = (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
            b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    buf = raw_exchange(sluice.port, reqs, until_closed=True, timeout=5)
    parts = buf.split(b"HTTP/1.1 200")[1:]
    assert len(parts) == 2, buf
    assert b"connection: close" not in parts[0] and b"connection: close" in parts[1]
    # a streamed answer to an HTTP/1.0 request is never chunked (an HTTP/1.0 client cannot
    # read chunked framing), even after an HTTP/1.1 request on the same connection
    stream = json.dumps({"model": "mock-model", "stream": True, "messages": MSG}).encode()
    reqs = (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
            + raw_post(stream).replace(b" HTTP/1.1\r\n", b" HTTP/1.0\r\n", 1))
    buf = raw_exchange(sluice.port, reqs, until_closed=True, timeout=10)
    first, _, second = buf.partition(b"HTTP/1.1 200")[2].partition(b"HTTP/1.1 200")
    head, _, body = second.partition(b"\r\n\r\n")
    assert b"text/event-stream" in head, buf[:300]
    assert b"transfer-encoding: chunked" not in head.lower(), head
    assert body.rstrip().endswith(b"data: [DONE]"), body[-200:]
    assert not re.match(rb"[0-9a-f]+\r\n", body), body[:50]


def test_nothing_after_a_closing_request_is_answered(sluice, stub):
    # the request after the closing one is a chat request: it must not reach the provider
    marker = "after-close-%d" % time.monotonic_ns()
    chat_req = raw_post({"model": "mock-model", "messages": [{"role": "user", "content": marker}]})
    # "Connection: close" (the parser itself stops there), and an HTTP/1.0 request asking for
    # keep-alive (the parser would go on; Sluice closes after any HTTP/1.0 request)
    for closing in (b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    b"GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"):
        # a pooled provider connection is idle: a request handled now would go out at once
        assert chat(sluice.port, {"model": "mock-model", "messages": MSG})[0] == 200
        reqs = closing + chat_req + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" * 3 + chat_req
        buf = raw_exchange(sluice.port, reqs, until_closed=True, timeout=5)
        assert buf.count(b"HTTP/1.1 ") == 1 and buf.startswith(b"HTTP/1.1 200"), buf
        assert b"connection: close" in buf.lower()
    time.sleep(1.0)
    sent = [r for r in stub.requests if marker.encode() in r["body"]]
    assert sent == [], f"{len(sent)} request(s) pipelined after a closing request reached the provider"
    assert wait_until(lambda: sluice.state()["in_flight"] == 0)


# ------------------------------------------------------------------ what a stranger can read
def test_metrics_token_and_debug_state_off_by_default(make_sluice, stub):
    # the defaults (no new config key): /debug/state is off unless asked for
    gw = make_sluice(server_config(stub.url).replace("debug_endpoints = true\n", ""), env=ENV)
    status, _, data = request(gw.port, "GET", "/debug/state")
    assert status == 404, (status, data[:200])
    assert request(gw.port, "GET", "/metrics")[0] == 200  # no token configured: open
    # a scrape token, when configured
    cfg = server_config(stub.url, 'metrics_token = "scrape-me"').replace("debug_endpoints = true\n", "")
    gw = make_sluice(cfg, env=ENV)
    assert request(gw.port, "GET", "/metrics")[0] == 401
    assert request(gw.port, "GET", "/metrics", headers={"authorization": "Bearer scrape-me"})[0] == 200
    assert request(gw.port, "GET", "/debug/state")[0] == 404
