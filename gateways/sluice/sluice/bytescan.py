"""The byte scans on Sluice's request path, in pure Python: the reference.

Each function has a twin of the same name, arguments and answer in ``_bytescan.pyx``: C loops
over the buffer instead of regexes and bytes methods, as aiohttp's ``_http_parser.pyx`` stands
beside ``http_parser.py``. The twins are used when Sluice runs compiled (build.py builds both
kinds of module); ``SLUICE_PURE_PYTHON=1`` runs these. ``tests/test_sluice_bytescan.py``
proves that both give the same answers, on random, JSON-shaped and hostile bytes.
"""
from __future__ import annotations

import re
from types import SimpleNamespace

_DECIDED = (b"model", b"max_tokens", b"max_completion_tokens", b"n", b"stream")
# How each letter may be spelled for a parser that matches keys as Go's encoding/json does: in
# either ASCII case, and k, s also as U+212A KELVIN SIGN, U+017F LONG S (UTF-8), which fold to them.
_FOLDS = {ord("k"): rb"(?:[kK]|\xe2\x84\xaa)", ord("s"): rb"(?:[sS]|\xc5\xbf)"}


def _folded(word: bytes) -> bytes:
    return b"".join(_FOLDS.get(c) or (b"[%c%c]" % (c, c - 32) if 97 <= c <= 122 else bytes([c]))
                    for c in word)


# The keys Sluice decides on, spelled literally, anywhere (strings included), in order; or (the
# empty group) a key that folds onto one but is spelled otherwise: a string followed by a colon.
# Every decided key starts with m, n or s (or U+017F): the lookahead turns most strings away at
# their first byte.
_KEYS = re.compile(rb'"(?=[mMnNsS\xc5])(?:(' + b"|".join(_DECIDED) + rb')"|(?:'
                   + b"|".join(map(_folded, _DECIDED)) + rb')"(?=\s*:))')
# The escapes that can spell a decided key's character in some case: \u0040-\u007f (ASCII letters
# and "_"), and the two letters that fold to ASCII ones (U+212A, U+017F).
_LETTER_ESCAPE = re.compile(rb'\\u(?:00[4-7][0-9a-fA-F]|212[aA]|017[fF])')
_FIRST_MODEL = re.compile(rb'\s*\{\s*"model"\s*:\s*"([^"\\]*)"')  # the model as the first key
_COUNT = re.compile(rb'"\w+"\s*:\s*(\d{1,12})\s*[,}]')  # a key and a plain count as its value
_BRACKET = re.compile(rb'[\[\]{}]')
# the billed counts of both dialects' usage objects; at most 12 digits: a larger count is not believed
_USAGE = re.compile(rb'"(prompt_tokens|completion_tokens|input_tokens|output_tokens|cached_tokens'
                    rb'|cache_creation_input_tokens|cache_read_input_tokens)"\s*:\s*(\d{1,12})(?!\d)')


def scan_keys(data: bytes) -> list[bytes] | None:
    """The decided keys spelled literally in ``data``, in order and as often as they occur (the
    regex's non-overlapping matches), or None when an escape could spell one, or a key (a string
    then a colon) spells one in another case."""
    if data.find(b"\\u") >= 0 and _LETTER_ESCAPE.search(data) is not None:
        return None
    found: list[bytes] = _KEYS.findall(data)
    return None if b"" in found else found


def first_model_span(data: bytes) -> tuple[int, int] | None:
    """(start, end) of the model's value when ``"model"`` is the body's first key and its value
    a string without escapes, else None."""
    m = _FIRST_MODEL.match(data)
    return None if m is None else m.span(1)


def top_level_count(data: bytes, at: int) -> int | None:
    """The count (1 .. 10^12 - 1) at ``at`` (0 <= at <= len(data)) when it is surely the value of
    a member of the top-level object, else None. In valid JSON a quote with no backslash before
    it, whose string is followed by ':', starts a key; that key is at the top level when no
    bracket comes between the body's opening brace and it, or between its value and the body's
    closing brace."""
    m = _COUNT.match(data, at)
    if m is None or data[at - 1] == 92:  # a backslash: the quote may be inside a string
        return None
    count = int(m.group(1))
    if count < 1:
        return None
    if _BRACKET.search(data, data.find(b"{") + 1, at) is None:
        return count
    end = data.rfind(b"}")
    if _BRACKET.search(data, m.end(1), end) is None and not data[end + 1:].strip():
        return count
    return None


def usage_counts(data: bytes, start: int) -> list[tuple[bytes, bytes]]:
    """The (name, digits) pairs of the usage counts spelled in ``data`` from ``start`` on: the
    prompt and completion counts of both dialects, OpenAI's ``cached_tokens`` and Anthropic's
    ``cache_creation_input_tokens`` and ``cache_read_input_tokens``."""
    found: list[tuple[bytes, bytes]] = _USAGE.findall(data, start)
    return found


def known_head_body_start(data: bytes, prefix: bytes, suffix: bytes) -> int:
    """Where the body starts when ``data`` is exactly one request with a known head: ``prefix``,
    a Content-Length's digits, ``suffix`` (from the CRLF after them to the blank line) and as
    many bytes as the digits say; else -1."""
    if not data.startswith(prefix):
        return -1
    v = len(prefix)
    j = data.find(b"\r\n", v, v + 20)
    if j < 0 or not data[v:j].isdigit() or not data.startswith(suffix, j):
        return -1
    start = j + len(suffix)
    return start if int(data[v:j]) == len(data) - start else -1


REFERENCE = SimpleNamespace(scan_keys=scan_keys, first_model_span=first_model_span,
                            top_level_count=top_level_count, usage_counts=usage_counts,
                            known_head_body_start=known_head_body_start)

from sluice import compiled  # noqa: E402  (the package decides which build runs)

if compiled:
    from sluice._bytescan import first_model_span, known_head_body_start, scan_keys, top_level_count, usage_counts  # noqa: F401,F811,E402
