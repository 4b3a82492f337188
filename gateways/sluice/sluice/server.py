"""The client side: one asyncio Protocol per client connection, and the per-worker App.

No task per request: httptools calls back into ClientConn as bytes arrive, a
complete request is routed synchronously, and the upstream pool hands the
request to a pooled connection (or, when none is idle, opens one).
"""
import asyncio
import os
import re
import signal
import sys
import time
from collections import deque
from time import perf_counter

import orjson
from httptools import HttpParserError, HttpParserUpgrade, HttpRequestParser

from sluice import __version__
from sluice.http import error_body, response, response_filter
from sluice.keys import KeyStore
from sluice.metrics import Metrics, render
from sluice.resilience import Policy, on_failure
from sluice.upstream import Provider

# Only for the performance gate's own test: a Sluice slowed on purpose, by this many
# milliseconds before each request goes upstream, must be caught by the gate. Never set in use.
TEST_DELAY_S = float(os.environ.get("SLUICE_TEST_DELAY_MS", "0") or 0) / 1000.0
# ... and, for the same reason, by this much CPU per request (a busy wait, microseconds).
TEST_CPU_BURN_S = float(os.environ.get("SLUICE_TEST_CPU_BURN_US", "0") or 0) / 1e6


def _burn_cpu(seconds):
    end = perf_counter() + seconds
    while perf_counter() < end:
        pass


loads = orjson.loads
dumps = orjson.dumps
JSONDecodeError = orjson.JSONDecodeError

_FIRST_MODEL = re.compile(rb'\s*\{\s*"model"\s*:\s*"([^"\\]*)"')
_ANY_MODEL = re.compile(rb'"model"\s*:\s*"([^"\\]*)"')
_MAX_TOKENS = re.compile(rb'"max(?:_completion)?_tokens"\s*:\s*(\d+)')

# request headers Sluice consumes instead of forwarding
H_DROP, H_AUTH, H_XKEY, H_EXPECT, H_AVERSION, H_CLEN, H_UPGRADE = range(7)
_SPECIAL = {
    b"host": H_DROP, b"connection": H_DROP, b"keep-alive": H_DROP, b"transfer-encoding": H_DROP,
    b"te": H_DROP, b"trailer": H_DROP, b"upgrade": H_UPGRADE, b"proxy-authorization": H_DROP,
    b"proxy-connection": H_DROP, b"accept-encoding": H_DROP, b"x-forwarded-for": H_DROP,
    b"authorization": H_AUTH, b"x-api-key": H_XKEY, b"expect": H_EXPECT,
    b"anthropic-version": H_AVERSION, b"content-length": H_CLEN,
}

TICK = 0.1
LINGER_S = 2.0  # after a last response, what the client still sends is read and dropped this long
MAX_TOKENS_RESERVED = 1 << 32   # a reservation's max_tokens part, whatever a body asks

# rpause bits: why reading from a client is paused
P_QUEUE, P_UPSTREAM, P_BAD, P_WRITE, P_FINAL, P_BURST = 1, 2, 4, 8, 16, 32


class Request:
    """One client request."""
    __slots__ = (
        "t0", "method", "url", "token", "fwd", "has_av", "http11", "keep_alive", "clen", "body",
        "left", "pieces", "blen", "upgrade", "pre", "t_resume", "overhead", "translate", "stream",
        "include_usage", "key", "reserved", "retried", "route", "model_label", "dialect", "payload",
        "client_model", "dep", "rs",
    )

    def __init__(self, t0):
        self.t0 = t0
        self.method = b""
        self.url = b""
        self.token = None
        self.fwd = b""
        self.has_av = False
        self.http11 = True
        self.keep_alive = True
        self.clen = -1
        self.body = b""
        self.left = -1           # Content-Length body bytes still to come
        self.pieces = None       # body pieces of earlier reads (a body longer than one read)
        self.blen = 0            # body bytes received so far
        self.upgrade = False
        self.pre = 0.0           # seconds of our own work before waiting on the provider
        self.t_resume = t0
        self.overhead = 0.0      # microseconds, as reported in the overhead header
        self.translate = 0       # 0 same dialect, 1 Anthropic client to OpenAI provider, 2 the reverse
        self.stream = False
        self.include_usage = False
        self.key = None
        self.reserved = 0        # tokens reserved from the key's budget
        self.retried = False
        self.route = None
        self.model_label = "-"
        self.dialect = "openai"
        self.payload = None      # set when the request goes towards a provider (counted in flight)
        self.client_model = None
        self.dep = None          # the deployment answering, when the model has a resilience Policy
        self.rs = None           # attempts so far (resilience.RState), made at the first failure


class Route:
    """A model name or alias as clients say it, resolved to a provider model."""
    __slots__ = ("name", "model_cfg", "provider", "upstream", "upstream_b", "max_output", "resil")

    def __init__(self, model_cfg, provider):
        self.name = model_cfg.name
        self.model_cfg = model_cfg
        self.provider = provider
        self.upstream = model_cfg.upstream_model
        self.upstream_b = self.upstream.encode()
        self.max_output = model_cfg.max_output_tokens
        self.resil = None  # a resilience.Policy when the model configures retries, fallbacks...


class HeaderPolicy:
    """Which client headers go to providers: the configured names and name prefixes."""

    def __init__(self, names):
        self.names = frozenset(n.encode() for n in names if not n.endswith("*"))
        self.prefixes = tuple(n[:-1].encode() for n in names if n.endswith("*"))

    def allows(self, low):
        return low in self.names or (self.prefixes and low.startswith(self.prefixes))


def _headers(hdrs, policy):
    """Digest a request's headers: (token, forwarded header block, expect 100, anthropic-version
    seen, a Content-Length spelled in an unusual case, Upgrade asked)."""
    token = None
    expect = has_av = upgrade = False
    clen = None
    fwd = []
    for name, value in hdrs.items():
        low = name.lower()
        h = _SPECIAL.get(low)
        if h is None:
            if policy.allows(low):
                fwd.append(name + b": " + value + b"\r\n")
        elif h == H_AUTH:
            token = value[7:].strip() if value[:7].lower() == b"bearer " else b""
        elif h == H_XKEY:
            if token is None:
                token = value.strip()
        elif h == H_EXPECT:
            expect = value.lower() == b"100-continue"
        elif h == H_AVERSION:
            has_av = True
            if policy.allows(low):
                fwd.append(name + b": " + value + b"\r\n")
        elif h == H_CLEN:
            clen = value
        elif h == H_UPGRADE:
            upgrade = True
    return token, b"".join(fwd), expect, has_av, clen, upgrade


