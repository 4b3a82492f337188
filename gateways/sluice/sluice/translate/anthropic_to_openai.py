"""An Anthropic client, an OpenAI provider: the Messages request translated to a Chat
Completions request, and the answer back (a unary response, or its stream event by event)."""
from __future__ import annotations

import orjson

from sluice.translate.common import (
    FINISH_TO_STOP,
    JSONObject,
    StreamTranslator,
    TranslationError,
    anthropic_event,
    anthropic_usage_of,
    check_messages,
    dumps,
    loads,
    new_id,
    random_hex,
    text_of,
)

# text and tool calls a translated stream holds back behind an open tool call (see
# OpenAIToAnthropicStream.live_tool): more fails the stream
MAX_HELD_BYTES = 8 << 20


# ------------------------------------------------------------------ the request
def anthropic_request_to_openai(req: JSONObject, upstream_model: str) -> tuple[JSONObject, bool]:
    """Returns (openai_request_dict, stream)."""
    messages = check_messages(req)
    out: list[JSONObject] = []
    system = req.get("system")
    if system:
        out.append({"role": "system", "content": text_of(system)})
    for msg in messages:
        _add_message(out, msg)
    body: JSONObject = {"model": upstream_model, "messages": out}
    if "max_tokens" in req:
        body["max_tokens"] = req["max_tokens"]
    for k in ("temperature", "top_p"):
        if k in req:
            body[k] = req[k]
    if req.get("stop_sequences"):
        body["stop"] = req["stop_sequences"]
    stream = req.get("stream") is True
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    _add_tools(body, req)
    meta = req.get("metadata")
    if isinstance(meta, dict) and meta.get("user_id"):
        body["user"] = meta["user_id"]
    return body, stream


def _add_message(out: list[JSONObject], msg: object) -> None:
    """One Anthropic message as OpenAI messages: tool results first (one message each), then
    the message itself."""
    if not isinstance(msg, dict) or msg.get("role") not in ("user", "assistant"):
        raise TranslationError("each message needs role 'user' or 'assistant'")
    role = msg["role"]
    content = msg.get("content")
    if isinstance(content, str):
        out.append({"role": role, "content": content})
        return
    if not isinstance(content, list):
        raise TranslationError("message content must be a string or a list of blocks")
    parts: list[JSONObject] = []
    tool_calls: list[JSONObject] = []
    for block in content:
        if not isinstance(block, dict):
            raise TranslationError("content blocks must be objects")
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": block.get("text", "")})
        elif kind == "image":
            parts.append(_image(block))
        elif kind == "tool_use":
            tool_calls.append({"id": block.get("id") or new_id("call_"), "type": "function",
                               "function": {"name": block.get("name", ""),
                                            "arguments": dumps(block.get("input", {})).decode()}})
        elif kind == "tool_result":
            out.append({"role": "tool", "tool_call_id": block.get("tool_use_id", ""),
                        "content": text_of(block.get("content"))})
        elif kind not in ("thinking", "redacted_thinking"):
            raise TranslationError(f"content block type {kind!r} is not supported by this provider")
    if role == "assistant":
        if parts or tool_calls:
            m: JSONObject = {"role": "assistant",
                 "content": "".join(p["text"] for p in parts if p["type"] == "text") or None}
            if tool_calls:
                m["tool_calls"] = tool_calls
            out.append(m)
    elif parts:
        if all(p["type"] == "text" for p in parts):
            out.append({"role": "user", "content": "".join(p["text"] for p in parts)})
        else:
            out.append({"role": "user", "content": parts})


def _image(block: JSONObject) -> JSONObject:
    src = block.get("source") or {}
    if src.get("type") == "base64":
        url = f"data:{src.get('media_type', 'image/png')};base64,{src.get('data', '')}"
    elif src.get("type") == "url":
        url = src.get("url", "")
    else:
        raise TranslationError("unsupported image source type")
    return {"type": "image_url", "image_url": {"url": url}}


