"""How a worker answers a generation request that gets a fault (see ``mocks.faults`` for
the schedule's format and what each fault does on the wire).

Only generation requests get per-request faults, chosen once the body is read and valid
(from the ``--faults`` schedule, or a request's ``x-mock-fault`` header); the request log's
``fault`` column names it (``status:<code>``, ``overloaded``, ``slow``, ``reset``, ``stall``,
``malformed``, ``mid_stream_error:event``, ``mid_stream_error:reset``, ``stream_cut``,
``no_response``, ``non_retriable``; ``""`` none), its ``status_code`` is the status of the
head written (499: none went out, or the client left first) and its ``ended`` says how the
response ended (``mocks.request_log.ENDED``).  A ``down`` window is not a reply: the worker
closes its listener (``mocks.worker``).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time

from aiohttp import web

from mocks.connection import bytes_out, gone
from mocks.faults import (
    MID_STREAM_ERROR_STATUS,
    NON_RETRIABLE_STATUS,
    OVERLOADED_STATUS,
    STREAM_ONLY,
    anthropic_context_length_body,
    anthropic_error_body,
    anthropic_error_event,
    broken_frame,
    broken_json,
    openai_context_length_body,
    openai_error_body,
    openai_error_event,
)
from mocks.protocol import CT, JSON_CT, RID, SSE_CT
from mocks.request_log import (
    FAULT_CLOSED,
    FAULT_CUT,
    FAULT_ERROR_EVENT,
    FAULT_RESET,
    MOCK_CLOSED,
    NEVER_ANSWERED,
)

_mono = time.monotonic_ns

FLUSH_WAIT_S = 1.0           # a reset waits at most this long for its partial body to leave
_LINGER_RST = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends an RST


class FaultReplies:
    """The faulted answers of ``mocks.app.MockApp`` (a mixin: they use its ``stats``,
    ``timer``, ``_hold``, ``_next_frame``, ``_send``, ``_unary``, ``_stream``,
    ``_log_request`` and ``_log_stopped``)."""

    async def _faulted(self, request, rid: str, path: str, body: bytes, t0: int, latency_ns: int,
                       delay_ns: int, fault, anthropic: bool, out: bytes | None, chars: tuple,
                       first: bytes = b"", middle=(), last: bytes = b""):
        """Answer a generation request with ``fault`` (``out``: the unary body; None for a
        stream of ``first``, ``middle``, ``last``; ``chars[k]``: the content characters once k
        content frames, or for ``out`` the whole body, went out)."""
        kind = fault.kind
        if out is not None and kind in STREAM_ONLY:  # nothing to cut mid-stream: answered as usual
            return await self._unary(request, rid, web.Response(body=out, headers={CT: JSON_CT, RID: rid}),
                                     path, body, t0, latency_ns, "", chars[1])
        label = fault.label
        finish = ""
        if kind == "mid_stream_error":
            finish = FAULT_RESET if fault.resets() else FAULT_ERROR_EVENT
            label += ":reset" if finish == FAULT_RESET else ":event"
        self.stats.record_fault(label)
        if kind in ("status", "overloaded", "non_retriable"):
            return await self._status_fault(request, rid, path, body, t0, fault, anthropic)
        if kind == "no_response":
            return await self._no_response(request, rid, path, body, t0, label)
        content = chars[1] if out is not None else 0
        if kind == "slow":
            latency_ns = fault.hold_ns
        elif kind == "malformed":
            if out is not None:
                out = broken_json(out)
                content = 0  # no client can read a body that is not JSON
            else:
                middle = list(middle)
                broken_at = min(fault.after_frames or 0, len(middle) - 1)
                middle[broken_at] = broken_frame(middle[broken_at])
                unreadable = chars[broken_at + 1] - chars[broken_at]
                chars = (*chars[:broken_at + 1], *(c - unreadable for c in chars[broken_at + 1:]))
        elif out is not None:  # reset / stall of a unary answer: the head promises the whole body
            cut = len(out) // 2 if fault.after_bytes is None else min(fault.after_bytes, len(out) - 1)
            resp = web.StreamResponse(headers={CT: JSON_CT, RID: rid})
            resp.content_length = len(out)
            return await self._cut(request, rid, path, body, t0, latency_ns, 0, resp, [out[:cut]], None, fault,
                                   label, FAULT_RESET if kind == "reset" else FAULT_CLOSED)
        else:  # a stream cut after some frames: reset, stall, mid_stream_error, stream_cut
            kept = len(middle) // 2 if fault.after_frames is None else min(fault.after_frames, len(middle))
            resp = web.StreamResponse(headers={CT: SSE_CT, "Cache-Control": "no-cache", RID: rid})
            tail = b""
            if finish == FAULT_ERROR_EVENT:
                tail = (anthropic_error_event(fault.status or MID_STREAM_ERROR_STATUS["anthropic"]) if anthropic
                        else openai_error_event(fault.status or MID_STREAM_ERROR_STATUS["openai"]))
            elif not finish:
                finish = {"reset": FAULT_RESET, "stall": FAULT_CLOSED, "stream_cut": FAULT_CUT}[kind]
            return await self._cut(request, rid, path, body, t0, latency_ns, delay_ns, resp, [first, *middle[:kept]],
                                   chars, fault, label, finish, tail)
        if out is None:
            return await self._stream(request, rid, path, body, t0, latency_ns, delay_ns, first, middle, last,
                                      chars, label)
        return await self._unary(request, rid, web.Response(body=out, headers={CT: JSON_CT, RID: rid}),
                                 path, body, t0, latency_ns, label, content)

    async def _status_fault(self, request, rid: str, path: str, body: bytes, t0: int, fault, anthropic: bool):
        if fault.hold_ns:
            await self._hold(path, t0 + fault.hold_ns)
        status, retry = fault.status, fault.retry_after_s
        headers = {CT: JSON_CT, RID: rid}
        if retry is not None:
            headers["Retry-After"] = str(retry)
        if fault.kind == "non_retriable":
            status = NON_RETRIABLE_STATUS
            err = anthropic_context_length_body(rid) if anthropic else openai_context_length_body()
        else:
            if fault.kind == "overloaded":
                status = OVERLOADED_STATUS["anthropic" if anthropic else "openai"]
            err = anthropic_error_body(status, rid, retry) if anthropic else openai_error_body(status, retry)
        self.stats.record_response(path, status)
        return await self._send(request, rid, path, web.Response(status=status, body=err, headers=headers),
                                body, t0, fault.hold_ns, fault.label)

    async def _no_response(self, request, rid: str, path: str, body: bytes, t0: int, label: str):
        """Never answer: wait until the connection is gone (the client left, a ``down`` window,
        or the mock's shutdown, which cancels the wait after its grace)."""
        stats = self.stats
        stats.incomplete += 1  # nobody gets an answer
        stats.record_response(path, 499)
        proto = request.protocol
        try:
            await self._until_lost(proto, None)
        finally:
            closed_ns = proto.client_left_ns() if proto is not None else 0
            # no head: its times are the body's end, so no service time is invented
            self._log_request(request, rid, path, body, 499, label, t0, 0, t0, t0, t0, 0, 0, 0, closed_ns,
                              NEVER_ANSWERED)
        return web.Response(status=499, headers={RID: rid})  # never written: the connection is gone

    async def _cut(self, request, rid: str, path: str, body: bytes, t0: int, latency_ns: int, delay_ns: int,
                   resp, pieces: list, chars: tuple | None, fault, label: str, finish: str,
                   tail: bytes = b"") -> web.StreamResponse:
        """A response that ends before its end: after the hold, write the head and ``pieces``
        (piece i at head + i × delay; for a stream piece 0 is the opening frame, then content
        frames whose content ``chars`` counts), then by ``finish``: abort the connection with
        an RST (``fault_reset``); send nothing more until the client leaves or ``stall_s``
        passes, then close it (``fault_closed``); write ``tail`` (the dialect's error event)
        and end the body (``fault_error_event``); end the body at once (``fault_cut``)."""
        if latency_ns:
            deadline = t0 + latency_ns
            if _mono() < deadline:
                try:
                    await self._hold(path, deadline)
                except asyncio.CancelledError:
                    self._log_stopped(request, rid, path, body, t0, latency_ns, label)
                    raise
        stats = self.stats
        t_head = _mono()
        stats.record_hold(t_head - t0)
        stats.record_response(path, 200)
        stats.incomplete += 1  # nobody gets the whole answer
        status = 200
        t_written = t_last = t_head
        sent = 0  # content frames handed to the socket
        ended, closed_ns = finish, 0
        transport = request.transport
        proto = request.protocol
        try:
            await resp.prepare(request)
            resp._payload_writer.send_headers()  # the head goes out even with no body bytes
            for i, piece in enumerate(pieces):
                due = t_head + i * delay_ns
                if _mono() < due and not await self._next_frame(proto, due):
                    raise ConnectionResetError("the client left between frames")
                if piece:
                    await resp.write(piece)
                t_last = _mono()
                if i == 0:
                    t_written = t_last
                elif chars is not None:
                    sent = i
            if transport is None or transport.is_closing():
                raise ConnectionResetError("client gone before the cut")
            if finish == FAULT_RESET:
                await self._flushed(transport)
                proto.closed_by_mock = True
                transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
                transport.abort()
            elif finish == FAULT_CLOSED:
                await self._flushed(transport)
                await self._until_lost(proto, fault.stall_s)
                if proto.lost_ns:  # the client left during the stall
                    ended, closed_ns = gone(proto)
                else:
                    proto.closed_by_mock = True
                    transport.close()
            else:  # the body ends whole: after the error event, or at once
                if tail:
                    await resp.write(tail)
                    t_last = _mono()
                await resp.write_eof()
        except ConnectionError:
            status = 499  # the client left before the cut
            ended, closed_ns = gone(proto)
        except asyncio.CancelledError:
            ended = MOCK_CLOSED
            raise
        finally:
            self._log_request(request, rid, path, body, status, label, t0, latency_ns, t_head, t_written,
                              t_last, bytes_out(resp), chars[sent] if chars is not None else 0, sent,
                              closed_ns, ended)
            stats.version += 1
        return resp

    @staticmethod
    async def _flushed(transport) -> None:
        """Wait (bounded) until the transport handed its buffered bytes to the kernel."""
        deadline = _mono() + int(FLUSH_WAIT_S * 1e9)
        while transport.get_write_buffer_size() and not transport.is_closing() and _mono() < deadline:
            await asyncio.sleep(0.001)

    @staticmethod
    async def _until_lost(proto, timeout_s: float | None) -> None:
        """Until the connection is lost, or ``timeout_s`` passed (None: no limit)."""
        if proto is None or proto.transport is None or proto.lost_ns:
            return
        loop = asyncio.get_running_loop()
        lost = loop.create_future()
        proto.lost_waiter = lost
        timeout = (loop.call_later(timeout_s, lambda: lost.done() or lost.set_result(None))
                   if timeout_s is not None else None)
        try:
            await lost
        finally:
            if timeout is not None:
                timeout.cancel()
            proto.lost_waiter = None
