"""Sluice's mock LLM provider: OpenAI and Anthropic dialects, fixed latency, self-measured.

    python -m mocks.server --host 127.0.0.1 --port N --latency-ms 60 --workers 1 \\
        --stats-dir DIR --response-tokens 16 --stream-chunks 20 --chunk-delay-ms 20 \\
        [--faults SCHEDULE.json --fault-seed 0 --fault-epoch-unix-s T] [--gc lean|freeze|default]

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
frame.  Holds and gaps are timed with a timerfd (see ``mocks.timer``): never early.

Per-request overrides (request headers): ``x-mock-latency-ms``, ``x-mock-chunks``,
``x-mock-chunk-delay-ms``, ``x-mock-response-tokens``; an invalid value is a 400.

Every response carries ``x-mock-request-id: <pid>-<seq>``.

Faults (see ``mocks.faults`` for the schedule's format and what each does on the wire):
``--faults JSON_OR_FILE`` (a list of fault specs, each with a share and a window),
``--fault-seed N`` (which requests get them; recorded in the stats' config) and
``--fault-epoch-unix-s T`` (the windows' zero; default the mock's start, shared by all
workers).  A request header ``x-mock-fault: ...`` forces a fault on one request.  Only
generation requests get per-request faults (status, overloaded, slow, reset, stall,
malformed), chosen once the body is read and valid; the request log's ``fault`` column names
it (``status:<code>``, ``overloaded``, ``slow``, ``reset``, ``stall``, ``malformed``; ``""``
none) and its ``status_code`` is the status of the head written (499: the client left
first).  A ``down`` window closes every worker's listener and connections, so connects are
refused until it ends; the stats file records when each worker applied it (``down_windows``).
Without a schedule the cost per request is one header lookup and one ``is None`` test.

Per-request log: every worker logs each request (``mocks.request_log.RequestLog``: one CSV
line in ``<stats_dir>/requests-<pid>.csv``, flushed with the stats file) under the load
generator's id.  The id is the marker ``[rid:<id>]`` found last in the request body (the
load generator puts it in the last user message, which every gateway forwards
unchanged), else the ``x-request-id`` header (a gateway may replace that header with its
own id, so the marker wins); ids are 1-64 characters of ``[A-Za-z0-9._:-]``, anything
else logs as ``""``.  Every response is written inside the handler so that the time its
head (and last byte) went to the socket can be logged.

Garbage collection (``--gc``, see ``GC_MODES``): by default each worker freezes its startup
heap and runs Python's cyclic collector on its own timer (small young passes every 20 ms, a
full one only after its memory grew) rather than inside whichever request crossed a
threshold; ``--gc default`` leaves Python's collector as it is, for an A/B.  Every collection's generation, pause and
freed objects are in the stats (``gc``), in every mode.

With ``--workers K`` (K > 1) this process is a supervisor: it starts K worker processes
(this module again, each binding the port with SO_REUSEPORT), forwards SIGTERM/SIGINT to
them, waits for them and exits; if a worker dies on its own, it stops the others and
exits 1.  Workers stay in the supervisor's process group and also get SIGTERM if the
supervisor dies.  With K = 1 everything is served in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import itertools
import os
import re
import resource
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

import orjson
import uvloop
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from multidict import istr

from mocks import __version__
from mocks.bodies import Renderer, models_body, prompt_tokens
from mocks.faults import (
    OVERLOADED_STATUS,
    FaultError,
    FaultPlan,
    anthropic_error_body,
    broken_frame,
    broken_json,
    load_schedule,
    openai_error_body,
    parse_header,
)
from mocks.request_log import RequestLog
from mocks.stats import read_stats
from mocks.timer import PreciseTimer
from mocks.worker_stats import WorkerStats, clear_worker_files, worker_file

_mono = time.monotonic_ns
_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError

RID = "x-mock-request-id"
CT = "Content-Type"
JSON_CT = "application/json"
SSE_CT = "text/event-stream"

H_LATENCY = "x-mock-latency-ms"
H_CHUNKS = "x-mock-chunks"
H_DELAY = "x-mock-chunk-delay-ms"
H_TOKENS = "x-mock-response-tokens"
H_CLIENT_RID = "x-request-id"
H_FAULT = "x-mock-fault"
# looked up as istr: a plain str key is lowercased into a new string on every lookup
_K_LATENCY, _K_CHUNKS, _K_DELAY, _K_TOKENS, _K_CLIENT_RID, _K_FAULT = map(
    istr, (H_LATENCY, H_CHUNKS, H_DELAY, H_TOKENS, H_CLIENT_RID, H_FAULT))

_RID_MARK = b"[rid:"
_RID_IN_BODY = re.compile(rb"\[rid:([A-Za-z0-9._:-]{1,64})\]")
_RID_VALID = re.compile(r"[A-Za-z0-9._:-]{1,64}\Z")

MAX_MS = 3_600_000.0
MAX_CHUNKS = 100_000
MAX_TOKENS = 1_000_000

# Python's cyclic GC runs whenever allocations cross its threshold, i.e. inside whichever
# request made them; at 1,000 connections its passes, when they ran, held the loop for 3-85 ms
# (few in a steady hold, more while connections open). A pass costs about the live objects of
# the generations it walks, and with keep-alive clients each idle connection keeps its last
# request's objects (~26) alive until its next request, so even a young pass each second walks
# ~26,000 objects (~10 ms here). "lean" (the default) therefore freezes the startup heap (never
# scanned again) and collects the young generations on the mock's own timer in small steps
# (every 20 ms: ~0.2 ms, p99 0.4 ms at 1,000 connections here), promoting what survives; the
# full pass over everything (~35 ms at 1,000 connections) runs only once the mock's peak RSS
# grew by GC_FULL_AFTER_GROWTH_MIB since the last one, or after GC_FULL_EVERY_S. It buys
# bounded pauses, not less work: ~12 ms of passes a second at ~940 req/s (about 1% of a core),
# where Python's thresholds spent 0-8 ms. Not gc.disable(): objects without cycles are freed by
# reference counting as always, cyclic garbage found young waits at most 20 ms, garbage in the
# old generation is bounded by that growth, and a burst of more than GC_BACKSTOP_OBJECTS new
# objects between two passes still gets Python's own young pass (counted as not timed).
# "freeze" is how the mock ran before (startup heap frozen, Python's thresholds); "default"
# leaves the collector as Python sets it. Every pass's pause is in the stats (gc.callbacks) in
# every mode, so they compare.
GC_MODES = ("lean", "freeze", "default")
GC_YOUNG_EVERY_S = 0.02
GC_FULL_AFTER_GROWTH_MIB = 64
GC_FULL_EVERY_S = 600.0
GC_BACKSTOP_OBJECTS = 100_000
_GC_NEVER = 1_000_000_000  # generation 1 and 2 thresholds: only the timer collects them

STATS_INTERVAL_S = 0.25   # write the worker file this often when it changed ...
STATS_HEARTBEAT_S = 0.5   # ... and at least this often anyway (freshness for read_stats)

OTHER_PATH = "<other>"

FLUSH_WAIT_S = 1.0           # a reset waits at most this long for its partial body to leave
REOPEN_TRIES = 100           # after a down window: bind attempts, REOPEN_GAP_S apart
REOPEN_GAP_S = 0.1
_LINGER_RST = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends an RST


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


def _openai_error(message: str, param, code) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": "invalid_request_error",
                                   "param": param, "code": code}})


def _anthropic_error(message: str) -> bytes:
    return orjson.dumps({"type": "error", "error": {"type": "invalid_request_error",
                                                     "message": message}})


def _generic_error(status: int, kind: str, message: str) -> bytes:
    # readable by both dialects' error parsers
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message,
                                                     "param": None, "code": kind}})


def request_id_of(headers, body: bytes) -> str:
    """The load generator's id: the last ``[rid:<id>]`` in the body, else ``x-request-id``."""
    i = body.rfind(_RID_MARK)
    if i >= 0:
        m = _RID_IN_BODY.match(body, i)
        if m is not None:
            return m.group(1).decode()
    v = headers.get(_K_CLIENT_RID)
    if v is not None and _RID_VALID.match(v):
        return v
    return ""


