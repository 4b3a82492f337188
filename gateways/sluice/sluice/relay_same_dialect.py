"""Relaying a same-dialect response: its head rebuilt for the client (the allowed provider
headers, the overhead header, the framing), and sent together with the body bytes of the read
that completed it, nothing past the response's end."""
import re
from typing import TYPE_CHECKING

from sluice.http import content_length_at, drop_lines, without_connection_options

if TYPE_CHECKING:
    from sluice.client import ClientConn  # noqa: F401 (type comments)
    from sluice.request import Request  # noqa: F401 (type comments)
    from sluice.upstream import UpstreamConn  # noqa: F401 (type comments)

_FRAMING = (b"transfer-encoding:", b"content-length:")
_BLANK_LINES = (b"\r\n\r\n", b"\n\n", b"\r\r")  # the ends of an SSE event
_USAGE_OBJECT = re.compile(rb'"usage"\s*:\s*\{')
_NO_CHOICES = re.compile(rb'"choices"\s*:\s*\[\s*\]')
STREAM_FAILED_ANTHROPIC = (b'event: error\ndata: {"type":"error","error":{"type":"api_error",'
                           b'"message":"provider stream failed"}}\n\n')
STREAM_FAILED_OPENAI = (b'data: {"error":{"message":"provider stream failed","type":"api_error",'
                        b'"param":null,"code":null}}\n\n')


def relay_head(u, req, head, low, length_at, rest, reframe, now):
    # type: (UpstreamConn, Request, bytes, bytes, int, bytes, bool, float) -> None
    """The head of ``u``'s response as the client gets it, kept until the read is parsed
    (``u.pending_head``, see ``write_head``)."""
    app = u.app
    keep = req.keep_alive and not app.stopping
    # only the allowed provider headers reach the client: never hop-by-hop ones, nor the ones
    # its Connection header names
    kept = low
    if u.connection_at >= 0:
        named = without_connection_options(head, low, u.connection_at)
        if named is not None:
            head = named
            kept = named.lower()
    m = u.provider.response_filter.search(kept)
    if m is not None:
        head = drop_lines(head, kept, u.provider.response_filter, m)
    if reframe:  # chunked, close-delimited or stripped: the body is re-framed by Sluice (see ``reframed``)
        u.chunked_to_client = req.http11
        u.at_event_end = True
        if not req.http11:
            keep = False
        if u.close_delimited or not req.http11 or length_at >= 0:  # a chunked provider head is kept as it is
            head = _without_framing(head)
            if u.chunked_to_client:
                head += b"transfer-encoding: chunked\r\n"
    elif u.status == 204 or u.status == 304:  # no body: no framing line a client could read one by
        head = _without_framing(head)
    if not head.startswith(b"HTTP/1.1 "):  # Sluice's own version, not the provider's (RFC 9110 6.2)
        head = b"HTTP/1.1" + head[head.find(b" "):]
    req.keep_alive = keep
    extra = b"" if keep else b"connection: close\r\n"
    us = req.overhead_us = (req.own_time + (now - u.t_rx)) * 1e6
    if app.overhead_header:
        extra = b"x-gateway-overhead-us: %d\r\n" % us + extra
    u.pending_head = (head, extra, rest, low, length_at)


def _without_framing(head):
    # type: (bytes) -> bytes
    return b"\r\n".join([ln for ln in head.split(b"\r\n") if not ln.lower().startswith(_FRAMING)])


def write_head(u, client, past_end):
    # type: (UpstreamConn, ClientConn, bool) -> None
    """The relayed head and the body bytes of its read, written once the read is parsed (one
    send for both): nothing past the response's end goes out (``past_end``: bytes followed it)."""
    head, extra, rest, low, length_at = u.pending_head  # type: ignore[misc]  # made by relay_head
    u.pending_head = None
    if u.body_left < 0 or u.strip_usage:  # re-framed (see relay_head)
        u.body_left = -1  # the parser's pieces are exact: nothing past the response's end is relayed
        rest = reframed(u, not u.response_open)
    else:
        u.body_parts.clear()  # the raw bytes are relayed
        if u.response_open:  # Content-Length: the body goes on in later reads
            u.body_left = content_length_at(low, length_at) - len(rest)
        elif past_end or u.status == 204 or u.status == 304:  # only what the head framed
            bodiless = length_at < 0 or u.status == 204 or u.status == 304
            rest = b"" if bodiless else rest[:content_length_at(low, length_at)]
        if u.usage_scan is not None and rest:
            u.usage_scan.feed(rest)
    u.client_head_sent = True
    client.write(b"".join((head, extra, b"\r\n", rest)))


def reframed(u, done):
    # type: (UpstreamConn, bool) -> bytes
    """The body pieces the parser took from the last read, framed by Sluice (``done``: with the
    body's end). Chunk extensions and trailers never pass: llhttp parses and drops them. This
    costs one copy of the body per read; filtering the provider's own framing instead would mean
    scanning every chunk line in Python, with state across reads."""
    parts = u.body_parts
    body = b"".join(parts)
    parts.clear()
    if u.usage_scan is not None and body:
        u.usage_scan.feed(body)
    if u.strip_usage:
        body = _without_usage_chunk(u, body, done)
    elif u.event_stream and u.status == 200:
        body = _whole_events(u, body, done)
    if body and u.event_stream:  # whether a failure could still add a whole event (see fail_midstream)
        u.at_event_end = body.endswith((b"\n\n", b"\r\n\r\n", b"\r\r"))
        if u.at_event_end:  # looked through once the body ends, not at every read
            u.last_events = body
    if done and u.event_stream and u.status == 200 and not _ends_stream(u.last_events):
        # the provider ended its body without its stream's last event: a truncated answer, which
        # the client is told of rather than given as a clean end
        body += stream_failed_event(u.req.dialect)  # type: ignore[union-attr]  # in an exchange
    if not u.chunked_to_client:  # an HTTP/1.0 client: the body up to the close
        return body
    if done:
        return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n"
    return b"%x\r\n%s\r\n" % (len(body), body) if body else b""


