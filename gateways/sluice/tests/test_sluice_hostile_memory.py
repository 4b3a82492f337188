"""Hostile clients that pile work up, against a running Sluice: requests pipelined by a client
that never reads are answered only as it reads, so memory stays bounded and other connections
are served meanwhile. And the workers: a metrics snapshot of a large config is still merged, a
killed worker's successor keeps the counted usage and the config that was loaded."""
import os
import re
import signal
import socket
import threading
import time

import psutil
import pytest
from sluice_helpers import (
    ENV,
    METRICS_TOKEN_LINE,
    MSG,
    chat,
    health_ms,
    live_children,
    raw_exchange,
    request,
    rss,
    server_config,
    tokens_spent,
)
from sluice_stub import wait_until

pytestmark = pytest.mark.integration


# ------------------------------------------------------------------ pipelined answers
def _peak_growth(pid, base, seconds, stop_above):
    """The largest RSS growth of ``pid`` over ``base`` seen within ``seconds`` (sampled)."""
    peak = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        peak = max(peak, rss(pid) - base)
        if peak > stop_above:
            break
        time.sleep(0.05)
    return peak


def _count_answers(s, status, n_wanted):
    n = 0
    tail = b""
    while n < n_wanted:
        chunk = s.recv(1 << 20)
        assert chunk, n
        n += (tail + chunk).count(status) - tail.count(status)
        tail = (tail + chunk)[-16:]
    return n


def test_pipelined_metrics_are_bounded_by_backpressure(make_sluice, stub):
    # 80 keys with a budget: every /metrics render is about 10 KB (two gauge lines a key), so
    # 7,500 renders queued for a client that does not read would hold about 75 MB
    keys = "".join(f'\n[keys.metrics-budget-key-{i:03d}]\nkey = "sk-mb-{i}"\ntoken_budget = 1000\n'
                   for i in range(80))
    gw = make_sluice(server_config(stub.url, METRICS_TOKEN_LINE, extra=keys), env=ENV)
    size = len(gw.metrics())
    assert size > 8000, size
    base = rss(gw.proc.pid)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    s.settimeout(20)
    s.connect(("127.0.0.1", gw.port))
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-test-metrics\r\n\r\n"
                  * 7500)  # never read (yet)
        # answers are produced as the client reads them: a few hundred KB at most, not 75 MB
        grown = _peak_growth(gw.proc.pid, base, 4.0, stop_above=30e6)
        assert grown < 15e6, f"{grown / 1e6:.0f} MB held for a client that does not read"
        assert health_ms(gw.port) < 1000  # another connection is served meanwhile
        # reading lets the answers through, one per request
        _count_answers(s, b"HTTP/1.1 200 OK", 300)
    finally:
        s.close()


def test_pipelined_404s_stop_when_the_client_does_not_read(make_sluice, stub):
    # 40 connections each pipeline 20,000 tiny requests for a path with no route and read
    # nothing. Each 20-byte request gets a ~200-byte 404: answering whole reads (up to
    # 256 KiB, ~13,000 requests) would hold megabytes per connection, not the transport's
    # high-water mark (64 KiB) and one unparsed read.
    gw = make_sluice(server_config(stub.url), env=ENV)
    one = b"GET /n HTTP/1.1\r\nHost: x\r\n\r\n"
    assert raw_exchange(gw.port, one, timeout=5).startswith(b"HTTP/1.1 404")
    base = rss(gw.proc.pid)
    socks = []
    try:
        # the worker is stopped while the requests arrive, so each connection's first read is
        # a full one whatever the machine's load
        os.kill(gw.proc.pid, signal.SIGSTOP)
        try:
            for _ in range(40):
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.settimeout(20)
                s.connect(("127.0.0.1", gw.port))
                socks.append(s)
            senders = [threading.Thread(target=s.sendall, args=(one * 20000,), daemon=True) for s in socks]
            for t in senders:
                t.start()
            time.sleep(1.0)
        finally:
            os.kill(gw.proc.pid, signal.SIGCONT)
        grown = _peak_growth(gw.proc.pid, base, 4.0, stop_above=40e6)
        assert grown < 15e6, f"{grown / 1e6:.0f} MB of 404s held for clients that do not read"
        # the worker holds back: answers are produced as the client reads them
        assert health_ms(gw.port) < 5000  # another connection is served meanwhile
        for s in socks[:2]:  # every request is still answered, in order, as the client reads
            assert _count_answers(s, b"HTTP/1.1 404", 20000) == 20000
    finally:
        for s in socks:
            s.close()


