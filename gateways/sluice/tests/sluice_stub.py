"""A small provider for Sluice's tests: aiohttp in a background thread, both dialects.

Behaviour per request headers:
  x-test-delay-ms        wait before the response head
  x-test-chunks          SSE chunks to send when streaming (default 3)
  x-test-chunk-delay-ms  pause between SSE chunks
  x-test-status          answer with this error status (and an error body)
  x-test-close           "1": close the connection without answering
  x-test-hang            "1": send the stream head and first chunk (Anthropic: message_start and
                         ping), then go silent
  x-test-gate            NAME: after the first chunk, wait until the test calls open_gate(NAME)
  x-test-big-chunks      N: stream N frames of 64 KiB (progress in ``big_sent``)
  x-test-tag             echoed back as a response header
  x-test-tool            NAME: answer with a call of tool NAME (arguments TOOL_ARGS) instead of
                         text, unary or streamed (the arguments in two fragments), in both dialects
Per stub (for the resilience tests): ``plan``, a list of statuses answered to the next requests
in turn (0: a normal answer, -1: close without answering); ``fail_status``, answered to every
request once the plan is used up; ``fail_share``, the share of the other requests answered 500
(at random); ``retry_after``, a Retry-After value sent with error statuses.
Every request is recorded (path, headers, raw body, monotonic arrival time) in ``Stub.requests``.
"""
import asyncio
import json
import random
import threading
import time

from aiohttp import web
from bench_overhead import free_port  # noqa: F401  (one picker for Sluice's tests and benchmarks)

TOOL_ARGS = {"city": "Paris", "unit": "celsius"}
TOOL_CALL_ID = "call_stub1"       # the OpenAI dialect's tool call id
TOOL_USE_ID = "toolu_stub1"       # the Anthropic dialect's tool_use id


def _args_fragments():
    """The tool's arguments as JSON text, cut in two (streams send them in pieces)."""
    text = json.dumps(TOOL_ARGS)
    return text[:7], text[7:]


