"""Deadlines the sweeper enforces once a second (pure Python, off the request path): a request's
total time, and a client that takes none of the response bytes waiting for it.

- ``request_timeout_s`` (the model's, else ``[server]``'s; once a fallback model serves the
  request, that model's): from the request's arrival to its last byte, every attempt, backoff
  and pool wait included. Past it, a request whose response head has not gone out gets 504 in
  its dialect; a response under way is ended (an error event first for a translated stream)
  and the connection closed, or aborted when the client has not taken all of it yet. The
  provider connection is aborted.
- ``client_send_timeout_s``, nginx's ``send_timeout``: while response bytes wait in a client's
  transport, their amount must change within this time, else the connection is aborted.
"""
from __future__ import annotations

import fcntl
import socket
import struct
import termios
from typing import TYPE_CHECKING

from sluice.http import error_body

if TYPE_CHECKING:
    import asyncio

    from sluice.client import ClientConn
    from sluice.request import Request
    from sluice.server import App


class Deadlines:
    def __init__(self, send_timeout: float) -> None:
        self.send_timeout = send_timeout
        self.waiting: dict[ClientConn, tuple[int, float]] = {}  # client -> (bytes waiting for it, when that amount was first seen)

    def sweep(self, app: App, now: float) -> None:
        waiting: dict[ClientConn, tuple[int, float]] = {}
        for c in list(app.clients):
            r = c.active
            if (r is not None and not c.closed and r.payload is not None
                    and now - r.t0 > r.route.model_cfg.request_timeout_s):
                request_expired(app, c, r)
            size = c.transport.get_write_buffer_size() if c.transport is not None else 0
            if not size:
                continue
            seen = self.waiting.get(c)
            if seen is None or seen[0] != size:
                waiting[c] = (size, now)  # first seen, or the client took some (or more was written)
            elif now - seen[1] > self.send_timeout:
                if c.upstream is not None:
                    app.metrics.upstream_error(c.upstream.provider.name, "client_too_slow")
                reset(c)  # close would wait for the bytes it does not take
            else:
                waiting[c] = seen
        self.waiting = waiting


def request_expired(app: App, c: ClientConn, r: Request) -> None:
    """``r`` ran past its model's request_timeout_s: answered 504, or its response ended."""
    # imported here, at a timeout: the compiled dispatch, imported as this module loads, would
    # load the compiled modules it cimports, server among them, which imports this module's
    # names before they exist
    from sluice import dispatch
    timeout = r.route.model_cfg.request_timeout_s
    up = c.upstream
    provider = up.provider.name if up is not None else r.route.provider.name
    app.metrics.upstream_error(provider, "request_timeout")
    if up is not None and up.client_head_sent:
        up.fail_midstream()  # an error event for a translated stream, then the close
        if c.transport.get_write_buffer_size() or unsent_bytes(c.transport):
            reset(c)  # a client behind its response: the close would wait for it
        return
    dispatch.cancel(c)  # the attempt under way, or the wait for a connection, is dropped
    c.respond(r, 504, error_body(r.dialect, 504, f"request not completed within {timeout:g}s"),
              b"", b"application/json", r.own_time * 1e6)
    app.request_finished(c, r, 504, None, None)


def unsent_bytes(transport: asyncio.Transport) -> int:
    """Bytes the kernel still holds for the client (written, not yet taken by it)."""
    try:
        fd = transport.get_extra_info("socket").fileno()
        unsent: int = struct.unpack("i", fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0\0\0\0"))[0]
        return unsent
    except (AttributeError, OSError, ValueError):
        return 0


def reset(c: ClientConn) -> None:
    """Close ``c`` with a reset: a plain close (or abort) leaves the bytes the client never took
    in the kernel, the FIN queued behind them, and the connection open on the client's side."""
    c.closed = True
    try:
        c.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                        struct.pack("ii", 1, 0))
    except (AttributeError, OSError):
        pass
    c.transport.abort()
