"""Many streams with random client disconnects, and backpressure: nothing may leak."""
import asyncio
import json
import random
import re
import socket
import struct

import psutil
import pytest
from sluice_helpers import KEY, base_config
from sluice_stub import wait_until

pytestmark = pytest.mark.integration

ENV = {"SLUICE_TEST_PROVIDER_KEY": "sk-provider-secret"}


async def _one(port, rng, stats):
    stream = rng.random() < 0.8
    body = json.dumps({"model": "fast", "stream": stream,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + KEY.encode()
           + b"\r\nx-test-chunks: 20\r\nx-test-chunk-delay-ms: 3\r\nx-test-delay-ms: %d\r\n" % rng.randint(0, 30)
           + b"content-length: %d\r\n\r\n" % len(body) + body)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sock = writer.get_extra_info("socket")
    writer.write(req)
    await writer.drain()
    mode = rng.random()
    try:
        if mode < 0.45:
            # disconnect at a random point: before the head, after some bytes, mid-stream
            await asyncio.sleep(rng.choice([0, 0.005, 0.02, 0.05]))
            if rng.random() < 0.5:
                await reader.read(rng.randint(1, 3000))
            if rng.random() < 0.5:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
            stats["dropped"] += 1
            return
        data = b""
        while True:
            chunk = await asyncio.wait_for(reader.read(65536), 10)
            if not chunk:
                break
            data += chunk
            head, sep, rest = data.partition(b"\r\n\r\n")
            if sep and ((stream and rest.endswith(b"\r\n0\r\n\r\n")) or (not stream and rest.endswith(b"}"))):
                break
        assert data.startswith(b"HTTP/1.1 200"), data[:200]
        if stream:
            assert b"data: [DONE]" in data
        stats["ok"] += 1
    finally:
        writer.close()


async def _storm(port, total, concurrency, seed):
    rng = random.Random(seed)
    stats = {"ok": 0, "dropped": 0}
    sem = asyncio.Semaphore(concurrency)

    async def run(i):
        async with sem:
            await _one(port, rng, stats)

    await asyncio.wait_for(asyncio.gather(*(run(i) for i in range(total))), 60)
    return stats


def _upstream_sockets(pid, stub_port):
    conns = psutil.Process(pid).net_connections(kind="tcp")
    return sum(1 for c in conns if c.raddr and c.raddr.port == stub_port and c.status == "ESTABLISHED")


def test_hundreds_of_streams_with_random_disconnects(make_sluice, stub):
    gw = make_sluice(base_config(stub.url), env=ENV)
    total = 400
    stats = asyncio.run(_storm(gw.port, total, concurrency=50, seed=1234))
    assert stats["ok"] + stats["dropped"] == total
    assert stats["ok"] > 100 and stats["dropped"] > 100

    def idle():
        st = gw.state()
        up = st["upstream"]["stub"]
        # the only client connection left is the one asking (busy while it is answered)
        return (st["in_flight"] == 0 and st["busy_clients"] == 1 and st["client_connections"] == 1
                and up["busy"] == 0 and up["connecting"] == 0 and up["waiters"] == 0 and st["tasks"] == 0)

    assert wait_until(idle, timeout=10), json.dumps(gw.state())
    st = gw.state()
    # every upstream socket still open is an idle pooled one (cancelled ones were closed)
    assert wait_until(lambda: _upstream_sockets(gw.proc.pid, stub.port) == gw.state()["upstream"]["stub"]["idle"])
    assert st["upstream"]["stub"]["idle"] <= 50
    assert wait_until(lambda: stub.active_streams == 0, timeout=10)
    # each request that reached Sluice was answered or counted as a client disconnect, once
    text = gw.metrics()
    counted = sum(int(v) for v in re.findall(r'sluice_requests_total\{model="mock-model",status="\d+"\} (\d+)', text))
    assert stats["ok"] <= counted <= total
    assert 'sluice_requests_in_flight 0' in text
    # and the pool still works
    from sluice_helpers import chat
    assert chat(gw.port, {"model": "fast", "messages": [{"role": "user", "content": "x"}]})[0] == 200


def test_backpressure_slow_client_pauses_the_provider(make_sluice, stub):
    gw = make_sluice(base_config(stub.url), env=ENV)
    frames = 800  # 800 x 64 KiB = 50 MiB
    start = stub.big_sent
    body = json.dumps({"model": "fast", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    s.settimeout(20)
    s.connect(("127.0.0.1", gw.port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + KEY.encode()
              + b"\r\nx-test-chunks: 0\r\nx-test-big-chunks: %d\r\ncontent-length: %d\r\n\r\n" % (frames, len(body))
              + body)
    try:
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = s.recv(4096)
            assert chunk
            got += chunk
        assert got.startswith(b"HTTP/1.1 200")
        # stop reading: the provider must be held back once the buffers in between are full
        last = [-1]

        def settled():
            now = stub.big_sent
            same = now == last[0]
            last[0] = now
            return same and now > start

        assert wait_until(settled, timeout=15, interval=0.5)
        held = stub.big_sent - start
        assert held < frames * 0.75, held
        rss = psutil.Process(gw.proc.pid).memory_info().rss
        assert rss < 120e6
        # reading again lets the whole stream through
        total = len(got)
        tail = got.partition(b"\r\n\r\n")[2]
        while not tail.endswith(b"\r\n0\r\n\r\n"):
            chunk = s.recv(1 << 20)
            assert chunk
            total += len(chunk)
            tail = (tail + chunk)[-16:]
        assert stub.big_sent - start == frames
        assert total > frames * 65536
    finally:
        s.close()


def test_idle_and_stuck_clients_are_let_go(make_sluice, stub):
    cfg = base_config(stub.url).replace("max_body_bytes = 65536",
                                        "max_body_bytes = 65536\nclient_idle_timeout_s = 0.5\nclient_send_timeout_s = 0.5")
    gw = make_sluice(cfg, env=ENV)
    # an idle keep-alive connection is closed
    idle = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    assert idle.recv(100) == b""
    idle.close()
    # half a request: 408, then close
    half = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    half.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + KEY.encode()
                 + b"\r\ncontent-length: 100\r\n\r\n{")
    data = b""
    while True:
        chunk = half.recv(65536)
        if not chunk:
            break
        data += chunk
    half.close()
    assert data.startswith(b"HTTP/1.1 408")
    # a client that stops reading a stream for good: the exchange is given up, nothing stays busy
    body = json.dumps({"model": "fast", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    s.connect(("127.0.0.1", gw.port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + KEY.encode()
              + b"\r\nx-test-chunks: 0\r\nx-test-big-chunks: 800\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
    try:
        assert wait_until(lambda: gw.state()["in_flight"] == 1)
        assert wait_until(lambda: gw.state()["in_flight"] == 0 and gw.state()["upstream"]["stub"]["busy"] == 0,
                          timeout=15)
        assert 'kind="client_too_slow"' in gw.metrics()
    finally:
        s.close()


def test_chunked_request_trailers_do_not_leak(sluice, stub):
    body = json.dumps({"model": "fast", "messages": [{"role": "user", "content": "hi"}]}).encode()
    req1 = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + KEY.encode()
            + b"\r\ntransfer-encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n0\r\nx-trailer: t\r\n\r\n" % (len(body), body))
    req2 = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + KEY.encode()
            + b"\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
    from sluice_helpers import raw_exchange
    buf = raw_exchange(sluice.port, req1 + req2, expect_responses=2)
    assert buf.count(b"HTTP/1.1 200 OK") == 2
    assert "x-trailer" not in {k.lower() for k in stub.requests[-1]["headers"]}
