"""Incremental text/event-stream parsing: bytes in, (event, data) pairs out."""


class SSEParser:
    """Feed bytes, get the (event, data) pairs of the events they complete."""
    __slots__ = ("buf",)

    def __init__(self):
        self.buf = b""

    def feed(self, data):
        buf = self.buf + data if self.buf else data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        events = []
        start = 0
        find = buf.find
        while True:
            i = find(b"\n\n", start)
            if i < 0:
                break
            block = buf[start:i]
            start = i + 2
            event = None
            datas = []
            for line in block.split(b"\n"):
                if line.startswith(b"data:"):
                    v = line[5:]
                    datas.append(v[1:] if v[:1] == b" " else v)
                elif line.startswith(b"event:"):
                    event = line[6:].strip()
            if datas or event is not None:
                events.append((event, b"\n".join(datas)))
        self.buf = buf[start:]
        return events