# ------------------------------------------------------------------ workers
def test_metrics_snapshot_of_a_large_config_is_merged(make_sluice, stub):
    # 400 models with 3,000-character names, each asked once over two workers: each worker's
    # snapshot is well over 256 KiB (one labelled series per model it served)
    names = [f"m{i:03d}-" + "x" * 3000 for i in range(400)]
    models = "".join(f'\n[models."{n}"]\nprovider = "stub"\n' for n in names)
    gw = make_sluice(server_config(stub.url, extra=models).replace("workers = 1", "workers = 2"), env=ENV)
    parent = psutil.Process(gw.proc.pid)
    assert wait_until(lambda: len(parent.children()) == 2, timeout=10)
    time.sleep(1.0)  # the second worker listens too
    for n in names:
        assert chat(gw.port, {"model": n, "messages": MSG}, headers={"x-test-status": "418"})[0] == 418
    time.sleep(2.0)  # every worker publishes its snapshot within a second
    for _ in range(4):  # whichever worker answers, the other's snapshot is merged in
        try:
            status, _, data = request(gw.port, "GET", "/metrics", timeout=10)
        except OSError as e:
            raise AssertionError(f"/metrics failed: {e!r}") from None
        assert status == 200, data[:200]
        got = re.findall(r'sluice_requests_total\{model="m(\d+)-x+",status="418"\} (\d+)', data.decode())
        assert sum(int(v) for _, v in got) == 400, len(got)


def test_restarted_worker_keeps_counted_usage_and_the_loaded_config(make_sluice, stub):
    cfg = server_config(stub.url, METRICS_TOKEN_LINE).replace("workers = 1", "workers = 2")
    gw = make_sluice(cfg, env=ENV)
    parent = psutil.Process(gw.proc.pid)
    assert wait_until(lambda: len(parent.children()) == 2)
    child = parent.children()[0]
    for _ in range(30):
        assert chat(gw.port, {"model": "fast", "messages": MSG, "max_tokens": 1}, key="sk-test-budget")[0] in (200, 429)
    time.sleep(1.5)  # every worker publishes within a second
    spent = tokens_spent(gw, "budget")
    assert spent > 0
    with open(gw.path, "a") as f:  # an edited file must not reach the restarted worker
        f.write('\n[keys.late]\nkey = "sk-late"\n')
    os.kill(child.pid, signal.SIGKILL)
    assert wait_until(lambda: len(set(live_children(parent)) - {child.pid}) == 2, timeout=10)
    time.sleep(2.0)
    assert tokens_spent(gw, "budget") == spent
    for _ in range(10):
        assert chat(gw.port, {"model": "fast", "messages": MSG}, key="sk-late")[0] == 401


# ------------------------------------------------------------------ keyless bodies
SENT = 43000  # of a body said to be 60000 bytes long, then stalled: three nearly fill 131072


def test_keyless_bodies_cannot_fill_the_held_body_cap(make_sluice, stub):
    # bodies that no answer reads (a path that takes none, a request without a valid key, which
    # gets 401) are dropped as they arrive: stalled, they cannot get a tenant's request 503
    gw = make_sluice(server_config(stub.url, "max_held_body_bytes = 131072"), env=ENV)
    stalled = []
    try:
        for path, auth in ((b"/health", b""), (b"/metrics", b""),
                           (b"/v1/chat/completions", b"authorization: Bearer sk-nobody\r\n")):
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
            s.sendall(b"POST " + path + b" HTTP/1.1\r\nhost: x\r\n" + auth
                      + b"content-type: application/json\r\ncontent-length: 60000\r\n\r\n" + b" " * SENT)
            stalled.append(s)
        # (before the fix, Sluice held them all by now; after it, none is held: not waited for)
        wait_until(lambda: gw.state()["body_bytes_held"] >= 3 * SENT, 2.0)
        status, _, body = chat(gw.port, {"model": "mock-model",
                                         "messages": [{"role": "user", "content": "x" * 3000}]})
        assert status == 200, body[:300]
        assert gw.state()["body_bytes_held"] == 0
    finally:
        for s in stalled:
            s.close()