def _add_tools(body: JSONObject, req: JSONObject) -> None:
    """The tools and tool_choice, as OpenAI says them."""
    tools = req.get("tools")
    if tools:
        body["tools"] = [{"type": "function", "function": {
            "name": t.get("name", ""), "description": t.get("description", ""),
            "parameters": t.get("input_schema", {"type": "object"})}} for t in tools]
    tc = req.get("tool_choice")
    if isinstance(tc, dict):
        kind = tc.get("type")
        if kind == "auto":
            body["tool_choice"] = "auto"
        elif kind == "any":
            body["tool_choice"] = "required"
        elif kind == "none":
            body["tool_choice"] = "none"
        elif kind == "tool":
            body["tool_choice"] = {"type": "function", "function": {"name": tc.get("name", "")}}
        if tc.get("disable_parallel_tool_use"):
            body["parallel_tool_calls"] = False


# ------------------------------------------------------------------ the answer
def openai_response_to_anthropic(resp: JSONObject, model: str) -> JSONObject:
    choices = resp.get("choices") or [{}]
    choice = choices[0] or {}
    msg = choice.get("message") or {}
    content: list[JSONObject] = []
    text = msg.get("content")
    if isinstance(text, list):
        text = text_of(text)
    if text:
        content.append({"type": "text", "text": text})
    for tc in msg.get("tool_calls") or []:
        fn = tc.get("function") or {}
        try:
            args = loads(fn.get("arguments") or "{}")
        except orjson.JSONDecodeError:
            args = {"_raw": fn.get("arguments")}
        content.append({"type": "tool_use", "id": tc.get("id") or new_id("toolu_"),
                        "name": fn.get("name", ""), "input": args})
    usage = resp.get("usage") or {}
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else 0
    rid = resp.get("id") or ""
    return {
        "id": rid if rid.startswith("msg_") else "msg_" + (rid or random_hex()),
        "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": FINISH_TO_STOP.get(choice.get("finish_reason"), "end_turn"),
        "stop_sequence": None,
        "usage": anthropic_usage_of(usage.get("prompt_tokens"), cached, usage.get("completion_tokens")),
    }