class ClientConn:  # an asyncio protocol (uvloop needs only the methods)
    __slots__ = (
        "app", "transport", "parser", "cur", "queue", "busy", "closed", "req", "up", "waiting",
        "wait_since", "t_rx", "last", "peer", "eof", "rpause", "in_next", "bad",
        "on_header", "hdrs", "hprev", "hdone", "on_url", "urlp", "on_body", "bodyp",
        "on_message_begin", "between", "known", "n_complete", "last_req",
        "backlog", "tail", "hbytes", "t_begin", "final", "burst", "feeding",
    )

    def __init__(self, app):
        self.app = app
        self.transport = None
        self.cur = None
        self.queue = deque()
        self.busy = False
        self.closed = False
        self.req = None
        self.up = None
        self.waiting = None
        self.wait_since = 0.0
        self.eof = False
        self.rpause = 0
        self.in_next = False
        self.bad = False
        self.peer = "-"
        self.backlog = None   # bytes read but not parsed yet (parsing stopped between parts)
        self.tail = b""       # the last bytes of a read that ended inside a head or a chunked body
        self.hbytes = 0       # bytes of the head being received
        self.t_begin = 0.0    # when its first bytes arrived
        self.final = False    # a request that closes the connection was read: nothing after it is
        self.burst = 0
        self.feeding = False

    # ------------------------------------------------------------ transport
    def connection_made(self, transport):
        self.transport = transport
        app = self.app
        if len(app.clients) >= app.max_clients:
            # over the per-worker cap: a clean refusal instead of a connection we cannot afford
            self.closed = True
            app.metrics.connections_refused += 1
            transport.write(response(503, error_body("openai", 503, "too many client connections"),
                                     extra=b"retry-after: 1\r\n", close=True))
            _linger(transport, app.loop)
            return
        # Headers go straight into a dict: a C-level callback, no Python frame per header.
        # (A repeated header keeps its last value.)
        self.hdrs = {}
        self.on_header = self.hdrs.__setitem__
        # URL pieces and body pieces are collected the same way (list.append)
        self.urlp = []
        self.on_url = self.urlp.append
        self.bodyp = []
        self.on_body = self.bodyp.append
        self.hprev = None
        self.hdone = None
        # ``between`` is non-empty while the parser waits for a new message: llhttp clears it
        # (a C-level call) at a message's first byte, on_message_complete refills it
        self.between = [True]
        self.on_message_begin = self.between.clear
        self.known = None  # the previous request's head, split around its Content-Length value
        self.n_complete = 0
        self.last_req = None
        self.parser = HttpRequestParser(self)
        self.last = perf_counter()
        app.clients.add(self)
        if app.access is not None:
            peer = transport.get_extra_info("peername")
            self.peer = peer[0] if peer else "-"
        if app.stopping:
            self.close()

    def connection_lost(self, exc):
        self.closed = True
        app = self.app
        app.clients.discard(self)
        self.queue.clear()
        self.backlog = None
        req = self.req
        if req is not None:
            # client gone before its response was complete: cancel the upstream request
            self.req = None
            app.metrics.client_disconnects += 1
            up = self.up
            relayed = None
            if up is not None:
                self.up = None
                relayed = up.relayed_usage()
                up.client = None
                up.req = None
                up.abort()
                up.pool.discard(up)
            if self.waiting is not None:
                self.waiting.forget(self)
                self.waiting = None
            if req.payload is not None:
                if relayed is None:
                    app.request_finished(self, req, 499, None, None)
                else:  # charged for what was relayed, not only the prompt
                    app.request_finished(self, req, 499, relayed[0], relayed[1])
            else:
                app.metrics.count_request(req.model_label, 499)

    def eof_received(self):
        # Like nginx: a client that closes its side is gone; this is how a disconnect
        # mid-request is noticed at all when nothing is being written to it.
        self.eof = True
        return None

    def pause_writing(self):
        # the client does not keep up: stop reading its next requests and stop reading the provider
        self._pause(P_WRITE)
        up = self.up
        if up is not None and up.transport is not None and not up.paused:
            up.paused = True
            up.transport.pause_reading()

    def resume_writing(self):
        up = self.up
        if up is not None and up.paused and up.transport is not None:
            up.paused = False
            up.last_rx = perf_counter()  # the idle timeout restarts when we read again
            up.transport.resume_reading()
        self._resume(P_WRITE)

    def _pause(self, bit):
        if not self.rpause and not self.closed:
            self.transport.pause_reading()
        self.rpause |= bit

    def _resume(self, bit):
        if self.rpause & bit:
            self.rpause &= ~bit
            if not self.rpause and not self.closed:
                if self.backlog is not None and not self.feeding:
                    # what was read before parsing stopped comes first
                    data = self.backlog
                    self.backlog = None
                    self._parse(data)
                    if self.rpause or self.closed:
                        return
                self.transport.resume_reading()

    def _unburst(self):
        self._resume(P_BURST)

    def pause_reading_for_upstream(self):
        self._pause(P_UPSTREAM)

    def resume_reading_for_upstream(self):
        self._resume(P_UPSTREAM)

    def write(self, data):
        if not self.closed:
            self.transport.write(data)

    def writelines(self, parts):
        if not self.closed:
            self.transport.writelines(parts)

    def close(self):
        if not self.closed:
            self.closed = True
            self.transport.close()

    def close_after_response(self):
        """Close once the last response is out, without losing it to a reset: see _linger."""
        if not self.closed:
            self.closed = True
            if self.rpause:
                self.rpause = 0
                self.transport.resume_reading()
            _linger(self.transport, self.app.loop)

    # ------------------------------------------------------------ parsing
    def data_received(self, data):
        t = self.t_rx = self.last = perf_counter()
        if self.closed or self.bad or self.final:
            return
        if self.backlog is not None:  # parsing is stopped: keep the order of the bytes
            self.backlog += data
            return
        at_start = self.between and not self.busy and not self.queue
        if at_start and self.known is not None and self._known_request(data, t):
            return
        n_complete = self.n_complete
        self._parse(data)
        if at_start and self.n_complete == n_complete + 1 and self.between and not self.closed:
            self._learn_head(data)

    def _parse(self, data):
        """Feed the parser one part at a time: a head up to its CRLF CRLF, a body up to its
        length (or, chunked, up to a CRLF CRLF). So every head is measured before it is parsed,
        at most a couple of requests complete per part, and parsing can stop between parts:
        while the client does not read (backpressure), the pipeline is full, a burst of answers
        was written, or a request closed the connection. What is left waits in ``backlog``
        (at most one read)."""
        parser = self.parser
        app = self.app
        n = len(data)
        pos = 0
        self.feeding = True
        self.burst = 0
        try:
            while pos < n:
                if self.rpause or self.closed:
                    if not self.closed and not self.bad and not self.final:
                        self.backlog = data[pos:]
                    return
                r = self.cur
                if r is None or r.left < 0:  # a head, or a chunked body: up to a CRLF CRLF
                    end = -1
                    if pos == 0 and self.tail:  # one that began in the previous read
                        end = (self.tail + data[:3]).find(b"\r\n\r\n")
                        if end >= 0:
                            end += 4 - len(self.tail)
                        self.tail = b""
                    if end < 0:
                        end = data.find(b"\r\n\r\n", pos)
                        end = n if end < 0 else end + 4
                    if r is None:
                        size = self.hbytes + end - pos
                        if size > app.max_head:
                            self._head_too_large(data, pos)
                            return
                        if not self.hbytes:
                            self.t_begin = self.t_rx
                        self.hbytes = size
                else:  # a Content-Length body: exactly what is left of it
                    end = pos + r.left
                    if end > n:
                        end = n
                    r.left -= end - pos
                parser.feed_data(data if end - pos == n else data[pos:end])
                pos = end
                r = self.cur
                if r is not None and self.bodyp:
                    self._body_progress(r)
            if self.cur is not None or not self.between:
                if self.cur is None or self.cur.left < 0:
                    self.tail = data[-3:]
        except HttpParserUpgrade:
            if not self.closed and not self.bad:
                self._bad_request(400, "protocol upgrades are not supported")
        except HttpParserError as e:
            if not self.closed and not self.bad:
                self._bad_request(400, f"malformed HTTP request: {e}")
        finally:
            self.feeding = False

    def _body_progress(self, r):
        """A body longer than one read: keep one piece per read, count it, enforce the limit."""
        parts = self.bodyp
        piece = parts[0] if len(parts) == 1 else b"".join(parts)
        parts.clear()
        r.blen += len(piece)
        if r.blen > self.app.max_body:
            self._bad_request(413, f"request body exceeds {self.app.max_body} bytes")
            return
        if r.pieces is None:
            r.pieces = [piece]
        else:
            r.pieces.append(piece)

    def _head_too_large(self, data, pos):
        # still on the request line (no CRLF yet) and it is longer than a URL may be: 414
        line = data.find(b"\r\n", pos)
        line = (len(data) if line < 0 else line) - pos
        if not self.hdrs and sum(map(len, self.urlp)) + line > self.app.max_url and (
                not self.hbytes or line == len(data) - pos):
            self._bad_request(414, f"request URL exceeds {self.app.max_url} bytes")
        else:
            self._bad_request(431, f"request head exceeds {self.app.max_head} bytes")

    # A client on a keep-alive connection usually sends every request with the same head but
    # for Content-Length. When a read holds exactly one such request, it is taken without the
    # parser (a byte comparison, the length's digits, a slice); anything else is parsed.
    def _learn_head(self, data):
        """The read was exactly one request, parsed: remember its head for the next one."""
        r = self.last_req
        if r.clen < 0 or self.hdone[2] or not r.keep_alive or r.upgrade:
            return  # no length, refused, Expect: 100-continue, or the last request of the connection
        end = data.find(b"\r\n\r\n") + 4
        if end < 4 or end + r.clen != len(data):
            return
        low = data[:end].lower()
        i = low.find(b"\r\ncontent-length:")
        if i < 0 or low.find(b"\r\ncontent-length:", i + 1) >= 0:
            return
        v = i + 17
        while low[v] in b" \t":
            v += 1
        j = data.find(b"\r\n", v)
        if not data[v:j].isdigit():
            return
        self.known = (data[:v], v, data[j:end], len(data[j:end]), r.method, r.url, r.token, r.fwd,
                      r.has_av, r.http11, r.keep_alive)

    def _known_request(self, data, t):
        prefix, v, suffix, n_suffix, method, url, token, fwd, has_av, http11, keep_alive = self.known
        if not data.startswith(prefix):
            return False
        j = data.find(b"\r\n", v, v + 20)
        if j < 0 or not data[v:j].isdigit() or not data.startswith(suffix, j):
            return False
        start = j + n_suffix
        clen = len(data) - start
        if int(data[v:j]) != clen or clen > self.app.max_body:
            return False
        r = Request(t)
        r.method = method
        r.url = url
        r.token = token
        r.fwd = fwd
        r.has_av = has_av
        r.http11 = http11
        r.keep_alive = keep_alive
        r.clen = clen
        r.body = data[start:]
        self.n_complete += 1
        self.busy = True
        try:
            self.app.handle(self, r)
        except Exception:
            self.app.internal_error(self, r)
        return True

    def dialect(self, r=None):
        """The client's dialect as far as the request shows it (for protocol-level errors)."""
        if r is None:
            r = self.cur
        if r is not None:
            url = r.url
            if r.has_av:
                return "anthropic"
        else:
            url = self.urlp[0] if self.urlp else b""
        return "anthropic" if url.startswith(b"/v1/messages") else "openai"

    def timed_out(self, message):
        """A request that did not arrive in time: 408 (after the responses owed), then close."""
        self.t_rx = perf_counter()
        self._bad_request(408, message)

    def _bad_request(self, status, message, r=None):
        """Unusable input: answer after the responses already owed, then close."""
        dialect = self.dialect(r)
        self.bad = True
        self.cur = None
        self.backlog = None
        self._pause(P_BAD)
        self.app.metrics.count_request("-", status)
        if not self.busy:
            self.queue.clear()
            self._error_and_close(status, message, dialect)
        else:
            self.queue.append((status, message, dialect))

    def _error_and_close(self, status, message, dialect):
        body = error_body(dialect, status, message)
        extra = b""
        if self.app.overhead_header:
            extra = b"x-gateway-overhead-us: %d\r\n" % ((perf_counter() - self.t_rx) * 1e6)
        self.write(response(status, body, extra=extra, close=True))
        self.close_after_response()

    def on_headers_complete(self):
        r = self.cur = Request(self.t_rx)  # t0 for an early refusal and the body deadline; reset when complete
        self.hbytes = 0
        u = self.urlp
        r.url = u[0] if len(u) == 1 else b"".join(u)
        u.clear()
        p = self.parser
        h = self.hdrs
        app = self.app
        # Content-Length differs per request; the rest usually repeats on a keep-alive
        # connection, so the digest of the previous request's headers is reused when equal.
        clen = h.pop(b"content-length", None) or h.pop(b"Content-Length", None)
        if h != self.hprev:
            if len(h) > app.max_headers:
                self._bad_request(431, f"more than {app.max_headers} request header fields")
                raise HttpParserError("too many headers")
            self.hprev = dict(h)
            self.hdone = _headers(h, app.forward_policy)
        h.clear()
        r.token, r.fwd, expect, r.has_av, odd_clen, upgrade = self.hdone
        if clen is None:
            clen = odd_clen
        if clen is not None:
            r.clen = r.left = int(clen)  # llhttp already checked it is a number
        r.method = method = p.get_method()
        if len(r.url) > app.max_url:
            self._bad_request(414, f"request URL exceeds {app.max_url} bytes")
            raise HttpParserError("URL too long")
        # the version of each request, not of the connection's first
        r.http11 = v = p.get_http_version() == "1.1"
        r.keep_alive = v and p.should_keep_alive()
        if method == b"CONNECT" or (upgrade and p.should_upgrade()):
            r.upgrade = True  # refused once the message is complete (llhttp stops there)
        elif r.clen > app.max_body:
            # refuse now (after the responses owed) rather than read a body we will not use
            self._bad_request(413, f"request body exceeds {app.max_body} bytes")
            raise HttpParserError("body too large")
        elif expect and not self.busy:
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_message_complete(self):
        r = self.cur
        self.cur = None
        self.between.append(True)
        if self.final or self.bad:
            return
        self.n_complete += 1
        self.last_req = r
        r.t0 = self.t_rx  # Sluice's clock for this request starts with the read that completed it
        if self.hdrs:
            self.hdrs.clear()  # trailer fields of a chunked body: not forwarded
        parts = self.bodyp
        if r.pieces is not None:
            r.body = b"".join(r.pieces + parts) if parts else b"".join(r.pieces)
            r.pieces = None
        elif not parts:
            r.body = b""
        else:
            r.body = parts[0] if len(parts) == 1 else b"".join(parts)
        parts.clear()
        if r.upgrade:
            if r.method == b"CONNECT":
                self._bad_request(405, "CONNECT is not supported", r)
            else:
                self._bad_request(400, "protocol upgrades are not supported", r)
            return
        if len(r.body) > self.app.max_body:
            self._bad_request(413, f"request body exceeds {self.app.max_body} bytes", r)
            return
        if not r.keep_alive:
            # the connection ends with this request: nothing after it is read or answered
            self.final = True
            self._pause(P_FINAL)
        self.burst += 1
        if self.burst >= self.app.max_pipelined and not self.final:
            # a burst of pipelined requests in one read: give other connections their turn
            self._pause(P_BURST)
            self.app.loop.call_soon(self._unburst)
        if self.busy or self.queue:
            self.queue.append(r)
            if len(self.queue) >= self.app.max_pipelined:
                self._pause(P_QUEUE)
            if not self.busy and not self.in_next:
                self._next()
        else:
            self.busy = True
            try:
                self.app.handle(self, r)
            except Exception:
                self.app.internal_error(self, r)

    def _next(self):
        self.in_next = True
        try:
            queue = self.queue
            while queue and not self.busy and not self.closed:
                r = queue.popleft()
                if type(r) is tuple:  # a refusal queued behind earlier requests
                    self._error_and_close(*r)
                    return
                self.busy = True
                t = perf_counter()
                if r.t0 < t:
                    r.t0 = t  # time spent queued behind earlier responses is not ours
                try:
                    self.app.handle(self, r)
                except Exception:
                    self.app.internal_error(self, r)
            if len(queue) < self.app.max_pipelined:
                self._resume(P_QUEUE)
        finally:
            self.in_next = False

    # ------------------------------------------------------------ responses
    def respond(self, r, status, body, extra=b"", content_type=b"application/json", overhead_us=None):
        """A response produced by Sluice itself (no provider involved)."""
        keep = r.keep_alive and not self.app.stopping and not self.bad
        if overhead_us is None:
            overhead_us = (perf_counter() - r.t0) * 1e6
        r.overhead = overhead_us
        if self.app.overhead_header:
            extra += b"x-gateway-overhead-us: %d\r\n" % overhead_us
        data = response(status, body, content_type, extra, close=not keep)
        if r.method == b"HEAD":  # the head a GET would get, without its body
            data = data[:len(data) - len(body)]
        self.write(data)
        self.done(keep)

    def done(self, keep_alive):
        """The current response is fully written."""
        self.busy = False
        self.last = perf_counter()  # the keep-alive idle time starts now
        self.req = None
        self.up = None
        if self.rpause & 2:  # P_UPSTREAM
            self._resume(2)
        if not keep_alive:
            self.close_after_response()
            return
        if self.eof and not self.queue:
            self.close()
            return
        if self.queue and not self.in_next:
            self._next()

    def exchange_done(self, req, status, prompt, completion):
        self.up = None
        self.app.request_finished(self, req, status, prompt, completion)
        self.done(req.keep_alive)

    def upstream_failed(self, status, message, kind=""):
        req = self.req
        self.waiting = None
        self.up = None
        if req is None or self.closed:
            return
        if req.dep is not None and kind:
            delay = on_failure(self.app, req, kind, -1.0, perf_counter())
            if delay >= 0:
                req.rs.delay = delay
                self.resend(req)
                return
        # our own time only: the request path before waiting on the provider
        us = req.pre * 1e6
        self.respond(req, status, error_body(req.dialect, status, message), overhead_us=us)
        self.app.request_finished(self, req, status, None, None)

    def abort_response(self, req, status):
        """The response head is out but the provider failed: the client must see a broken response."""
        self.up = None
        self.app.request_finished(self, req, status, None, None)
        self.req = None
        self.busy = False
        self.close()

    def on_upstream(self, conn):
        """The pool has a connection for the request we were waiting with."""
        self.waiting = None
        req = self.req
        self.up = conn
        req.t_resume = perf_counter()
        conn.start(self, req, req.payload)

    def resend(self, req):
        """Another attempt for ``req`` (resilience), after ``req.rs.delay`` seconds."""
        self.up = None
        delay = req.rs.delay
        if delay > 0:
            self.app.loop.call_later(delay, self._resend, req)
        else:
            self._resend(req)

    def _resend(self, req):
        if self.closed or self.req is not req:
            return  # the client went away meanwhile (its request was accounted for then)
        pool = req.dep.provider.pool
        now = perf_counter()
        req.t_resume = now
        up = pool.acquire()
        if up is not None:
            self.up = up
            up.start(self, req, req.payload)
        else:
            self.waiting = pool
            self.wait_since = now
            pool.wait(self)

    def retry_upstream(self, req):
        self.up = None
        pool = (req.dep.provider if req.dep is not None else req.route.provider).pool
        self.waiting = pool
        self.wait_since = perf_counter()
        req.t_resume = self.wait_since
        pool.waiters.append(self)
        pool.connect()


