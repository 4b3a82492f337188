"""Token usage read from the relayed bytes of a same-dialect response, for token budgets: the
counts of the "usage" objects, found by a byte scan, never by parsing the JSON."""
from sluice.bytescan import usage_counts

# usage_counts reads at most 12 digits: a larger count is not believed (the estimate is charged)
MAX_USAGE = 10 ** 12


def believed(prompt, completion):
    """Usage as a provider reported it, or (None, None) when it cannot be true (not a number,
    negative, huge): the request is then charged the estimate."""
    if (type(prompt) is int and type(completion) is int
            and 0 <= prompt <= MAX_USAGE and 0 <= completion <= MAX_USAGE):
        return prompt, completion
    return None, None


class UsageScan:
    """The usage counts of one response, scanned read by read (and across the reads' edges)."""
    __slots__ = ("counts", "frames", "tail", "event_stream")

    def __init__(self):
        self.counts = {}            # b"prompt_tokens" (...) -> the last count seen
        self.frames = 0             # SSE data frames seen, for an estimate when no usage comes
        self.tail = b""             # the end of the last read: a usage object may go on in the next
        self.event_stream = False   # the response is an SSE stream (set at its head)

    def feed(self, data):
        """Token counts live in "usage" objects: look only there (and across chunk edges)."""
        if self.event_stream:
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
            counts = self.counts
            for name, value in usage_counts(buf, i):
                counts[name] = int(value)
            self.tail = buf[i:] if len(buf) - i < 4096 else b""
        else:
            self.tail = data[-8:]

    def tokens(self, body_len, bytes_read):
        """(prompt, completion): the counts seen in either dialect, else an estimate from the
        request body's length and what was relayed (SSE frames, or bytes / 4)."""
        u = self.counts
        if b"prompt_tokens" in u or b"completion_tokens" in u:
            return u.get(b"prompt_tokens", 0), u.get(b"completion_tokens", 0)
        if b"input_tokens" in u or b"output_tokens" in u:
            return u.get(b"input_tokens", 0), u.get(b"output_tokens", 0)
        return body_len // 4, self.frames if self.event_stream else (bytes_read // 4)
