"""A repeated request head, taken without the parser.

A client on a keep-alive connection usually sends every request with the same head but for
Content-Length. When a read held exactly one such request, parsed, its head is remembered split
around the length's digits; a later read that is exactly one request with that head is taken
with two byte comparisons, the digits and a slice. Anything else is parsed.
"""
from typing import TYPE_CHECKING

from sluice.bytescan import known_head_body_start

if TYPE_CHECKING:
    from sluice.request import Request  # noqa: F401 (type comments)


class KnownHead:
    """A request head seen before: split around its Content-Length value, and what it said."""
    __slots__ = ("prefix", "suffix", "head")

    def __init__(self, data, digits_at, digits_end, head_end, r):
        # type: (bytes, int, int, int, Request) -> None
        self.prefix = data[:digits_at]          # the head up to the length's digits
        self.suffix = data[digits_end:head_end]  # from the CRLF after the digits to CRLF CRLF
        self.head = r.with_head(0.0)            # what the head said (a Request without a body)

    def request(self, data, t, max_body):
        # type: (bytes, float, int) -> Request | None
        """The request ``data`` holds when it is exactly one request with this head, else None."""
        start = known_head_body_start(data, self.prefix, self.suffix)
        if start < 0:
            return None
        content_length = len(data) - start
        if content_length > max_body:
            return None
        r = self.head.with_head(t)
        r.content_length = content_length
        r.body = data[start:]
        return r


def learn(r, data, expect_continue):
    # type: (Request, bytes, bool) -> KnownHead | None
    """The head of ``r`` when the read ``data`` was exactly that one request, parsed, and its head
    can be taken again this way; else None."""
    if r.content_length < 0 or expect_continue or not r.keep_alive or r.upgrade:
        return None  # no length, Expect: 100-continue, or the last request of the connection
    end = data.find(b"\r\n\r\n") + 4
    if end < 4 or end + r.content_length != len(data):
        return None
    low = data[:end].lower()
    i = low.find(b"\r\ncontent-length:")
    if i < 0 or low.find(b"\r\ncontent-length:", i + 1) >= 0:
        return None
    v = i + 17
    while low[v] in b" \t":
        v += 1
    j = data.find(b"\r\n", v)
    if not data[v:j].isdigit():
        return None
    return KnownHead(data, v, j, end, r)
