"""Providers and their keep-alive connection pools: the idle connections, a busy set, the clients
waiting for a connection, and the tasks opening new ones. Every connection or client leaves its
collection in constant time: a provider may drop thousands at once."""
import asyncio
from collections import OrderedDict
from time import perf_counter
from typing import TYPE_CHECKING

from sluice import dispatch
from sluice.upstream import UpstreamConn

if TYPE_CHECKING:
    import ssl  # noqa: F401 (type comments)

    from sluice.client import ClientConn  # noqa: F401 (type comments)
    from sluice.config import ProviderConfig  # noqa: F401 (type comments)
    from sluice.server import App  # noqa: F401 (type comments)

_last_connect_log = {}  # type: dict[str, float]


def _log_connect_error(provider, error):
    # type: (Provider, str) -> None
    """At most one line a second per provider."""
    import sys
    import time
    now = time.monotonic()
    if now - _last_connect_log.get(provider.name, -2.0) >= 1.0:
        _last_connect_log[provider.name] = now
        sys.stderr.write(f"sluice: cannot connect to provider {provider.name}: {error}\n")


class Provider:
    """One configured provider: where it is, the head every request to it starts with, its
    timeouts, its pool."""

    def __init__(self, cfg, app):
        # type: (ProviderConfig, App) -> None
        self.cfg = cfg
        self.name = cfg.name
        self.response_filter = app.response_filter
        self.dialect = cfg.dialect
        self.host = cfg.host
        self.port = cfg.port
        self.ssl = None  # type: ssl.SSLContext | None
        if cfg.scheme == "https":
            import ssl
            ctx = ssl.create_default_context(cafile=cfg.ca_file or None)
            if not cfg.tls_verify:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            self.ssl = ctx
        lines = [b"POST " + cfg.chat_path.encode() + b" HTTP/1.1\r\n",
                 b"host: " + cfg.host_header.encode() + b"\r\n"]
        if cfg.api_key:
            if self.dialect == "anthropic":
                lines.append(b"x-api-key: " + cfg.api_key.encode() + b"\r\n")
            else:
                lines.append(b"authorization: Bearer " + cfg.api_key.encode() + b"\r\n")
        for k, v in cfg.headers.items():
            lines.append(k.encode() + b": " + v.encode() + b"\r\n")
        self.head_prefix = b"".join(lines)
        self.anthropic_version = b"anthropic-version: " + cfg.anthropic_version.encode() + b"\r\n"
        self.connect_timeout = cfg.connect_timeout_s
        self.response_timeout = cfg.response_timeout_s
        self.stream_idle_timeout = cfg.stream_idle_timeout_s
        self.pool_idle_timeout = cfg.pool_idle_timeout_s
        self.pool = Pool(self, app)
        self.latency = app.metrics.latency_hist(cfg.name)


class Waiters(OrderedDict["ClientConn", None]):
    """The client connections waiting for a connection, oldest first (as a deque, but any one
    leaves in constant time)."""

    def append(self, client):
        # type: (ClientConn) -> None
        self[client] = None

    def popleft(self):
        # type: () -> ClientConn
        return self.popitem(False)[0]


