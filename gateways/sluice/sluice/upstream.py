"""The upstream side of an exchange: one pooled connection to a provider.

An UpstreamConn is an asyncio Protocol with an httptools response parser. It is driven by
callbacks only: dispatch hands it a request (``start``), and its ``data_received`` relays the
response to the client. A read comes either before the response head is parsed
(``_head_read``: it may hold part of the head, the head, or the whole response) or after it
(``_body_read``). At the head, the exchange picks its relay mode. In the common same-dialect
case with a Content-Length body (RAW) the provider's bytes are written to the client as they
arrive, up to that length; only the response head is rebuilt, to add X-Gateway-Overhead-Us. The
other modes take the parser's body pieces instead: re-framed (a chunked or close-delimited body:
no chunk extension or trailer passes), translated, or dropped; an error status's body goes to
the log, and the client gets Sluice's words (provider_errors.py). A parser error, or bytes after a
response's end, end the connection: only a parser that finished exactly one response is used
again. How a response is relayed is in relay_same_dialect.py and relay_translated.py; this
module drives the exchange.
"""
from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING

from httptools import HttpParserError, HttpResponseParser

from sluice import dispatch, provider_errors, relay_same_dialect, relay_translated
from sluice.dialects import SAME_DIALECT
from sluice.http import chunked_last, content_length_at, says_close
from sluice.resilience import attempt_answered, attempt_replaced
from sluice.usage import UsageScan

if TYPE_CHECKING:
    import asyncio  # noqa: F401 (type comments)

    from sluice.client import ClientConn  # noqa: F401 (type comments)
    from sluice.pool import Pool, Provider  # noqa: F401 (type comments)
    from sluice.request import Request  # noqa: F401 (type comments)
    from sluice.translate import SSEParser  # noqa: F401 (type comments)
    from sluice.translate.common import StreamTranslator  # noqa: F401 (type comments)

# relay modes of an exchange
RAW = 0                 # same dialect, a Content-Length body (or none): upstream bytes go straight to the client
REFRAME = 1             # same dialect, a chunked or close-delimited body: re-framed from the parser's pieces
TRANSLATE_BUFFERED = 2  # translated unary response (or another status below 400): whole body, then one write
TRANSLATE_STREAM = 3    # translated SSE stream, event by event
DISCARD = 4             # a failed attempt that another attempt replaces: the body is read and dropped
PROVIDER_ERROR = 5      # an error status: its body kept for the log, the client gets Sluice's (provider_errors.py)

MAX_HEAD = 64 * 1024


def _log_response_error(provider, e, event):
    # type: (Provider, HttpParserError, str) -> None
    """A response Sluice cannot take: one line about the provider, ``event`` saying what it sent
    (see provider_errors.log); a bug in our own callback, surfaced as a parser error: its
    traceback."""
    cause = e.__context__
    if cause is not None and not isinstance(cause, HttpParserError):
        import sys
        import traceback
        sys.stderr.write("sluice: error in upstream response handling:\n")
        traceback.print_exception(cause, file=sys.stderr)
    else:
        provider_errors.log(provider.name, event, str(cause or e))


