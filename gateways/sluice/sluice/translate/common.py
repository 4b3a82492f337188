"""What both translation directions share: the refusal, content text, stop reasons, ids, SSE
event encoding, the stream translators' common end, and provider error messages."""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any

import orjson

loads = orjson.loads
dumps = orjson.dumps

# A JSON object as orjson parses it: a client's or a provider's, so its values are checked (or
# their wrong shapes caught) where they are read
JSONObject = dict[str, Any]


class TranslationError(ValueError):
    """The request cannot be expressed in the provider's dialect (answered with 400)."""


def random_hex() -> str:
    return os.urandom(12).hex()


def new_id(prefix: str) -> str:
    return prefix + random_hex()


# OpenAI finish_reason <-> Anthropic stop_reason (looked up with what a provider sent: None when
# it sent none)
FINISH_TO_STOP: dict[str | None, str] = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                  "function_call": "tool_use", "content_filter": "refusal"}
STOP_TO_FINISH: dict[str | None, str] = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
                  "tool_use": "tool_calls", "refusal": "content_filter", "pause_turn": "stop"}


def count(value: object) -> int:
    """A provider's token count as a client is told it: 0 for anything but a count (what is
    charged is decided apart, on the provider's own values)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def openai_usage_of(uncached: object, cache_write: object, cache_read: object,
                    completion: object) -> JSONObject:
    """Anthropic's counts as OpenAI says them: prompt_tokens are every prompt token, those read
    from the cache among them (``prompt_tokens_details.cached_tokens``); OpenAI has no word
    for a cache write, which Anthropic bills as prompt tokens."""
    prompt = count(uncached) + count(cache_write) + count(cache_read)
    return {"prompt_tokens": prompt, "completion_tokens": count(completion),
            "total_tokens": prompt + count(completion),
            "prompt_tokens_details": {"cached_tokens": count(cache_read)}}


def anthropic_usage_of(prompt: object, cached: object, completion: object) -> JSONObject:
    """OpenAI's counts as Anthropic says them: input_tokens leave out the cache's reads, given
    as cache_read_input_tokens (OpenAI writes to its cache at no charge: none written)."""
    read = min(count(cached), count(prompt))
    return {"input_tokens": count(prompt) - read, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": read, "output_tokens": count(completion)}


def text_of(content: object) -> str:
    """Text of an Anthropic/OpenAI content value (string or list of text parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for b in content:
            if isinstance(b, dict) and b.get("type") == "text":
                parts.append(b.get("text", ""))
            elif isinstance(b, str):
                parts.append(b)
        return "".join(parts)
    raise TranslationError("content must be a string or a list of content blocks")


def check_messages(req: object) -> list[Any]:
    """The request's messages list; refused unless the body is an object with one."""
    if not isinstance(req, dict):
        raise TranslationError("request body must be a JSON object")
    messages = req.get("messages")
    if not isinstance(messages, list):
        raise TranslationError("messages: a list is required")
    return messages


def anthropic_event(kind: bytes, obj: JSONObject) -> bytes:
    return b"event: " + kind + b"\ndata: " + dumps(obj) + b"\n\n"


def openai_event(obj: JSONObject) -> bytes:
    return b"data: " + dumps(obj) + b"\n\n"


class StreamTranslator(ABC):
    """What both stream directions share: closing the stream and the token counts seen."""

    input_tokens: int
    output_tokens: int
    cache_write: int
    cache_read: int
    usage_seen: bool
    done: bool      # the provider's last event (or its error) was seen, or the stream was closed

    @abstractmethod
    def feed(self, events: list[tuple[bytes | None, bytes]]) -> bytes:
        """The provider's events (the SSE parser's (event, data) pairs), translated."""

    @abstractmethod
    def _finish(self, out: list[bytes]) -> None:
        """The events that end the translated stream, appended to ``out``."""

    def finish(self) -> bytes:
        """Called at the end of the upstream body (the provider may omit its terminator)."""
        out: list[bytes] = []
        self._finish(out)
        return b"".join(out)

    def usage(self) -> tuple[int, int, int, int, bool]:
        """The provider's billed counts, in its dialect's sense (OpenAI's cache reads are part of
        its prompt), and whether its final usage was seen."""
        return self.input_tokens, self.output_tokens, self.cache_write, self.cache_read, self.usage_seen


def upstream_error_message(body: bytes) -> str:
    """The message of a provider error body in either dialect (or its text)."""
    try:
        obj = loads(body)
    except orjson.JSONDecodeError:
        text = body[:500].decode("utf-8", "replace").strip()
        return text or "provider error"
    if isinstance(obj, dict):
        err = obj.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
        if obj.get("message"):
            return str(obj["message"])
    return "provider error"