def _whole_events(u, body, done):
    # type: (UpstreamConn, bytes, bool) -> bytes
    """The whole events of ``u``'s stream so far (all of it once ``done``): the start of an event
    is held until its end comes, so that a failure can still end the client's stream with a whole
    error event. Past max_sse_frame_bytes it goes on (a provider cannot make Sluice hold more).
    Held pieces are joined once, and only the new bytes are searched: a large event trickled in
    small reads costs about what it costs in one."""
    parts = u.held_parts
    if not parts:
        if done or body.endswith(_BLANK_LINES):  # the usual read: whole events only
            return body
        end = _events_end(body, len(body))
        if len(body) - end > u.app.max_sse_frame:
            return body
        parts.append(body[end:])
        u.held_size = len(body) - end
        return body[:end]
    if done or body.endswith(_BLANK_LINES):
        end = len(body)
    else:  # an event's end in this read, or across its start (a separator's first bytes held)
        tail = parts[-1][-3:]
        look = tail + body
        end = _events_end(look, len(look)) - len(tail)
        if end <= 0:
            parts.append(body)
            u.held_size += len(body)
            if u.held_size <= u.app.max_sse_frame:
                return b""
            body = b""
            end = 0
    parts.append(body[:end])
    held = b"".join(parts)
    parts.clear()
    u.held_size = 0
    if end < len(body):
        parts.append(body[end:])
        u.held_size = len(body) - end
    return held


def _ends_stream(events):
    # type: (bytes) -> bool
    """Whether the last of these whole events ends its stream: OpenAI's ``data: [DONE]``,
    Anthropic's ``message_stop``, or either dialect's error event (only the last event is read)."""
    sep = b"\n\n" if events.endswith(b"\n\n") else b"\r\n\r\n" if events.endswith(b"\r\n\r\n") else b"\r\r"
    start = events.rfind(sep, 0, len(events) - len(sep)) + len(sep)
    if start < len(sep):
        start = 0
    last = events[start:start + 40]
    return (last.find(b"[DONE]") >= 0 or last.find(b"message_stop") >= 0
            or last.find(b"error") >= 0)


def stream_failed_event(dialect):
    # type: (str) -> bytes
    """The event that tells a client in ``dialect`` its stream failed: OpenAI's SDK raises an
    APIError for an error object in a ``data:`` event, Anthropic's for ``event: error``."""
    return STREAM_FAILED_ANTHROPIC if dialect == "anthropic" else STREAM_FAILED_OPENAI


def _without_usage_chunk(u, body, done):
    # type: (UpstreamConn, bytes, bool) -> bytes
    """The whole events of ``u``'s stream so far (all of it once ``done``) without the usage
    chunk Sluice asked for (``choices`` empty, ``usage`` an object); an event not ended yet is
    held until its end comes, or until it is over max_sse_frame_bytes (no usage chunk is that
    large: it goes on, and a provider cannot make Sluice hold more)."""
    held = u.held  # the start of an event not ended yet: no event ends in it
    # where the last event ending in this read ends, looked for in this read only (and across its
    # edge with the held bytes): an event trickled in small reads is looked through once, not
    # once a read. A read mostly ends with an event: then no separator is looked for (two of the
    # three never occur in a stream, and each look reads it all)
    edge = bytes(held[len(held) - 3:]) if held else b""
    look = edge + body if edge else body
    end = len(look) if look.endswith(_BLANK_LINES) else _events_end(look, len(look))
    end -= len(edge)
    if end > 0:
        if held:
            held += body[:end]
            events = bytes(held)
            held.clear()
        else:
            events = body[:end] if end < len(body) else body
        if end < len(body):
            held += body[end:]
    else:
        events = b""
        held += body
    if done or len(held) > u.app.max_sse_frame:
        events += held
        held.clear()
    m = _USAGE_OBJECT.search(events)
    while m is not None:
        at = m.start()
        start = _events_end(events, at)
        stop = _event_stop(events, at)
        if _NO_CHOICES.search(events, start, stop) is not None:
            events = events[:start] + events[stop:]
            m = _USAGE_OBJECT.search(events, start)
        else:
            m = _USAGE_OBJECT.search(events, stop)
    return events


def _events_end(data, before):
    # type: (bytes, int) -> int
    """Where the last event ending before ``before`` ends (0: none): after its blank line. (A
    Python call when compiled, too: a test counts the bytes it looks through.)"""
    end = 0
    for sep in _BLANK_LINES:
        i = data.rfind(sep, 0, before)
        if i >= 0 and i + len(sep) > end:
            end = i + len(sep)
    return end


def _event_stop(data, at):
    # type: (bytes, int) -> int
    """Where the event holding ``at`` ends: after its blank line, or at the data's end."""
    stop = len(data)
    for sep in _BLANK_LINES:
        i = data.find(sep, at)
        if 0 <= i and i + len(sep) < stop:
            stop = i + len(sep)
    return stop