class Stub:
    def __init__(self, ssl_context=None):
        self.ssl_context = ssl_context
        self.requests = []
        self.active_streams = 0
        self.cancelled_streams = 0
        self.big_sent = 0
        self.cancelled_tags = []  # x-test-tag of the streams whose client went away
        self.gates = {}
        self.plan = []
        self.fail_status = 0
        self.fail_share = 0.0
        self.retry_after = None
        self.port = free_port()
        self.loop = None
        self.runner = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    # -------------------------------------------------------------- control
    def start(self):
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("stub did not start")
        return self

    def stop(self):
        if self.loop is not None:
            fut = asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop)
            try:
                fut.result(5)
            except Exception:
                pass
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5)

    def _gate(self, name):
        ev = self.gates.get(name)
        if ev is None:
            ev = self.gates[name] = asyncio.Event()
        return ev

    def open_gate(self, name):
        self.loop.call_soon_threadsafe(lambda: self._gate(name).set())

    @property
    def url(self):
        return f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{self.port}"

    def _run(self):
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self.openai)
        app.router.add_post("/v1/messages", self.anthropic)
        self.runner = web.AppRunner(app, access_log=None, handle_signals=False)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", self.port, backlog=1024, ssl_context=self.ssl_context)
        self.loop.run_until_complete(site.start())
        self._ready.set()
        self.loop.run_forever()

    # -------------------------------------------------------------- helpers
    async def _common(self, request):
        raw = await request.read()
        self.requests.append({"path": request.path, "headers": dict(request.headers), "body": raw,
                              "t_s": time.monotonic()})
        h = request.headers
        if h.get("x-test-close") == "1":
            request.transport.close()
            raise ConnectionResetError
        delay = int(h.get("x-test-delay-ms", "0"))
        if delay:
            await asyncio.sleep(delay / 1000)
        status = int(h.get("x-test-status", "0"))
        if self.plan:
            status = self.plan.pop(0) or status
        elif self.fail_status:
            status = self.fail_status
        elif self.fail_share and random.random() < self.fail_share:
            status = 500
        if status == -1:
            request.transport.close()
            raise ConnectionResetError
        return raw, status

    def _err_headers(self, headers):
        if self.retry_after is not None:
            headers["retry-after"] = str(self.retry_after)
        return headers

    # -------------------------------------------------------------- OpenAI
    async def openai(self, request):
        try:
            raw, status = await self._common(request)
        except ConnectionResetError:
            return web.Response(status=500)
        tag = {"x-test-tag": request.headers.get("x-test-tag", "")}
        if status:
            return web.json_response({"error": {"message": f"stub error {status}", "type": "stub",
                                                "param": None, "code": None}}, status=status,
                                     headers=self._err_headers(tag))
        body = json.loads(raw)
        model = body.get("model")
        tool = request.headers.get("x-test-tool")
        if not body.get("stream"):
            return web.json_response(headers=tag, data=self._openai_unary(model, tool))
        h = request.headers
        chunks = int(h.get("x-test-chunks", "3"))
        delay = int(h.get("x-test-chunk-delay-ms", "0")) / 1000
        resp = web.StreamResponse(headers={"content-type": "text/event-stream", **tag})
        self.active_streams += 1
        try:
            try:
                await resp.prepare(request)
            except ConnectionResetError:  # Sluice already dropped this request
                self.cancelled_streams += 1
                return resp
            base = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 1, "model": model}
            first = dict(base, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""},
                                         "finish_reason": None}])
            await resp.write(b"data: " + json.dumps(first).encode() + b"\n\n")
            if h.get("x-test-hang") == "1":
                # silent until the peer goes away (aiohttp does not cancel handlers for that)
                while request.transport is not None and not request.transport.is_closing():
                    await asyncio.sleep(0.02)
                self.cancelled_streams += 1
                self.cancelled_tags.append(h.get("x-test-tag", ""))
                return resp
            if h.get("x-test-gate"):
                await self._gate(h["x-test-gate"]).wait()
            big = int(h.get("x-test-big-chunks", "0"))
            for _ in range(big):
                await resp.write(b"data: " + b"x" * 65536 + b"\n\n")
                self.big_sent += 1
            for i in range(chunks):
                if delay:
                    await asyncio.sleep(delay)
                c = dict(base, choices=[{"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": None}])
                await resp.write(b"data: " + json.dumps(c).encode() + b"\n\n")
            if tool:
                await self._openai_tool_frames(resp, base, tool)
            last = dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": "tool_calls" if tool else "stop"}])
            await resp.write(b"data: " + json.dumps(last).encode() + b"\n\n")
            if (body.get("stream_options") or {}).get("include_usage"):
                u = dict(base, choices=[], usage={"prompt_tokens": 11, "completion_tokens": chunks,
                                                  "total_tokens": 11 + chunks})
                await resp.write(b"data: " + json.dumps(u).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except ConnectionResetError:  # the gateway dropped the request mid-stream
            self.cancelled_streams += 1
            return resp
        except asyncio.CancelledError:
            self.cancelled_streams += 1
            raise
        finally:
            self.active_streams -= 1
        return resp

    @staticmethod
    def _openai_unary(model, tool):
        """A unary answer: text, or a call of ``tool``."""
        message, finish = {"role": "assistant", "content": "Hello from stub"}, "stop"
        if tool:
            message, finish = {"role": "assistant", "content": None, "tool_calls": [
                {"id": TOOL_CALL_ID, "type": "function",
                 "function": {"name": tool, "arguments": json.dumps(TOOL_ARGS)}}]}, "tool_calls"
        return {"id": "chatcmpl-stub", "object": "chat.completion", "created": 1, "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}}

    @staticmethod
    async def _openai_tool_frames(resp, base, tool):
        """A streamed tool call: its id and name, then its arguments in two fragments."""
        first, rest = _args_fragments()
        calls = [[{"index": 0, "id": TOOL_CALL_ID, "type": "function",
                   "function": {"name": tool, "arguments": ""}}],
                 [{"index": 0, "function": {"arguments": first}}],
                 [{"index": 0, "function": {"arguments": rest}}]]
        for call in calls:
            c = dict(base, choices=[{"index": 0, "delta": {"tool_calls": call}, "finish_reason": None}])
            await resp.write(b"data: " + json.dumps(c).encode() + b"\n\n")

    # -------------------------------------------------------------- Anthropic
    async def anthropic(self, request):
        try:
            raw, status = await self._common(request)
        except ConnectionResetError:
            return web.Response(status=500)
        if status:
            return web.json_response({"type": "error", "error": {"type": "overloaded_error",
                                                                 "message": f"stub error {status}"}},
                                     status=status, headers=self._err_headers({}))
        body = json.loads(raw)
        model = body.get("model")
        tool = request.headers.get("x-test-tool")
        if not body.get("stream"):
            content, stop = [{"type": "text", "text": "Hello from stub"}], "end_turn"
            if tool:
                content = [{"type": "tool_use", "id": TOOL_USE_ID, "name": tool, "input": TOOL_ARGS}]
                stop = "tool_use"
            return web.json_response({
                "id": "msg_stub", "type": "message", "role": "assistant", "model": model,
                "content": content, "stop_reason": stop, "stop_sequence": None,
                "usage": {"input_tokens": 13, "output_tokens": 4}})
        h = request.headers
        chunks = int(h.get("x-test-chunks", "3"))
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)

        async def ev(kind, obj):
            await resp.write(f"event: {kind}\ndata: {json.dumps(obj)}\n\n".encode())

        await ev("message_start", {"type": "message_start", "message": {
            "id": "msg_stub", "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 13, "output_tokens": 1}}})
        await ev("ping", {"type": "ping"})
        if h.get("x-test-hang") == "1":  # silent until the peer goes away
            while request.transport is not None and not request.transport.is_closing():
                await asyncio.sleep(0.02)
            return resp
        await ev("content_block_start", {"type": "content_block_start", "index": 0,
                                         "content_block": {"type": "text", "text": ""}})
        for i in range(chunks):
            await ev("content_block_delta", {"type": "content_block_delta", "index": 0,
                                             "delta": {"type": "text_delta", "text": f"tok{i} "}})
        await ev("content_block_stop", {"type": "content_block_stop", "index": 0})
        if tool:
            await ev("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {
                "type": "tool_use", "id": TOOL_USE_ID, "name": tool, "input": {}}})
            for fragment in _args_fragments():
                await ev("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {
                    "type": "input_json_delta", "partial_json": fragment}})
            await ev("content_block_stop", {"type": "content_block_stop", "index": 1})
        await ev("message_delta", {"type": "message_delta",
                                   "delta": {"stop_reason": "tool_use" if tool else "end_turn",
                                             "stop_sequence": None},
                                   "usage": {"output_tokens": chunks}})
        await ev("message_stop", {"type": "message_stop"})
        await resp.write_eof()
        return resp


def wait_until(pred, timeout=5.0, interval=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()
