"""An OpenAI client, an Anthropic provider: the Chat Completions request translated to a
Messages request, and the answer back (a unary response, or its stream event by event)."""
from __future__ import annotations

import time
from typing import Any

import orjson

from sluice.translate.common import (
    STOP_TO_FINISH,
    JSONObject,
    StreamTranslator,
    TranslationError,
    check_messages,
    dumps,
    loads,
    new_id,
    openai_event,
    openai_usage_of,
    random_hex,
    text_of,
)


# ------------------------------------------------------------------ the request
def openai_request_to_anthropic(req: JSONObject, upstream_model: str, default_max_tokens: int,
                                ) -> tuple[JSONObject, bool, bool]:
    """Returns (anthropic_request_dict, stream, include_usage)."""
    messages = check_messages(req)
    n = req.get("n", 1)
    if n not in (1, None):
        raise TranslationError("n > 1 is not supported by this provider")
    system, out = _messages(messages)
    max_tokens = req.get("max_completion_tokens") or req.get("max_tokens") or default_max_tokens
    body: JSONObject = {"model": upstream_model, "max_tokens": max_tokens, "messages": out}
    if system:
        body["system"] = "\n\n".join(s for s in system if s)
    if "temperature" in req and req["temperature"] is not None:
        body["temperature"] = min(float(req["temperature"]), 1.0)
    if "top_p" in req and req["top_p"] is not None:
        body["top_p"] = req["top_p"]
    stop = req.get("stop")
    if stop:
        body["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    stream = req.get("stream") is True
    if stream:
        body["stream"] = True
    opts = req.get("stream_options")
    include_usage = bool(stream and isinstance(opts, dict) and opts.get("include_usage"))
    _add_tools(body, req)
    if req.get("user"):
        body["metadata"] = {"user_id": str(req["user"])}
    return body, stream, include_usage


def _messages(messages: list[Any]) -> tuple[list[str], list[JSONObject]]:
    """(the system texts, the Anthropic messages): consecutive messages of one role merged, tool
    results in user messages."""
    system: list[str] = []
    out: list[JSONObject] = []

    def push(role: str, blocks: list[JSONObject]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": list(blocks)})

    for msg in messages:
        if not isinstance(msg, dict):
            raise TranslationError("each message must be an object")
        role = msg.get("role")
        if role in ("system", "developer"):
            system.append(text_of(msg.get("content")))
        elif role == "user":
            push("user", _content_blocks(msg.get("content")))
        elif role == "assistant":
            push("assistant", _content_blocks(msg.get("content")) + _tool_uses(msg))
        elif role == "tool":
            push("user", [{"type": "tool_result", "tool_use_id": msg.get("tool_call_id", ""),
                           "content": text_of(msg.get("content"))}])
        else:
            raise TranslationError(f"message role {role!r} is not supported")
    return system, out


def _tool_uses(msg: JSONObject) -> list[JSONObject]:
    """The tool calls of an assistant message, as tool_use blocks."""
    blocks: list[JSONObject] = []
    for tc in msg.get("tool_calls") or ():
        fn = tc.get("function") or {}
        try:
            args = loads(fn.get("arguments") or "{}")
        except orjson.JSONDecodeError:
            raise TranslationError("tool call arguments must be JSON") from None
        blocks.append({"type": "tool_use", "id": tc.get("id") or new_id("toolu_"),
                       "name": fn.get("name", ""), "input": args})
    return blocks


def _content_blocks(content: object) -> list[JSONObject]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise TranslationError("message content must be a string or a list of parts")
    blocks: list[JSONObject] = []
    for p in content:
        if not isinstance(p, dict):
            raise TranslationError("content parts must be objects")
        kind = p.get("type")
        if kind == "text":
            blocks.append({"type": "text", "text": p.get("text", "")})
        elif kind == "image_url":
            blocks.append(_image(p))
        else:
            raise TranslationError(f"content part type {kind!r} is not supported by this provider")
    return blocks


def _image(part: JSONObject) -> JSONObject:
    url = (part.get("image_url") or {}).get("url", "")
    if url.startswith("data:"):
        head, _, data = url.partition(",")
        media = head[5:].split(";")[0] or "image/png"
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _add_tools(body: JSONObject, req: JSONObject) -> None:
    """The tools and tool_choice, as Anthropic says them."""
    tools = req.get("tools")
    if tools:
        conv: list[JSONObject] = []
        for t in tools:
            fn = t.get("function") or {}
            conv.append({"name": fn.get("name", ""), "description": fn.get("description", ""),
                         "input_schema": fn.get("parameters") or {"type": "object", "properties": {}}})
        body["tools"] = conv
    tc = req.get("tool_choice")
    if tc == "auto":
        body["tool_choice"] = {"type": "auto"}
    elif tc == "required":
        body["tool_choice"] = {"type": "any"}
    elif tc == "none":
        body["tool_choice"] = {"type": "none"}
    elif isinstance(tc, dict) and tc.get("type") == "function":
        body["tool_choice"] = {"type": "tool", "name": (tc.get("function") or {}).get("name", "")}
    if req.get("parallel_tool_calls") is False:
        # Anthropic says it in tool_choice ("auto" when the client chose none; a tool_choice
        # without tools is refused there); its "none" calls no tool, and takes no such field
        choice = body.get("tool_choice")
        if choice is None and "tools" in body:
            choice = body["tool_choice"] = {"type": "auto"}
        if choice is not None and choice["type"] != "none":
            choice["disable_parallel_tool_use"] = True


# ------------------------------------------------------------------ the answer
def anthropic_response_to_openai(resp: JSONObject, model: str) -> JSONObject:
    texts: list[str] = []
    tool_calls: list[JSONObject] = []
    for block in resp.get("content") or ():
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text", ""))
        elif kind == "tool_use":
            tool_calls.append({"id": block.get("id", ""), "type": "function", "function": {
                "name": block.get("name", ""), "arguments": dumps(block.get("input", {})).decode()}})
    msg: JSONObject = {"role": "assistant", "content": "".join(texts) if texts or not tool_calls else None}
    if tool_calls:
        msg["tool_calls"] = tool_calls
    usage = resp.get("usage") or {}
    rid = resp.get("id") or random_hex()
    return {
        "id": "chatcmpl-" + rid, "object": "chat.completion", "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": msg,
                     "finish_reason": STOP_TO_FINISH.get(resp.get("stop_reason"), "stop")}],
        "usage": openai_usage_of(usage.get("input_tokens"), usage.get("cache_creation_input_tokens"),
                                 usage.get("cache_read_input_tokens"), usage.get("output_tokens")),
    }