class OpenAIToAnthropicStream(StreamTranslator):
    """OpenAI chat.completion.chunk events -> Anthropic message stream events."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.started = False
        self.done = False
        self.block: int | None = None        # index of the open Anthropic content block
        self.block_kind: str | tuple[str, int] | None = None   # "text" or ("tool", openai tool index)
        self.next_index = 0
        # The tool call whose block is open (its OpenAI index): it stays open to the end, since
        # OpenAI may send more of its arguments after another call began, and an Anthropic
        # block once stopped takes no more. What comes meanwhile (other calls, text) is held,
        # in order, and written as whole blocks at the end.
        self.live_tool: int | None = None
        self.held: list[JSONObject] = []
        self.held_tools: dict[int, JSONObject] = {}     # openai tool_call index -> its held block
        self.held_bytes = 0
        self.finish_reason: str | None = None
        self.input_tokens = 0
        self.output_tokens = 0
        self.cache_write = 0
        self.cache_read = 0     # prompt_tokens_details.cached_tokens: part of prompt_tokens
        self.usage_seen = False

    def _start(self, out: list[bytes], rid: str | None) -> None:
        self.started = True
        mid = rid if rid and rid.startswith("msg_") else "msg_" + (rid or random_hex())
        out.append(anthropic_event(b"message_start", {"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant", "model": self.model, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0}}}))

    def _close_block(self, out: list[bytes]) -> None:
        if self.block is not None:
            out.append(anthropic_event(b"content_block_stop",
                                       {"type": "content_block_stop", "index": self.block}))
            self.block = None
            self.block_kind = None

    def _open(self, out: list[bytes], kind: str | tuple[str, int], content_block: JSONObject) -> None:
        self._close_block(out)
        self.block = self.next_index
        self.next_index += 1
        self.block_kind = kind
        out.append(anthropic_event(b"content_block_start", {
            "type": "content_block_start", "index": self.block, "content_block": content_block}))

    def feed(self, events: list[tuple[bytes | None, bytes]]) -> bytes:
        out: list[bytes] = []
        for _event, data in events:
            if self.done:
                break
            if data == b"[DONE]":
                self._finish(out)
                continue
            try:
                chunk = loads(data)
            except orjson.JSONDecodeError:
                continue
            if not isinstance(chunk, dict):
                continue
            if "error" in chunk:
                err = chunk["error"] if isinstance(chunk["error"], dict) else {"message": str(chunk["error"])}
                out.append(anthropic_event(b"error", {"type": "error", "error": {
                    "type": "api_error", "message": err.get("message", "provider error")}}))
                self.done = True
                break
            if not self.started:
                self._start(out, chunk.get("id"))
            usage = chunk.get("usage")
            if usage:
                self.usage_seen = True
                self.input_tokens = usage.get("prompt_tokens", 0) or 0
                self.output_tokens = usage.get("completion_tokens", 0) or 0
                details = usage.get("prompt_tokens_details")
                self.cache_read = details.get("cached_tokens") or 0 if isinstance(details, dict) else 0
            for choice in chunk.get("choices") or ():
                self._choice(out, choice)
        return b"".join(out)

    def _choice(self, out: list[bytes], choice: JSONObject) -> None:
        """One choice of a chunk: text and tool-call deltas, its finish reason."""
        delta = choice.get("delta") or {}
        text = delta.get("content")
        if text and self.live_tool is not None:
            if self.held and self.held[-1]["type"] == "text":
                self.held[-1]["parts"].append(text)
            else:
                self.held.append({"type": "text", "parts": [text]})
            self._hold(len(text))
        elif text:
            if self.block_kind != "text":
                self._open(out, "text", {"type": "text", "text": ""})
            out.append(anthropic_event(b"content_block_delta", {
                "type": "content_block_delta", "index": self.block,
                "delta": {"type": "text_delta", "text": text}}))
        for tc in delta.get("tool_calls") or ():
            ti = tc.get("index", 0)
            fn = tc.get("function") or {}
            args = fn.get("arguments")
            if ti != self.live_tool and ti not in self.held_tools:
                block = {"type": "tool_use", "id": tc.get("id") or new_id("toolu_"),
                         "name": fn.get("name", ""), "input": {}}
                if self.live_tool is None:
                    self._open(out, ("tool", ti), block)
                    self.live_tool = ti
                else:
                    self.held_tools[ti] = block = dict(block, parts=[])
                    self.held.append(block)
            if not args:
                continue
            if ti == self.live_tool:
                out.append(anthropic_event(b"content_block_delta", {
                    "type": "content_block_delta", "index": self.block,
                    "delta": {"type": "input_json_delta", "partial_json": args}}))
            else:
                self.held_tools[ti]["parts"].append(args)
                self._hold(len(args))
        fr = choice.get("finish_reason")
        if fr:
            self.finish_reason = fr

    def _hold(self, n: int) -> None:
        self.held_bytes += n
        if self.held_bytes > MAX_HELD_BYTES:  # a provider's nonsense: the stream fails
            raise ValueError(f"over {MAX_HELD_BYTES} bytes of tool calls and text held behind an open tool call")

    def _write_held(self, out: list[bytes]) -> None:
        """The blocks held behind the open tool call, each whole (start, its delta, stop)."""
        for held in self.held:
            text = "".join(held.pop("parts"))
            if held["type"] == "text":
                self._open(out, "text", {"type": "text", "text": ""})
                delta = {"type": "text_delta", "text": text}
            else:
                self._open(out, "tool", held)
                delta = {"type": "input_json_delta", "partial_json": text}
            if text:
                out.append(anthropic_event(b"content_block_delta", {
                    "type": "content_block_delta", "index": self.block, "delta": delta}))
        self._close_block(out)
        self.held = []

    def _finish(self, out: list[bytes]) -> None:
        if self.done:
            return
        if not self.started:
            self._start(out, None)
        self._close_block(out)
        self._write_held(out)
        out.append(anthropic_event(b"message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": FINISH_TO_STOP.get(self.finish_reason, "end_turn"), "stop_sequence": None},
            "usage": anthropic_usage_of(self.input_tokens, self.cache_read, self.output_tokens)}))
        out.append(anthropic_event(b"message_stop", {"type": "message_stop"}))
        self.done = True
