"""The request handler of one worker (:class:`MockApp`): routing, generation requests
(hold, unary answer, stream), the other endpoints, and each request's stats and
request-log line.

Endpoints
    POST /v1/chat/completions   OpenAI chat.completion, or SSE chat.completion.chunk frames
                                with ``"stream": true``
    POST /v1/messages           Anthropic message, or its SSE event sequence with
                                ``"stream": true``
    GET  /v1/models             OpenAI model list
    GET  /health                ``{"status":"ok"}`` (no latency)
    GET  /stats                 merged statistics of all workers (``mocks.stats`` shape)
    (``/chat/completions``, ``/messages`` and ``/models`` are accepted as aliases.)

Timing: the handler takes t0 once it has the whole request body, holds until
t0 + latency, then writes the response head (``hold`` = head time - t0, recorded in
10 µs buckets).  Stream frames follow the head: frame i of ``stream_chunks`` content
frames is written at head + i × chunk delay (an absolute schedule: no drift); the opening
frame(s) are written right after the head, the closing ones right after the last content
frame.  Holds and gaps are timed with a timerfd (see ``mocks.timer``): never early.  A client
that closes its connection between frames ends the wait for the next one at once (the
connection's ``connection_lost``, ``mocks.connection``): nothing more is written, and the log
says when the close came (``client_closed_t_unix_ns``, ``ended`` = ``client_closed``).

Per-request overrides (request headers): ``x-mock-latency-ms``, ``x-mock-chunks``,
``x-mock-chunk-delay-ms``, ``x-mock-response-tokens``; an invalid value is a 400
(``mocks.protocol``).

Every response carries ``x-mock-request-id: <pid>-<seq>``.

Faulted answers (``mocks.fault_replies``) are chosen once the body is read and valid.

Per-request log: every request is logged (``mocks.request_log.RequestLog``: one CSV line
in ``<stats_dir>/requests-<pid>.csv``, flushed with the stats file) under the load
generator's id.  The id is the marker ``[rid:<id>]`` found last in the request body (the
load generator puts it in the last user message, which every gateway forwards
unchanged), else the ``x-request-id`` header (a gateway may replace that header with its
own id, so the marker wins); ids are 1-64 characters of ``[A-Za-z0-9._:-]``, anything
else logs as ``""``.  Every response is written inside the handler so that the time its
head (and last byte) went to the socket can be logged, with the content it carried and how
it ended (the log's columns: ``mocks.request_log.REQUEST_LOG_COLUMNS``).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import time

import orjson
from aiohttp import web
from aiohttp.web_request import BaseRequest

from mocks.bodies import Renderer, models_body, prompt_tokens
from mocks.connection import bytes_out, gone, head_bytes
from mocks.fault_replies import FaultReplies
from mocks.faults import FaultPlan
from mocks.protocol import (
    CT,
    JSON_CT,
    RID,
    SSE_CT,
    BadRequest,
    anthropic_invalid_request,
    openai_invalid_request,
    parse_body,
    read_overrides,
    request_id_of,
)
from mocks.request_log import COMPLETE, MOCK_CLOSED, RequestLog
from mocks.stats import read_stats
from mocks.timer import PreciseTimer
from mocks.worker_stats import WorkerStats

_mono = time.monotonic_ns

OTHER_PATH = "<other>"


def _generic_error(kind: str, message: str) -> bytes:
    # readable by both dialects' error parsers
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message,
                                                     "param": None, "code": kind}})


class MockApp(FaultReplies):
    """The request handler of one worker."""

    def __init__(self, cfg, stats: WorkerStats, timer: PreciseTimer, log: RequestLog):
        self.cfg = cfg
        self.stats = stats
        self.log = log
        self.timer = timer
        self.renderer = Renderer()
        self.plan = None  # no fault until armed (mocks.worker: at the epoch, or by the arm file)
        self.latency_ns = int(round(cfg.latency_ms * 1_000_000))
        self.response_tokens = cfg.response_tokens
        self.stream_chunks = cfg.stream_chunks
        self.delay_ns = int(round(cfg.chunk_delay_ms * 1_000_000))
        self._seq = itertools.count(1)
        self._rid_prefix = f"{os.getpid()}-"
        self._health = orjson.dumps({"status": "ok"})
        self._models = models_body(cfg.models, int(time.time()))
        gen_openai = ("POST", functools.partial(self.generate, anthropic=False))
        gen_anthropic = ("POST", functools.partial(self.generate, anthropic=True))
        models = ("GET", self.models)
        self._routes = {
            "/v1/chat/completions": gen_openai, "/chat/completions": gen_openai,
            "/v1/messages": gen_anthropic, "/messages": gen_anthropic,
            "/v1/models": models, "/models": models,
            "/health": ("GET", self.health),
            "/stats": ("GET", self.stats_handler),
        }

    # ------------------------------------------------------------------ dispatch
    async def handle(self, request: BaseRequest) -> web.StreamResponse:
        """Route; each handler records its own response in the stats (a stream records its
        head as it is written and its completion separately) and in the request log
        (the ones here: through :meth:`_send`)."""
        rid = self._rid_prefix + str(next(self._seq))
        path = request.path
        route = self._routes.get(path)
        if route is None:
            self.stats.record_response(OTHER_PATH, 404)
            return await self._send(request, rid, OTHER_PATH, web.Response(
                status=404, body=_generic_error("not_found_error", f"Unknown path: {path}"),
                headers={CT: JSON_CT, RID: rid}))
        method, handler = route
        if request.method != method and not (method == "GET" and request.method == "HEAD"):
            self.stats.record_response(path, 405)
            return await self._send(request, rid, path, web.Response(status=405, body=_generic_error(
                "method_not_allowed", f"Method {request.method} not allowed on {path}; use {method}"),
                headers={CT: JSON_CT, RID: rid, "Allow": method}))
        try:
            return await handler(request, rid, path)
        except web.HTTPException as exc:  # e.g. 413 from request.read()
            self.stats.record_response(path, exc.status)
            return await self._send(request, rid, path, web.Response(status=exc.status, body=_generic_error(
                "invalid_request_error" if exc.status < 500 else "api_error", exc.reason),
                headers={CT: JSON_CT, RID: rid}))
        except Exception as exc:  # never let aiohttp answer without our header
            self.stats.record_response(path, 500)
            return await self._send(request, rid, path, web.Response(
                status=500, body=_generic_error("api_error", f"mock error: {exc!r}"),
                headers={CT: JSON_CT, RID: rid}))

    def arm(self, epoch_unix_s: float) -> None:
        """The schedule's windows, counted from ``epoch_unix_s``, take effect."""
        self.plan = FaultPlan(self.cfg.fault_schedule, self.cfg.fault_seed, epoch_unix_s,
                              time.time(), _mono())

    def _log_request(self, request, rid: str, path: str, body: bytes, status: int, fault: str, t0: int,
                     hold_set_ns: int, t_head: int, t_written: int, t_last: int, sent_bytes: int,
                     content_chars: int = 0, frames: int = 0, client_closed_ns: int = 0,
                     ended: str = COMPLETE) -> None:
        """The request log's line: ``t0`` body read, ``t_head`` head write started,
        ``t_written`` head handed to the socket, ``t_last`` last byte handed to it;
        ``content_chars`` and ``frames`` of content handed to it; ``client_closed_ns`` when
        the client's close reached the mock (0: it did not leave); ``ended`` how it ended."""
        proto = request.protocol
        rx_ns, peer_port = (proto.rx_ns, proto.peer_port) if proto is not None else (t0, 0)
        self.log.record(request_id_of(request.headers, body), rid, path, status, fault, t0, hold_set_ns,
                        t_head - t0, t_written, t_last, head_bytes(request) + len(body), sent_bytes,
                        max(0, t0 - rx_ns), t_written - t_head, peer_port, content_chars, frames,
                        client_closed_ns, ended)

    async def _send(self, request, rid: str, path: str, resp, body: bytes = b"", t0: int = 0,
                    hold_set_ns: int = 0, fault: str = "", content_chars: int = 0) -> web.StreamResponse:
        """Write a whole (unheld or already held) response now and log it.  ``t0``: when
        the body was read (0: not read; the request's last bytes count instead);
        ``content_chars``: the assistant content in its body."""
        t_start = _mono()
        if not t0:
            t0 = t_start
        status = resp.status
        sent_bytes = 0
        ended, closed_ns = COMPLETE, 0
        try:
            await resp.prepare(request)
            await resp.write_eof()
            sent_bytes = resp.body_length
        except ConnectionError:
            status = 499  # nobody got this answer
            content_chars = 0
            ended, closed_ns = gone(request.protocol)
        t_done = _mono()
        self._log_request(request, rid, path, body, status, fault, t0, hold_set_ns, t_start, t_done, t_done,
                          sent_bytes, content_chars, 0, closed_ns, ended)
        return resp

    async def _bad(self, request, rid: str, path: str, error: bytes, body: bytes, t0: int) -> web.Response:
        self.stats.record_response(path, 400)
        return await self._send(request, rid, path, web.Response(
            status=400, body=error, headers={CT: JSON_CT, RID: rid}), body, t0)

    # ------------------------------------------------------------------ generation
    async def generate(self, request: BaseRequest, rid: str, path: str, anthropic: bool) -> web.StreamResponse:
        """A generation request in the OpenAI (chat completions) or Anthropic (messages) dialect."""
        body = await request.read()
        t0 = _mono()  # the whole request is here: the hold starts
        try:
            req, model, messages = parse_body(body)
            latency_ns, tokens, chunks, delay_ns, fault = read_overrides(
                request.headers, self.latency_ns, self.response_tokens, self.stream_chunks, self.delay_ns)
        except BadRequest as e:
            error = anthropic_invalid_request(e) if anthropic else openai_invalid_request(e)
            return await self._bad(request, rid, path, error, body, t0)
        if fault is None and self.plan is not None:
            fault = self.plan.pick(t0)
        renderer = self.renderer
        if anthropic:
            prompt = prompt_tokens(messages, req.get("system"))
        else:
            prompt = prompt_tokens(messages)
        if req.get("stream") is True:
            if anthropic:
                first, middle, last = renderer.anthropic_stream(rid.encode(), model, tokens, chunks, prompt)
            else:
                options = req.get("stream_options")
                include_usage = type(options) is dict and options.get("include_usage") is True
                first, middle, last = renderer.openai_stream(rid.encode(), model, tokens, chunks, prompt,
                                                             include_usage)
            chars = renderer.content_chars(tokens, chunks)
            if fault is not None:
                return await self._faulted(request, rid, path, body, t0, latency_ns, delay_ns, fault, anthropic,
                                           None, chars, first, middle, last)
            return await self._stream(request, rid, path, body, t0, latency_ns, delay_ns, first, middle, last,
                                      chars)
        if anthropic:
            out = renderer.anthropic_unary(rid.encode(), model, tokens, prompt)
        else:
            out = renderer.openai_unary(rid.encode(), model, tokens, prompt)
        chars = renderer.content_chars(tokens, 1)
        if fault is not None:
            return await self._faulted(request, rid, path, body, t0, latency_ns, delay_ns, fault, anthropic, out,
                                       chars)
        resp = web.Response(body=out, headers={CT: JSON_CT, RID: rid})
        return await self._unary(request, rid, resp, path, body, t0, latency_ns, "", chars[1])

    async def _hold(self, path: str, deadline: int) -> None:
        try:
            await self.timer.wait_until(deadline)
        except asyncio.CancelledError:  # shutdown after the grace period
            self.stats.record_response(path, 499)
            raise

    async def _next_frame(self, proto, due: int) -> bool:
        """Wait until a frame is due; False when the client left first (its connection_lost
        ends the wait at once: a stream writing every few seconds stops when it is told)."""
        if proto is None:
            await self.timer.wait_until(due)
            return True
        if not proto.lost_ns:
            wait = self.timer.wait_until(due)
            proto.lost_waiter = wait
            await wait
        return not proto.lost_ns

    def _log_stopped(self, request, rid: str, path: str, body: bytes, t0: int, hold_set_ns: int,
                     fault: str) -> None:
        """The line of a request the mock's shutdown cancelled before its head."""
        now = _mono()
        self._log_request(request, rid, path, body, 499, fault, t0, hold_set_ns, now, now, now, 0,
                          ended=MOCK_CLOSED)

    async def _unary(self, request, rid: str, resp, path: str, body: bytes, t0: int, latency_ns: int,
                     fault: str = "", content_chars: int = 0):
        # the response is fully built before the hold: only the head's write follows it
        if latency_ns:
            deadline = t0 + latency_ns
            if _mono() < deadline:
                try:
                    await self._hold(path, deadline)
                except asyncio.CancelledError:
                    self._log_stopped(request, rid, path, body, t0, latency_ns, fault)
                    raise
        stats = self.stats
        stats.record_hold(_mono() - t0)
        transport = request.transport
        if transport is None or transport.is_closing():
            stats.incomplete += 1  # the client left during the hold: nobody gets this answer
        else:
            stats.count += 1  # counted before the bytes go out, so a reader never sees it missing
        stats.record_response(path, 200)
        return await self._send(request, rid, path, resp, body, t0, latency_ns, fault, content_chars)

    async def _stream(self, request, rid: str, path: str, body: bytes, t0: int, latency_ns: int, delay_ns: int,
                      first: bytes, middle: list, last: bytes, chars: tuple, fault: str = ""):
        """A whole stream; ``chars[k]``: the content characters once k content frames went out."""
        resp = web.StreamResponse(headers={CT: SSE_CT, "Cache-Control": "no-cache", RID: rid})
        if latency_ns:
            deadline = t0 + latency_ns
            if _mono() < deadline:
                try:
                    await self._hold(path, deadline)
                except asyncio.CancelledError:
                    self._log_stopped(request, rid, path, body, t0, latency_ns, fault)
                    raise
        stats = self.stats
        timer = self.timer
        proto = request.protocol
        t_head = _mono()
        stats.record_hold(t_head - t0)
        stats.record_response(path, 200)
        counted = False
        t_written = t_last = t_head
        status = 200
        sent = 0  # content frames handed to the socket
        ended, closed_ns = COMPLETE, 0
        try:
            await resp.prepare(request)  # the head goes out with the first frame
            if delay_ns:
                await resp.write(first)
                t_written = t_last = _mono()
                for frame in middle:  # frame i at head + i * delay: no drift
                    due = t_head + (sent + 1) * delay_ns
                    if _mono() < due:  # _next_frame, inline: this loop runs for every frame
                        if not proto.lost_ns:
                            wait = timer.wait_until(due)
                            proto.lost_waiter = wait
                            await wait
                        if proto.lost_ns:
                            raise ConnectionResetError("the client left between frames")
                    await resp.write(frame)
                    sent += 1
                    t_last = _mono()
                stats.count += 1  # before the last bytes go out (undone below if they cannot)
                counted = True
                await resp.write(last)
            else:
                stats.count += 1
                counted = True
                await resp.write(first + b"".join(middle) + last)
                sent = len(middle)
                t_written = t_last = _mono()
            await resp.write_eof()
            t_last = _mono()
        except BaseException as exc:  # client gone mid-stream, or cancelled at shutdown
            if counted:
                stats.count -= 1
            stats.incomplete += 1
            stats.version += 1
            status = 499
            if isinstance(exc, ConnectionError):
                ended, closed_ns = gone(proto)
            else:
                ended = MOCK_CLOSED
                raise
        finally:
            self._log_request(request, rid, path, body, status, fault, t0, latency_ns, t_head, t_written, t_last,
                              bytes_out(resp), chars[sent], sent, closed_ns, ended)
        stats.version += 1
        return resp

    # ------------------------------------------------------------------ others
    async def models(self, request: BaseRequest, rid: str, path: str) -> web.Response:
        self.stats.record_response(path, 200)
        return await self._send(request, rid, path, web.Response(body=self._models, headers={CT: JSON_CT, RID: rid}))

    async def health(self, request: BaseRequest, rid: str, path: str) -> web.Response:
        self.stats.record_response(path, 200)
        return await self._send(request, rid, path, web.Response(body=self._health, headers={CT: JSON_CT, RID: rid}))

    async def stats_handler(self, request: BaseRequest, rid: str, path: str) -> web.Response:
        self.stats.record_response(path, 200)
        merged = read_stats(self.cfg.stats_dir, _override=self.stats.snapshot())
        return await self._send(request, rid, path, web.Response(body=orjson.dumps(merged),
                                                                 headers={CT: JSON_CT, RID: rid}))
