"""Pre-rendered response bodies for the mock (OpenAI and Anthropic dialects).

Everything that depends only on (model, response tokens, prompt tokens, chunks) is
rendered once with orjson and cached; per request only the request id and the
``created`` second are spliced in as bytes.
"""

from __future__ import annotations

import itertools
import time

import orjson

_WORDS = ("lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit",
          "sed", "do", "eiusmod", "tempor", "incididunt", "ut", "labore", "et", "dolore",
          "magna", "aliqua", "enim", "ad", "minim", "veniam", "quis", "nostrud")

SYSTEM_FINGERPRINT = "fp_sluice_mock"


def tokens(count: int) -> list[str]:
    """``count`` tokens: words, each but the first with its leading space."""
    return [(" " if i else "") + _WORDS[i % len(_WORDS)] for i in range(count)]


def content_text(count: int) -> str:
    return "".join(tokens(count))


def content_pieces(count: int, chunks: int) -> list[str]:
    """Split ``count`` tokens over ``chunks`` pieces as evenly as possible; they join to
    ``content_text(count)`` (pieces are empty when chunks > tokens)."""
    words = tokens(count)
    return ["".join(words[i * count // chunks:(i + 1) * count // chunks]) for i in range(chunks)]


def _text_len(content) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        total = 0
        for part in content:
            if isinstance(part, dict):
                t = part.get("text")
                if isinstance(t, str):
                    total += len(t)
            elif isinstance(part, str):
                total += len(part)
        return total
    return 0


def prompt_tokens(messages: list, system=None) -> int:
    """Cheap, deterministic prompt-token estimate: characters of text content / 4."""
    chars = 0
    for message in messages:
        if isinstance(message, dict):
            chars += _text_len(message.get("content"))
    if system is not None:
        chars += _text_len(system)
    return max(1, (chars + 3) // 4)


_created = [0, b"0"]


def created_bytes() -> bytes:
    now_s = int(time.time())
    if now_s != _created[0]:
        _created[0] = now_s
        _created[1] = str(now_s).encode()
    return _created[1]


def _tail(obj: dict) -> bytes:
    """orjson rendering without the opening brace (the spliced head supplies it)."""
    return orjson.dumps(obj)[1:]


class Renderer:
    """Caches rendered parts; bounded (cleared when full, so odd model names cannot grow it)."""

    def __init__(self, max_entries: int = 4096):
        self._cache: dict = {}
        self._chars: dict = {}  # its own: a lookup per request, kept to a tuple key and a get
        self._max = max_entries

    def _get(self, key, build):
        parts = self._cache.get(key)
        if parts is None:
            if len(self._cache) >= self._max:
                self._cache.clear()
            parts = self._cache[key] = build(*key[1:])
        return parts

    def content_chars(self, out_tokens: int, chunks: int) -> tuple[int, ...]:
        """Characters of content sent once k content frames went out, k = 0..chunks (the
        request log's ``content_chars_sent``); a unary answer's is ``content_chars(n, 1)[1]``."""
        key = (out_tokens, chunks)
        chars = self._chars.get(key)
        if chars is None:
            if len(self._chars) >= self._max:
                self._chars.clear()
            chars = self._chars[key] = _content_chars(out_tokens, chunks)
        return chars

    # ------------------------------------------------------------------ OpenAI
    def openai_unary(self, rid: bytes, model: str, out_tokens: int, in_tokens: int) -> bytes:
        tail = self._get(("ou", model, out_tokens, in_tokens), _openai_unary_tail)
        return b"".join((b'{"id":"chatcmpl-', rid, b'","object":"chat.completion","created":',
                         created_bytes(), b",", tail))

    def openai_stream(self, rid: bytes, model: str, out_tokens: int, chunks: int, in_tokens: int,
                      include_usage: bool):
        """(first, middle, last): the role frame; one frame per content piece; the finish
        frame (+ usage frame) and ``[DONE]``."""
        role, contents, ends = self._get(("os", model, out_tokens, chunks, in_tokens, include_usage),
                                         _openai_stream_tails)
        prefix = b"".join((b'data: {"id":"chatcmpl-', rid,
                           b'","object":"chat.completion.chunk","created":', created_bytes(), b","))
        first = prefix + role
        middle = [prefix + frame for frame in contents]
        last = b"".join([prefix + frame for frame in ends]) + b"data: [DONE]\n\n"
        return first, middle, last

    # ------------------------------------------------------------------ Anthropic
    def anthropic_unary(self, rid: bytes, model: str, out_tokens: int, in_tokens: int) -> bytes:
        tail = self._get(("au", model, out_tokens, in_tokens), _anthropic_unary_tail)
        return b"".join((b'{"id":"msg_', rid, b'",', tail))

    def anthropic_stream(self, rid: bytes, model: str, out_tokens: int, chunks: int, in_tokens: int):
        """(first, middle, last): message_start + content_block_start + ping; one
        content_block_delta per piece; content_block_stop + message_delta + message_stop."""
        start_tail, after_start, deltas, last = self._get(("as", model, out_tokens, chunks, in_tokens),
                                                          _anthropic_stream_parts)
        first = b"".join((b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_',
                          rid, b'",', start_tail, after_start))
        return first, deltas, last


def _content_chars(out_tokens: int, chunks: int) -> tuple[int, ...]:
    return tuple(itertools.accumulate((len(piece) for piece in content_pieces(out_tokens, chunks)), initial=0))


def _openai_usage(in_tokens: int, out_tokens: int) -> dict:
    return {"prompt_tokens": in_tokens, "completion_tokens": out_tokens, "total_tokens": in_tokens + out_tokens}


def _openai_unary_tail(model: str, out_tokens: int, in_tokens: int) -> bytes:
    return _tail({
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content_text(out_tokens), "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        }],
        "usage": _openai_usage(in_tokens, out_tokens),
        "system_fingerprint": SYSTEM_FINGERPRINT,
    })


def _openai_stream_tails(model: str, out_tokens: int, chunks: int, in_tokens: int, include_usage: bool):
    def frame(choices, **extra) -> bytes:
        obj = {"model": model, "system_fingerprint": SYSTEM_FINGERPRINT, "choices": choices}
        if include_usage:
            obj["usage"] = None
        obj.update(extra)
        return _tail(obj) + b"\n\n"

    def choice(delta, finish=None):
        return [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]

    role = frame(choice({"role": "assistant", "content": "", "refusal": None}))
    contents = tuple(frame(choice({"content": piece})) for piece in content_pieces(out_tokens, chunks))
    ends = [frame(choice({}, "stop"))]
    if include_usage:
        ends.append(frame([], usage=_openai_usage(in_tokens, out_tokens)))
    return role, contents, tuple(ends)


def _anthropic_unary_tail(model: str, out_tokens: int, in_tokens: int) -> bytes:
    return _tail({
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": content_text(out_tokens)}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": in_tokens, "output_tokens": out_tokens},
    })


def _sse(event: str, obj: dict) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


def _anthropic_stream_parts(model: str, out_tokens: int, chunks: int, in_tokens: int):
    start_tail = _tail({
        "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": in_tokens, "output_tokens": 1},
    }) + b"}\n\n"  # closes the outer message_start object
    after_start = (_sse("content_block_start", {"type": "content_block_start", "index": 0,
                                                "content_block": {"type": "text", "text": ""}})
                   + _sse("ping", {"type": "ping"}))
    deltas = tuple(_sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                "delta": {"type": "text_delta", "text": piece}})
                   for piece in content_pieces(out_tokens, chunks))
    last = (_sse("content_block_stop", {"type": "content_block_stop", "index": 0})
            + _sse("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                     "usage": {"output_tokens": out_tokens}})
            + _sse("message_stop", {"type": "message_stop"}))
    return start_tail, after_start, deltas, last


def models_body(models: list[str], created: int) -> bytes:
    return orjson.dumps({
        "object": "list",
        "data": [{"id": model_id, "object": "model", "created": created, "owned_by": "sluice-mock"}
                 for model_id in models],
    })