def _head_bytes(request: BaseRequest) -> int:
    """Size of the request head as sent (exact for ``Name: value`` header lines)."""
    n = len(request.method) + len(request.raw_path) + 14  # " ", " HTTP/1.1\r\n", final "\r\n"
    for k, v in request.raw_headers:
        n += len(k) + len(v) + 4
    return n


def _bytes_out(resp) -> int:
    w = resp._payload_writer  # None once the eof went out; body_length then has the total
    return w.output_size if w is not None else resp.body_length


class _Protocol(RequestHandler):
    """aiohttp's connection handler, noting its peer's port and when request bytes last
    arrived (the request log's ``arrival_lag_ns`` starts there); a stalled response
    waits on ``lost_waiter`` for the client to leave."""

    rx_ns = 0
    peer_port = 0
    lost_waiter = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer_port = peer[1]

    def data_received(self, data: bytes) -> None:
        self.rx_ns = _mono()
        super().data_received(data)

    def connection_lost(self, exc) -> None:
        w = self.lost_waiter
        if w is not None and not w.done():
            w.set_result(None)
        super().connection_lost(exc)


class _Server(web.Server):
    def __call__(self) -> RequestHandler:
        return _Protocol(self, loop=self._loop, **self._kwargs)


def _ms_header(value: str, name: str) -> int:
    try:
        ms = float(value)
    except ValueError:
        raise BadRequest(f"Invalid header {name}: {value!r} is not a number", name, "invalid_value")
    if not (0.0 <= ms <= MAX_MS):  # also rejects NaN
        raise BadRequest(f"Invalid header {name}: must be between 0 and {MAX_MS:g}", name, "invalid_value")
    return int(round(ms * 1_000_000))


def _int_header(value: str, name: str, lo: int, hi: int) -> int:
    try:
        n = int(value)
    except ValueError:
        raise BadRequest(f"Invalid header {name}: {value!r} is not an integer", name, "invalid_value")
    if not (lo <= n <= hi):
        raise BadRequest(f"Invalid header {name}: must be between {lo} and {hi}", name, "invalid_value")
    return n


