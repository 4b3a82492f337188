"""Token usage read from the relayed bytes of a same-dialect response, for token budgets: the
counts of the "usage" objects, found by a byte scan, never by parsing the JSON; and what a
provider's usage costs a key (``weighed``)."""
import re
from typing import TYPE_CHECKING

from sluice.bytescan import usage_counts

if TYPE_CHECKING:
    # what one token of each kind costs, in thousandths: prompt, completion, cache_write, cache_read
    Weights = tuple[int, ...]
    # (prompt side, completion) charged, or (None, None): not known, the reservation is charged
    Charged = tuple[int, int] | tuple[None, None]

# usage_counts reads at most 12 digits: a larger count is not believed (the reservation is charged)
MAX_USAGE = 10 ** 12
# the completion count of a usage object, in either dialect: the one a provider sends last
_COMPLETION = (b"completion_tokens", b"output_tokens")
# Anthropic's stream reports its final usage in this event, after message_start's provisional one
_DELTA = b"message_delta"
# the end of a unary body kept to read its usage from, once the body is whole: the usage object
# (and what a provider puts after it) fits; a body whose usage is not in it is charged the
# reservation
UNARY_TAIL = 16384
_USAGE_KEY = re.compile(rb'"usage"\s*:\s*\{')
# a JSON string or a bracket: read from outside any string, the brackets' depth
_STRING_OR_BRACKET = re.compile(rb'"(?:[^"\\]++|\\.)*+"|[{}\[\]]')
# the usual ending, matched whole in one call: the usage object (objects nested one deep in it,
# strings read whole), then only scalar members up to the body's closing brace
# (runs of bytes, possessive: the engine takes a run in one step and never backtracks into it)
_STRING = rb'"(?:[^"\\]++|\\.)*+"'
_USUAL_END = re.compile(rb'(\{(?:[^{}"]++|' + _STRING + rb'|\{(?:[^{}"]++|' + _STRING + rb')*+\})*+\})'
                        rb'(?:\s*,\s*' + _STRING + rb'\s*:\s*(?:' + _STRING + rb'|[-+.\w]++))*+\s*\}\s*')


def believed(*counts):
    # type: (*object) -> bool
    """Whether usage counts as a provider reported them can be true (integers, 0 to 10^12)."""
    for c in counts:
        if type(c) is not int or not 0 <= c <= MAX_USAGE:
            return False
    return True


