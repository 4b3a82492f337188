"""How a worker answers a generation request that gets a fault (see ``mocks.faults`` for
the schedule's format and what each fault does on the wire).

Only generation requests get per-request faults (status, overloaded, slow, reset, stall,
malformed), chosen once the body is read and valid (from the ``--faults`` schedule, or a
request's ``x-mock-fault`` header); the request log's ``fault`` column names it
(``status:<code>``, ``overloaded``, ``slow``, ``reset``, ``stall``, ``malformed``; ``""``
none) and its ``status_code`` is the status of the head written (499: the client left
first).  A ``down`` window is not a reply: the worker closes its listener
(``mocks.worker``).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time

from aiohttp import web

from mocks.connection import bytes_out
from mocks.faults import (
    OVERLOADED_STATUS,
    anthropic_error_body,
    broken_frame,
    broken_json,
    openai_error_body,
)
from mocks.protocol import CT, JSON_CT, RID, SSE_CT

_mono = time.monotonic_ns

FLUSH_WAIT_S = 1.0           # a reset waits at most this long for its partial body to leave
_LINGER_RST = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends an RST


class FaultReplies:
    """The faulted answers of ``mocks.app.MockApp`` (a mixin: they use its ``stats``,
    ``timer``, ``_hold``, ``_send``, ``_unary``, ``_stream`` and ``_log_request``)."""

    async def _faulted(self, request, rid: str, path: str, body: bytes, t0: int, latency_ns: int,
                       delay_ns: int, fault, anthropic: bool, out: bytes | None, first: bytes = b"",
                       middle=(), last: bytes = b""):
        """Answer a generation request with ``fault`` (``out``: the unary body; None for a
        stream of ``first``, ``middle``, ``last``)."""
        kind = fault.kind
        self.stats.record_fault(fault.label)
        if kind in ("status", "overloaded"):
            return await self._status_fault(request, rid, path, body, t0, fault, anthropic)
        if kind == "slow":
            latency_ns = fault.hold_ns
        elif kind == "malformed":
            if out is not None:
                out = broken_json(out)
            else:
                middle = list(middle)
                broken_at = min(fault.after_frames or 0, len(middle) - 1)
                middle[broken_at] = broken_frame(middle[broken_at])
        elif out is not None:  # reset / stall of a unary answer: the head promises the whole body
            cut = len(out) // 2 if fault.after_bytes is None else min(fault.after_bytes, len(out) - 1)
            resp = web.StreamResponse(headers={CT: JSON_CT, RID: rid})
            resp.content_length = len(out)
            return await self._cut(request, rid, path, body, t0, latency_ns, 0, resp, [out[:cut]], fault)
        else:
            kept = len(middle) // 2 if fault.after_frames is None else min(fault.after_frames, len(middle))
            resp = web.StreamResponse(headers={CT: SSE_CT, "Cache-Control": "no-cache", RID: rid})
            pieces = [first, *middle[:kept]]
            return await self._cut(request, rid, path, body, t0, latency_ns, delay_ns, resp, pieces, fault)
        if out is None:
            return await self._stream(request, rid, path, body, t0, latency_ns, delay_ns, first, middle, last,
                                      fault.label)
        return await self._unary(request, rid, web.Response(body=out, headers={CT: JSON_CT, RID: rid}),
                                 path, body, t0, latency_ns, fault.label)

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

    async def _cut(self, request, rid: str, path: str, body: bytes, t0: int, latency_ns: int, delay_ns: int,
                   resp, pieces: list, fault) -> web.StreamResponse:
        """Reset or stall: after the hold, write the head and ``pieces`` (piece i at head +
        i × delay), then abort the connection with an RST (reset), or send nothing more until
        the client leaves or ``stall_s`` passes and then close it (stall)."""
        if latency_ns:
            deadline = t0 + latency_ns
            if _mono() < deadline:
                await self._hold(path, deadline)
        stats = self.stats
        t_head = _mono()
        stats.record_hold(t_head - t0)
        stats.record_response(path, 200)
        stats.incomplete += 1  # nobody gets the whole answer
        status = 200
        t_written = t_last = t_head
        transport = request.transport
        try:
            await resp.prepare(request)
            resp._payload_writer.send_headers()  # the head goes out even with no body bytes
            for i, piece in enumerate(pieces):
                due = t_head + i * delay_ns
                if _mono() < due:
                    await self.timer.wait_until(due)
                if piece:
                    await resp.write(piece)
                t_last = _mono()
                if i == 0:
                    t_written = t_last
            if transport is None or transport.is_closing():
                raise ConnectionResetError("client gone before the cut")
            await self._flushed(transport)
            if fault.kind == "reset":
                transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
                transport.abort()
            else:
                await self._until_lost(request.protocol, fault.stall_s)
                transport.close()
        except ConnectionError:
            status = 499  # the client left before the cut
        finally:
            self._log_request(request, rid, path, body, status, fault.label, t0, latency_ns, t_head, t_written,
                              t_last, bytes_out(resp))
            stats.version += 1
        return resp

    @staticmethod
    async def _flushed(transport) -> None:
        """Wait (bounded) until the transport handed its buffered bytes to the kernel."""
        deadline = _mono() + int(FLUSH_WAIT_S * 1e9)
        while transport.get_write_buffer_size() and not transport.is_closing() and _mono() < deadline:
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
