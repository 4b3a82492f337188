"""The framing of what a client sends, read beside the parser: where a head (or a part of a
chunked body) ends, a head's size against the limits and its Host field, the transfer coding a
request names, a chunked body's chunks (counted), and its trailer section, counted against the
head limits and dropped.

llhttp reports a header or trailer field only once it is complete, and keeps a growing one
itself: so sizes are counted here, before the bytes are parsed.
"""
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sluice.client import ClientConn  # noqa: F401 (type comments)
    from sluice.request import HeaderDigest, Request  # noqa: F401 (type comments)

HEX_DIGITS = re.compile(rb"[0-9A-Fa-f]*")
MAX_SIZE_DIGITS = 15  # a longer chunk size is over any body limit (413), or 2^64 (the parser refuses it)
# chunks in one request body (a 4 MiB body in 64-byte chunks): each costs a step of Python here,
# so a body of tiny chunks would hold the loop for seconds (1,000,000 one-byte chunks: 17 s)
MAX_CHUNKS = 65536


def part_end(conn, data, pos):
    # type: (ClientConn, bytes, int) -> int
    """Where the head (or chunked body) part that starts at ``pos`` ends: after its CRLF CRLF,
    or the end of the read."""
    end = -1
    if pos == 0 and conn.read_tail:  # one that began in the previous read
        end = (conn.read_tail + data[:3]).find(b"\r\n\r\n")
        if end >= 0:
            end += 4 - len(conn.read_tail)
        conn.read_tail = b""
    if end < 0:
        end = data.find(b"\r\n\r\n", pos)
        end = len(data) if end < 0 else end + 4
    return end


def count_head_bytes(conn, data, pos, end):
    # type: (ClientConn, bytes, int, int) -> bool
    """The head grows by ``data[pos:end]``: False when it is over the limit (refused)."""
    size = conn.head_bytes + end - pos
    if size > conn.app.max_head:
        head_too_large(conn, data, pos)
        return False
    if not conn.head_bytes:
        conn.head_began = conn.t_rx
    conn.head_bytes = size
    if data.endswith(b"\r\n\r\n", pos, end) or (
            end - pos < 4 and (b"".join(conn.head_pieces[-3:]) + data[pos:end]).endswith(b"\r\n\r\n")):
        return host_ok(conn, data, pos, end)
    return True


def host_ok(conn, data, pos, end):
    # type: (ClientConn, bytes, int, int) -> bool
    """The head that ``data[pos:end]`` completes has one Host field, or none in an HTTP/1.0
    request: else it is refused with 400 (RFC 9112 3.2). Read from its bytes, before the parser:
    the header dict keeps one value per spelling."""
    head = data[pos:end]
    if conn.head_pieces:
        head = b"".join(conn.head_pieces) + head
    hosts = head.lower().count(b"\nhost:")
    if hosts == 1:
        return True
    if hosts == 0:
        line = head.lstrip(b"\r\n")
        if not line[:line.find(b"\r\n")].endswith(b" HTTP/1.1"):
            return True  # HTTP/1.0 needs none; anything else is the parser's to refuse
        conn._bad_request(400, "an HTTP/1.1 request needs a Host header")
    else:
        conn._bad_request(400, "more than one Host header")
    return False


def head_too_large(conn, data, pos):
    # type: (ClientConn, bytes, int) -> None
    # still on the request line (no CRLF yet) and it is longer than a URL may be: 414
    app = conn.app
    line = data.find(b"\r\n", pos)
    line = (len(data) if line < 0 else line) - pos
    if not conn.headers and sum(map(len, conn.url_parts)) + line > app.max_url and (
            not conn.head_bytes or line == len(data) - pos):
        conn._bad_request(414, f"request URL exceeds {app.max_url} bytes")
    else:
        conn._bad_request(431, f"request head exceeds {app.max_head} bytes")


