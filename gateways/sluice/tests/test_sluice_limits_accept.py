"""Connections over max_client_connections are refused as they are accepted, and a connect flood
cannot make them hold descriptors: at most 32 refusals linger at once (each a descriptor for up to
2 s), the others are closed as soon as their 503 is written. Counted in the worker's open files,
from real clients that keep their sockets open."""
import re
import socket

import psutil
import pytest
from sluice_helpers import ENV, count_responses, request, server_config
from sluice_stub import wait_until

pytestmark = pytest.mark.integration

CAP = 8
FLOOD = 400
LINGERING = 32   # the most refusals lingering at once
SLACK = 16       # descriptors being closed as they are counted


def _answer(s):
    """What a refused client reads: its bytes until the server closes, or resets, the connection."""
    buf = b""
    try:
        while count_responses(buf) < 1:
            piece = s.recv(65536)
            if not piece:
                break
            buf += piece
    except (ConnectionResetError, socket.timeout):
        pass
    return buf


def test_a_connect_flood_over_the_cap_holds_few_descriptors(make_sluice, stub):
    gw = make_sluice(server_config(stub.url, f"max_client_connections = {CAP}"), env=ENV)
    worker = psutil.Process(gw.proc.pid)
    held, flood = [], []
    try:
        for _ in range(CAP):  # the cap reached: each held connection answered, so counted
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            buf = b""
            while count_responses(buf) < 1:
                buf += s.recv(65536)
            assert buf.startswith(b"HTTP/1.1 200"), buf[:100]
            held.append(s)
        base = worker.num_fds()
        for _ in range(FLOOD):  # each sends a request and keeps its socket open
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            flood.append(s)
        answers = [_answer(s) for s in flood]
        grown = worker.num_fds() - base
        assert grown <= LINGERING + SLACK, f"{grown} descriptors held for {FLOOD} refused connections"
        # none was served; the lingering ones surely got their 503, the others got it or a reset
        assert not [a for a in answers if a and not a.startswith(b"HTTP/1.1 503")], answers[:3]
        clean = [a for a in answers if a.startswith(b"HTTP/1.1 503")]
        assert len(clean) >= LINGERING and all(b"retry-after: 1" in a for a in clean)
    finally:
        for s in held + flood:
            s.close()
    assert wait_until(lambda: request(gw.port, "GET", "/health")[0] == 200)
    m = re.search(r"sluice_client_connections_refused_total (\d+)", gw.metrics())
    assert m and int(m.group(1)) >= FLOOD
