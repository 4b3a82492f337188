"""What an idle keep-alive connection costs a worker, against a running Sluice: a connection
whose last request had a head near max_header_bytes keeps no copy of that head while it waits
for its next request (client_idle_timeout_s, 75 s by default), so a worker at its connection
cap is not held at several head copies a connection."""
import json
import socket

import pytest
from sluice_helpers import AUTH, ENV, MSG, count_responses, rss, server_config

pytestmark = pytest.mark.integration

IDLE_CONNECTIONS = 64
# four forwarded headers of 7,800 bytes (the stub's server takes fields up to 8 KiB each):
# a head of about 31 KiB, under the default max_header_bytes (32 KiB)
BIG_FIELDS = b"".join(b"x-custom-%d: %s\r\n" % (i, b"v" * 7800) for i in range(4))
BODY = json.dumps({"model": "mock-model", "messages": MSG}).encode()


def _chat_head(fields):
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n" + AUTH + fields
            + b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(BODY))


def _one_answer(s, data):
    """Send one request on ``s`` and read its whole answer, leaving the connection open."""
    s.sendall(data)
    buf = b""
    while count_responses(buf) < 1:
        chunk = s.recv(65536)
        assert chunk, buf[:300]
        buf += chunk
    assert buf.startswith(b"HTTP/1.1 200"), buf[:300]
    assert b"connection: close" not in buf.lower(), buf[:300]


def _connect(port):
    return socket.create_connection(("127.0.0.1", port), timeout=20)


def test_an_idle_connection_keeps_no_copy_of_a_large_head(make_sluice, stub):
    gw = make_sluice(server_config(stub.url), env=ENV)
    big = _chat_head(BIG_FIELDS) + BODY
    head_bytes = len(big) - len(BODY)
    assert 30 * 1024 < head_bytes < 32768
    # warm up: the allocator and Sluice's first-request work, on connections that then close
    for _ in range(4):
        with _connect(gw.port) as s:
            _one_answer(s, big)
            _one_answer(s, big)
    base = rss(gw.proc.pid)
    idle = []
    try:
        for _ in range(IDLE_CONNECTIONS):
            s = _connect(gw.port)
            idle.append(s)
            _one_answer(s, big)  # then idle, under client_idle_timeout_s
        per_connection = (rss(gw.proc.pid) - base) / IDLE_CONNECTIONS
        # a connection's own state (transport, parser, buffers) is a few KiB: a copy of its
        # last head (the header dict, the forwarded lines, the head kept for the next
        # request) is about head_bytes each
        assert per_connection < head_bytes, (
            f"{per_connection / 1024:.0f} KiB a connection held after a "
            f"{head_bytes / 1024:.0f} KiB head")
        # the connections are still usable: each takes another request
        for s in idle[:4]:
            _one_answer(s, big)
    finally:
        for s in idle:
            s.close()
