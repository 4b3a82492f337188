"""Many requests held open at once (the in-flight lane, at tiny scale): a raw provider that holds
every request before it answers, Sluice between it and thousands of open client connections."""
import asyncio
import json
import resource
import threading
import time

import pytest
from sluice_helpers import ENV, rss, server_config
from sluice_stub import free_port

pytestmark = pytest.mark.integration

BODY = b'{"model":"mock-model","messages":[{"role":"user","content":"hi"}]}'
STREAM_BODY = b'{"model":"mock-model","stream":true,"messages":[{"role":"user","content":"hi"}]}'
FRAME = (b'data: {"id":"x","object":"chat.completion.chunk",'
         b'"choices":[{"index":0,"delta":{"content":"ok"}}]}\n\n')
ANSWER = json.dumps({"id": "x", "object": "chat.completion", "model": "mock-model", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()


class HoldingProvider:
    """Answers every request ``hold_s`` after its head arrived; counts its open connections."""

    def __init__(self, hold_s, frame_every_s=0.0):
        self.hold_s = hold_s
        self.frame_every_s = frame_every_s  # > 0: a chunked SSE stream, a frame this often
        self.port = free_port()
        self.open = 0
        self.peak = 0
        self.received = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.thread.start()
        assert self.ready.wait(10)
        return self

    def __exit__(self, *exc):
        asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    async def _shutdown(self):
        """Every connection Sluice keeps alive to this provider is closed before its loop stops."""
        self.server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(
            self._serve, "127.0.0.1", self.port, backlog=4096))
        self.ready.set()
        self.loop.run_forever()
        self.loop.close()

    async def _serve(self, reader, writer):
        self.open += 1
        self.peak = max(self.peak, self.open)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                self.received += 1
                if self.frame_every_s:
                    await self._stream(writer)
                    continue
                await asyncio.sleep(self.hold_s)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n" % len(ANSWER) + ANSWER)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open -= 1
            writer.close()


    async def _stream(self, writer):
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")
        frames = [FRAME] * int(self.hold_s / self.frame_every_s) + [b"data: [DONE]\n\n"]
        for frame in frames:
            writer.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            await writer.drain()
            await asyncio.sleep(self.frame_every_s)
        writer.write(b"0\r\n\r\n")
        await writer.drain()


async def _one(port, deadline_s, body):
    """One request on its own connection: its status, or the error that ended it."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), deadline_s)
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
                     b"authorization: Bearer sk-test-main\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n" % len(body) + body)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), deadline_s)
        status = int(head.split(b" ", 2)[1])
        if b"text/event-stream" in head:
            body = await asyncio.wait_for(reader.readuntil(b"\r\n0\r\n\r\n"), deadline_s)
            status = status if b"data: [DONE]" in body else "no [DONE]"
        writer.close()
        return status
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as e:
        return type(e).__name__


async def _hold_many(port, n, deadline_s, on_all_sent, body=BODY):
    tasks = []
    for i in range(n):
        tasks.append(asyncio.ensure_future(_one(port, deadline_s, body)))
        if i % 200 == 199:
            await asyncio.sleep(0.02)  # the listen backlog is not what this test measures
    await asyncio.sleep(0.5)
    on_all_sent()
    return await asyncio.gather(*tasks)


def _start_with_soft_fd_limit(make_sluice, config, soft):
    """Sluice started with an open-file soft limit of ``soft`` (a common default), hard unchanged."""
    old = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, old[1]), old[1]))
    try:
        return make_sluice(config, env=ENV)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, old)


def test_two_thousand_held_requests_all_answered_with_bounded_upstream(make_sluice):
    n, hold_s, max_connections = 2000, 2.0, 1500
    with HoldingProvider(hold_s) as provider:
        cfg = server_config(f"http://127.0.0.1:{provider.port}").replace(
            '[providers.stub]\n', f'[providers.stub]\nmax_connections = {max_connections}\n')
        gw = _start_with_soft_fd_limit(make_sluice, cfg, 1024)
        before = rss(gw.proc.pid)
        held = {}
        results = asyncio.run(_hold_many(gw.port, n, 20.0,
                                         lambda: held.setdefault("rss", rss(gw.proc.pid))))
    failed = [r for r in results if r != 200]
    assert not failed, (f"{len(failed)} of {n} not answered 200, e.g. {failed[:5]}; "
                        f"log tail: {gw.output()[-600:]}")
    assert provider.peak <= max_connections
    assert "open files" in gw.output()
    print(f"\nsluice RSS with {n} requests open: {(held['rss'] - before) / 2**20 / n * 1000:.2f} MiB "
          f"per 1,000 open requests (behaviour on a loaded machine; provider peak "
          f"{provider.peak} connections)")


def test_pool_waiters_beyond_their_bound_get_503(make_sluice):
    """2 connections, 3 waiters: of 8 held requests, 5 are answered and 3 refused at once."""
    with HoldingProvider(1.0) as provider:
        cfg = server_config(f"http://127.0.0.1:{provider.port}").replace(
            '[providers.stub]\n', '[providers.stub]\nmax_connections = 2\nmax_waiters = 3\n')
        gw = make_sluice(cfg, env=ENV)
        t = time.monotonic()
        results = asyncio.run(_hold_many(gw.port, 8, 10.0, lambda: None))
    assert sorted(results, key=str) == [200] * 5 + [503] * 3, results
    assert provider.peak <= 2
    assert time.monotonic() - t < 10


def test_one_thousand_held_streams_all_relayed_to_their_end(make_sluice):
    """Streams held open 2 s, a frame every 250 ms (the in-flight lane's streamed steps)."""
    n = 1000
    with HoldingProvider(2.0, frame_every_s=0.25) as provider:
        gw = _start_with_soft_fd_limit(make_sluice, server_config(
            f"http://127.0.0.1:{provider.port}"), 1024)
        before = rss(gw.proc.pid)
        held = {}
        results = asyncio.run(_hold_many(gw.port, n, 20.0,
                                         lambda: held.setdefault("rss", rss(gw.proc.pid)),
                                         body=STREAM_BODY))
    failed = [r for r in results if r != 200]
    assert not failed, f"{len(failed)} of {n} streams failed, e.g. {failed[:5]}"
    print(f"\nsluice RSS with {n} streams open: {(held['rss'] - before) / 2**20 / n * 1000:.2f} MiB "
          f"per 1,000 open streams (behaviour on a loaded machine)")
