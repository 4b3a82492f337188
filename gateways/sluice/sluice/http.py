"""Byte-level HTTP/1.1 helpers: response heads, errors in each client dialect, and what the
upstream side reads in a provider's response head."""
import re
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    import asyncio  # noqa: F401 (type comments)
    from collections.abc import Sequence  # noqa: F401 (type comments)

LINGER_S = 2.0  # after a last response, what the client still sends is read and dropped this long

REASONS = {
    100: b"Continue", 200: b"OK", 201: b"Created", 204: b"No Content", 400: b"Bad Request",
    401: b"Unauthorized", 403: b"Forbidden", 404: b"Not Found", 405: b"Method Not Allowed",
    408: b"Request Timeout", 413: b"Payload Too Large", 429: b"Too Many Requests",
    431: b"Request Header Fields Too Large", 499: b"Client Closed Request",
    500: b"Internal Server Error", 501: b"Not Implemented", 502: b"Bad Gateway", 503: b"Service Unavailable",
    504: b"Gateway Timeout", 505: b"HTTP Version Not Supported", 529: b"Overloaded",
}

STATUS_LINES = {code: b"HTTP/1.1 %d %s\r\n" % (code, reason) for code, reason in REASONS.items()}


def status_line(code):
    # type: (int) -> bytes
    line = STATUS_LINES.get(code)
    if line is None:
        line = b"HTTP/1.1 %d Unknown\r\n" % code
    return line


# OpenAI error "type" and "code" per status; Anthropic error "type" per status.
_OPENAI_TYPES = {
    400: ("invalid_request_error", None), 401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", "model_not_allowed"), 404: ("invalid_request_error", "model_not_found"),
    405: ("invalid_request_error", "method_not_allowed"), 408: ("invalid_request_error", "request_timeout"),
    413: ("invalid_request_error", "request_too_large"), 429: ("rate_limit_error", "rate_limit_exceeded"),
    500: ("api_error", "internal_error"), 501: ("invalid_request_error", "not_implemented"),
    502: ("api_error", "upstream_unavailable"),
    503: ("api_error", "overloaded"), 504: ("api_error", "upstream_timeout"),
    529: ("api_error", "overloaded"),
}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "not_found_error", 405: "invalid_request_error", 408: "timeout_error",
    413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
    501: "invalid_request_error", 502: "api_error",
    503: "overloaded_error", 504: "timeout_error", 529: "overloaded_error",
}


def error_body(dialect, status, message, code=None):
    # type: (str, int, str, str | None) -> bytes
    if dialect == "anthropic":
        etype = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return orjson.dumps({"type": "error", "error": {"type": etype, "message": message}})
    etype, default_code = _OPENAI_TYPES.get(
        status, ("api_error" if status >= 500 else "invalid_request_error", None))
    return orjson.dumps({"error": {"message": message, "type": etype, "param": None,
                                   "code": code or default_code}})


def response(status, body, content_type=b"application/json", extra=b"", close=False):
    # type: (int, bytes, bytes, bytes, bool) -> bytes
    """A complete response with Content-Length; ``extra`` is raw header lines."""
    return b"".join((
        status_line(status),
        b"content-type: ", content_type, b"\r\ncontent-length: ", b"%d" % len(body), b"\r\n",
        extra,
        b"connection: close\r\n\r\n" if close else b"\r\n",
        body,
    ))


def linger(transport, loop):
    # type: (asyncio.Transport, asyncio.AbstractEventLoop) -> None
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


# hop-by-hop fields: never relayed, whatever the allow-list admits (RFC 9110 7.6.1); the framing
# ones are Sluice's own (kept by the filter, rewritten by the relay)
HOP_BY_HOP = ("connection", "keep-alive", "proxy-connection", "proxy-authenticate", "te", "trailer",
              "upgrade")


def response_filter(names):
    # type: (Sequence[str]) -> re.Pattern[bytes]
    """A regex matching the provider response header lines not to relay (on the lowercased head):
    every line whose name is not allowed, or is hop-by-hop. The framing headers are always kept."""
    exact = [n for n in names if not n.endswith("*")] + ["content-length", "transfer-encoding"]
    prefixes = tuple(n[:-1] for n in names if n.endswith("*"))
    # the lookahead for hop-by-hop names only when the allow-list admits one: none by default
    hop = [re.escape(h.encode()) + rb"[ \t]*:" for h in HOP_BY_HOP if h in exact or h.startswith(prefixes)]
    alts = [re.escape(n.encode()) + rb"[ \t]*:" for n in exact] + [re.escape(p.encode()) for p in prefixes]
    keep = b"|".join(alts)
    if hop:
        keep = rb"(?!" + b"|".join(hop) + rb")(?:" + keep + rb")"
    return re.compile(rb"\r\n(?!(?:" + keep + rb")|\Z)[^\r\n]*")


def without_connection_options(head, low, i):
    # type: (bytes, bytes, int) -> bytes | None
    """``head`` without the fields its Connection header lines (the first at ``i`` in ``low``, its
    lowercased copy) name: hop-by-hop, never relayed (RFC 9110 7.6.1). None when they name none
    but close and keep-alive (the common case: nothing to drop)."""
    names = set()
    while i >= 0:
        end = low.find(b"\r", i + 1)
        for option in low[low.find(b":", i) + 1:end].split(b","):
            names.add(option.strip())
        i = low.find(b"\nconnection:", end)
    names.difference_update((b"", b"close", b"keep-alive"))
    if not names:
        return None
    return b"\r\n".join([ln for ln in head.split(b"\r\n") if ln.split(b":", 1)[0].lower() not in names])


def chunk(data):
    # type: (bytes) -> bytes
    """``data`` as one chunk of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def content_length_at(head, i):
    # type: (bytes, int) -> int
    """The Content-Length value of the header line at ``i`` (llhttp checked it is a number)."""
    return int(head[head.find(b":", i) + 1:head.find(b"\r", i)])


def says_close(low, i):
    # type: (bytes, int) -> bool
    """Whether the Connection header at ``i`` of a lowercased head says close."""
    return low.find(b"close", i, low.find(b"\n", i + 1)) >= 0


def drop_lines(head, low, drop_re, m):
    # type: (bytes, bytes, re.Pattern[bytes], re.Match[bytes] | None) -> bytes
    """``head`` without the lines ``drop_re`` finds in its lowercased copy ``low`` (``m``: the
    first match)."""
    out = []
    pos = 0
    while m is not None:
        out.append(head[pos:m.start()])
        pos = m.end()
        m = drop_re.search(low, pos)
    out.append(head[pos:])
    return b"".join(out)


def chunked_last(low, i):
    # type: (bytes, int) -> bool
    """Whether chunked is the last coding of the Transfer-Encoding header at ``i`` of a lowercased
    head (else a response's body runs to the close, RFC 9112 6.3)."""
    value = low[low.find(b":", i) + 1:low.find(b"\r", i)]
    return value.rsplit(b",", 1)[-1].strip() == b"chunked"