def weighed(weights, prompt, completion, cache_write, cache_read):
    # type: (Weights, int, int, int, int) -> tuple[int, int]
    """(prompt side, completion) charged for billed counts: each times its kind's weight
    (``[token_weights]``, in thousandths: prompt, completion, cache_write, cache_read), rounded
    up. ``prompt`` excludes the cached counts; the prompt side includes them. Integers only: a
    float sum could round 1600 x 0.1 up to 161."""
    wp, wc, ww, wr = weights
    return (-(-(prompt * wp + cache_write * ww + cache_read * wr) // 1000),
            -(-(completion * wc) // 1000))


def openai_usage(weights, prompt, completion, cached):
    # type: (Weights, int, int, int) -> tuple[int, int]
    """OpenAI's usage charged: its ``cached_tokens`` are part of ``prompt_tokens``, billed as
    cache reads."""
    cached = min(cached, prompt)
    return weighed(weights, prompt - cached, completion, 0, cached)


def top_level_usage(tail):
    # type: (bytes) -> tuple[int, int] | None
    """(start, end) of the usage object ending a unary body's ``tail`` when it is the body's own
    (its last "usage" key, at the top level: after its object only the body's closing brace
    closes anything), else None. In JSON a literal ``"usage"`` followed by a colon is a key,
    never inside a string (quotes there are escaped): from it on, strings are read whole."""
    i = tail.rfind(b'"usage"')
    m = _USAGE_KEY.match(tail, i) if i >= 0 else None
    if m is None:
        return None
    usual = _USUAL_END.fullmatch(tail, m.end() - 1)
    if usual is not None:  # one match where most bodies end, not a step a token
        return i, usual.end(1)
    depth = 0
    end = -1
    for t in _STRING_OR_BRACKET.finditer(tail, m.end() - 1):
        c = tail[t.start()]
        if c == 34:  # a string
            continue
        if c == 123 or c == 91:
            depth += 1
            continue
        depth -= 1
        if depth == 0 and end < 0:
            end = t.end()  # the usage object's close
        elif depth < 0:  # the object holding it closes: the body's, when nothing follows
            return (i, end) if c == 125 and end >= 0 and not tail[t.end():].strip() else None
    return None


class UsageScan:
    """The usage counts of one response, scanned read by read (and across the reads' edges); of
    a unary body, read once it is whole (``end``)."""
    __slots__ = ("counts", "tail", "weights", "final", "provisional", "edge", "unary")

    def __init__(self, weights):
        # type: (Weights) -> None
        self.counts = {}  # type: dict[bytes, int]  # b"prompt_tokens" (...) -> the last count seen
        self.tail = b""             # the end of the last read: a usage object may go on in the next
        self.weights = weights      # the weights per kind of token (see ``weighed``)
        self.final = False          # the usage that ends the response was seen
        # an Anthropic stream before its message_delta: the counts are message_start's, which
        # say output_tokens 1 (set at the response head)
        self.provisional = False
        self.edge = b""             # the last bytes of the last read: the event's name may go on
        # not an event stream (set at the response head): only the end of the body is kept (in
        # ``tail``), its usage read once it is whole; a tool call's input before it is JSON a
        # client can shape, and may hold a usage object of its own
        self.unary = False

    def feed(self, data):
        # type: (bytes) -> None
        """Body bytes as the provider sent them (never Sluice's chunk framing)."""
        if self.unary:
            if len(data) >= UNARY_TAIL:
                self.tail = data[len(data) - UNARY_TAIL:]
            else:
                tail = self.tail + data
                self.tail = tail if len(tail) <= UNARY_TAIL else tail[len(tail) - UNARY_TAIL:]
            return
        if self.provisional:
            j = data.find(_DELTA)
            if j >= 0:
                after = j + len(_DELTA)
            else:
                j = (self.edge + data[:len(_DELTA)]).find(_DELTA)
                after = j + len(_DELTA) - len(self.edge) if j >= 0 else -1
                self.edge = data[1 - len(_DELTA):]
            if after >= 0:  # message_start's usage before it, the final usage after it
                self._scan(data[:after])
                self.provisional = False
                self.tail = b""
                data = data[after:]
        self._scan(data)

    def _scan(self, data):
        # type: (bytes) -> None
        """Token counts live in "usage" objects: look only there (and across chunk edges)."""
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
            found = usage_counts(buf, i)
            n = len(found)
            if n and 48 <= buf[len(buf) - 1] <= 57:
                n -= 1  # the last count ends the read: its next digits may be in the next one
            k = 0
            for name, value in found:
                counts[name] = int(value)
                if k < n and name in _COMPLETION and not self.provisional:
                    self.final = True  # a unary body's, OpenAI's last chunk's, message_delta's
                k += 1
            if i == 0:  # a tail went on: only the last usage object can go on again (OpenAI's
                # stream says "usage": null in every chunk: a tail from the first would grow by
                # every read, each scanned again)
                i = buf.rfind(b'"usage"')
            self.tail = buf[i:] if len(buf) - i < 4096 else b""
        else:
            self.tail = data[-8:]

    def end(self):
        # type: () -> None
        """The body is whole: a unary body's usage is read from its end. (Never called for a body
        cut before its end: its usage stays unknown, the reservation is charged.)"""
        if not self.unary:
            return
        tail = self.tail
        span = top_level_usage(tail)
        if span is None:
            return
        counts = self.counts
        for name, value in usage_counts(tail[:span[1]], span[0]):
            counts[name] = int(value)
            if name in _COMPLETION:
                self.final = True

    def tokens(self):
        # type: () -> Charged
        """(prompt side, completion) charged for the final usage in either dialect (see
        ``weighed``), or (None, None) when it was not seen: the reservation is charged."""
        if not self.final:
            return None, None
        u = self.counts
        if b"completion_tokens" in u:
            return openai_usage(self.weights, u.get(b"prompt_tokens", 0), u[b"completion_tokens"],
                                u.get(b"cached_tokens", 0))
        return weighed(self.weights, u.get(b"input_tokens", 0), u.get(b"output_tokens", 0),
                       u.get(b"cache_creation_input_tokens", 0), u.get(b"cache_read_input_tokens", 0))
