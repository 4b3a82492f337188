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