class Pool:
    """Keep-alive connections to one provider: the idle ones, a busy set, waiters."""

    def __init__(self, provider, app):
        # type: (Provider, App) -> None
        self.provider = provider
        self.app = app
        self.loop = app.loop
        self.max_connections = provider.cfg.max_connections
        self.max_waiters = provider.cfg.max_waiters
        # idle connections in the order they were parked: the most recently used one is reused
        # first, the oldest times out first. A parked connection has its idle_since set; one that
        # closes while parked is uncounted at once (idle_since back to 0) and its place here is
        # dropped when reached from either end: no search of the list.
        self.idle = []  # type: list[UpstreamConn]
        self.parked = 0
        self.busy = set()  # type: set[UpstreamConn]
        self.connecting = 0
        self.waiters = Waiters()  # bounded
        self.tasks = set()  # type: set[asyncio.Task[None]]

    def counts(self):
        # type: () -> tuple[int, int, int]
        return self.parked, len(self.busy), self.connecting

    def acquire(self):
        # type: () -> UpstreamConn | None
        idle = self.idle
        while idle:
            c = idle.pop()
            if c.idle_since:
                c.idle_since = 0.0
                self.parked -= 1
            if c.alive:
                self.busy.add(c)
                return c
        return None

    def wait(self, client):
        # type: (ClientConn) -> None
        """``client`` needs a connection: it gets one through dispatch.start_exchange, or
        dispatch.attempt_failed; a 503 at once when every connection is taken and
        ``max_waiters`` wait beyond those the connections being opened will serve."""
        room = len(self.busy) + self.parked + self.connecting < self.max_connections
        if not room and len(self.waiters) >= self.connecting + self.max_waiters:
            self.app.metrics.upstream_error(self.provider.name, "pool_full")
            dispatch.attempt_failed(client, 503, f"too many requests waiting for a connection to "
                                                 f"provider {self.provider.name}")
            return
        self.waiters.append(client)
        if room:
            self.connect()

    def forget(self, client):
        # type: (ClientConn) -> None
        self.waiters.pop(client, None)

    def connect(self):
        # type: () -> None
        self.connecting += 1
        task = self.loop.create_task(self._connect())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _connect(self):
        # type: () -> None
        p = self.provider
        conn = UpstreamConn(self)
        kind = None  # type: str | None
        error = ""
        try:
            await asyncio.wait_for(self.loop.create_connection(
                # (a protocol by its methods, as uvloop takes it)
                lambda: conn, p.host, p.port, ssl=p.ssl,  # type: ignore[type-var]
                server_hostname=p.host if p.ssl else None), p.connect_timeout)
        except asyncio.TimeoutError:
            kind = "connect_timeout"
        except (OSError, ValueError) as e:
            kind = "connect_refused" if isinstance(e, ConnectionRefusedError) else "connect_error"
            error = str(e) or type(e).__name__
        except asyncio.CancelledError:
            self.connecting -= 1
            raise
        self.connecting -= 1
        if kind is not None:
            self.app.metrics.upstream_error(p.name, kind)
            self._connect_failed(kind, error)
            return
        c = self.app.metrics.upstream_connects
        c[p.name] = c.get(p.name, 0) + 1
        self.give(conn)

    def _connect_failed(self, kind, error):
        # type: (str, str) -> None
        """The oldest live waiter gets the failure (the others wait for the next connection)."""
        p = self.provider
        while self.waiters:
            client = self.waiters.popleft()
            if client.waiting_on is self:
                if kind == "connect_timeout":
                    dispatch.attempt_failed(client, 504, f"provider {p.name} did not accept a "
                                                         f"connection within {p.connect_timeout:g}s",
                                            "connect")
                elif kind == "connect_refused":
                    dispatch.attempt_failed(client, 502, f"provider {p.name} refused the connection",
                                            "connect")
                else:  # the cause (addresses included) is for the log, not for clients
                    _log_connect_error(p, error)
                    dispatch.attempt_failed(client, 502, f"cannot connect to provider {p.name}",
                                            "connect")
                break

    def give(self, conn):
        # type: (UpstreamConn) -> None
        """A free connection: hand it to the oldest live waiter, or park it idle."""
        if not conn.alive:
            self.discard(conn)
            return
        if conn.paused:  # paused for a slow client that is gone now
            conn.paused = False
            conn.transport.resume_reading()  # type: ignore[union-attr]  # pooled: connected
        waiters = self.waiters
        while waiters:
            client = waiters.popleft()
            if client.waiting_on is self:
                self.busy.add(conn)
                try:
                    dispatch.start_exchange(client, conn)
                except Exception:
                    import traceback
                    traceback.print_exc()
                    conn.client = None
                    conn.abort()
                    self.discard(conn)
                    dispatch.attempt_failed(client, 500, "internal error while sending the request")
                return
        conn.idle_since = perf_counter()
        self.idle.append(conn)
        self.parked += 1

    def release(self, conn):
        # type: (UpstreamConn) -> None
        self.busy.discard(conn)
        self.give(conn)

    def discard(self, conn):
        # type: (UpstreamConn) -> None
        self.busy.discard(conn)
        if conn.idle_since:
            conn.idle_since = 0.0
            self.parked -= 1
        if self.waiters and len(self.busy) + self.parked + self.connecting < self.max_connections:
            self.connect()

    def sweep(self, now):
        # type: (float) -> None
        p = self.provider
        for conn in list(self.busy):
            conn.check_timeout(now)
        idle = self.idle
        limit = now - p.pool_idle_timeout
        if idle and idle[0].idle_since < limit:
            n = 0
            for conn in idle:  # oldest first; the places of closed ones (0) go with them
                if conn.idle_since >= limit:
                    break
                n += 1
            expired = idle[:n]
            del idle[:n]  # one move of the rest, however many expired
            for conn in expired:
                if conn.idle_since:
                    conn.idle_since = 0.0
                    self.parked -= 1
                    conn.close()
        # waiters are in the order they began waiting: only the oldest can be over the limit
        waiters = self.waiters
        limit = now - p.response_timeout
        while waiters and next(iter(waiters)).wait_since < limit:
            client = waiters.popleft()
            if client.waiting_on is self:
                self.app.metrics.upstream_error(p.name, "pool_timeout")
                dispatch.attempt_failed(client, 504, f"no connection to provider {p.name} "
                                                     f"became free within {p.response_timeout:g}s")

    def close(self):
        # type: () -> None
        for conn in self.idle + list(self.busy):
            conn.close()
        for t in list(self.tasks):
            t.cancel()
