"""Hostile clients, slow and idle connections, to a running Sluice: a head or body trickled a byte
at a time gets its 408 within the deadline, a request that stops arriving is cut by the idle
timeout, connections past the cap are refused cleanly, and a client that hangs up mid-stream is
still charged for what was relayed."""
import json
import re
import socket
import time

import pytest
from sluice_helpers import (
    ENV,
    METRICS_TOKEN_LINE,
    MSG,
    count_responses,
    raw_exchange,
    raw_post,
    request,
    server_config,
    tokens_spent,
)
from sluice_stub import wait_until

pytestmark = pytest.mark.integration


# ------------------------------------------------------------------ slowloris, connection cap
def _trickle(port, prefix, byte, seconds):
    """Send ``prefix``, then one byte every 0.2 s; what came back (until close or ``seconds``)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    buf = b""
    try:
        s.sendall(prefix)
        deadline = time.monotonic() + seconds
        s.settimeout(0.2)
        while time.monotonic() < deadline:
            try:
                s.sendall(byte)  # one byte now and then: never idle
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
            except socket.timeout:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
    finally:
        s.close()
    return buf


def test_slowloris_gets_408_within_the_head_deadline(make_sluice, stub):
    # the defaults: a head must be complete within 30 s of its first byte, however it trickles
    # (no config key needed, so any Sluice can be asked)
    gw = make_sluice(server_config(stub.url), env=ENV)
    t = time.monotonic()
    buf = _trickle(gw.port, b"GET /health HTTP/1.1\r\nHo", b"s", 40)
    assert buf.startswith(b"HTTP/1.1 408"), (time.monotonic() - t, buf[:100])
    assert time.monotonic() - t > 25  # not before the default deadline
    # shorter deadlines, head and body
    gw = make_sluice(server_config(stub.url, "client_header_timeout_s = 1\nclient_body_timeout_s = 1"), env=ENV)
    for prefix, byte in ((b"GET /health HTTP/1.1\r\nHo", b"s"),
                         (raw_post({"model": "fast", "messages": MSG})[:-10], b" ")):
        buf = _trickle(gw.port, prefix, byte, 6)
        assert buf.startswith(b"HTTP/1.1 408"), buf[:100]


def test_connection_cap_refuses_cleanly(make_sluice, stub):
    # the default cap (16,384 client connections a worker): no config key needed
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    from sluice.config_server import ServerConfig
    default_cap = ServerConfig({}).max_client_connections
    want = default_cap + 1000  # the test's sockets; Sluice raises its own soft limit to the hard one
    if soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            pytest.skip(f"needs {want} file descriptors (hard limit {hard})")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # Sluice inherits it too
    try:
        gw = make_sluice(server_config(stub.url), env=ENV)
        held = []
        try:
            for _ in range(default_cap):
                held.append(socket.create_connection(("127.0.0.1", gw.port), timeout=10))
            # once the worker has accepted them all, the next connection is refused cleanly
            buf = b""
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                buf = raw_exchange(gw.port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", until_closed=True,
                                   timeout=5)
                if not buf.startswith(b"HTTP/1.1 200"):
                    break
                time.sleep(0.2)
            assert count_responses(buf) == 1, buf[:200]
            assert buf.startswith(b"HTTP/1.1 503") and b"retry-after" in buf, buf[:200]
        finally:
            for s in held:
                s.close()
        assert wait_until(lambda: request(gw.port, "GET", "/health")[0] == 200, timeout=10)
        m = re.search(r"sluice_client_connections_refused_total (\d+)", gw.metrics())
        assert m and int(m.group(1)) >= 1
        # a configured cap
        gw = make_sluice(server_config(stub.url, "max_client_connections = 5"), env=ENV)
        held = [socket.create_connection(("127.0.0.1", gw.port), timeout=5) for _ in range(5)]
        try:
            time.sleep(0.3)
            buf = raw_exchange(gw.port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", until_closed=True, timeout=5)
            assert count_responses(buf) == 1
            assert buf.startswith(b"HTTP/1.1 503") and b"retry-after" in buf
        finally:
            for s in held:
                s.close()
        assert wait_until(lambda: request(gw.port, "GET", "/health")[0] == 200)
        assert "sluice_client_connections_refused_total 1" in gw.metrics()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# ------------------------------------------------------------------ idle and head deadlines in the client dialect
def test_parser_errors_and_408_in_the_client_dialect(make_sluice, stub):
    # only keys any Sluice knows: a request that stopped arriving is cut by the idle timeout
    gw = make_sluice(server_config(stub.url, "client_idle_timeout_s = 1"), env=ENV)
    buf = raw_exchange(gw.port, b"POST /v1/messages HTTP/1.1\r\nHost: x\r\ncontent-length: 1\r\n"
                       b"transfer-encoding: chunked\r\n\r\n", until_closed=True, timeout=5)
    assert buf.startswith(b"HTTP/1.1 400"), buf[:100]
    assert json.loads(buf.split(b"\r\n\r\n", 1)[1]).get("type") == "error", buf
    buf = raw_exchange(gw.port, b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n", until_closed=True, timeout=8)
    assert buf.startswith(b"HTTP/1.1 408"), buf[:100]
    assert json.loads(buf.split(b"\r\n\r\n", 1)[1]).get("type") == "error", buf
    # and the head deadline's 408
    gw = make_sluice(server_config(stub.url, "client_header_timeout_s = 0.5"), env=ENV)
    buf = raw_exchange(gw.port, b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n", until_closed=True, timeout=5)
    assert buf.startswith(b"HTTP/1.1 408")
    assert json.loads(buf.split(b"\r\n\r\n", 1)[1]).get("type") == "error"


# ------------------------------------------------------------------ budgets and disconnects
def test_disconnect_before_usage_is_charged_for_what_was_relayed(make_sluice, stub):
    gw = make_sluice(server_config(stub.url, METRICS_TOKEN_LINE, extra="\n[keys.budget2]\nkey = \"sk-budget2\"\ntoken_budget = 100000\n"),
                     env=ENV)
    body = json.dumps({"model": "fast", "stream": True, "stream_options": {"include_usage": True},
                       "messages": MSG, "max_tokens": 500}).encode()
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    s.sendall(raw_post(body, auth=b"authorization: Bearer sk-budget2\r\n",
                    headers=b"x-test-chunks: 200\r\nx-test-chunk-delay-ms: 10\r\n"))
    buf = b""
    while buf.count(b"data: ") < 40:
        chunk = s.recv(65536)
        assert chunk
        buf += chunk
    s.close()  # before the usage frame and [DONE]
    assert wait_until(lambda: gw.state()["in_flight"] == 0)
    assert wait_until(lambda: tokens_spent(gw, "budget2") >= len(body) // 4 + 40, timeout=5), \
        tokens_spent(gw, "budget2")
