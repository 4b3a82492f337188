"""What the two client dialects mean on the wire: each one's chat path, the SSE frames that
carry text and end a stream, and the shape of its error body (how a failed request's body is
classed). The load generator, the statistics and the report read these; the Locust processes
import this module, so it uses the standard library only."""
from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Dialect:
    name: str
    chat_path: str           # the path a client of this dialect calls
    content_frame: str       # regex (bytes) that an SSE data line carrying text matches
    done_frame: str          # regex (bytes) of the data line that ends a stream
    unary_marker: str        # bytes every well-formed unary answer contains


DIALECTS = {
    "openai": Dialect("openai", "/v1/chat/completions",
                      content_frame=r'"content"\s*:\s*"[^"]', done_frame=r"^data:\s*\[DONE\]\s*$",
                      unary_marker='"choices"'),
    "anthropic": Dialect("anthropic", "/v1/messages",
                         content_frame=r'"text_delta"\s*,\s*"text"\s*:\s*"[^"]',
                         done_frame=r'^data:.*"type"\s*:\s*"message_stop"',
                         unary_marker='"content"'),
}
# The generation paths the mock serves (with and without the /v1 prefix: some gateways strip it).
GENERATION_PATHS = tuple(p for d in DIALECTS.values()
                         for p in (d.chat_path, d.chat_path.removeprefix("/v1")))

# A failed request's body, as the load generator judges it (at most this many bytes of it): in
# the error shape of the client's dialect, JSON of another shape, or no JSON at all (empty, text,
# HTML, or no response).
ERROR_BODY_PREFIX_BYTES = 16 * 1024
ERROR_BODY_CLASSES = ("client", "other", "none")


def _openai_error(doc) -> bool:
    """``{"error": {"message": str, "type": ...}}``; Anthropic's marker ``"type": "error"`` is
    another dialect's body, even though its ``error`` has the same two keys."""
    error = doc.get("error")
    return (doc.get("type") != "error" and isinstance(error, dict)
            and isinstance(error.get("message"), str) and "type" in error)


def _anthropic_error(doc) -> bool:
    """``{"type": "error", "error": {"type": str, "message": str}}``."""
    error = doc.get("error")
    return (doc.get("type") == "error" and isinstance(error, dict)
            and isinstance(error.get("type"), str) and isinstance(error.get("message"), str))


ERROR_SHAPES = {"openai": _openai_error, "anthropic": _anthropic_error}


def error_body_dialect(dialect: str, body: bytes | None) -> str:
    """One of ERROR_BODY_CLASSES for a failed request's body, judged on its first
    ERROR_BODY_PREFIX_BYTES: a JSON body cut there is too long for an error of the dialect
    ("other")."""
    head = (body or b"")[:ERROR_BODY_PREFIX_BYTES]
    try:
        doc = json.loads(head)
    except ValueError:   # not JSON, not UTF-8, empty, or cut at the prefix
        cut = len(body or b"") > ERROR_BODY_PREFIX_BYTES and head.lstrip()[:1] in (b"{", b"[")
        return "other" if cut else "none"
    return "client" if isinstance(doc, dict) and ERROR_SHAPES[dialect](doc) else "other"


# The characters of assistant content a client assembles: what the provider's
# ``content_chars_sent`` counts on its side, whatever a system re-chunked or translated between.
def _openai_frame_chars(doc) -> int:
    return sum(_text_len((c.get("delta") or {}).get("content"))
               for c in doc.get("choices") or () if isinstance(c, dict))


def _anthropic_frame_chars(doc) -> int:
    delta = doc.get("delta")
    return _text_len(delta.get("text")) if isinstance(delta, dict) else 0


def _openai_unary_chars(doc) -> int:
    return sum(_text_len((c.get("message") or {}).get("content"))
               for c in doc.get("choices") or () if isinstance(c, dict))


def _anthropic_unary_chars(doc) -> int:
    return sum(_text_len(block.get("text")) for block in doc.get("content") or ()
               if isinstance(block, dict) and block.get("type") == "text")


def _text_len(value) -> int:
    return len(value) if isinstance(value, str) else 0


FRAME_CHARS = {"openai": _openai_frame_chars, "anthropic": _anthropic_frame_chars}
UNARY_CHARS = {"openai": _openai_unary_chars, "anthropic": _anthropic_unary_chars}


def _json_of(data: bytes):
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def frame_content_chars(dialect: str, line: bytes) -> int:
    """Characters of content in one SSE ``data:`` line of a stream (0 when it carries none or
    is not JSON)."""
    doc = _json_of(line[5:].strip())
    return FRAME_CHARS[dialect](doc) if doc is not None else 0


def unary_content_chars(dialect: str, body: bytes | None) -> int:
    """Characters of content in a whole unary answer (0 when it is not the dialect's JSON)."""
    doc = _json_of(body or b"")
    return UNARY_CHARS[dialect](doc) if doc is not None else 0


def is_error_event(dialect: str, line: bytes) -> bool:
    """Whether an SSE ``data:`` line is its dialect's error event (OpenAI: an ``{"error": ...}``
    object, which the official SDK raises as ``APIError``; Anthropic: the data of
    ``event: error``)."""
    doc = _json_of(line[5:].strip())
    return doc is not None and ERROR_SHAPES[dialect](doc)
