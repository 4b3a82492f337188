"""Incremental text/event-stream parsing: bytes in, (event, data) pairs out.

Linear in the bytes fed: each read is scanned once, and only the unfinished line is kept
between reads (as pieces, never re-joined per read). Lines end with CRLF, LF or a lone CR."""
from __future__ import annotations


class FrameTooLarge(ValueError):
    """An event grew past the parser's limit without its blank line."""


class SSEParser:
    """Feed bytes, get the (event, data) pairs of the events they complete."""
    __slots__ = ("max_frame", "partial", "partial_len", "frame_len", "event", "datas", "after_cr")

    def __init__(self, max_frame: int = 1 << 20) -> None:
        self.max_frame = max_frame
        self.partial: list[bytes] = []       # pieces of the line not ended yet
        self.partial_len = 0
        self.frame_len = 0      # bytes of the event's finished lines
        self.event: bytes | None = None
        self.datas: list[bytes] = []
        self.after_cr = False   # the last read ended with CR: an LF starting the next one ends nothing

    def feed(self, data: bytes) -> list[tuple[bytes | None, bytes]]:
        if self.after_cr and data[:1] == b"\n":
            data = data[1:]
        self.after_cr = data[-1:] == b"\r"
        if data.find(b"\r") >= 0:  # one line ending for the scan below
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        events: list[tuple[bytes | None, bytes]] = []
        start = 0
        find = data.find
        while True:
            i = find(b"\n", start)
            if i < 0:
                break
            if self.partial:
                self.partial.append(data[start:i])
                line = b"".join(self.partial)
                self.partial = []
                self.partial_len = 0
            else:
                line = data[start:i]
            start = i + 1
            if line:
                self._field(line)
            elif self.datas or self.event is not None:  # a blank line ends the event
                events.append((self.event, b"\n".join(self.datas)))
                self.event = None
                self.datas = []
                self.frame_len = 0
            else:
                self.frame_len = 0
        if start < len(data):
            rest = data[start:]
            self.partial.append(rest)
            self.partial_len += len(rest)
            if self.frame_len + self.partial_len > self.max_frame:
                raise FrameTooLarge(f"an SSE event over {self.max_frame} bytes")
        return events

    def _field(self, line: bytes) -> None:
        self.frame_len += len(line) + 1
        if self.frame_len > self.max_frame:
            raise FrameTooLarge(f"an SSE event over {self.max_frame} bytes")
        if line.startswith(b"data:"):
            v = line[5:]
            self.datas.append(v[1:] if v[:1] == b" " else v)
        elif line.startswith(b"event:"):
            self.event = line[6:].strip()
        # comments (":...") and other fields are ignored, as the SSE specification says