class MockApp:
    """The request handler of one worker."""

    def __init__(self, cfg, stats: WorkerStats, timer: PreciseTimer, log: RequestLog):
        self.cfg = cfg
        self.stats = stats
        self.log = log
        self.timer = timer
        self.renderer = Renderer()
        self.plan = (FaultPlan(cfg.fault_schedule, cfg.fault_seed, cfg.fault_epoch_unix_s, time.time(), _mono())
                     if cfg.fault_schedule else None)
        self.lat_ns = int(round(cfg.latency_ms * 1_000_000))
        self.tokens = cfg.response_tokens
        self.chunks = cfg.stream_chunks
        self.delay_ns = int(round(cfg.chunk_delay_ms * 1_000_000))
        self._seq = itertools.count(1)
        self._rid_prefix = f"{os.getpid()}-"
        self._health = orjson.dumps({"status": "ok"})
        self._models = models_body(cfg.models, int(time.time()))
        gen_openai = ("POST", self.openai)
        gen_anthropic = ("POST", self.anthropic)
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
                status=404, body=_generic_error(404, "not_found_error", f"Unknown path: {path}"),
                headers={CT: JSON_CT, RID: rid}))
        method, fn = route
        if request.method != method and not (method == "GET" and request.method == "HEAD"):
            self.stats.record_response(path, 405)
            return await self._send(request, rid, path, web.Response(status=405, body=_generic_error(
                405, "method_not_allowed", f"Method {request.method} not allowed on {path}; use {method}"),
                headers={CT: JSON_CT, RID: rid, "Allow": method}))
        try:
            return await fn(request, rid, path)
        except web.HTTPException as exc:  # e.g. 413 from request.read()
            self.stats.record_response(path, exc.status)
            return await self._send(request, rid, path, web.Response(status=exc.status, body=_generic_error(
                exc.status, "invalid_request_error" if exc.status < 500 else "api_error", exc.reason),
                headers={CT: JSON_CT, RID: rid}))
        except Exception as exc:  # never let aiohttp answer without our header
            self.stats.record_response(path, 500)
            return await self._send(request, rid, path, web.Response(
                status=500, body=_generic_error(500, "api_error", f"mock error: {exc!r}"),
                headers={CT: JSON_CT, RID: rid}))

    async def _send(self, request, rid: str, path: str, resp, body: bytes = b"", t0: int = 0,
                    hold_set: int = 0, fault: str = "") -> web.StreamResponse:
        """Write a whole (unheld or already held) response now and log it.  ``t0``: when
        the body was read (0: not read; the request's last bytes count instead)."""
        t_start = _mono()
        if not t0:
            t0 = t_start
        proto = request.protocol
        rx, port = (proto.rx_ns, proto.peer_port) if proto is not None else (t0, 0)
        status = resp.status
        out = 0
        try:
            await resp.prepare(request)
            await resp.write_eof()
            out = resp.body_length
        except ConnectionError:
            status = 499  # the client left: nobody got this answer
        t_done = _mono()
        self.log.record(request_id_of(request.headers, body), rid, path, status, fault, t0, hold_set,
                        t_start - t0, t_done, t_done, _head_bytes(request) + len(body), out,
                        max(0, t0 - rx), t_done - t_start, port)
        return resp

    def _overrides(self, headers):
        lat, n, chunks, delay = self.lat_ns, self.tokens, self.chunks, self.delay_ns
        v = headers.get(_K_LATENCY)
        if v is not None:
            lat = _ms_header(v, H_LATENCY)
        v = headers.get(_K_TOKENS)
        if v is not None:
            n = _int_header(v, H_TOKENS, 0, MAX_TOKENS)
        v = headers.get(_K_CHUNKS)
        if v is not None:
            chunks = _int_header(v, H_CHUNKS, 1, MAX_CHUNKS)
        v = headers.get(_K_DELAY)
        if v is not None:
            delay = _ms_header(v, H_DELAY)
        v = headers.get(_K_FAULT)
        if v is not None:
            try:
                return lat, n, chunks, delay, parse_header(v)
            except FaultError as e:
                raise BadRequest(f"Invalid header {H_FAULT}: {e}", H_FAULT, "invalid_value")
        return lat, n, chunks, delay, None

    @staticmethod
    def _parse(body: bytes):
        """Validate the common shape; returns (req, model, messages)."""
        try:
            req = _loads(body)
        except _JSONDecodeError:
            raise BadRequest("We could not parse the JSON body of your request. The body must be valid JSON.",
                             None, "invalid_json")
        if type(req) is not dict:
            raise BadRequest("The request body must be a JSON object.", None, "invalid_type")
        model = req.get("model")
        if model is None:
            raise BadRequest("Missing required parameter: 'model'.", "model", "missing_required_parameter")
        if type(model) is not str:
            raise BadRequest("Invalid type for 'model': expected a string.", "model", "invalid_type")
        messages = req.get("messages")
        if messages is None:
            raise BadRequest("Missing required parameter: 'messages'.", "messages", "missing_required_parameter")
        if type(messages) is not list:
            raise BadRequest("Invalid type for 'messages': expected an array of messages.", "messages",
                             "invalid_type")
        if not messages:
            raise BadRequest("Invalid 'messages': empty array. Expected an array with minimum length 1.",
                             "messages", "empty_array")
        return req, model, messages

    async def _bad(self, request, rid: str, path: str, error: bytes, body: bytes, t0: int) -> web.Response:
        self.stats.record_response(path, 400)
        return await self._send(request, rid, path, web.Response(
            status=400, body=error, headers={CT: JSON_CT, RID: rid}), body, t0)

    # ------------------------------------------------------------------ generation
    async def openai(self, request: BaseRequest, rid: str, path: str) -> web.StreamResponse:
        body = await request.read()
        t0 = _mono()  # the whole request is here: the hold starts
        try:
            req, model, messages = self._parse(body)
            lat, n, chunks, delay, fault = self._overrides(request.headers)
        except BadRequest as e:
            return await self._bad(request, rid, path, _openai_error(e.message, e.param, e.code), body, t0)
        if fault is None and self.plan is not None:
            fault = self.plan.pick(t0)
        p = prompt_tokens(messages)
        if req.get("stream") is True:
            so = req.get("stream_options")
            inc = type(so) is dict and so.get("include_usage") is True
            first, middle, last = self.renderer.openai_stream(rid.encode(), model, n, chunks, p, inc)
            if fault is not None:
                return await self._faulted(request, rid, path, body, t0, lat, delay, fault, False,
                                           None, first, middle, last)
            return await self._stream(request, rid, path, body, t0, lat, delay, first, middle, last)
        out = self.renderer.openai_unary(rid.encode(), model, n, p)
        if fault is not None:
            return await self._faulted(request, rid, path, body, t0, lat, delay, fault, False, out)
        resp = web.Response(body=out, headers={CT: JSON_CT, RID: rid})
        return await self._unary(request, rid, resp, path, body, t0, lat)

    async def anthropic(self, request: BaseRequest, rid: str, path: str) -> web.StreamResponse:
        body = await request.read()
        t0 = _mono()
        try:
            req, model, messages = self._parse(body)
            lat, n, chunks, delay, fault = self._overrides(request.headers)
        except BadRequest as e:
            return await self._bad(request, rid, path, _anthropic_error(e.message), body, t0)
        if fault is None and self.plan is not None:
            fault = self.plan.pick(t0)
        p = prompt_tokens(messages, req.get("system"))
        if req.get("stream") is True:
            first, middle, last = self.renderer.anthropic_stream(rid.encode(), model, n, chunks, p)
            if fault is not None:
                return await self._faulted(request, rid, path, body, t0, lat, delay, fault, True,
                                           None, first, middle, last)
            return await self._stream(request, rid, path, body, t0, lat, delay, first, middle, last)
        out = self.renderer.anthropic_unary(rid.encode(), model, n, p)
        if fault is not None:
            return await self._faulted(request, rid, path, body, t0, lat, delay, fault, True, out)
        resp = web.Response(body=out, headers={CT: JSON_CT, RID: rid})
        return await self._unary(request, rid, resp, path, body, t0, lat)

    async def _hold(self, path: str, deadline: int) -> None:
        try:
            await self.timer.wait_until(deadline)
        except asyncio.CancelledError:  # shutdown after the grace period
            self.stats.record_response(path, 499)
            raise

    async def _unary(self, request, rid: str, resp, path: str, body: bytes, t0: int, lat: int,
                     fault: str = ""):
        # the response is fully built before the hold: only the head's write follows it
        if lat:
            deadline = t0 + lat
            if _mono() < deadline:
                await self._hold(path, deadline)
        st = self.stats
        st.record_hold(_mono() - t0)
        tr = request.transport
        if tr is None or tr.is_closing():
            st.incomplete += 1  # the client left during the hold: nobody gets this answer
        else:
            st.count += 1  # counted before the bytes go out, so a reader never sees it missing
        st.record_response(path, 200)
        return await self._send(request, rid, path, resp, body, t0, lat, fault)

    async def _stream(self, request, rid: str, path: str, body: bytes, t0: int, lat: int, delay: int,
                      first: bytes, middle: list, last: bytes, fault: str = ""):
        resp = web.StreamResponse(headers={CT: SSE_CT, "Cache-Control": "no-cache", RID: rid})
        if lat:
            deadline = t0 + lat
            if _mono() < deadline:
                await self._hold(path, deadline)
        st = self.stats
        timer = self.timer
        t_head = _mono()
        st.record_hold(t_head - t0)
        st.record_response(path, 200)
        counted = False
        t_written = t_head
        status = 200
        try:
            await resp.prepare(request)  # the head goes out with the first frame
            if delay:
                await resp.write(first)
                t_written = _mono()
                i = 0
                for frame in middle:  # frame i at head + i * delay: no drift
                    i += 1
                    due = t_head + i * delay
                    if _mono() < due:
                        await timer.wait_until(due)
                    await resp.write(frame)
                st.count += 1  # before the last bytes go out (undone below if they cannot)
                counted = True
                await resp.write(last)
            else:
                st.count += 1
                counted = True
                await resp.write(first + b"".join(middle) + last)
                t_written = _mono()
            await resp.write_eof()
        except BaseException as exc:  # client gone mid-stream, or cancelled at shutdown
            if counted:
                st.count -= 1
            st.incomplete += 1
            st.version += 1
            status = 499
            if not isinstance(exc, ConnectionError):
                raise
        finally:
            t_last = _mono()
            proto = request.protocol
            rx, port = (proto.rx_ns, proto.peer_port) if proto is not None else (t0, 0)
            self.log.record(request_id_of(request.headers, body), rid, path, status, fault, t0, lat,
                            t_head - t0, t_written, t_last, _head_bytes(request) + len(body),
                            _bytes_out(resp), max(0, t0 - rx), t_written - t_head, port)
        st.version += 1
        return resp

    # ------------------------------------------------------------------ faults
    async def _faulted(self, request, rid: str, path: str, body: bytes, t0: int, lat: int, delay: int,
                       fault, anthropic: bool, out: bytes | None, first: bytes = b"", middle=(),
                       last: bytes = b""):
        """Answer a generation request with ``fault`` (``out``: the unary body; None for a
        stream of ``first``, ``middle``, ``last``)."""
        kind = fault.kind
        self.stats.record_fault(fault.label)
        if kind in ("status", "overloaded"):
            return await self._status_fault(request, rid, path, body, t0, fault, anthropic)
        if kind == "slow":
            lat = fault.hold_ns
        elif kind == "malformed":
            if out is not None:
                out = broken_json(out)
            else:
                middle = list(middle)
                k = min(fault.after_frames or 0, len(middle) - 1)
                middle[k] = broken_frame(middle[k])
        elif out is not None:  # reset / stall of a unary answer: the head promises the whole body
            cut = len(out) // 2 if fault.after_bytes is None else min(fault.after_bytes, len(out) - 1)
            resp = web.StreamResponse(headers={CT: JSON_CT, RID: rid})
            resp.content_length = len(out)
            return await self._cut(request, rid, path, body, t0, lat, 0, resp, [out[:cut]], fault)
        else:
            k = len(middle) // 2 if fault.after_frames is None else min(fault.after_frames, len(middle))
            resp = web.StreamResponse(headers={CT: SSE_CT, "Cache-Control": "no-cache", RID: rid})
            return await self._cut(request, rid, path, body, t0, lat, delay, resp, [first, *middle[:k]], fault)
        if out is None:
            return await self._stream(request, rid, path, body, t0, lat, delay, first, middle, last, fault.label)
        return await self._unary(request, rid, web.Response(body=out, headers={CT: JSON_CT, RID: rid}),
                                 path, body, t0, lat, fault.label)

    async def _status_fault(self, request, rid: str, path: str, body: bytes, t0: int, fault, anthropic: bool):
        if fault.hold_ns:
            await self._hold(path, t0 + fault.hold_ns)
        status, retry = fault.status, fault.retry_after_s
        if fault.kind == "overloaded":
            status = OVERLOADED_STATUS["anthropic" if anthropic else "openai"]
        headers = {CT: JSON_CT, RID: rid}
        if retry is not None:
            headers["Retry-After"] = str(retry)
        err = anthropic_error_body(status, rid, retry) if anthropic else openai_error_body(status, retry)
        self.stats.record_response(path, status)
        return await self._send(request, rid, path, web.Response(status=status, body=err, headers=headers),
                                body, t0, fault.hold_ns, fault.label)

    async def _cut(self, request, rid: str, path: str, body: bytes, t0: int, lat: int, delay: int, resp,
                   pieces: list, fault) -> web.StreamResponse:
        """Reset or stall: after the hold, write the head and ``pieces`` (piece i at head +
        i × delay), then abort the connection with an RST (reset), or send nothing more until
        the client leaves or ``stall_s`` passes and then close it (stall)."""
        if lat:
            deadline = t0 + lat
            if _mono() < deadline:
                await self._hold(path, deadline)
        st = self.stats
        t_head = _mono()
        st.record_hold(t_head - t0)
        st.record_response(path, 200)
        st.incomplete += 1  # nobody gets the whole answer
        status = 200
        t_written = t_last = t_head
        tr = request.transport
        try:
            await resp.prepare(request)
            resp._payload_writer.send_headers()  # the head goes out even with no body bytes
            for i, piece in enumerate(pieces):
                due = t_head + i * delay
                if _mono() < due:
                    await self.timer.wait_until(due)
                if piece:
                    await resp.write(piece)
                t_last = _mono()
                if i == 0:
                    t_written = t_last
            if tr is None or tr.is_closing():
                raise ConnectionResetError("client gone before the cut")
            await self._flushed(tr)
            if fault.kind == "reset":
                tr.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
                tr.abort()
            else:
                await self._until_lost(request.protocol, fault.stall_s)
                tr.close()
        except ConnectionError:
            status = 499  # the client left before the cut
        finally:
            proto = request.protocol
            rx, port = (proto.rx_ns, proto.peer_port) if proto is not None else (t0, 0)
            self.log.record(request_id_of(request.headers, body), rid, path, status, fault.label, t0, lat,
                            t_head - t0, t_written, t_last, _head_bytes(request) + len(body),
                            _bytes_out(resp), max(0, t0 - rx), t_written - t_head, port)
            st.version += 1
        return resp

    @staticmethod
    async def _flushed(tr) -> None:
        """Wait (bounded) until the transport handed its buffered bytes to the kernel."""
        deadline = _mono() + int(FLUSH_WAIT_S * 1e9)
        while tr.get_write_buffer_size() and not tr.is_closing() and _mono() < deadline:
            await asyncio.sleep(0.001)

    @staticmethod
    async def _until_lost(proto, stall_s: float) -> None:
        if proto is None or proto.transport is None:
            return
        loop = asyncio.get_running_loop()
        lost = loop.create_future()
        proto.lost_waiter = lost
        timeout = loop.call_later(stall_s, lambda: lost.done() or lost.set_result(None))
        try:
            await lost
        finally:
            timeout.cancel()
            proto.lost_waiter = None

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


