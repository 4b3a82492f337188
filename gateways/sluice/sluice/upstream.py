"""Providers, their keep-alive connection pools, and the upstream side of an exchange.

An UpstreamConn is an asyncio Protocol with an httptools response parser. It is
driven by callbacks only: the client connection hands it a request (``start``),
and its ``data_received`` relays the response to the client. In the common
same-dialect case the provider's bytes are written to the client as they
arrive (chunked framing included); only the response head is rebuilt, to add
X-Gateway-Overhead-Us. Translation and re-framing use the parser's body
callbacks instead.
"""
import asyncio
import re
from functools import partial
from time import perf_counter

import orjson
from httptools import HttpParserError, HttpResponseParser

from sluice.http import error_body, response
from sluice.resilience import classify, on_failure, parse_retry_after

# exchange modes
RAW = 0       # same dialect: upstream bytes go straight to the client
REFRAME = 1   # same dialect, but the body must be re-framed (close-delimited upstream, HTTP/1.0 client)
BUFFER = 2    # translated unary response, or a translated error: whole body, then one write
TSTREAM = 3   # translated SSE stream, event by event
DISCARD = 4   # a failed attempt that another attempt replaces: the body is read and dropped

# at most 12 digits: a larger count is not believed (the estimate is charged instead)
_USAGE = re.compile(rb'"(prompt_tokens|completion_tokens|input_tokens|output_tokens)"\s*:\s*(\d{1,12})(?!\d)')
MAX_HEAD = 64 * 1024
MAX_BUFFERED_BODY = 64 * 1024 * 1024
# A request that fails on a reused connection before any byte came back is retried once, fresh,
# only if the provider closed within this time of the send: the race with a provider closing an
# idle connection. A later close may mean the provider had the request, so it is not sent twice.
STALE_RETRY_S = 1.0
MAX_USAGE = 10 ** 12


def _believed(prompt, completion):
    """Usage as a provider reported it, or (None, None) when it cannot be true (not a number,
    negative, huge): the request is then charged the estimate."""
    if (type(prompt) is int and type(completion) is int
            and 0 <= prompt <= MAX_USAGE and 0 <= completion <= MAX_USAGE):
        return prompt, completion
    return None, None


def _clen(head, i):
    """The Content-Length value of the header line at ``i`` (llhttp checked it is a number)."""
    return int(head[head.find(b":", i) + 1:head.find(b"\r", i)])


def _chunked_end(buf):
    """The end of a chunked body starting at ``buf[0]`` when it ends in ``buf``, else -1."""
    pos = 0
    n = len(buf)
    while pos < n:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return -1
        try:
            size = int(buf[pos:eol].split(b";", 1)[0], 16)
        except ValueError:
            return -1  # llhttp reports it
        if size == 0:
            if buf.startswith(b"\r\n", eol + 2):
                return eol + 4
            end = buf.find(b"\r\n\r\n", eol)
            return -1 if end < 0 else end + 4
        pos = eol + 2 + size + 2
    return -1


def _log_callback_error(e):
    """A bug in our own callback surfaces as a parser error: make it visible."""
    cause = e.__context__
    if cause is not None and not isinstance(cause, HttpParserError):
        import sys
        import traceback
        sys.stderr.write("sluice: error in upstream response handling:\n")
        traceback.print_exception(cause, file=sys.stderr)


_last_connect_log = {}


def _log_connect_error(provider, error):
    """At most one line a second per provider."""
    import sys
    import time
    now = time.monotonic()
    if now - _last_connect_log.get(provider.name, -2.0) >= 1.0:
        _last_connect_log[provider.name] = now
        sys.stderr.write(f"sluice: cannot connect to provider {provider.name}: {error}\n")


def _closes(low, i):
    """Whether the Connection header at ``i`` of a lowercased head says close."""
    return low.find(b"close", i, low.find(b"\n", i + 1)) >= 0


def _drop_lines(head, low, drop_re, m):
    """``head`` without the lines ``drop_re`` finds in its lowercased copy ``low``."""
    out = []
    pos = 0
    while m is not None:
        out.append(head[pos:m.start()])
        pos = m.end()
        m = drop_re.search(low, pos)
    out.append(head[pos:])
    return b"".join(out)


