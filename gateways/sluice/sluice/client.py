"""The client side: one asyncio Protocol per client connection.

No task per request: httptools calls back into ClientConn as bytes arrive, a complete request
is handed to the App synchronously (``App.handle``), and answered in order: by Sluice itself
(``respond``) or by a provider exchange (see dispatch.py, upstream.py), which ends in
``exchange_done`` or ``abort_response``. Reading from the client pauses for reasons kept as bits
(``paused_for``), and resumes when none is left.
"""
from time import perf_counter
from typing import TYPE_CHECKING

from httptools import HttpParserError, HttpParserUpgrade, HttpRequestParser

from sluice import dispatch, framing, known_head, request
from sluice.http import error_body, linger, response
from sluice.request import Request

if TYPE_CHECKING:
    import asyncio  # noqa: F401 (type comments)

    from sluice.framing import ChunkedFraming  # noqa: F401 (type comments)
    from sluice.known_head import KnownHead  # noqa: F401 (type comments)
    from sluice.pool import Pool  # noqa: F401 (type comments)
    from sluice.request import HeaderDigest  # noqa: F401 (type comments)
    from sluice.server import App  # noqa: F401 (type comments)
    from sluice.upstream import UpstreamConn  # noqa: F401 (type comments)

CHAT_PATHS = (b"/v1/chat/completions", b"/v1/messages")

# why reading from a client is paused (bits of ClientConn.paused_for)
PAUSE_QUEUE_FULL = 1   # max_pipelined requests are queued
PAUSE_UPSTREAM = 2     # the provider does not take what is sent to it fast enough
PAUSE_BAD = 4          # unusable input: the connection ends after the responses owed
PAUSE_WRITE = 8        # the client does not read its answers
PAUSE_FINAL = 16       # a request that closes the connection was read
PAUSE_BURST = 32       # max_pipelined requests were answered from one read: others get a turn
PAUSE_QUEUED_BYTES = 64  # max_queued_bytes_per_connection of bodies wait behind the one answered


# A request without a known key (auth required) whose body is larger, or chunked, gets its 401
# from its head and the connection closed; a smaller body is read first and the connection kept
KEYLESS_BODY_READ_BYTES = 65536

# A head up to this size is remembered for the connection's next request (its header dict, its
# digest, the known head): SDK heads are well under 1 KiB. A larger one is not, or an idle
# keep-alive connection would hold about three copies of a head up to max_header_bytes.
CACHED_HEAD_BYTES = 4096

