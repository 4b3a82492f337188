"""Request bodies the load generator sends, built once per run by the harness.

Two client dialects (OpenAI chat completions, Anthropic messages) and two kinds of body: the
small default chat, or a long agent-style conversation of about `request_bytes` (tool
definitions, tool calls and tool results carrying file contents, as coding agents send). The
text is drawn from a fixed vocabulary by a seeded generator, so a run's body is reproducible
from its recorded seed. The load generator also needs to know, per dialect, which SSE frames
carry text and which one ends a stream; that lives here beside the bodies.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass

SMALL_BODY_BYTES = 0   # request_bytes = 0: the small two-message chat
# Where the load generator writes each request's id (the mock and the wire parser read
# `[rid:<id>]`); "@" is not an id character, so an unfilled slot never passes for an id.
RID_SLOT = "[rid:@RID@] "


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


SYSTEM_PROMPT = "You are a helpful assistant."
_WORDS = ("def", "return", "self", "value", "config", "request", "response", "import", "class",
          "for", "in", "if", "else", "None", "True", "False", "items", "result", "error", "path",
          "open", "read", "write", "append", "dict", "list", "len", "range", "async", "await",
          "yield", "with", "as", "raise", "try", "except", "lambda", "key", "model", "tokens")
_TOOL_DESCRIPTION = "Read a file of the repository and return its contents."
_TOOL_SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def chat_body(dialect: str, model: str, max_tokens: int, stream: bool, request_bytes: int = 0,
              seed: int = 0, rid_slot: bool = False) -> bytes:
    """The JSON body of one chat request. With request_bytes > 0 the body is a conversation
    whose encoded size is within 1% (or 64 bytes) of request_bytes. rid_slot: the last user
    message begins with RID_SLOT, for the load generator to fill per request."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}; choose one of {sorted(DIALECTS)}")
    if request_bytes <= 0:
        body = _small(dialect, model, max_tokens, stream, rid_slot)
    else:
        body = _conversation(dialect, model, max_tokens, stream, request_bytes, random.Random(seed),
                             rid_slot)
    return json.dumps(body, separators=(",", ":")).encode()


def _small(dialect: str, model: str, max_tokens: int, stream: bool, rid_slot: bool = False) -> dict:
    user = {"role": "user", "content": (RID_SLOT if rid_slot else "") + "Say hello in a few words."}
    if dialect == "openai":
        body = {"model": model, "messages": [{"role": "system", "content": SYSTEM_PROMPT}, user],
                "max_tokens": max_tokens}
    else:
        body = {"model": model, "system": SYSTEM_PROMPT, "messages": [user], "max_tokens": max_tokens}
    if stream:
        body["stream"] = True
    return body


def _file_text(rng: random.Random, n_bytes: int) -> str:
    lines, size = [], 0
    while size < n_bytes:
        indent = "    " * rng.randrange(3)
        line = indent + " ".join(rng.choice(_WORDS) for _ in range(rng.randrange(3, 12)))
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)[:n_bytes]


def _turn(dialect: str, i: int, content: str) -> list[dict]:
    """One agent step: the user (or the loop) asks, the assistant calls a tool, its result."""
    path = f"src/module_{i}.py"
    ask = {"role": "user", "content": f"Look at {path} and tell me what it does."}
    if dialect == "openai":
        call_id = f"call_{i}"
        return [ask,
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": call_id, "type": "function",
                     "function": {"name": "read_file", "arguments": json.dumps({"path": path})}}]},
                {"role": "tool", "tool_call_id": call_id, "content": content}]
    use_id = f"toolu_{i}"
    return [ask,
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": use_id, "name": "read_file", "input": {"path": path}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": use_id, "content": content}]}]


def _conversation(dialect: str, model: str, max_tokens: int, stream: bool, request_bytes: int,
                  rng: random.Random, rid_slot: bool = False) -> dict:
    body = _small(dialect, model, max_tokens, stream)
    if dialect == "openai":
        body["tools"] = [{"type": "function", "function": {
            "name": "read_file", "description": _TOOL_DESCRIPTION, "parameters": _TOOL_SCHEMA}}]
    else:
        body["tools"] = [{"name": "read_file", "description": _TOOL_DESCRIPTION,
                          "input_schema": _TOOL_SCHEMA}]
    ask = (RID_SLOT if rid_slot else "") + "Now summarise what these modules do together."
    history: list[dict] = []

    def with_history(turns: list[dict]) -> dict:
        turns = turns + [{"role": "user", "content": ask}]
        if dialect == "anthropic":
            turns = _alternate(turns)
        return {**body, "messages": body["messages"][:-1] + turns}

    def size(turns: list[dict]) -> int:
        return len(json.dumps(with_history(turns), separators=(",", ":")).encode())

    chunk = 4096  # file contents per tool result, as an agent reads a file in pieces
    i = 0
    while size(history) < request_bytes and i < 100_000:  # bounded: each turn adds over 4 KiB
        i += 1
        history += _turn(dialect, i, _file_text(rng, chunk))
    if history:
        # shorten the last tool result (binary search) so the body lands on the requested size
        text = _result_text(dialect, history[-1])
        lo, hi = 1, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if size(history[:-1] + [_with_result_text(dialect, history[-1], text[:mid])]) <= request_bytes:
                lo = mid
            else:
                hi = mid - 1
        history[-1] = _with_result_text(dialect, history[-1], text[:lo])
    return with_history(history)


def _alternate(messages: list[dict]) -> list[dict]:
    """Anthropic turns alternate: a tool result and the next question share one user turn."""
    merged: list[dict] = []
    for m in messages:
        blocks = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        if merged and merged[-1]["role"] == m["role"]:
            merged[-1] = {**merged[-1], "content": merged[-1]["content"] + blocks}
        else:
            merged.append({"role": m["role"], "content": blocks})
    return merged


def _result_text(dialect: str, message: dict) -> str:
    return message["content"] if dialect == "openai" else message["content"][0]["content"]


def _with_result_text(dialect: str, message: dict, text: str) -> dict:
    if dialect == "openai":
        return {**message, "content": text}
    return {**message, "content": [{**message["content"][0], "content": text}]}