class Provider:
    def __init__(self, cfg, app):
        self.cfg = cfg
        self.name = cfg.name
        self.drop_re = app.response_filter
        self.dialect = cfg.dialect
        self.host = cfg.host
        self.port = cfg.port
        self.ssl = None
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


class Pool:
    """Keep-alive connections to one provider: an idle stack, a busy set, waiters."""

    def __init__(self, provider, app):
        self.provider = provider
        self.app = app
        self.loop = app.loop
        self.max = provider.cfg.max_connections
        self.idle = []       # LIFO: the most recently used connection is reused first
        self.busy = set()
        self.connecting = 0
        self.waiters = []    # client connections waiting for a connection, FIFO
        self.tasks = set()

    def counts(self):
        return len(self.idle), len(self.busy), self.connecting

    def acquire(self):
        idle = self.idle
        while idle:
            c = idle.pop()
            if c.alive:
                self.busy.add(c)
                c.reused = True
                return c
        return None

    def wait(self, client):
        """``client`` needs a connection; it gets ``on_upstream(conn)`` or ``upstream_failed``."""
        self.waiters.append(client)
        if len(self.busy) + len(self.idle) + self.connecting < self.max:
            self.connect()

    def forget(self, client):
        try:
            self.waiters.remove(client)
        except ValueError:
            pass

    def connect(self):
        self.connecting += 1
        task = self.loop.create_task(self._connect())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _connect(self):
        p = self.provider
        conn = UpstreamConn(self)
        kind = None
        error = ""
        try:
            await asyncio.wait_for(self.loop.create_connection(
                lambda: conn, p.host, p.port, ssl=p.ssl,
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
        app = self.app
        if kind is not None:
            app.metrics.upstream_error(p.name, kind)
            while self.waiters:
                client = self.waiters.pop(0)
                if client.waiting is self:
                    if kind == "connect_timeout":
                        client.upstream_failed(504, f"provider {p.name} did not accept a connection "
                                                    f"within {p.connect_timeout:g}s", "connect")
                    elif kind == "connect_refused":
                        client.upstream_failed(502, f"provider {p.name} refused the connection", "connect")
                    else:  # the cause (addresses included) is for the log, not for clients
                        _log_connect_error(p, error)
                        client.upstream_failed(502, f"cannot connect to provider {p.name}", "connect")
                    break
            return
        c = app.metrics.upstream_connects
        c[p.name] = c.get(p.name, 0) + 1
        self.give(conn)

    def give(self, conn):
        """A free connection: hand it to the oldest live waiter, or park it idle."""
        if not conn.alive:
            self.discard(conn)
            return
        if conn.paused:  # paused for a slow client that is gone now
            conn.paused = False
            conn.transport.resume_reading()
        waiters = self.waiters
        while waiters:
            client = waiters.pop(0)
            if client.waiting is self:
                self.busy.add(conn)
                try:
                    client.on_upstream(conn)
                except Exception:
                    import traceback
                    traceback.print_exc()
                    conn.client = None
                    conn.abort()
                    self.discard(conn)
                    client.upstream_failed(500, "internal error while sending the request")
                return
        conn.idle_since = perf_counter()
        self.idle.append(conn)

    def release(self, conn):
        self.busy.discard(conn)
        self.give(conn)

    def discard(self, conn):
        self.busy.discard(conn)
        if conn in self.idle:
            self.idle.remove(conn)
        if self.waiters and len(self.busy) + len(self.idle) + self.connecting < self.max:
            self.connect()

    def sweep(self, now):
        p = self.provider
        for conn in list(self.busy):
            conn.check_timeout(now)
        idle = self.idle
        limit = now - p.pool_idle_timeout
        while idle and idle[0].idle_since < limit:
            idle.pop(0).close()
        if self.waiters:
            limit = now - p.response_timeout
            for client in list(self.waiters):
                if client.wait_since < limit and client.waiting is self:
                    self.waiters.remove(client)
                    self.app.metrics.upstream_error(p.name, "pool_timeout")
                    client.upstream_failed(504, f"no connection to provider {p.name} became free "
                                                f"within {p.response_timeout:g}s")

    def close(self):
        for conn in self.idle + list(self.busy):
            conn.close()
        for t in list(self.tasks):
            t.cancel()


class UpstreamConn:  # an asyncio protocol (uvloop needs only the methods)
    __slots__ = (
        "pool", "provider", "app", "transport", "parser", "alive", "paused", "reused", "idle_since",
        "client", "req", "mode", "head_done", "open", "on_message_complete", "cur", "pre", "hoff", "t_rx", "t_sent",
        "t_head", "last_rx", "nbytes", "status", "stream", "chunked_out", "close_delimited",
        "parts", "parts_len", "sse", "translator", "scan", "usage", "frames", "tail", "client_head_sent",
        "broken", "retry_after", "on_body", "bodyp", "on_message_begin", "begins", "left", "hout",
    )

    def __init__(self, pool):
        self.pool = pool
        self.provider = pool.provider
        self.app = pool.app
        self.transport = None
        # body pieces are collected by a C-level callback and handled after each feed
        # (in the common relay mode they are simply dropped: the raw bytes went out already)
        self.bodyp = []
        self.on_body = self.bodyp.append
        # ``open`` is emptied by llhttp (a C-level call) when a response is complete
        self.open = [True]
        self.on_message_complete = self.open.clear
        # one entry per response begun: a second one means bytes followed the response's end
        self.begins = []
        self.on_message_begin = partial(self.begins.append, True)
        self.hout = None
        self.parser = HttpResponseParser(self)
        self.alive = False
        self.paused = False
        self.reused = False
        self.idle_since = 0.0
        self.client = None
        self.req = None
        self.broken = False

    # ------------------------------------------------------------ transport
    def connection_made(self, transport):
        self.transport = transport
        self.alive = True

    def connection_lost(self, exc):
        self.alive = False
        self.pool.discard(self)
        client = self.client
        if client is not None:
            self._lost_during_exchange()

    def eof_received(self):
        return None  # the transport closes, connection_lost follows

    def pause_writing(self):
        c = self.client
        if c is not None:
            c.pause_reading_for_upstream()

    def resume_writing(self):
        c = self.client
        if c is not None:
            c.resume_reading_for_upstream()

    def close(self):
        self.alive = False
        if self.transport is not None:
            self.transport.close()

    def abort(self):
        self.alive = False
        if self.transport is not None:
            self.transport.abort()

    # ------------------------------------------------------------ exchange
    def start(self, client, req, payload):
        self.client = client
        self.req = req
        self.mode = RAW
        self.head_done = False
        if not self.open:
            self.open.append(True)
        self.pre = b""
        self.hoff = 0
        self.nbytes = 0
        self.status = 0
        self.client_head_sent = False
        self.broken = False
        self.begins.clear()
        self.scan = req.reserved > 0 and req.translate == 0
        if self.scan:
            self.usage = {}
            self.frames = 0
            self.tail = b""
        self.transport.write(payload)
        now = perf_counter()
        self.t_sent = self.last_rx = now
        req.pre += now - req.t_resume

    def check_timeout(self, now):
        if self.client is None:
            return
        p = self.provider
        if self.paused:
            # reading is paused because the client does not keep up: not the provider's fault,
            # but a client that stops reading for good must not hold the exchange forever
            if now - self.last_rx > self.app.idle_timeout:
                self.app.metrics.upstream_error(p.name, "client_too_slow")
                self._fail_midstream()
            return
        if not self.head_done or not self.client_head_sent:
            if not self.head_done and now - self.t_sent > p.response_timeout:
                self.app.metrics.upstream_error(p.name, "response_timeout")
                self._fail(504, f"provider {p.name} did not answer within {p.response_timeout:g}s", "timeout")
            elif self.head_done and now - self.last_rx > p.stream_idle_timeout:
                self.app.metrics.upstream_error(p.name, "idle_timeout")
                self._fail(504, f"provider {p.name} stalled for {p.stream_idle_timeout:g}s", "timeout")
        elif now - self.last_rx > p.stream_idle_timeout:
            self.app.metrics.upstream_error(p.name, "idle_timeout")
            self._fail_midstream()

    def data_received(self, data):
        client = self.client
        if client is None:
            # nothing was asked: a stray byte on an idle connection makes it unusable
            self.abort()
            return
        try:
            self.t_rx = self.last_rx = perf_counter()
            self.nbytes += len(data)
            parts = self.bodyp
            if self.head_done:
                left = self.left
                if left >= 0:  # Content-Length: nothing past its end is the response
                    if len(data) > left:
                        data = data[:left]
                        self.broken = True
                    self.left = left - len(data)
                after = False  # bytes that follow the response's end in this read
                try:
                    self.parser.feed_data(data)
                except HttpParserError as e:
                    if self.open:
                        _log_callback_error(e)
                        parts.clear()
                        self._fail_midstream()
                        return
                    after = True
                if not self.open and left < 0 and (after or len(self.begins) > 1):
                    # bytes after a chunked response's end, in the read that ended it: where
                    # exactly it ended is not known, so nothing of this read is relayed
                    parts.clear()
                    self.broken = True
                    self._fail_midstream()
                    return
                if self.mode == RAW:
                    if not client.closed:  # ClientConn.write, inlined: this runs once per stream frame
                        client.transport.write(data)
                    if self.scan:
                        self._scan(data)
                    parts.clear()
                else:
                    try:
                        self._bodies()
                    except HttpParserError as e:
                        _log_callback_error(e)
                        self._fail_midstream()
                        return
                if not self.open:
                    self._finish()
                return
            self.cur = data
            after = False  # bytes that follow the response's end in this read
            try:
                self.parser.feed_data(data)
            except HttpParserError as e:
                parts.clear()
                if self.head_done and not self.open:
                    after = True
                else:
                    _log_callback_error(e)
                    if self.client_head_sent:
                        self._fail_midstream()
                        return
                    self.hout = None
                    self.app.metrics.upstream_error(self.provider.name, "bad_response")
                    self._fail(502, f"provider {self.provider.name} sent an invalid HTTP response")
                    return
            if self.client is None:
                return
            if not self.head_done:
                pre = self.pre + data if self.pre else data
                pre = pre[self.hoff:]
                self.hoff = 0
                if len(pre) > MAX_HEAD:
                    self._fail(502, "provider response head too large")
                    return
                self.pre = pre
                return
            self.pre = b""
            if not self.open and len(self.begins) > 1:
                after = True
            out = self.hout
            if out is not None:
                if self.open or after:
                    if self._write_head(client, after):
                        return
                else:  # the whole response in this read, nothing after it (the common unary case)
                    self.hout = None
                    rest = out[2]
                    if self.scan and rest:
                        self._scan(rest)
                    self.client_head_sent = True
                    client.write(b"".join((out[0], out[1], b"\r\n", rest)))  # one send for head and body
            if parts:
                if self.mode == RAW:
                    parts.clear()
                elif after:
                    parts.clear()
                    self.broken = True
                    self._fail_midstream()
                    return
                else:
                    try:
                        self._bodies()
                    except HttpParserError as e:
                        _log_callback_error(e)
                        self._fail_midstream()
                        return
            if not self.open:
                self._finish()
        except Exception:  # a bug of ours must not leave the exchange hanging
            import sys
            import traceback
            sys.stderr.write("sluice: error in upstream response handling:\n")
            traceback.print_exc(file=sys.stderr)
            if self.client is not None:
                self.app.metrics.upstream_error(self.provider.name, "internal")
                if self.client_head_sent:
                    self._fail_midstream()
                else:
                    self._fail(500, "internal error")

    def _write_head(self, client, after):
        """The relayed head and the body bytes of its read, written once the read is parsed:
        nothing past the response's end goes out. True when the exchange failed instead."""
        head, extra, rest, low, cl = self.hout
        self.hout = None
        if self.open:  # the body goes on in later reads
            self.left = _clen(low, cl) - len(rest) if cl >= 0 else -1
        elif after:
            self.broken = True
            end = _clen(low, cl) if cl >= 0 else _chunked_end(rest)
            if end < 0:
                self.app.metrics.upstream_error(self.provider.name, "bad_response")
                self._fail(502, f"provider {self.provider.name} sent bytes after its response")
                return True
            rest = rest[:end]
        if self.scan and rest:
            self._scan(rest)
        self.client_head_sent = True
        client.write(b"".join((head, extra, b"\r\n", rest)))  # one send for head and body
        return False

    # -- parser callbacks --
    def on_headers_complete(self):
        if self.head_done:  # a second response head: bytes after the response's end
            raise HttpParserError("bytes after the response")
        buf = self.pre + self.cur if self.pre else self.cur
        idx = buf.find(b"\r\n\r\n", self.hoff)
        status = self.parser.get_status_code()
        if status < 200 and status != 101:
            # interim response (103 Early Hints...): skip it, the real head follows
            self.hoff = idx + 4 if idx >= 0 else len(buf)
            self.begins.clear()
            return
        if idx < 0:
            raise HttpParserError("response head without CRLF CRLF")
        if not self.open:  # emptied by an interim response that came before this head
            self.open.append(True)
        self.head_done = True
        self.status = status
        req = self.req
        app = self.app
        head = buf[self.hoff:idx + 2]
        low = head.lower()
        # bytes.find, not ``in``: CPython 3.11's bytes ``in`` first tries the operand as an int and
        # formats (then drops) a TypeError each time
        find = low.find
        self.stream = find(b"text/event-stream") >= 0
        # llhttp refuses Content-Length with Transfer-Encoding: one of them frames the body
        cl = find(b"\ncontent-length:")
        self.close_delimited = cl < 0 and find(b"\ntransfer-encoding:") < 0 and status not in (204, 304)
        # where the response ends, to relay nothing after it: Content-Length bytes left, or -1
        self.left = -1 if cl < 0 and status not in (204, 304) else 0
        # whether the provider keeps the connection (read from the head: llhttp forgets it
        # once the response is over, and asking it from a callback costs a Python call)
        connection = find(b"\nconnection:")
        self.broken = head.startswith(b"HTTP/1.0") or (connection >= 0 and _closes(low, connection))
        now = self.t_head = perf_counter()
        self.provider.latency.observe(now - self.t_sent)
        dep = req.dep
        if dep is not None:  # resilience: a failed attempt may be replaced by another one
            if status < 429:
                if dep.fails:
                    dep.fails = 0
            elif self._attempt_failed(req, status, head, low):
                if cl >= 0:
                    self.left = _clen(low, cl) - (len(buf) - idx - 4)
                self.mode = DISCARD
                self.hout = None
                return
        client = self.client
        keep = req.keep_alive and not app.stopping
        if req.translate == 0:
            # only the allowed provider headers reach the client (hop-by-hop ones never do)
            m = self.provider.drop_re.search(low)
            if m is not None:
                head = _drop_lines(head, low, self.provider.drop_re, m)
            if self.close_delimited or (not req.http11 and find(b"\ntransfer-encoding:") >= 0):
                self.mode = REFRAME
                self.chunked_out = req.http11
                if not req.http11:
                    keep = False
                head = b"\r\n".join([ln for ln in head.split(b"\r\n")
                                     if not ln.lower().startswith((b"transfer-encoding:", b"content-length:"))])
                if self.chunked_out:
                    head += b"transfer-encoding: chunked\r\n"
            else:
                self.mode = RAW
            req.keep_alive = keep
            extra = b"" if keep else b"connection: close\r\n"
            us = req.overhead = (req.pre + (now - self.t_rx)) * 1e6
            if app.overhead_header:
                extra = b"x-gateway-overhead-us: %d\r\n" % us + extra
            if self.mode == RAW:
                self.hout = (head, extra, buf[idx + 4:], low, cl)  # written once the read is parsed
            else:
                if cl >= 0:
                    self.left = _clen(low, cl) - (len(buf) - idx - 4)
                self.client_head_sent = True
                client.write(b"".join((head, extra, b"\r\n")))
            return
        # translated exchange
        if cl >= 0:
            self.left = _clen(low, cl) - (len(buf) - idx - 4)
        from sluice import translate
        if status == 200 and self.stream and req.stream:
            self.mode = TSTREAM
            self.sse = translate.SSEParser()
            if req.translate == 1:   # anthropic client, openai provider
                self.translator = translate.OpenAIToAnthropicStream(req.client_model)
            else:
                self.translator = translate.AnthropicToOpenAIStream(req.client_model, req.include_usage)
            req.keep_alive = keep
            us = (req.pre + (perf_counter() - self.t_rx)) * 1e6
            req.overhead = us
            lines = [b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"]
            if req.http11:
                lines.append(b"transfer-encoding: chunked\r\n")
                self.chunked_out = True
            else:
                self.chunked_out = False
                req.keep_alive = False
            if app.overhead_header:
                lines.append(b"x-gateway-overhead-us: %d\r\n" % us)
            lines.append(b"\r\n" if req.keep_alive else b"connection: close\r\n\r\n")
            self.client_head_sent = True
            client.write(b"".join(lines))
        else:
            self.mode = BUFFER
            self.parts = []
            self.parts_len = 0
            i = low.find(b"\nretry-after:")
            self.retry_after = head[i + 1:head.find(b"\r\n", i + 1) + 2] if i >= 0 else b""

    def _attempt_failed(self, req, status, head, low):
        """An error status: True when another attempt replaces this one (nothing of it is relayed)."""
        cls = classify(status)
        if cls is None:  # not a provider fault (a 4xx): the deployment is healthy
            if req.dep.fails:
                req.dep.fails = 0
            return False
        delay = on_failure(self.app, req, cls, parse_retry_after(head, low), self.t_head)
        if delay < 0:
            return False
        req.rs.delay = delay
        return True

    def _bodies(self):
        """Body pieces of the last feed, for the modes that do not relay raw bytes."""
        parts = self.bodyp
        if not parts:
            return
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        parts.clear()
        mode = self.mode
        if mode == DISCARD:
            return
        client = self.client
        if client is None:
            return
        if mode == TSTREAM:
            try:
                out = self.translator.feed(self.sse.feed(body))
            except Exception as e:  # a bug in translation must not leave the exchange hanging
                raise HttpParserError(f"stream translation failed: {e!r}") from e
            if out:
                client.write(b"%x\r\n%s\r\n" % (len(out), out) if self.chunked_out else out)
        elif mode == BUFFER:
            self.parts_len += len(body)
            if self.parts_len > MAX_BUFFERED_BODY:
                raise HttpParserError("provider response too large to translate")
            self.parts.append(body)
        else:  # REFRAME
            client.write(b"%x\r\n%s\r\n" % (len(body), body) if self.chunked_out else body)

    # -- usage scanning for token budgets (same-dialect relays) --
    def _scan(self, data):
        """Token counts live in "usage" objects: look only there (and across chunk edges)."""
        if self.stream:
            self.frames += data.count(b"data:")
        tail = self.tail
        if len(tail) > 8:  # the previous chunk ended inside a usage object: scan across the edge
            buf = tail + data
            i = 0
        else:
            buf = data
            i = data.find(b'"usage"')
            if i < 0 and tail and (tail + data[:8]).find(b'"usage"') >= 0:
                buf = tail + data
                i = buf.find(b'"usage"')
        if i >= 0:
            usage = self.usage
            for name, value in _USAGE.findall(buf, i):
                usage[name] = int(value)
            self.tail = buf[i:] if len(buf) - i < 4096 else b""
        else:
            self.tail = data[-8:]

    def relayed_usage(self):
        """(prompt, completion) for what the client was sent so far, or None when nothing of the
        response was: a client that leaves mid-stream pays for what it received."""
        req = self.req
        if req is None or not self.client_head_sent:
            return None
        if self.mode == TSTREAM:
            prompt, completion, _seen = self.translator.usage()
            return _believed(prompt, completion)
        if self.mode == RAW and self.scan:
            return self._raw_usage(req)
        return None

    def _raw_usage(self, req):
        u = self.usage
        if b"prompt_tokens" in u or b"completion_tokens" in u:
            return u.get(b"prompt_tokens", 0), u.get(b"completion_tokens", 0)
        if b"input_tokens" in u or b"output_tokens" in u:
            return u.get(b"input_tokens", 0), u.get(b"output_tokens", 0)
        return len(req.body) // 4, self.frames if self.stream else (self.nbytes // 4)

    # ------------------------------------------------------------ endings
    def _finish(self):
        """The provider's response is complete: final writes, accounting, connection reuse."""
        client = self.client
        req = self.req
        mode = self.mode
        if mode == DISCARD:  # a failed attempt, read to its end: the connection can be reused
            self.client = None
            self.req = None
            if self.alive and not self.broken and not self.close_delimited:
                self.pool.release(self)
            else:
                self.close()
                self.pool.discard(self)
            client.resend(req)
            return
        app = self.app
        now = self.t_rx  # the read that completed the response
        prompt = completion = None
        if mode == RAW:
            if self.scan:
                prompt, completion = self._raw_usage(req)
        elif mode == TSTREAM:
            out = self.translator.finish()
            if self.chunked_out:
                client.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(out), out) if out else b"0\r\n\r\n")
            elif out:
                client.write(out)
            prompt, completion = _believed(*self.translator.usage()[:2])
        elif mode == BUFFER:
            prompt, completion = self._write_buffered(client, req)
        else:  # REFRAME
            if self.chunked_out:
                client.write(b"0\r\n\r\n")
        if self.stream and self.client_head_sent:
            app.metrics.stream_relay.observe(now - self.t_head)
        self.client = None
        self.req = None
        if self.alive and not self.broken and not self.close_delimited:
            self.pool.release(self)
        else:
            self.close()
            self.pool.discard(self)
        client.exchange_done(req, self.status, prompt, completion)

    def _write_buffered(self, client, req):
        from sluice import translate
        body = b"".join(self.parts)
        self.parts = None
        status = self.status
        prompt = completion = None
        dialect = req.dialect
        if status == 200:
            try:
                obj = orjson.loads(body)
                if not isinstance(obj, dict):
                    raise ValueError("not an object")
                if req.translate == 1:
                    out = translate.openai_response_to_anthropic(obj, req.client_model)
                    u = out["usage"]
                    prompt, completion = _believed(u["input_tokens"], u["output_tokens"])
                else:
                    out = translate.anthropic_response_to_openai(obj, req.client_model)
                    u = out["usage"]
                    prompt, completion = _believed(u["prompt_tokens"], u["completion_tokens"])
                payload = orjson.dumps(out)
            except (ValueError, TypeError, AttributeError, KeyError):
                status = 502
                self.status = 502
                payload = error_body(dialect, 502, f"provider {self.provider.name} returned a "
                                                   "response that could not be translated")
        else:
            if status == 529 and dialect == "openai":
                status = 503
                self.status = 503
            payload = error_body(dialect, status, translate.upstream_error_message(body))
        overhead = (req.pre + (perf_counter() - self.t_rx)) * 1e6
        req.overhead = overhead
        keep = req.keep_alive and not self.app.stopping
        req.keep_alive = keep
        extra = b"x-gateway-overhead-us: %d\r\n" % overhead if self.app.overhead_header else b""
        if status != 200 and self.retry_after:
            extra += self.retry_after
        self.client_head_sent = True
        client.write(response(status, payload, extra=extra, close=not keep))
        return prompt, completion

    def _lost_during_exchange(self):
        """The provider closed the connection while a request was using it."""
        if self.head_done and self.close_delimited:
            try:
                self._bodies()
            except HttpParserError:
                self._fail_midstream()
                return
            self._finish()  # EOF ends a close-delimited body
            return
        if not self.client_head_sent:
            client = self.client
            req = self.req
            self.client = None
            self.req = None
            if self.head_done and self.mode == DISCARD:
                client.resend(req)
                return
            if (self.nbytes == 0 and self.reused and not req.retried
                    and perf_counter() - self.t_sent < STALE_RETRY_S):
                # a pooled connection the provider had already closed: retry once, fresh
                req.retried = True
                client.retry_upstream(req)
                return
            self.app.metrics.upstream_error(self.provider.name, "closed")
            client.upstream_failed(502, f"provider {self.provider.name} closed the connection "
                                        "before answering", "reset")
            return
        self.app.metrics.upstream_error(self.provider.name, "closed_midstream")
        self._fail_midstream()

    def _fail(self, status, message, kind=""):
        """Give up on this exchange before anything was sent to the client."""
        client = self.client
        req = self.req
        self.client = None
        self.req = None
        self.abort()
        self.pool.discard(self)
        if client is not None:
            if self.head_done and self.mode == DISCARD:  # the next attempt was decided already
                client.resend(req)
            else:
                client.upstream_failed(status, message, kind)

    def _fail_midstream(self):
        """Give up after the response head went out: tell the client if we can, then close."""
        if not self.client_head_sent:
            self._fail(502, f"provider {self.provider.name} sent a broken response")
            return
        client = self.client
        req = self.req
        self.client = None
        self.req = None
        self.abort()
        self.pool.discard(self)
        if client is None:
            return
        if self.mode == TSTREAM:
            if req.dialect == "anthropic":
                ev = b'event: error\ndata: {"type":"error","error":{"type":"api_error","message":"provider stream failed"}}\n\n'
            else:
                ev = b'data: {"error":{"message":"provider stream failed","type":"api_error","param":null,"code":null}}\n\n'
            client.write(b"%x\r\n%s\r\n" % (len(ev), ev) if self.chunked_out else ev)
        client.abort_response(req, self.status)