def refuse_unknown_coding(conn, digest):
    # type: (ClientConn, HeaderDigest) -> bool
    """True (and the request refused with 501) unless its Transfer-Encoding names exactly one
    coding, chunked, on one header line: RFC 9112 6.1, a coding the server does not understand."""
    # (called when it has one)
    codings = [c.strip() for c in digest.transfer_encoding.split(b",") if c.strip()]  # type: ignore[union-attr]
    # "gzip" then "chunked" on two lines with the same spelling: one dict entry, two codings
    if len(codings) == 1 and codings[0].lower() == b"chunked" and (
            b"".join(conn.head_pieces).lower().count(b"\ntransfer-encoding:") == 1):
        return False
    conn._bad_request(501, "transfer codings other than chunked are not implemented")
    return True


class ChunkedFraming:
    """A chunked request body's framing, followed beside the parser to count its chunks and to
    know where its trailer section begins; and the trailer section's size and field count so far."""
    __slots__ = ("data_left", "size_digits", "on_digits", "in_trailers", "trailer_bytes",
                 "trailer_fields", "chunks")

    def __init__(self):
        # type: () -> None
        self.data_left = 0         # bytes of the current chunk and its CRLF still to come
        self.size_digits = b""     # the chunk-size line's hex digits so far (no leading zeros)
        self.on_digits = True      # still on those digits (not on a chunk extension)
        self.in_trailers = False
        self.trailer_bytes = 0
        self.trailer_fields = 0
        self.chunks = 0

    def trailer_share(self, data, pos, end):
        # type: (bytes, int, int) -> int
        """How many of the body's next bytes, ``data[pos:end]``, belong to its trailer section.
        Stops at the chunk over MAX_CHUNKS (the body is refused)."""
        i = pos
        while i < end and not self.in_trailers:
            if self.data_left:
                step = self.data_left if self.data_left < end - i else end - i
                self.data_left -= step
                i += step
                continue
            lf = data.find(b"\n", i, end)
            stop = end if lf < 0 else lf
            if self.on_digits:
                # ([...]*: it always matches)
                digits_end = HEX_DIGITS.match(data, i, stop).end()  # type: ignore[union-attr]
                digits = data[i:digits_end]
                if not self.size_digits:
                    digits = digits.lstrip(b"0")
                self.size_digits = (self.size_digits + digits)[:MAX_SIZE_DIGITS]
                self.on_digits = digits_end == stop and lf < 0
            if lf < 0:
                return 0
            i = lf + 1
            size = int(self.size_digits or b"0", 16)
            self.size_digits = b""
            self.on_digits = True
            if size:
                self.data_left = size + 2
                self.chunks += 1
                if self.chunks > MAX_CHUNKS:
                    return 0
            else:
                self.in_trailers = True  # the last chunk: what follows is the trailer section
        return end - i if self.in_trailers else 0


def count_trailer_bytes(conn, data, pos, end):
    # type: (ClientConn, bytes, int, int) -> bool
    """The chunked body being read grows by ``data[pos:end]``: False when it now has more than
    MAX_CHUNKS chunks, or its trailer section is over max_header_bytes (refused before the
    parser holds it)."""
    f = conn.chunked
    if f is None:
        f = conn.chunked = ChunkedFraming()
    n = f.trailer_share(data, pos, end)
    if f.chunks > MAX_CHUNKS:
        conn._bad_request(413, f"request body has more than {MAX_CHUNKS} chunks")
        return False
    if n:
        f.trailer_bytes += n
        if f.trailer_bytes > conn.app.max_head:
            conn._bad_request(431, f"request trailer section exceeds {conn.app.max_head} bytes")
            return False
    return True


def drop_trailer_fields(conn, r):
    # type: (ClientConn, Request) -> bool
    """The trailer fields the parser reported (into ``conn.headers``) are counted and dropped,
    never forwarded: False when there are more than max_headers of them (refused)."""
    f = conn.chunked  # type: ChunkedFraming  # type: ignore[assignment]  # fields after a head: a chunked body's trailers
    f.trailer_fields += len(conn.headers)
    conn.headers.clear()
    if f.trailer_fields > conn.app.max_headers:
        conn._bad_request(431, f"more than {conn.app.max_headers} request header fields in the "
                               "trailer section", r)
        return False
    return True
