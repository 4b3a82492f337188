"""The mock's sockets: the listening socket, the listener that ``down`` faults close and
reopen, and the per-connection handler that notes what the request log needs (the peer's
port, when request bytes last arrived) and lets a stalled response wait for the client to
leave; with the byte counts of a request head and a response as written.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

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
        waiter = self.lost_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        super().connection_lost(exc)


class ConnectionServer(web.Server):
    """aiohttp's low-level server, its connections handled by :class:`Connection`."""

    def __call__(self) -> RequestHandler:
        return Connection(self, loop=self._loop, **self._kwargs)


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