class AccessLog:
    """Access log lines kept in memory and written in batches (never a write per request)."""

    def __init__(self, target):
        self.entries = []
        if target == "-":
            self.fd = sys.stderr.fileno()
            self.owned = False
        else:
            self.fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self.owned = True

    def flush(self):
        entries = self.entries
        if not entries:
            return
        self.entries = []
        out = []
        for ts, peer, method, path, status, model, key, dur, ov, stream, attempts, fallback in entries:
            out.append(dumps({
                "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + (".%03dZ" % int(ts % 1 * 1000)),
                "client": peer, "method": method, "path": path, "status": status, "model": model,
                "key": key, "duration_ms": round(dur * 1000, 3), "overhead_us": int(ov),
                "stream": stream, "attempts": attempts, "fallback": fallback}))
            out.append(b"\n")
        data = b"".join(out)
        try:
            while data:
                n = os.write(self.fd, data)
                data = data[n:]
        except OSError:
            pass

    def close(self):
        self.flush()
        if self.owned:
            os.close(self.fd)


class App:
    """Everything one worker process serves with."""

    def __init__(self, cfg, loop, shared, worker=0, n_workers=1, children=None):
        self.cfg = cfg
        self.loop = loop
        self.worker = worker
        self.n_workers = n_workers
        self.shared = shared
        s = cfg.server
        self.max_body = s.max_body_bytes
        self.max_pipelined = s.max_pipelined
        self.max_url = s.max_url_bytes
        self.max_head = s.max_header_bytes
        self.max_headers = s.max_headers
        self.max_clients = s.max_client_connections
        self.header_timeout = s.client_header_timeout_s
        self.body_timeout = s.client_body_timeout_s
        self.metrics_token = s.metrics_token.encode() or None
        self.forward_policy = HeaderPolicy(s.forward_request_headers)
        self.validate_json = s.validate_json
        self.overhead_header = s.overhead_header
        self.require_auth = s.require_auth
        self.metrics_on = s.metrics
        self.debug_on = s.debug_endpoints
        self.idle_timeout = s.client_idle_timeout_s
        self.metrics = Metrics()
        self.clients = set()
        self.stopping = False
        self.server = None
        self.children = children  # Supervisor in the parent process, None elsewhere
        self.parent_pid = None
        self.access = AccessLog(s.access_log) if s.access_log else None
        self.response_filter = response_filter(s.forward_response_headers)
        self.providers = {n: Provider(p, self) for n, p in cfg.providers.items()}
        self.routes = {}
        self.retry_budget = cfg.retry_budget
        self.policies = []
        by_model = {}
        fallback_targets = {f for m in cfg.models.values() for f in m.fallbacks}
        for m in cfg.models.values():
            route = Route(m, self.providers[m.provider])
            if m.resilient or m.name in fallback_targets:
                targets = []
                for d in m.deployments:
                    t = Route(m, self.providers[d.provider])
                    t.upstream = d.upstream_model
                    t.upstream_b = t.upstream.encode()
                    targets.append(t)
                route.resil = Policy(m, targets)
                self.policies.append(route.resil)
            by_model[m.name] = route
            for name in [m.name] + m.aliases:
                self.routes[name] = route
        for m in cfg.models.values():
            if m.fallbacks:
                by_model[m.name].resil.fallbacks = [by_model[f] for f in m.fallbacks]
        self.keys = KeyStore(cfg.keys, shared, worker, n_workers)
        for rec in self.keys.records:  # model names and aliases each key may call
            rec.allowed = frozenset(n for n, r in self.routes.items() if rec.allows(n, r.name))
        self.models_openai = dumps({"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": r.provider.name}
            for name, r in self.routes.items()]})
        self.models_anthropic = dumps({"data": [
            {"type": "model", "id": name, "display_name": name, "created_at": "1970-01-01T00:00:00Z"}
            for name in self.routes], "has_more": False,
            "first_id": next(iter(self.routes)), "last_id": list(self.routes)[-1]})
        self.health = dumps({"status": "ok", "version": __version__})
        self._last_slow = 0.0
        self._last_flush = 0.0
        self.access_flush_s = s.access_log_flush_s
        self._snap_changes = -1

    # ------------------------------------------------------------ routing
    def handle(self, conn, r):
        conn.req = r
        url = r.url
        q = url.find(b"?")
        path = url if q < 0 else url[:q]
        if path == b"/v1/chat/completions":
            r.dialect = "openai"
            if r.method != b"POST":
                return conn.respond(r, 405, error_body("openai", 405, "use POST"), b"allow: POST\r\n")
            return self.chat(conn, r)
        if path == b"/v1/messages":
            r.dialect = "anthropic"
            if r.method != b"POST":
                return conn.respond(r, 405, error_body("anthropic", 405, "use POST"), b"allow: POST\r\n")
            return self.chat(conn, r)
        dialect = "anthropic" if r.has_av else "openai"
        if r.method != b"GET":
            if path in (b"/health", b"/metrics", b"/v1/models", b"/debug/state"):
                return conn.respond(r, 405, error_body(dialect, 405, "use GET"), b"allow: GET\r\n")
            return conn.respond(r, 404, error_body(dialect, 404, f"no route for {path.decode('latin-1')}"))
        if path == b"/health":
            return conn.respond(r, 200, self.health)
        if path == b"/v1/models":
            if self.require_auth and self.keys.lookup(r.token or b"") is None:
                return conn.respond(r, 401, error_body(dialect, 401, "missing or invalid API key"))
            return conn.respond(r, 200, self.models_anthropic if r.has_av else self.models_openai)
        if path == b"/metrics" and self.metrics_on:
            if self.metrics_token is not None and r.token != self.metrics_token:
                return conn.respond(r, 401, error_body(dialect, 401, "/metrics needs its bearer token"))
            return conn.respond(r, 200, self.render_metrics(), content_type=b"text/plain; version=0.0.4")
        if path == b"/debug/state" and self.debug_on:
            return conn.respond(r, 200, dumps(self.debug_state()))
        return conn.respond(r, 404, error_body(dialect, 404, f"no route for {path.decode('latin-1')}"))

    def internal_error(self, conn, r):
        """A bug met while handling ``r``: a 500 in the client's dialect (or, once a response head
        went out, a closed connection), counted, the reservation and the in-flight count released."""
        import traceback
        sys.stderr.write("sluice: internal error while handling a request:\n")
        traceback.print_exc(file=sys.stderr)
        if conn.req is not r:
            return  # that request was already answered; what failed came after it
        up = conn.up
        head_sent = False
        if up is not None:
            conn.up = None
            head_sent = up.client_head_sent
            up.client = None
            up.req = None
            up.abort()
            up.pool.discard(up)
        if conn.waiting is not None:
            conn.waiting.forget(conn)
            conn.waiting = None
        r.keep_alive = False
        if r.payload is not None:
            self.request_finished(conn, r, 500, None, None)
        else:
            self.metrics.count_request(r.model_label, 500)
            if r.reserved:
                self.keys.settle(r.key, r.reserved, 0)
                r.reserved = 0
        if head_sent or conn.closed:
            conn.req = None
            conn.busy = False
            conn.close()
            return
        try:
            conn.respond(r, 500, error_body(r.dialect, 500, "internal error"))
        except Exception:
            conn.close()

    def _reject(self, conn, r, status, message, extra=b""):
        """Refused by Sluice before any provider was involved."""
        m = self.metrics
        m.count_request(r.model_label, status)
        conn.respond(r, status, error_body(r.dialect, status, message), extra)
        m.overhead.observe(r.overhead / 1e6)

    def chat(self, conn, r):
        dialect = r.dialect
        key = None
        token = r.token
        if token is not None or self.require_auth:
            key = self.keys.lookup(token) if token else None
            if key is None and (self.require_auth or token):
                return self._reject(conn, r, 401, "missing API key" if not token else "invalid API key")
        body = r.body
        obj = None
        span = None
        if not self.validate_json:
            m = _FIRST_MODEL.match(body)
            # only a model key that occurs once: with a repeated one, the body is parsed
            if m is not None and body.find(b'"model"', m.end()) < 0:
                try:
                    model = m.group(1).decode()
                    span = m.span(1)
                except UnicodeDecodeError:
                    return self._reject(conn, r, 400, "model: not valid UTF-8")
        if span is None:
            try:
                obj = loads(body)
            except JSONDecodeError as e:
                return self._reject(conn, r, 400, f"request body is not valid JSON: {e}")
            if type(obj) is not dict:
                return self._reject(conn, r, 400, "request body must be a JSON object")
            model = obj.get("model")
            if type(model) is not str or not model:
                return self._reject(conn, r, 400, "model: a model name (string) is required")
        route = self.routes.get(model)
        if route is None:
            return self._reject(conn, r, 404, f"model {model[:200]!r} not found")
        r.route = route
        r.model_label = route.name
        r.client_model = model
        if key is not None:
            if model not in key.allowed:
                return self._reject(conn, r, 403, f"key {key.name!r} may not use model {model!r}")
            if key.rpm:
                wait = self.keys.take_request(key, r.t0)
                if wait:
                    return self._reject(conn, r, 429, f"rate limit of {key.rpm} requests per minute "
                                                      f"exceeded for key {key.name!r}",
                                        b"retry-after: %d\r\n" % wait)
        tgt = route
        if route.resil is not None:
            dep = route.resil.pick(r.t0)
            r.dep = dep
            tgt = dep.target
        provider = tgt.provider
        if provider.dialect != dialect:
            from sluice import translate  # loaded on first use: workers that never translate stay smaller
            if obj is None:
                obj = loads(body)
            try:
                body = self._translated(r, tgt, obj)
            except (translate.TranslationError, TypeError, ValueError, AttributeError, RecursionError) as e:
                return self._reject(conn, r, 400, f"cannot translate request: {e}")
        elif tgt.upstream != model:
            body = self._patch_model(body, obj, model, span, tgt)
            if body is None:
                return self._reject(conn, r, 400, "request body is nested too deeply to rewrite its model")
        r.key = key
        if key is not None and key.budget:
            mt = None
            if obj is None:
                m = _MAX_TOKENS.search(body)
                if m is not None and _MAX_TOKENS.search(body, m.end()) is None:
                    mt = int(m.group(1))
                elif m is not None:  # a repeated key: read it as the provider's parser would
                    obj = loads(body)
            if obj is not None:
                mt = obj.get("max_completion_tokens") or obj.get("max_tokens")
            if type(mt) is not int or mt <= 0:
                mt = tgt.max_output
            estimate = len(r.body) // 4 + (mt if mt < MAX_TOKENS_RESERVED else MAX_TOKENS_RESERVED)
            wait = self.keys.reserve(key, estimate)
            if wait:
                return self._reject(conn, r, 429, f"token budget of key {key.name!r} exhausted",
                                    b"retry-after: %d\r\n" % wait)
            r.reserved = estimate
        payload = self._payload(r, provider, body)
        self.metrics.in_flight += 1
        r.payload = payload  # kept for another attempt
        if TEST_CPU_BURN_S:
            _burn_cpu(TEST_CPU_BURN_S)
        if TEST_DELAY_S:
            self.loop.call_later(TEST_DELAY_S, self._send_upstream, conn, r, provider.pool)
        else:
            self._send_upstream(conn, r, provider.pool)

    def _payload(self, r, provider, body):
        """The request as sent to ``provider`` (kept for another attempt)."""
        fwd = r.fwd
        if r.translate:
            fwd = b"".join([ln + b"\r\n" for ln in fwd.split(b"\r\n")[:-1]
                            if not ln.lower().startswith((b"anthropic-", b"content-type:"))])
            fwd += b"content-type: application/json\r\n"
            if provider.dialect == "anthropic":
                fwd += provider.anthropic_version
        elif not r.has_av and provider.dialect == "anthropic":
            fwd += provider.anthropic_version
        return b"".join((provider.head_prefix, fwd, b"content-length: %d\r\n\r\n" % len(body), body))

    def _translated(self, r, tgt, obj):
        """The request body in ``tgt``'s provider dialect; ``r`` learns how to translate the
        answer back. Raises what the translation refuses."""
        from sluice import translate  # loaded on first use: workers that never translate stay smaller
        if r.dialect == "anthropic":
            new, r.stream = translate.anthropic_request_to_openai(obj, tgt.upstream)
            r.translate = 1
        else:
            new, r.stream, r.include_usage = translate.openai_request_to_anthropic(
                obj, tgt.upstream, tgt.max_output)
            r.translate = 2
        return dumps(new)

    def retarget(self, r, tgt):
        """Make ``r`` ready for another attempt at ``tgt`` (a deployment's Route): its body
        translated or its model patched for that provider. False when it cannot be."""
        provider = tgt.provider
        dialect = r.dialect
        body = r.body
        model = r.client_model
        r.translate = 0
        r.include_usage = False
        r.stream = False
        try:
            if provider.dialect != dialect:
                body = self._translated(r, tgt, loads(body))
            elif tgt.upstream != model:
                body = self._patch_model(body, loads(body), model, None, tgt)
                if body is None:
                    return False
        except Exception:  # what the first attempt's checks let through but this target refuses
            return False
        r.payload = self._payload(r, provider, body)
        return True

    def _send_upstream(self, conn, r, pool):
        up = pool.acquire()
        if up is not None:
            r.t_resume = r.t0
            conn.up = up
            up.start(conn, r, r.payload)
        else:
            t = perf_counter()
            r.pre = t - r.t0
            conn.waiting = pool
            conn.wait_since = t
            pool.wait(conn)

    def _patch_model(self, body, obj, model, span, route):
        """Replace only the model value's bytes; re-serialize only if it cannot be located safely."""
        if span is None:
            mb = model.encode()
            m = _FIRST_MODEL.match(body)
            if m is not None and m.group(1) == mb:
                span = m.span(1)
            else:
                found = [m for m in _ANY_MODEL.finditer(body) if m.group(1) == mb]
                if len(found) == 1 and body.count(b'"model"') == 1:
                    span = found[0].span(1)
                else:
                    obj["model"] = route.upstream
                    try:
                        return dumps(obj)
                    except orjson.JSONEncodeError:  # deeper than orjson serializes
                        return None
        s, e = span
        return body[:s] + route.upstream_b + body[e:]

    # ------------------------------------------------------------ accounting
    def request_finished(self, conn, req, status, prompt, completion):
        """Every chat request that was sent towards a provider ends here exactly once."""
        m = self.metrics
        m.in_flight -= 1
        m.count_request(req.model_label, status)
        rs = req.rs
        if rs is not None and rs.budgeted:
            rs.budgeted = False
            m.retries_in_flight -= 1
        if req.overhead:
            m.overhead.observe(req.overhead / 1e6)
        key = req.key
        if key is not None and req.reserved:
            if prompt is None:
                prompt = len(req.body) // 4
                completion = 0 if status >= 400 else max(0, req.reserved - prompt)
            self.keys.settle(key, req.reserved, prompt + completion)
            req.reserved = 0
            key.prompt_tokens += prompt
            key.completion_tokens += completion
        elif key is not None and prompt is not None:
            key.prompt_tokens += prompt
            key.completion_tokens += completion
        if self.access is not None:
            now = time.time()
            self.access.entries.append((
                now, conn.peer, req.method.decode(), req.url.decode("latin-1"), status, req.model_label,
                key.name if key is not None else "-", perf_counter() - req.t0, req.overhead, req.stream,
                rs.attempts if rs is not None else 1, rs.fallback if rs is not None else None))
            if len(self.access.entries) >= 4096:
                self.access.flush()

    # ------------------------------------------------------------ introspection
    def gauges(self):
        g = {
            "sluice_client_connections": [[[], len(self.clients)]],
            "sluice_asyncio_tasks": [[[], len(asyncio.all_tasks(self.loop))]],
            "sluice_workers": [[[], 1]],
            "sluice_resident_memory_bytes": [[[], _rss()]],
        }
        conns = []
        for name, p in self.providers.items():
            idle, busy, connecting = p.pool.counts()
            conns += [[["provider", name, "state", "idle"], idle], [["provider", name, "state", "busy"], busy],
                      [["provider", name, "state", "connecting"], connecting]]
        g["sluice_upstream_connections"] = conns
        if self.policies:
            now = perf_counter()
            g["sluice_ejected_deployments"] = [
                [["model", pol.name, "provider", d.name], 1 if d.ejected_until > now else 0]
                for pol in self.policies if pol.single is None for d in pol.deps]
        if self.n_workers == 1 or self.worker == 0:
            res, spent = [], []
            for rec in self.keys.records:
                if rec.budget:
                    s, rv = self.keys.budget_state(rec)
                    spent.append([["key", rec.name], s])
                    res.append([["key", rec.name], rv])
            if res:
                g["sluice_key_tokens_reserved"] = res
                g["sluice_key_tokens_spent"] = spent
        return g

    def _sync_tokens(self):
        """Token counts are kept on the key records (cheaper per request); metrics read them here."""
        t = self.metrics.tokens
        for rec in self.keys.records:
            if rec.prompt_tokens or rec.completion_tokens:
                t[(rec.name, "prompt")] = rec.prompt_tokens
                t[(rec.name, "completion")] = rec.completion_tokens

    def render_metrics(self):
        self._sync_tokens()
        live = self.gauges()
        if self.n_workers > 1:
            snaps = []
            for w in range(self.n_workers):
                if w == self.worker:
                    continue
                data = self.shared.read_snapshot(w)
                if data:
                    try:
                        snaps.append(loads(data))
                    except JSONDecodeError:
                        pass
            m, gauges = Metrics.merged(self.metrics, live, [s for s in snaps if type(s) is dict and "requests" in s])
        else:
            m, gauges = Metrics.merged(self.metrics, live, [])
        return render(m, gauges)

    def debug_state(self):
        up = {}
        for name, p in self.providers.items():
            idle, busy, connecting = p.pool.counts()
            up[name] = {"idle": idle, "busy": busy, "connecting": connecting,
                        "waiters": len(p.pool.waiters), "connect_tasks": len(p.pool.tasks)}
        return {"pid": os.getpid(), "worker": self.worker, "workers": self.n_workers,
                "in_flight": self.metrics.in_flight, "client_connections": len(self.clients),
                "busy_clients": sum(1 for c in self.clients if c.busy),
                "tasks": len(asyncio.all_tasks(self.loop)), "upstream": up,
                "requests": sum(self.metrics.requests.values()),
                "client_disconnects": self.metrics.client_disconnects}

    # ------------------------------------------------------------ housekeeping
    def start(self, sock):
        self.server = self.loop.run_until_complete(self.loop.create_server(
            lambda: ClientConn(self), sock=sock, backlog=self.cfg.server.backlog))
        self.loop.call_later(TICK, self._tick)

    def _tick(self):
        now = perf_counter()
        for p in self.providers.values():
            p.pool.sweep(now)
        if now - self._last_slow >= 1.0:
            self._last_slow = now
            self._slow_tick(now)
        if self.access is not None and now - self._last_flush >= self.access_flush_s:
            self._last_flush = now
            self.access.flush()
        if not self._done_stopping(now):
            self.loop.call_later(TICK, self._tick)

    def _slow_tick(self, now):
        limit = now - self.idle_timeout
        head_limit = now - self.header_timeout
        body_limit = now - self.body_timeout
        for c in list(self.clients):
            if c.closed or c.bad:
                continue
            r = c.cur
            if r is not None:  # a body arriving: the whole body has a deadline
                if r.t0 < body_limit:
                    c.timed_out(f"request body not received within {self.body_timeout:g}s")
                    continue
            elif c.hbytes and not c.final:  # a head arriving: so has the whole head
                if c.t_begin < head_limit:
                    c.timed_out(f"request head not received within {self.header_timeout:g}s")
                    continue
            if not c.busy and not c.queue and c.last < limit:
                if r is not None or c.hbytes:  # a request stopped half-way
                    c.timed_out("request not completed in time")
                else:
                    c.close()
        self.keys.return_leases()
        self._sync_tokens()
        if self.n_workers > 1 and self.metrics.changes != self._snap_changes:
            self._snap_changes = self.metrics.changes
            self.shared.write_snapshot(self.worker, self.metrics.snapshot(self.gauges()))
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            self.stop()  # the supervisor is gone: do not outlive it
        if self.children is not None:
            self.children.check()

    def stop(self):
        """Graceful stop: no new connections, finish what is in flight (bounded by shutdown_grace_s)."""
        if self.stopping:
            return
        self.stopping = True
        self.stop_deadline = perf_counter() + self.cfg.server.shutdown_grace_s
        if self.children is not None:
            self.children.terminate()
        if self.server is not None:
            self.server.close()
        for c in list(self.clients):
            if not c.busy and not c.queue:
                c.close()

    def _done_stopping(self, now):
        if not self.stopping:
            return False
        busy = any(c.busy for c in self.clients)
        if busy and now < self.stop_deadline:
            return False
        if self.children is not None and not self.children.all_exited() and now < self.stop_deadline + 2:
            return False
        for c in list(self.clients):
            c.close()
        for p in self.providers.values():
            p.pool.close()
        if self.access is not None:
            self.access.close()
            self.access = None
        if self.n_workers > 1:
            self.shared.clear_snapshot(self.worker)
        self.loop.call_later(0.05, self.loop.stop)
        return True


def _linger(transport, loop):
    """Half-close after a last response, then drop what the client still sends until it closes
    or LINGER_S passes (as nginx's lingering close): closing with unread bytes would send a
    reset, and the client could lose the response."""
    if not transport.can_write_eof():
        transport.close()
        return
    try:
        transport.write_eof()
    except (OSError, RuntimeError):
        transport.close()
        return
    loop.call_later(LINGER_S, transport.close)


def _rss():
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def install_signals(loop, app):
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, app.stop)