class ClientConn:  # an asyncio protocol (uvloop needs only the methods)
    __slots__ = (
        "app", "transport", "parser", "incoming", "queue", "busy", "closed", "active", "upstream",
        "waiting_on", "wait_since", "t_rx", "last_active", "peer", "eof", "paused_for",
        "draining_queue", "bad", "on_header", "headers", "last_headers", "last_digest", "on_url",
        "url_parts", "on_body", "body_parts", "on_message_begin", "between_messages",
        "known_head", "completed", "last_parsed", "backlog", "read_tail", "head_bytes",
        "head_began", "final", "burst", "feeding", "head_pieces", "chunked", "queued_bytes",
        "held_bytes", "key_known",
    )

    def __init__(self, app):
        # type: (App) -> None
        self.app = app
        self.transport = None  # type: asyncio.Transport  # type: ignore[assignment]  # set by connection_made, the first call
        self.incoming = None  # type: Request | None  # the request whose message is being read
        self.queue = []  # type: list[Request | tuple[int, str, str]]  # read, not answered yet (and a refusal, a tuple); a list: max_pipelined at most
        self.busy = False
        self.closed = False
        self.active = None  # type: Request | None  # the request being answered
        self.upstream = None  # type: UpstreamConn | None  # its provider connection
        self.waiting_on = None  # type: Pool | None  # the pool it waits for a connection from
        self.wait_since = 0.0
        self.eof = False
        self.paused_for = 0
        self.draining_queue = False
        self.bad = False
        self.peer = "-"
        self.backlog = None  # type: bytes | None  # bytes read but not parsed yet (parsing stopped between parts)
        self.read_tail = b""  # the last bytes of a read that ended inside a head or a chunked body
        self.head_bytes = 0   # bytes of the head being received
        self.head_began = 0.0  # when its first bytes arrived
        self.final = False    # a request that closes the connection was read: nothing after it is
        self.burst = 0        # requests completed from the current read
        self.feeding = False
        self.chunked = None  # type: ChunkedFraming | None  # the chunked body being read: its framing (see framing.py)
        self.queued_bytes = 0  # body bytes of the queued requests
        self.held_bytes = 0   # body bytes of this connection's requests counted in App.body_bytes_held
        self.key_known = False  # the last request head's key is a configured one

    # ------------------------------------------------------------ transport
    def connection_made(self, transport):
        # type: (asyncio.Transport) -> None
        self.transport = transport
        app = self.app   # over max_client_connections it never gets here (Server.accept)
        # Headers go straight into a dict: a C-level callback, no Python frame per header.
        # (A repeated header keeps its last value.)
        self.headers = {}  # type: dict[bytes, bytes]
        self.on_header = self.headers.__setitem__
        # URL pieces and body pieces are collected the same way (list.append)
        self.url_parts = []  # type: list[bytes]
        self.on_url = self.url_parts.append
        self.head_pieces = []  # type: list[bytes]  # the bytes of the head being parsed (read again for Transfer-Encoding)
        self.body_parts = []  # type: list[bytes]
        self.on_body = self.body_parts.append
        self.last_headers = None  # type: dict[bytes, bytes] | None
        self.last_digest = None  # type: HeaderDigest | None
        # non-empty while the parser waits for a new message: llhttp clears it (a C-level call)
        # at a message's first byte, on_message_complete refills it
        self.between_messages = [True]
        self.on_message_begin = self.between_messages.clear
        self.known_head = None  # type: KnownHead | None  # the previous request's head, to take the next one without the parser
        self.completed = 0
        self.last_parsed = None  # type: Request | None
        self.parser = HttpRequestParser(self)
        self.last_active = perf_counter()
        app.clients.add(self)
        if app.access_log is not None:
            peer = transport.get_extra_info("peername")
            self.peer = peer[0] if peer else "-"
        if app.stopping:
            self.close()

    def connection_lost(self, exc):
        # type: (Exception | None) -> None
        self.closed = True
        app = self.app
        app.clients.discard(self)
        self.queue.clear()
        self.queued_bytes = 0
        app.body_bytes_held -= self.held_bytes  # every body this connection held, answered or not
        self.held_bytes = 0
        self.backlog = None
        r = self.active
        if r is None:
            return
        # client gone before its response was complete: cancel the upstream request
        self.active = None
        app.metrics.client_disconnects += 1
        relayed = self.upstream.relayed_usage() if self.upstream is not None else None
        dispatch.cancel(self)
        if r.payload is None:
            app.metrics.count_request(r.model_label, 499)
        elif relayed is None:
            app.request_finished(self, r, 499, None, None)
        else:  # charged for what was relayed, not only the prompt
            app.request_finished(self, r, 499, relayed[0], relayed[1])

    def eof_received(self):
        # type: () -> None
        # Like nginx: a client that closes its side is gone; this is how a disconnect
        # mid-request is noticed at all when nothing is being written to it.
        self.eof = True
        return None

    def pause_writing(self):
        # type: () -> None
        # the client does not keep up: stop reading its next requests and stop reading the provider
        self._pause(PAUSE_WRITE)
        up = self.upstream
        if up is not None and up.transport is not None and not up.paused:
            up.paused = True
            up.transport.pause_reading()

    def resume_writing(self):
        # type: () -> None
        up = self.upstream
        if up is not None and up.paused and up.transport is not None:
            up.paused = False
            up.last_rx = perf_counter()  # the idle timeout restarts when we read again
            up.transport.resume_reading()
        self._resume(PAUSE_WRITE)

    def _pause(self, reason):
        # type: (int) -> None
        if not self.paused_for and not self.closed:
            self.transport.pause_reading()
        self.paused_for |= reason

    def _resume(self, reason):
        # type: (int) -> None
        if self.paused_for & reason:
            self.paused_for &= ~reason
            if not self.paused_for and not self.closed:
                if self.backlog is not None and not self.feeding:
                    # what was read before parsing stopped comes first
                    data = self.backlog
                    self.backlog = None
                    self._parse(data)
                    self.last_parsed = None  # learnt from only in data_received
                    if self.paused_for or self.closed:
                        return
                self.transport.resume_reading()

    def _end_burst(self):
        # type: () -> None
        self._resume(PAUSE_BURST)

    def pause_reading_for_upstream(self):
        # type: () -> None
        self._pause(PAUSE_UPSTREAM)

    def resume_reading_for_upstream(self):
        # type: () -> None
        self._resume(PAUSE_UPSTREAM)

    def write(self, data):
        # type: (bytes) -> None
        if not self.closed:
            self.transport.write(data)

    def writelines(self, parts):
        # type: (list[bytes]) -> None
        if not self.closed:
            self.transport.writelines(parts)

    def close(self):
        # type: () -> None
        if not self.closed:
            self.closed = True
            self.transport.close()

    def close_after_response(self):
        # type: () -> None
        """Close once the last response is out, without losing it to a reset: see linger."""
        if not self.closed:
            self.closed = True
            if self.paused_for:
                self.paused_for = 0
                self.transport.resume_reading()
            linger(self.transport, self.app.loop)

    # ------------------------------------------------------------ parsing
    def data_received(self, data):
        # type: (bytes) -> None
        t = self.t_rx = self.last_active = perf_counter()
        if self.closed or self.bad or self.final:
            return
        if self.backlog is not None:  # parsing is stopped: keep the order of the bytes
            self.backlog += data
            return
        at_start = self.between_messages and not self.busy and not self.queue
        if at_start and self.known_head is not None:
            r = self.known_head.request(data, t, self.app.max_body)
            if r is not None:  # exactly one request with the head seen before: no parser
                self.completed += 1
                if not self.hold(r, len(r.body)):
                    return
                self.busy = True
                self._handle(r)
                return
        completed = self.completed
        self._parse(data)
        if (at_start and self.completed == completed + 1 and self.between_messages and not self.closed
                and self.last_digest is not None):  # (None: a head too large to remember)
            # (a request completed: set)
            head = known_head.learn(self.last_parsed, data, self.last_digest.expect_continue)  # type: ignore[arg-type]
            if head is not None:
                self.known_head = head
        self.last_parsed = None  # an idle connection must not keep its last request's body

    def _parse(self, data):
        # type: (bytes) -> None
        """Feed the parser one part at a time: a head up to its CRLF CRLF, a body up to its
        length (or, chunked, up to a CRLF CRLF). So every head and trailer section is measured
        before it is parsed (framing.py), at most a couple of requests complete per part, and
        parsing can stop between parts: while the client does not read (backpressure), the
        pipeline is full, a burst of answers was written, or a request closed the connection.
        What is left waits in ``backlog`` (at most one read)."""
        n = len(data)
        pos = 0
        self.feeding = True
        self.burst = 0
        try:
            while pos < n:
                if self.paused_for or self.closed:
                    if not self.closed and not self.bad and not self.final:
                        self.backlog = data[pos:]
                    return
                r = self.incoming
                if r is None or r.body_left < 0:  # a head, or a chunked body: up to a CRLF CRLF
                    end = framing.part_end(self, data, pos)
                    if r is None:
                        if not framing.count_head_bytes(self, data, pos, end):
                            return
                    elif not framing.count_trailer_bytes(self, data, pos, end):
                        return
                else:  # a Content-Length body: exactly what is left of it
                    end = pos + r.body_left
                    if end > n:
                        end = n
                    r.body_left -= end - pos
                part = data if end - pos == n else data[pos:end]
                if r is None:
                    self.head_pieces.append(part)
                self.parser.feed_data(part)
                pos = end
                r = self.incoming
                if r is not None:
                    if self.body_parts:
                        self._body_progress(r)
                    if self.headers and not self.bad and not framing.drop_trailer_fields(self, r):
                        return
            if self.incoming is not None or not self.between_messages:
                if self.incoming is None or self.incoming.body_left < 0:
                    self.read_tail = data[-3:]
        except HttpParserUpgrade:
            if not self.closed and not self.bad:
                self._bad_request(400, "protocol upgrades are not supported")
        except HttpParserError as e:
            if not self.closed and not self.bad:
                self._bad_request(400, f"malformed HTTP request: {e}")
        finally:
            self.feeding = False

    def _body_progress(self, r):
        # type: (Request) -> None
        """A body longer than one read: keep one piece per read, count it, enforce the limits."""
        if r.discard_body:
            for piece in self.body_parts:
                r.body_received += len(piece)
            self.body_parts.clear()
            if r.body_received > self.app.max_body:
                self._bad_request(413, f"request body exceeds {self.app.max_body} bytes")
            return
        received = r.body_received
        if not r.add_body_piece(self.body_parts, self.app.max_body):
            self._bad_request(413, f"request body exceeds {self.app.max_body} bytes")
        elif not self.hold(r, r.body_received - received):
            return
        elif self.busy and self.queued_bytes + r.body_received > self.app.max_queued:
            self._pause(PAUSE_QUEUED_BYTES)  # read the rest in its turn

    def dialect(self, r=None):
        # type: (Request | None) -> str
        """The client's dialect as far as the request shows it (for protocol-level errors)."""
        if r is None:
            r = self.incoming
        if r is not None:
            url = r.url
            if r.has_anthropic_version:
                return "anthropic"
        else:
            url = self.url_parts[0] if self.url_parts else b""
        return "anthropic" if url.startswith(b"/v1/messages") else "openai"

    def timed_out(self, message):
        # type: (str) -> None
        """A request that did not arrive in time: 408 (after the responses owed), then close."""
        self.t_rx = perf_counter()
        self._bad_request(408, message)

    def _bad_request(self, status, message, r=None):
        # type: (int, str, Request | None) -> None
        """Unusable input: answer after the responses already owed, then close."""
        dialect = self.dialect(r)
        if self.app.access_log is not None:  # (the request as far as it was read)
            self.app.access_log.refusal(self.peer, r if r is not None else self.incoming, status, message)
        self.bad = True
        if self.incoming is not None:
            self.release(self.incoming)
        if r is not None:
            self.release(r)
        self.incoming = None
        self.backlog = None
        self._pause(PAUSE_BAD)
        self.app.metrics.count_request("-", status)
        if not self.busy:
            self.queue.clear()
            self._error_and_close(status, message, dialect)
        else:
            self.queue.append((status, message, dialect))

    def _error_and_close(self, status, message, dialect):
        # type: (int, str, str) -> None
        body = error_body(dialect, status, message)
        # Sluice's own 503 here is momentary: too many bodies held by the worker
        extra = b"retry-after: 1\r\n" if status == 503 else b""
        if self.app.overhead_header:
            extra += b"x-gateway-overhead-us: %d\r\n" % ((perf_counter() - self.t_rx) * 1e6)
        self.write(response(status, body, extra=extra, close=True))
        self.close_after_response()

    def on_headers_complete(self):
        # type: () -> None
        # t0 for an early refusal and the body deadline; reset when the request is complete
        r = self.incoming = Request(self.t_rx)
        u = self.url_parts
        r.url = u[0] if len(u) == 1 else b"".join(u)
        u.clear()
        p = self.parser
        h = self.headers
        app = self.app
        # Content-Length differs per request; the rest usually repeats on a keep-alive
        # connection, so the digest of the previous request's headers is reused when equal.
        content_length = h.pop(b"content-length", None) or h.pop(b"Content-Length", None)
        if h != self.last_headers:
            if len(h) > app.max_headers:
                self._bad_request(431, f"more than {app.max_headers} request header fields")
                raise HttpParserError("too many headers")
            d = request.digest_headers(h, app.forward_policy)
            if self.head_bytes <= CACHED_HEAD_BYTES:
                self.last_headers = dict(h)
                self.last_digest = d
            else:  # not kept for the next request (nor is the known head: data_received)
                self.last_headers = None
                self.last_digest = None
            # (not None: bool(d.token))
            self.key_known = bool(d.token) and app.keys.lookup(d.token) is not None  # type: ignore[arg-type]
        else:
            d = self.last_digest  # type: ignore[assignment]  # set with last_headers
        self.head_bytes = 0
        h.clear()
        r.token = d.token
        r.forward_headers = d.forward_headers
        r.has_anthropic_version = d.has_anthropic_version
        if content_length is None:
            content_length = d.odd_content_length
        if content_length is not None:
            r.content_length = r.body_left = int(content_length)  # llhttp already checked it is a number
        elif d.transfer_encoding is not None and framing.refuse_unknown_coding(self, d):
            raise HttpParserError("unknown transfer coding")
        self.head_pieces.clear()
        r.method = method = p.get_method()
        if len(r.url) > app.max_url:
            self._bad_request(414, f"request URL exceeds {app.max_url} bytes")
            raise HttpParserError("URL too long")
        # the version of each request, not of the connection's first
        r.http11 = v = p.get_http_version() == "1.1"
        r.keep_alive = v and p.should_keep_alive()
        if method == b"CONNECT" or (d.upgrade and p.should_upgrade()):
            r.upgrade = True  # refused once the message is complete (llhttp stops there)
        elif r.content_length > app.max_body:
            # refuse now (after the responses owed) rather than read a body we will not use
            self._bad_request(413, f"request body exceeds {app.max_body} bytes")
            raise HttpParserError("body too large")
        elif (not self.key_known and app.require_auth
              and (r.content_length > KEYLESS_BODY_READ_BYTES or d.transfer_encoding is not None)
              and self._chat_path(r.url)):
            # refused from its head: a large body nobody may send is not read (nor waited for);
            # a small one is read, so that the 401 leaves the connection open, as nginx discards one
            self._bad_request(401, "invalid API key" if d.token else "missing API key")
            raise HttpParserError("no key")
        elif d.expect_continue and not self.busy:
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        # a body no answer reads (a path that takes none; a key that gets 401) is dropped as it
        # arrives: a keyless client cannot fill max_held_body_bytes, which the tenants share
        r.discard_body = (not self.key_known and (app.require_auth or bool(d.token))) or not self._chat_path(r.url)

    def on_message_complete(self):
        # type: () -> None
        r = self.incoming  # type: Request  # type: ignore[assignment]  # made by on_headers_complete, before llhttp completes the message
        self.incoming = None
        self.between_messages.append(True)
        if self.final or self.bad:
            return
        self.completed += 1
        self.last_parsed = r
        r.t0 = self.t_rx  # Sluice's clock for this request starts with the read that completed it
        if self.chunked is not None:
            if not framing.drop_trailer_fields(self, r):
                return
            self.chunked = None
        if r.discard_body:
            self.body_parts.clear()
        r.take_body(self.body_parts)
        if not self.hold(r, len(r.body) - r.held):
            return
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
            self._pause(PAUSE_FINAL)
        self.burst += 1
        if self.burst >= self.app.max_pipelined and not self.final:
            # a burst of pipelined requests in one read: give other connections their turn
            self._pause(PAUSE_BURST)
            self.app.loop.call_soon(self._end_burst)
        if self.busy or self.queue:
            self.queue.append(r)
            self.queued_bytes += len(r.body)
            if len(self.queue) >= self.app.max_pipelined:
                self._pause(PAUSE_QUEUE_FULL)
            if self.queued_bytes > self.app.max_queued:
                self._pause(PAUSE_QUEUED_BYTES)
            if not self.busy and not self.draining_queue:
                self._next()
        else:
            self.busy = True
            self._handle(r)

    @staticmethod
    def _chat_path(url):
        # type: (bytes) -> bool
        q = url.find(b"?")
        return (url if q < 0 else url[:q]) in CHAT_PATHS

    def hold(self, r, n):
        # type: (Request, int) -> bool
        """``n`` more body bytes of ``r`` held by the worker: False when that is over
        max_held_body_bytes (``r`` is then refused: 503, close)."""
        app = self.app
        r.held += n
        self.held_bytes += n
        app.body_bytes_held += n
        if app.body_bytes_held > app.max_held_body:
            self._bad_request(503, f"request bodies held by this worker exceed {app.max_held_body} "
                                   f"bytes", r)
            return False
        return True

    def release(self, r):
        # type: (Request) -> None
        """``r``'s body is no longer held (answered, or dropped). Once the connection is closed,
        connection_lost releases all it held."""
        n = r.held
        if n and not self.closed:
            r.held = 0
            self.held_bytes -= n
            self.app.body_bytes_held -= n

    def _handle(self, r):
        # type: (Request) -> None
        try:
            self.app.handle(self, r)
        except Exception:
            self.app.internal_error(self, r)

    def _next(self):
        # type: () -> None
        """Answer the queued requests in order, while no answer is in progress."""
        self.draining_queue = True
        try:
            queue = self.queue
            while queue and not self.busy and not self.closed:
                r = queue.pop(0)
                if type(r) is tuple:  # a refusal queued behind earlier requests
                    self._error_and_close(*r)
                    return
                self.busy = True
                self.queued_bytes -= len(r.body)  # type: ignore[union-attr]  # a Request: a refusal returned above
                t = perf_counter()
                if r.t0 < t:  # type: ignore[union-attr]  # (as above)
                    r.t0 = t  # type: ignore[union-attr]  # time spent queued behind earlier responses is not ours
                self._handle(r)  # type: ignore[arg-type]  # (as above)
            if len(queue) < self.app.max_pipelined:
                self._resume(PAUSE_QUEUE_FULL)
            if self.paused_for & PAUSE_QUEUED_BYTES and not self.holds_too_much():
                if self.incoming is not None:
                    self.incoming.t0 = perf_counter()  # its body deadline starts again
                self._resume(PAUSE_QUEUED_BYTES)
        finally:
            self.draining_queue = False

    # ------------------------------------------------------------ responses
    def respond(self, r, status, body, extra=b"", content_type=b"application/json", overhead_us=None):
        # type: (Request, int, bytes, bytes, bytes, float | None) -> None
        """A response produced by Sluice itself (no provider involved)."""
        keep = r.keep_alive and not self.app.stopping and not self.bad
        if overhead_us is None:
            overhead_us = (perf_counter() - r.t0) * 1e6
        r.overhead_us = overhead_us
        if self.app.overhead_header:
            extra += b"x-gateway-overhead-us: %d\r\n" % overhead_us
        data = response(status, body, content_type, extra, close=not keep)
        if r.method == b"HEAD":  # the head a GET would get, without its body
            data = data[:len(data) - len(body)]
        self.write(data)
        if status >= 400 and status < 500 and self.app.access_log is not None:  # a refusal
            self.app.access_log.refusal(self.peer, r, status, body)
        self.done(keep)

    def done(self, keep_alive):
        # type: (bool) -> None
        """The current response is fully written."""
        if self.active is not None:
            self.release(self.active)
        self.busy = False
        self.last_active = perf_counter()  # the keep-alive idle time starts now
        self.active = None
        self.upstream = None
        if self.paused_for & PAUSE_UPSTREAM:
            self._resume(PAUSE_UPSTREAM)
        if not keep_alive:
            self.close_after_response()
            return
        if self.eof and not self.queue:
            self.close()
            return
        if (self.queue or self.paused_for) and not self.draining_queue:
            self._next()

    def holds_too_much(self):
        # type: () -> bool
        """Whether the bodies read ahead of their turn are over max_queued_bytes_per_connection."""
        queued = self.queued_bytes
        if self.busy and self.incoming is not None:
            queued += self.incoming.body_received
        return queued > self.app.max_queued

    def body_held(self):
        # type: () -> bool
        """A body arriving that Sluice stopped reading until its turn: no deadline runs for it."""
        return self.incoming is not None and self.paused_for & PAUSE_QUEUED_BYTES != 0

    def exchange_done(self, r, status, prompt, completion):
        # type: (Request, int, int | None, int | None) -> None
        """The provider's response was relayed in full."""
        self.upstream = None
        self.app.request_finished(self, r, status, prompt, completion)
        self.done(r.keep_alive)

    def abort_response(self, r, status):
        # type: (Request, int) -> None
        """The response head is out but the provider failed: the client must see a broken response."""
        self.upstream = None
        self.app.request_finished(self, r, status, None, None)
        self.active = None
        self.busy = False
        self.close()