class UpstreamConn:  # an asyncio protocol (uvloop needs only the methods)
    __slots__ = (
        "pool", "provider", "app", "transport", "parser", "alive", "paused",
        "idle_since", "client", "req", "mode", "head_done", "response_open", "on_message_complete",
        "this_read", "head_so_far", "head_start", "t_rx", "t_sent", "t_head", "last_rx",
        "bytes_read", "status", "event_stream", "chunked_to_client", "close_delimited", "buffered",
        "buffered_bytes", "sse_parser", "stream_translator", "usage_scan", "client_head_sent",
        "no_reuse", "retry_after_line", "on_body", "body_parts", "on_message_begin",
        "messages_begun", "body_left", "pending_head", "at_event_end", "connection_at",
        "strip_usage", "held", "held_parts", "held_size", "last_events", "error_body_bytes",
    )
    if TYPE_CHECKING:  # set by the relay modules and provider_errors
        at_event_end: bool
        buffered: list[bytes] | None
        buffered_bytes: int
        chunked_to_client: bool
        error_body_bytes: int
        retry_after_line: bytes
        sse_parser: SSEParser
        stream_translator: StreamTranslator

    def __init__(self, pool):
        # type: (Pool) -> None
        self.pool = pool
        self.provider = pool.provider
        self.app = pool.app
        self.transport = None  # type: asyncio.Transport | None
        # body pieces are collected by a C-level callback and handled after each feed
        # (in the common relay mode they are simply dropped: the raw bytes went out already)
        self.body_parts = []  # type: list[bytes]
        self.on_body = self.body_parts.append
        # emptied by llhttp (a C-level call) when a response is complete
        self.response_open = [True]
        self.on_message_complete = self.response_open.clear
        # one entry per response begun: a second one means bytes followed the response's end
        self.messages_begun = []  # type: list[bool]
        self.on_message_begin = partial(self.messages_begun.append, True)
        self.pending_head = None  # type: tuple[bytes, bytes, bytes, bytes, int] | None
        self.parser = HttpResponseParser(self)
        self.alive = False
        self.paused = False
        self.idle_since = 0.0
        self.client = None  # type: ClientConn | None
        self.req = None  # type: Request | None
        self.no_reuse = False
        self.usage_scan = None  # type: UsageScan | None
        self.strip_usage = False
        self.buffered_bytes = 0
        self.held = bytearray()  # an event of a stream whose usage chunk is taken out, not ended yet
        self.held_parts = []  # type: list[bytes]  # the start of an SSE event not ended yet
        self.held_size = 0
        self.last_events = b""  # the last read that ended at an event's end (see reframed)

    # ------------------------------------------------------------ transport
    def connection_made(self, transport):
        # type: (asyncio.Transport) -> None
        self.transport = transport
        self.alive = True

    def connection_lost(self, exc):
        # type: (Exception | None) -> None
        self.alive = False
        self.pool.discard(self)
        if self.client is not None:  # (a close-delimited body ends here: its buffered bytes are read)
            try:
                self._lost_during_exchange()
            except Exception:  # a bug of ours must not leave the exchange hanging
                self._internal_error()
        self.release_buffered()

    def eof_received(self):
        # type: () -> None
        # the transport closes, connection_lost follows: meanwhile no request may be written to it
        self.alive = False
        return None

    def pause_writing(self):
        # type: () -> None
        c = self.client
        if c is not None:
            c.pause_reading_for_upstream()

    def resume_writing(self):
        # type: () -> None
        c = self.client
        if c is not None:
            c.resume_reading_for_upstream()

    def close(self):
        # type: () -> None
        self.alive = False
        if self.transport is not None:
            self.transport.close()

    def abort(self):
        # type: () -> None
        self.alive = False
        self.release_buffered()
        if self.transport is not None:
            self.transport.abort()

    # ------------------------------------------------------------ exchange
    def start(self, client, req, payload):
        # type: (ClientConn, Request, bytes) -> None
        self.client = client
        self.req = req
        self.mode = RAW
        self.head_done = False
        if not self.response_open:
            self.response_open.append(True)
        self.head_so_far = b""
        self.head_start = 0
        self.bytes_read = 0
        self.status = 0
        self.client_head_sent = False
        self.no_reuse = False
        self.messages_begun.clear()
        # token counts read from the relayed bytes: for a budget, when nothing is translated
        self.usage_scan = (UsageScan(self.app.token_weights)
                           if req.reserved > 0 and req.translation == SAME_DIALECT else None)
        self.strip_usage = False
        self.held_parts.clear()
        self.held_size = 0
        self.last_events = b""  # the last read that ended at an event's end (see reframed)
        self.transport.write(payload)  # type: ignore[union-attr]  # a pooled connection is connected
        req.sent = True
        now = perf_counter()
        self.t_sent = self.last_rx = now
        req.own_time += now - req.t_resume

    def check_timeout(self, now):
        # type: (float) -> None
        if self.client is None:
            return
        p = self.provider
        if self.paused:
            # reading is paused because the client does not keep up: not the provider's fault,
            # but a client that does not drain what waits for it must not hold the exchange
            if now - self.last_rx > self.app.send_timeout:
                self.app.metrics.upstream_error(p.name, "client_too_slow")
                self.fail_midstream()
            return
        if not self.head_done or not self.client_head_sent:
            if not self.head_done and now - self.t_sent > p.response_timeout:
                self.app.metrics.upstream_error(p.name, "response_timeout")
                self.fail(504, f"provider {p.name} did not answer within {p.response_timeout:g}s", "timeout")
            elif self.head_done and now - self.last_rx > p.stream_idle_timeout:
                self.app.metrics.upstream_error(p.name, "idle_timeout")
                self.fail(504, f"provider {p.name} stalled for {p.stream_idle_timeout:g}s", "timeout")
        elif now - self.last_rx > p.stream_idle_timeout:
            self.app.metrics.upstream_error(p.name, "idle_timeout")
            self.fail_midstream()

    # ------------------------------------------------------------ reads
    def data_received(self, data):
        # type: (bytes) -> None
        if self.client is None:
            # nothing was asked: a stray byte on an idle connection makes it unusable
            self.abort()
            return
        try:
            self.t_rx = self.last_rx = perf_counter()
            self.bytes_read += len(data)
            if self.head_done:
                self._body_read(data)
            else:
                self._head_read(data)
        except Exception:  # a bug of ours must not leave the exchange hanging
            self._internal_error()

    def _body_read(self, data):
        # type: (bytes) -> None
        """A read after the response head: relayed as it is (RAW), or its body pieces handed on."""
        client = self.client  # type: ClientConn  # type: ignore[assignment]  # in an exchange: data_received checked
        left = self.body_left
        if left >= 0:  # Content-Length: nothing past its end is the response
            if len(data) > left:
                data = data[:left]
                self.no_reuse = True
                provider_errors.log(self.provider.name, "sent bytes after its response")
            self.body_left = left - len(data)  # type: int
        try:
            self.parser.feed_data(data)
        except HttpParserError as e:
            self.no_reuse = True  # the parser stays in its error state: the connection is done
            if self.response_open:
                _log_response_error(self.provider, e, "sent an invalid response body")
                self.body_parts.clear()
                self.fail_midstream()
                return
            # bytes after the response's end; its body pieces are exact, nothing else is relayed
            provider_errors.log(self.provider.name, "sent bytes after its response")
        mode = self.mode
        if mode == RAW or mode == REFRAME:
            if mode == REFRAME:  # (its body pieces are scanned for usage there, unframed)
                data = relay_same_dialect.reframed(self, not self.response_open)
            else:
                self.body_parts.clear()
                if self.usage_scan is not None:
                    self.usage_scan.feed(data)
            if data and not client.closed:  # ClientConn.write, inlined: this runs once per stream frame
                client.transport.write(data)
        elif not self._relay_bodies():
            return
        if not self.response_open:
            self._finish()

    def _head_read(self, data):
        # type: (bytes) -> None
        """A read before the response head was parsed: part of the head, the head, or more."""
        client = self.client  # type: ClientConn  # type: ignore[assignment]  # in an exchange: data_received checked
        self.this_read = data
        past_end = False  # bytes that follow the response's end in this read
        try:
            self.parser.feed_data(data)
        except HttpParserError as e:
            self.no_reuse = True  # the parser stays in its error state: the connection is done
            if self.head_done and not self.response_open:
                past_end = True
            else:
                self.body_parts.clear()
                _log_response_error(self.provider, e, "sent an invalid response")
                if self.client_head_sent:
                    self.fail_midstream()
                    return
                self.pending_head = None
                self.app.metrics.upstream_error(self.provider.name, "bad_response")
                # a provider fault like a 5xx; after a head, it may have acted on the request
                self.fail(502, f"provider {self.provider.name} sent an invalid HTTP response",
                          "reset" if self.head_done else "5xx")
                return
        if self.client is None:
            return
        if not self.head_done:
            self._keep_head_part(data)
            return
        self.head_so_far = b""
        if not self.response_open and len(self.messages_begun) > 1:
            past_end = True
        if past_end:
            provider_errors.log(self.provider.name, "sent bytes after its response")
        if self.pending_head is not None:  # same dialect: the head and this read's body, in one write
            relay_same_dialect.write_head(self, client, past_end)
        elif self.body_parts and not self._relay_bodies():
            return
        if not self.response_open:
            self._finish()

    def _keep_head_part(self, data):
        # type: (bytes) -> None
        """A read that ended inside the response head: kept until the head is complete."""
        head = self.head_so_far + data if self.head_so_far else data
        head = head[self.head_start:]
        self.head_start = 0
        if len(head) > MAX_HEAD:
            provider_errors.log(self.provider.name, "sent a response head over %d bytes" % MAX_HEAD)
            self.fail(502, "provider response head too large", "5xx")
            return
        self.head_so_far = head

    def _internal_error(self):
        # type: () -> None
        import sys
        import traceback
        sys.stderr.write("sluice: error in upstream response handling:\n")
        traceback.print_exc(file=sys.stderr)
        if self.client is not None:
            self.app.metrics.upstream_error(self.provider.name, "internal")
            if self.client_head_sent:
                self.fail_midstream()
            else:
                self.fail(500, "internal error")

    # ------------------------------------------------------------ the response head
    def on_headers_complete(self):
        # type: () -> None
        """The parser's callback: the response head is complete; the relay mode is chosen."""
        if self.head_done:  # a second response head: bytes after the response's end
            raise HttpParserError("bytes after the response")
        buf = self.head_so_far + self.this_read if self.head_so_far else self.this_read
        end = buf.find(b"\r\n\r\n", self.head_start)
        status = self.parser.get_status_code()
        if status < 200:
            if status != 100 and status != 103:
                # llhttp reads a body after other 1xx heads (101: switches protocols): no meaning
                # here, and bytes in it must never pass for a response head
                raise HttpParserError("unexpected interim status %d" % status)
            # 100 Continue, 103 Early Hints: skipped, the real head follows
            self.head_start = end + 4 if end >= 0 else len(buf)
            self.messages_begun.clear()
            return
        if end < 0:
            raise HttpParserError("response head without CRLF CRLF")
        if not self.response_open:  # emptied by an interim response that came before this head
            self.response_open.append(True)
        self.head_done = True
        self.status = status
        req = self.req  # type: Request  # type: ignore[assignment]  # in an exchange: llhttp parses only its response
        if status >= 400:
            req.sent = False  # the provider says it did not act on the request
        head = buf[self.head_start:end + 2]
        low = head.lower()
        length_at = self._read_framing(head, low, status)
        now = self.t_head = perf_counter()
        self.provider.latency.observe(now - self.t_sent)
        body_here = len(buf) - end - 4  # body bytes in this read
        deployment = req.deployment
        if deployment is not None:  # resilience: a failed attempt may be replaced by another one
            if status < 429:
                attempt_answered(self.app, req, status, now)
            elif attempt_replaced(self.app, req, status, head, low, now):
                if length_at >= 0:
                    self.body_left = content_length_at(low, length_at) - body_here
                self.mode = DISCARD
                self.pending_head = None
                return
        if status >= 400:  # the provider's words go to the log, the client gets Sluice's
            if length_at >= 0:
                self.body_left = content_length_at(low, length_at) - body_here
            self.mode = PROVIDER_ERROR
            provider_errors.start(self, head, low)
            return
        if req.translation == SAME_DIALECT:
            # not framed by Content-Length (chunked, or up to the close), or a stream whose usage
            # chunk is taken out
            self.strip_usage = req.strip_usage and self.event_stream and status == 200
            reframe = self.body_left < 0 or self.strip_usage
            self.mode = REFRAME if reframe else RAW
            relay_same_dialect.relay_head(self, req, head, low, length_at, buf[end + 4:], reframe, now)
            return
        if length_at >= 0:
            self.body_left = content_length_at(low, length_at) - body_here
        if status == 200 and self.event_stream and req.stream:
            self.mode = TRANSLATE_STREAM
            relay_translated.start_stream(self, self.client, req)  # type: ignore[arg-type]  # in an exchange
        else:
            self.mode = TRANSLATE_BUFFERED
            relay_translated.start_buffered(self, head, low)

    def _read_framing(self, head, low, status):
        # type: (bytes, bytes, int) -> int
        """What the head says about the body and the connection. Returns where its
        Content-Length line is (-1: none)."""
        # bytes.find, not ``in``: CPython 3.11's bytes ``in`` first tries the operand as an int and
        # formats (then drops) a TypeError each time
        find = low.find
        self.event_stream = find(b"text/event-stream") >= 0
        if self.usage_scan is not None:
            self.usage_scan.provisional = self.event_stream and self.provider.dialect == "anthropic"
            self.usage_scan.unary = not self.event_stream
        # llhttp refuses Content-Length with Transfer-Encoding: one of them frames the body
        length_at = find(b"\ncontent-length:")
        framed = length_at >= 0 or status == 204 or status == 304  # 204 and 304 never have a body
        if framed:
            self.close_delimited = False
        else:  # up to the close, unless chunked is the last transfer coding (as llhttp reads it)
            te = low.rfind(b"\ntransfer-encoding:")
            self.close_delimited = te < 0 or not chunked_last(low, te)
        # where the response ends, to relay nothing after it: Content-Length bytes left, or -1
        self.body_left = 0 if framed else -1
        # whether the provider keeps the connection (read from the head: llhttp forgets it
        # once the response is over, and asking it from a callback costs a Python call)
        connection = self.connection_at = find(b"\nconnection:")
        self.no_reuse = head.startswith(b"HTTP/1.0") or (connection >= 0 and says_close(low, connection))
        return length_at

    # ------------------------------------------------------------ bodies
    def _relay_bodies(self):
        # type: () -> bool
        """``_bodies``, for a read: False when the exchange failed instead."""
        try:
            self._bodies()
        except HttpParserError as e:
            _log_response_error(self.provider, e, "sent a body Sluice cannot relay")
            self.fail_midstream()
            return False
        return True

    def _bodies(self):
        # type: () -> None
        """Body pieces of the last feed, for the modes that do not relay raw bytes."""
        parts = self.body_parts
        if not parts:
            return
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        parts.clear()
        mode = self.mode
        if mode == DISCARD:
            return
        if mode == PROVIDER_ERROR:
            provider_errors.keep(self, body)
            return
        client = self.client
        if client is None:
            return
        if mode == TRANSLATE_STREAM:
            relay_translated.relay_stream(self, client, body)
        else:  # TRANSLATE_BUFFERED
            relay_translated.buffer(self, body)

    def relayed_usage(self):
        # type: () -> tuple[int, int] | None
        """(prompt, completion) charged for the final usage the provider reported, or None when
        it was not seen: a client that leaves then pays its whole reservation."""
        req = self.req
        if req is None or not self.client_head_sent:
            return None
        prompt = completion = None
        if self.mode == TRANSLATE_STREAM:
            prompt, completion = relay_translated.stream_usage(self)
        elif (self.mode == RAW or self.mode == REFRAME) and self.usage_scan is not None:
            prompt, completion = self.usage_scan.tokens()
        # (the two are None together)
        return None if prompt is None else (prompt, completion)  # type: ignore[return-value]

    # ------------------------------------------------------------ endings
    def _finish(self):
        # type: () -> None
        """The provider's response is complete: final writes, accounting, connection reuse."""
        client = self.client  # type: ClientConn  # type: ignore[assignment]  # the exchange's: it ends here
        req = self.req  # type: Request  # type: ignore[assignment]  # (as the client)
        mode = self.mode
        if mode == DISCARD:  # a failed attempt, read to its end: the connection can be reused
            self._return_connection()
            dispatch.resend(client, req)
            return
        prompt = completion = None
        if mode == RAW or mode == REFRAME:  # (a re-framed body's end went out with its last piece)
            if self.usage_scan is not None:
                self.usage_scan.end()
                prompt, completion = self.usage_scan.tokens()
        elif mode == TRANSLATE_STREAM:
            prompt, completion = relay_translated.finish_stream(self, client)
        elif mode == PROVIDER_ERROR:
            provider_errors.write(self, client, req)
        else:  # TRANSLATE_BUFFERED
            prompt, completion = relay_translated.write_buffered(self, client, req)
        if self.event_stream and self.client_head_sent:
            self.app.metrics.stream_relay.observe(self.t_rx - self.t_head)  # t_rx: the last read
        self._return_connection()
        client.exchange_done(req, self.status, prompt, completion)

    def _return_connection(self):
        # type: () -> None
        """The exchange is over: the connection is pooled again, or closed if it cannot be reused.
        Pooled only when its parser read exactly one response, to its end, without an error: then
        llhttp is back at its start, as a fresh parser would be."""
        self.client = None
        self.req = None
        self.release_buffered()
        if self.alive and not self.no_reuse and not self.close_delimited and len(self.messages_begun) == 1:
            self.pool.release(self)
        else:
            self.close()
            self.pool.discard(self)

    def release_buffered(self):
        # type: () -> None
        """The bytes of a response buffered to be translated are no longer held by the worker."""
        if self.buffered_bytes:
            self.app.body_bytes_held -= self.buffered_bytes
            self.buffered_bytes = 0
            self.buffered = None

    def _abandon(self):
        # type: () -> None
        """The exchange failed: the connection is aborted and leaves the pool."""
        self.client = None
        self.req = None
        self.abort()
        self.pool.discard(self)

    def _lost_during_exchange(self):
        # type: () -> None
        """The provider closed the connection while a request was using it."""
        if self.head_done and self.close_delimited:  # EOF ends a close-delimited body
            if self.mode == REFRAME:  # (every read's body pieces were handled already)
                # (connection_lost checked)
                self.client.write(relay_same_dialect.reframed(self, True))  # type: ignore[union-attr]
            self._finish()
            return
        if self.client_head_sent:
            self.app.metrics.upstream_error(self.provider.name, "closed_midstream")
            provider_errors.log(self.provider.name, "closed the connection mid-response")
            self.fail_midstream()
            return
        client = self.client  # type: ClientConn  # type: ignore[assignment]  # connection_lost checked
        req = self.req  # type: Request  # type: ignore[assignment]  # (as the client)
        self.client = None
        self.req = None
        if self.head_done and self.mode == DISCARD:
            dispatch.resend(client, req)
        else:  # written (a connection whose close was seen is never used): it may have been acted
            # on, so only a model's policy with retry_after_send sends it again (RFC 9110 9.2.2)
            self.app.metrics.upstream_error(self.provider.name, "closed")
            provider_errors.log(self.provider.name, "closed the connection before answering")
            dispatch.attempt_failed(client, 502, f"provider {self.provider.name} closed the "
                                                 "connection before answering", "reset")

    def fail(self, status, message, kind=""):
        # type: (int, str, str) -> None
        """Give up on this exchange before anything was sent to the client."""
        client = self.client
        req = self.req
        self._abandon()
        if client is not None:
            if self.head_done and self.mode == DISCARD:  # the next attempt was decided already
                # (an exchange's client and request are set together)
                dispatch.resend(client, req)  # type: ignore[arg-type]
            else:
                dispatch.attempt_failed(client, status, message, kind)

    def fail_midstream(self):
        # type: () -> None
        """Give up after the response head went out: tell the client if we can, then close."""
        if not self.client_head_sent:  # it answered, then broke: it may have acted on the request
            self.fail(502, f"provider {self.provider.name} sent a broken response", "reset")
            return
        client = self.client
        req = self.req  # type: Request  # type: ignore[assignment]  # set with the client, checked below
        self._abandon()
        if client is None:
            return
        # a same-dialect stream that stopped between two events can still end with a whole one
        if self.mode == TRANSLATE_STREAM or (self.mode == REFRAME and self.event_stream
                                             and self.at_event_end):
            relay_translated.stream_failed(self, client, req)
        client.abort_response(req, self.status)
