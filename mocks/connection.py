"""The mock's sockets: the listening socket, the listener that ``down`` faults close and
reopen, and the per-connection handler that notes what the request log needs (the peer's
port, when request bytes last arrived, when and by whom the connection was closed) and
lets a response wait for the client to leave; with the byte counts of a request head and a
response as written.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from mocks.request_log import CLIENT_CLOSED, MOCK_CLOSED

_mono = time.monotonic_ns

REOPEN_TRIES = 100           # after a down window: bind attempts, REOPEN_GAP_S apart
REOPEN_GAP_S = 0.1


def make_socket(host: str, port: int, reuseport: bool, backlog: int) -> socket.socket:
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


class Connection(RequestHandler):
    """aiohttp's connection handler, noting its peer's port, when request bytes last
    arrived (the request log's ``arrival_lag_ns`` starts there) and when the connection was
    lost (``lost_ns``; ``closed_by_mock`` when the mock closed it itself); a response
    waiting between frames, or for the client to leave, waits on ``lost_waiter``, which a
    lost connection completes."""

    rx_ns = 0
    peer_port = 0
    lost_ns = 0
    closed_by_mock = False
    lost_waiter = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer_port = peer[1]

    def data_received(self, data: bytes) -> None:
        self.rx_ns = _mono()
        super().data_received(data)

    def force_close(self) -> None:
        # aiohttp calls it for the mock (shutdown, a down window) and from connection_lost
        if not self.lost_ns:
            self.closed_by_mock = True
        super().force_close()

    def connection_lost(self, exc) -> None:
        self.lost_ns = _mono()
        waiter = self.lost_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        super().connection_lost(exc)

    def client_left_ns(self) -> int:
        """When the client's close reached the mock (monotonic ns); 0 while the connection is
        open or when the mock closed it."""
        return 0 if self.closed_by_mock else self.lost_ns


class ConnectionServer(web.Server):
    """aiohttp's low-level server, its connections handled by :class:`Connection`."""

    def __call__(self) -> RequestHandler:
        return Connection(self, loop=self._loop, **self._kwargs)


def gone(proto) -> tuple[str, int]:
    """A response the socket refused: how it ended (``client_closed``, or ``mock_closed`` when
    the mock closed the connection itself) and when the client's close reached the mock
    (monotonic ns; 0 for ``mock_closed``; now, when its connection_lost has not run yet)."""
    if proto is not None and proto.closed_by_mock:
        return MOCK_CLOSED, 0
    return CLIENT_CLOSED, (proto.lost_ns if proto is not None and proto.lost_ns else _mono())


def head_bytes(request: BaseRequest) -> int:
    """Size of the request head as sent (exact for ``Name: value`` header lines)."""
    size = len(request.method) + len(request.raw_path) + 14  # " ", " HTTP/1.1\r\n", final "\r\n"
    for name, value in request.raw_headers:
        size += len(name) + len(value) + 4
    return size


def bytes_out(resp) -> int:
    writer = resp._payload_writer  # None once the eof went out; body_length then has the total
    return writer.output_size if writer is not None else resp.body_length


class Listener:
    """The worker's listening server, closed and reopened by ``down`` faults."""

    def __init__(self, loop, server, sock, cfg, reuseport: bool):
        self.loop, self.server, self.sock, self.cfg, self.reuseport = loop, server, sock, cfg, reuseport
        self.port = sock.getsockname()[1]
        self.listening_server = None

    async def open(self) -> None:
        self.listening_server = await self.loop.create_server(self.server, sock=self.sock, backlog=self.cfg.backlog)

    def close(self) -> None:
        if self.listening_server is not None:
            self.listening_server.close()  # the loop detached self.sock and closes its fd now: connects are refused
            self.listening_server = None

    async def reopen(self) -> bool:
        for _ in range(REOPEN_TRIES):
            try:
                self.sock = make_socket(self.cfg.host, self.port, self.reuseport, self.cfg.backlog)
            except OSError as exc:
                error = exc
                await asyncio.sleep(REOPEN_GAP_S)
                continue
            await self.open()
            return True
        print(f"sluice-mock: cannot listen again on {self.cfg.host}:{self.port} after a down window: {error}",
              file=sys.stderr, flush=True)
        return False