class AnthropicToOpenAIStream(StreamTranslator):
    """Anthropic message stream events -> OpenAI chat.completion.chunk events."""

    def __init__(self, model: str, include_usage: bool) -> None:
        self.model = model
        self.include_usage = include_usage
        self.id = "chatcmpl-" + random_hex()
        self.created = int(time.time())
        self.tools: dict[int, int] = {}   # anthropic block index -> openai tool index
        self.finish_reason: str | None = None
        self.input_tokens = 0
        self.output_tokens = 0
        self.cache_write = 0    # cache_creation_input_tokens: not part of input_tokens
        self.cache_read = 0     # cache_read_input_tokens: nor this
        self.usage_seen = False  # message_delta's usage: message_start's is provisional
        self.done = False
        self.started = False

    def _chunk(self, delta: JSONObject, finish: str | None = None) -> bytes:
        return openai_event({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                             "model": self.model,
                             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    def feed(self, events: list[tuple[bytes | None, bytes]]) -> bytes:
        out: list[bytes] = []
        for event, data in events:
            if self.done:
                break
            try:
                obj = loads(data)
            except orjson.JSONDecodeError:
                continue
            if not isinstance(obj, dict):
                continue
            kind = obj.get("type") or (event.decode() if event else "")
            if kind == "message_start":
                self._message_start(out, obj)
            elif kind == "content_block_start":
                self._block_start(out, obj)
            elif kind == "content_block_delta":
                self._block_delta(out, obj)
            elif kind == "message_delta":
                self._message_delta(obj)
            elif kind == "message_stop":
                self._finish(out)
            elif kind == "error":
                err = obj.get("error") or {}
                out.append(openai_event({"error": {"message": err.get("message", "provider error"),
                                                   "type": err.get("type", "api_error"),
                                                   "param": None, "code": None}}))
                self.done = True
        return b"".join(out)

    def _message_start(self, out: list[bytes], obj: JSONObject) -> None:
        msg = obj.get("message") or {}
        if msg.get("id"):
            self.id = "chatcmpl-" + msg["id"]
        usage = msg.get("usage") or {}
        self.input_tokens = usage.get("input_tokens", 0) or 0
        self.output_tokens = usage.get("output_tokens", 0) or 0
        self._cache_counts(usage)
        self.started = True
        out.append(self._chunk({"role": "assistant", "content": ""}))

    def _block_start(self, out: list[bytes], obj: JSONObject) -> None:
        cb = obj.get("content_block") or {}
        if cb.get("type") == "tool_use":
            ti = len(self.tools)
            self.tools[obj.get("index", 0)] = ti
            out.append(self._chunk({"tool_calls": [{
                "index": ti, "id": cb.get("id", ""), "type": "function",
                "function": {"name": cb.get("name", ""), "arguments": ""}}]}))
        elif cb.get("type") == "text" and cb.get("text"):
            out.append(self._chunk({"content": cb["text"]}))

    def _block_delta(self, out: list[bytes], obj: JSONObject) -> None:
        d = obj.get("delta") or {}
        dk = d.get("type")
        if dk == "text_delta":
            out.append(self._chunk({"content": d.get("text", "")}))
        elif dk == "input_json_delta":
            ti = self.tools.get(obj.get("index", 0), 0)
            out.append(self._chunk({"tool_calls": [{
                "index": ti, "function": {"arguments": d.get("partial_json", "")}}]}))

    def _message_delta(self, obj: JSONObject) -> None:
        d = obj.get("delta") or {}
        if d.get("stop_reason"):
            self.finish_reason = STOP_TO_FINISH.get(d["stop_reason"], "stop")
        usage = obj.get("usage") or {}
        if usage:
            self.usage_seen = True
            self.output_tokens = usage.get("output_tokens", self.output_tokens) or 0
            if usage.get("input_tokens"):
                self.input_tokens = usage["input_tokens"]
            self._cache_counts(usage)

    def _cache_counts(self, usage: JSONObject) -> None:
        """The cache counts of a usage object (message_delta's, when it has them, are cumulative)."""
        if "cache_creation_input_tokens" in usage:
            self.cache_write = usage["cache_creation_input_tokens"] or 0
        if "cache_read_input_tokens" in usage:
            self.cache_read = usage["cache_read_input_tokens"] or 0

    def _finish(self, out: list[bytes]) -> None:
        if self.done:
            return
        if not self.started:
            self.started = True
            out.append(self._chunk({"role": "assistant", "content": ""}))
        out.append(self._chunk({}, self.finish_reason or "stop"))
        if self.include_usage:
            out.append(openai_event({
                "id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "choices": [],
                "usage": openai_usage_of(self.input_tokens, self.cache_write, self.cache_read,
                                         self.output_tokens)}))
        out.append(b"data: [DONE]\n\n")
        self.done = True