# ============================================================================ worker

def _make_socket(host: str, port: int, reuseport: bool, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuseport:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _startup_line(cfg, pid: int, workers: int, port: int) -> str:
    return (f"sluice-mock {__version__} ready url=http://{cfg.host}:{port} port={port} pid={pid} "
            f"workers={workers} latency_ms={cfg.latency_ms:g} stats_dir={cfg.stats_dir}")


async def _stats_writer(stats: WorkerStats, stats_dir: str, log: RequestLog) -> None:
    last_version = stats.version
    last_write = time.monotonic()
    warned = False
    log_warned = False
    while True:
        await asyncio.sleep(STATS_INTERVAL_S)
        try:
            log.flush()
        except OSError as exc:
            if not log_warned:
                print(f"sluice-mock: cannot write the request log {log.path}: {exc}", file=sys.stderr, flush=True)
                log_warned = True
        if log.dropped != stats.log_dropped:
            stats.log_dropped = log.dropped
            stats.version += 1
        now = time.monotonic()
        if stats.version != last_version or now - last_write >= STATS_HEARTBEAT_S:
            last_version = stats.version
            try:
                stats.write(stats_dir)
            except OSError as exc:
                if not warned:
                    print(f"sluice-mock: cannot write stats to {stats_dir}: {exc}", file=sys.stderr, flush=True)
                    warned = True
            last_write = now


def _config_record(cfg) -> dict:
    rec = {"latency_ms": cfg.latency_ms, "response_tokens": cfg.response_tokens,
           "stream_chunks": cfg.stream_chunks, "chunk_delay_ms": cfg.chunk_delay_ms,
           "workers": cfg.workers, "gc": cfg.gc, "mock_version": __version__}
    if cfg.fault_schedule:
        rec.update(faults=[f.record() for f in cfg.fault_schedule], fault_seed=cfg.fault_seed,
                   fault_epoch_unix_s=cfg.fault_epoch_unix_s)
    return rec


class _Listener:
    """The worker's listening server, closed and reopened by ``down`` faults."""

    def __init__(self, loop, server, sock, cfg, reuseport: bool):
        self.loop, self.server, self.sock, self.cfg, self.reuseport = loop, server, sock, cfg, reuseport
        self.port = sock.getsockname()[1]
        self.srv = None

    async def open(self) -> None:
        self.srv = await self.loop.create_server(self.server, sock=self.sock, backlog=self.cfg.backlog)

    def close(self) -> None:
        if self.srv is not None:
            self.srv.close()  # the loop detached self.sock and closes its fd now: connects are refused
            self.srv = None

    async def reopen(self) -> bool:
        for _ in range(REOPEN_TRIES):
            try:
                self.sock = _make_socket(self.cfg.host, self.port, self.reuseport, self.cfg.backlog)
            except OSError as exc:
                error = exc
                await asyncio.sleep(REOPEN_GAP_S)
                continue
            await self.open()
            return True
        print(f"sluice-mock: cannot listen again on {self.cfg.host}:{self.port} after a down window: {error}",
              file=sys.stderr, flush=True)
        return False


async def _down_windows(cfg, listener: _Listener, stats: WorkerStats, stop: asyncio.Event) -> None:
    """Run the schedule's ``down`` faults: refuse connections from start to end."""
    downs = sorted((f for f in cfg.fault_schedule if f.kind == "down"), key=lambda f: f.start_s)
    for f in downs:
        start = cfg.fault_epoch_unix_s + f.start_s
        end = start + f.duration_s
        if end <= time.time():
            continue
        await asyncio.sleep(max(0.0, start - time.time()))
        listener.close()
        for conn in listener.server.connections:  # the provider is gone for everyone
            conn.force_close()
        t_down = time.time()
        await asyncio.sleep(max(0.0, end - time.time()))
        ok = await listener.reopen()
        stats.down_windows.append({"fault_index": f.index, "start_t_unix_s": t_down, "end_t_unix_s": time.time()})
        stats.version += 1
        if not ok:
            stats.config["listen_failed"] = True
            stop.set()
            return


class _GcWatch:
    """Times every collection into the worker's stats (a gc.callbacks hook); ``collect``
    runs one pass on the mock's own timer, marked as timed."""

    __slots__ = ("stats", "t0", "timed")

    def __init__(self, stats: WorkerStats):
        self.stats = stats
        self.t0 = 0
        self.timed = False

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self.t0 = _mono()
        else:
            self.stats.record_gc(info["generation"], _mono() - self.t0, info["collected"], self.timed)

    def collect(self, generation: int) -> int:
        self.timed = True
        try:
            return gc.collect(generation)
        finally:
            self.timed = False


def _gc_control(mode: str, stats: WorkerStats) -> _GcWatch:
    """Set the collector up for ``mode`` once startup is done (see GC_MODES)."""
    if mode != "default":
        gc.collect()
        gc.freeze()  # startup objects (modules, the app, its tables) need no more scanning
    if mode == "lean":
        gc.set_threshold(GC_BACKSTOP_OBJECTS, _GC_NEVER, _GC_NEVER)
    watch = _GcWatch(stats)
    gc.callbacks.append(watch)
    return watch


def _peak_rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux; one syscall


async def _gc_timer(watch: _GcWatch) -> None:
    """Lean mode's passes: young every GC_YOUNG_EVERY_S; full once the peak RSS grew by
    GC_FULL_AFTER_GROWTH_MIB or GC_FULL_EVERY_S passed (each full one also logged to stderr)."""
    last_full = time.monotonic()
    peak_after_full = _peak_rss_kib()
    while True:
        await asyncio.sleep(GC_YOUNG_EVERY_S)
        grown_kib = _peak_rss_kib() - peak_after_full
        if grown_kib < GC_FULL_AFTER_GROWTH_MIB * 1024 and time.monotonic() - last_full < GC_FULL_EVERY_S:
            watch.collect(1)
            continue
        t0 = _mono()
        freed = watch.collect(2)
        print(f"sluice-mock: gc full pass {(_mono() - t0) / 1e6:.2f} ms, {freed} objects freed "
              f"(peak RSS +{grown_kib / 1024:.0f} MiB since the last one)", file=sys.stderr, flush=True)
        last_full = time.monotonic()
        peak_after_full = _peak_rss_kib()


async def _serve(cfg, reuseport: bool, announce: bool) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    stats = WorkerStats(cfg.latency_ms, _config_record(cfg))
    timer = PreciseTimer(loop, force_fallback=(cfg.timer == "loop"))
    stats.config["timer"] = timer.kind
    log = RequestLog(cfg.stats_dir)
    app = MockApp(cfg, stats, timer, log)
    max_body = cfg.max_body_bytes

    def request_factory(message, payload, protocol, writer, task):
        return BaseRequest(message, payload, protocol, writer, task, loop, client_max_size=max_body)

    server = _Server(app.handle, request_factory=request_factory, access_log=None)
    try:
        sock = _make_socket(cfg.host, cfg.port, reuseport, cfg.backlog)
    except OSError as exc:
        print(f"sluice-mock: cannot listen on {cfg.host}:{cfg.port}: {exc}", file=sys.stderr, flush=True)
        return 2
    listener = _Listener(loop, server, sock, cfg, reuseport)
    await listener.open()
    stats.write(cfg.stats_dir)  # also the readiness signal for a supervisor
    if announce:
        print(_startup_line(cfg, os.getpid(), 1, listener.port), flush=True)
    writer = asyncio.create_task(_stats_writer(stats, cfg.stats_dir, log))
    downs = (asyncio.create_task(_down_windows(cfg, listener, stats, stop))
             if any(f.kind == "down" for f in cfg.fault_schedule) else None)
    watch = _gc_control(cfg.gc, stats)
    collector = asyncio.create_task(_gc_timer(watch)) if cfg.gc == "lean" else None

    await stop.wait()

    if collector is not None:
        collector.cancel()
    if downs is not None:
        downs.cancel()
    listener.close()  # stop accepting; then let in-flight requests finish (bounded)
    try:
        await server.shutdown(cfg.shutdown_grace_s)
    finally:
        writer.cancel()
        try:
            log.close()
        except OSError as exc:
            print(f"sluice-mock: cannot write the request log {log.path}: {exc}", file=sys.stderr, flush=True)
        stats.log_dropped = log.dropped
        stats.final = True
        stats.write(cfg.stats_dir)
        timer.close()
    return 2 if stats.config.get("listen_failed") else 0


def _die_with_parent(parent_pid: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:  # the supervisor died before prctl took effect
        sys.exit(1)


# ============================================================================ supervisor

def _child_argv(cfg) -> list[str]:
    return [sys.executable, "-m", "mocks.server",
            "--host", cfg.host, "--port", str(cfg.port), "--workers", str(cfg.workers),
            "--latency-ms", repr(cfg.latency_ms), "--stats-dir", cfg.stats_dir,
            "--response-tokens", str(cfg.response_tokens), "--stream-chunks", str(cfg.stream_chunks),
            "--chunk-delay-ms", repr(cfg.chunk_delay_ms), "--models", ",".join(cfg.models),
            "--shutdown-grace-s", repr(cfg.shutdown_grace_s), "--backlog", str(cfg.backlog),
            "--max-body-bytes", str(cfg.max_body_bytes), "--timer", cfg.timer, "--gc", cfg.gc,
            "--worker-of", str(os.getpid()),
            *(("--faults", cfg.faults, "--fault-seed", str(cfg.fault_seed),
                "--fault-epoch-unix-s", repr(cfg.fault_epoch_unix_s)) if cfg.faults else ())]


def _stop_children(children, sig=signal.SIGTERM) -> None:
    for p in children:
        if p.poll() is None:
            try:
                p.send_signal(sig)
            except OSError:
                pass


def _reap(children, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(p.poll() is None for p in children):
        time.sleep(0.02)
    for p in children:
        if p.poll() is None:
            p.kill()
            p.wait()


def _supervise(cfg) -> int:
    # A plain (non-SO_REUSEPORT) bind fails if anything listens on the port already,
    # including another SO_REUSEPORT listener we would otherwise silently share it with.
    try:
        _make_socket(cfg.host, cfg.port, False, 1).close()
    except OSError as exc:
        print(f"sluice-mock: cannot listen on {cfg.host}:{cfg.port}: {exc}", file=sys.stderr, flush=True)
        return 2

    children: list[subprocess.Popen] = []
    requested: list[int] = []

    def on_signal(signum, _frame):
        requested.append(signum)
        for p in children:  # no Popen.poll() here: it may be running in the main code
            if p.returncode is None:
                try:
                    os.kill(p.pid, signum)
                except OSError:
                    pass

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    argv = _child_argv(cfg)
    grace = cfg.shutdown_grace_s + 10.0

    for _ in range(cfg.workers):
        if requested:
            break
        children.append(subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL))

    failed = None
    pending = list(children)
    deadline = time.monotonic() + 60.0
    while pending and not requested and failed is None:
        pending = [p for p in pending if not os.path.exists(worker_file(cfg.stats_dir, p.pid))]
        for p in children:
            if p.poll() is not None:
                failed = f"worker {p.pid} exited during startup with code {p.returncode}"
        if time.monotonic() > deadline:
            failed = f"workers {[p.pid for p in pending]} not ready after 60 s"
        time.sleep(0.01)
    if failed is None and not requested:
        print(_startup_line(cfg, os.getpid(), cfg.workers, cfg.port), flush=True)

    while failed is None and not requested:
        for p in children:
            if p.poll() is not None:
                failed = f"worker {p.pid} exited unexpectedly with code {p.returncode}"
                break
        else:
            time.sleep(0.1)

    if failed is not None:
        print(f"sluice-mock: {failed}; stopping the other workers", file=sys.stderr, flush=True)
        _stop_children(children)
        _reap(children, grace)
        return 1

    _stop_children(children, requested[0])  # again: covers a child started during the signal
    _reap(children, grace)
    ok_codes = {0, -signal.SIGTERM, -signal.SIGINT}
    bad = [(p.pid, p.returncode) for p in children if p.returncode not in ok_codes]
    if bad:
        print(f"sluice-mock: workers exited with errors: {bad}", file=sys.stderr, flush=True)
        return 1
    return 0


# ============================================================================ CLI

def _parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m mocks.server", description="Sluice's mock LLM provider")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--latency-ms", type=float, default=60.0, help="hold before the response head (default 60)")
    ap.add_argument("--workers", type=int, default=1, help="worker processes sharing the port (default 1)")
    ap.add_argument("--stats-dir", default=None, help="where workers write their stats (default: a new temp dir)")
    ap.add_argument("--response-tokens", type=int, default=16, help="words of content per response (default 16)")
    ap.add_argument("--stream-chunks", type=int, default=20, help="content frames per stream (default 20)")
    ap.add_argument("--chunk-delay-ms", type=float, default=20.0, help="gap between content frames (default 20)")
    ap.add_argument("--models", default="mock-model", help="comma-separated ids for /v1/models")
    ap.add_argument("--shutdown-grace-s", type=float, default=1.0,
                    help="on SIGTERM, how long in-flight requests may finish (default 1)")
    ap.add_argument("--backlog", type=int, default=4096)
    ap.add_argument("--timer", choices=("timerfd", "loop"), default="timerfd",
                    help="how holds and chunk gaps are timed: a timerfd (sub-ms, Linux; default) or the "
                         "event loop's millisecond timers")
    ap.add_argument("--max-body-bytes", type=int, default=64 * 1024 * 1024)
    ap.add_argument("--gc", choices=GC_MODES, default="lean",
                    help="Python's cyclic garbage collector: lean (default: startup heap frozen, "
                         "collected on the mock's timer, not inside requests), freeze (startup heap "
                         "frozen, Python's thresholds: the mock before 1.2), default (as Python sets it)")
    ap.add_argument("--faults", default=None, metavar="JSON_OR_FILE",
                    help="fault schedule: a JSON list (inline, or the path of a file); see mocks.faults")
    ap.add_argument("--fault-seed", type=int, default=0, help="which requests get a fault (default 0)")
    ap.add_argument("--fault-epoch-unix-s", type=float, default=None,
                    help="the faults' start_s counts from this wall-clock time (default: the mock's start)")
    ap.add_argument("--worker-of", type=int, default=None, help=argparse.SUPPRESS)
    cfg = ap.parse_args(argv)
    if cfg.workers < 1:
        ap.error("--workers must be at least 1")
    if not (0 <= cfg.latency_ms <= MAX_MS) or not (0 <= cfg.chunk_delay_ms <= MAX_MS):
        ap.error("--latency-ms and --chunk-delay-ms must be between 0 and 3600000")
    if not (1 <= cfg.stream_chunks <= MAX_CHUNKS):
        ap.error(f"--stream-chunks must be between 1 and {MAX_CHUNKS}")
    if not (0 <= cfg.response_tokens <= MAX_TOKENS):
        ap.error(f"--response-tokens must be between 0 and {MAX_TOKENS}")
    if not (0 < cfg.port < 65536):
        ap.error("--port must be between 1 and 65535")
    cfg.models = [m for m in cfg.models.split(",") if m] or ["mock-model"]
    try:
        cfg.fault_schedule = load_schedule(cfg.faults) if cfg.faults else []
    except FaultError as exc:
        ap.error(f"--faults: {exc}")
    if cfg.fault_epoch_unix_s is None:
        cfg.fault_epoch_unix_s = time.time()  # a supervisor passes its own to every worker
    return cfg


def main(argv=None) -> int:
    cfg = _parse_args(argv)
    if cfg.worker_of is not None:  # a worker started by a supervisor
        _die_with_parent(cfg.worker_of)
        return uvloop.run(_serve(cfg, reuseport=True, announce=False))
    if cfg.stats_dir is None:
        cfg.stats_dir = tempfile.mkdtemp(prefix="sluice-mock-stats-")
    cfg.stats_dir = os.path.abspath(cfg.stats_dir)
    os.makedirs(cfg.stats_dir, exist_ok=True)
    clear_worker_files(cfg.stats_dir)  # figures of an earlier mock must not be merged in
    if cfg.workers == 1:
        return uvloop.run(_serve(cfg, reuseport=False, announce=True))
    return _supervise(cfg)


if __name__ == "__main__":
    sys.exit(main())
