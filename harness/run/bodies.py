"""Request bodies the load generator sends, built once per run by the harness.

Two client dialects (OpenAI chat completions, Anthropic messages) and two kinds of body: the
small default chat, or a long agent-style conversation of about `request_bytes` (tool
definitions, tool calls and tool results carrying file contents, as coding agents send). The
text is drawn from a fixed vocabulary by a seeded generator, so a run's body is reproducible
from its recorded seed. What each dialect means on the wire (paths, frames, error
shapes) is harness.model.dialects.
"""
from __future__ import annotations

import json
import random

from harness.model.dialects import DIALECTS

SMALL_BODY_BYTES = 0   # request_bytes = 0: the small two-message chat
# Where the load generator writes each request's id (the mock and the wire parser read
# `[rid:<id>]`); "@" is not an id character, so an unfilled slot never passes for an id.
RID_SLOT = "[rid:@RID@] "

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
