"""Anthropic Messages <-> OpenAI Chat Completions, requests, responses and SSE streams.

Only used when the client's dialect differs from the provider's; same-dialect
traffic never reaches this module (its bytes are relayed as they are).
"""
import os
import time

import orjson

loads = orjson.loads
dumps = orjson.dumps


class TranslationError(ValueError):
    """The request cannot be expressed in the provider's dialect (answered with 400)."""


def _hex():
    return os.urandom(12).hex()


def _new_id(prefix):
    return prefix + _hex()


# ---------------------------------------------------------------- SSE parsing
class SSEParser:
    """Incremental text/event-stream parser: feed bytes, get (event, data) pairs."""
    __slots__ = ("buf",)

    def __init__(self):
        self.buf = b""

    def feed(self, data):
        buf = self.buf + data if self.buf else data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        events = []
        start = 0
        find = buf.find
        while True:
            i = find(b"\n\n", start)
            if i < 0:
                break
            block = buf[start:i]
            start = i + 2
            event = None
            datas = []
            for line in block.split(b"\n"):
                if line.startswith(b"data:"):
                    v = line[5:]
                    datas.append(v[1:] if v[:1] == b" " else v)
                elif line.startswith(b"event:"):
                    event = line[6:].strip()
            if datas or event is not None:
                events.append((event, b"\n".join(datas)))
        self.buf = buf[start:]
        return events


def _anthropic_event(kind, obj):
    return b"event: " + kind + b"\ndata: " + dumps(obj) + b"\n\n"


def _openai_event(obj):
    return b"data: " + dumps(obj) + b"\n\n"


# ------------------------------------------------------- finish/stop reasons
_FINISH_TO_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                   "function_call": "tool_use", "content_filter": "refusal"}
_STOP_TO_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
                   "tool_use": "tool_calls", "refusal": "content_filter", "pause_turn": "stop"}


def _text_of(content):
    """Text of an Anthropic/OpenAI content value (string or list of text parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for b in content:
            if isinstance(b, dict) and b.get("type") == "text":
                parts.append(b.get("text", ""))
            elif isinstance(b, str):
                parts.append(b)
        return "".join(parts)
    raise TranslationError("content must be a string or a list of content blocks")


# ====================================================== Anthropic -> OpenAI
def _anthropic_image_to_openai(block):
    src = block.get("source") or {}
    if src.get("type") == "base64":
        url = f"data:{src.get('media_type', 'image/png')};base64,{src.get('data', '')}"
    elif src.get("type") == "url":
        url = src.get("url", "")
    else:
        raise TranslationError("unsupported image source type")
    return {"type": "image_url", "image_url": {"url": url}}


def anthropic_request_to_openai(req, upstream_model):
    """Returns (openai_request_dict, stream)."""
    if not isinstance(req, dict):
        raise TranslationError("request body must be a JSON object")
    messages = req.get("messages")
    if not isinstance(messages, list):
        raise TranslationError("messages: a list is required")
    out = []
    system = req.get("system")
    if system:
        out.append({"role": "system", "content": _text_of(system)})
    for msg in messages:
        if not isinstance(msg, dict) or msg.get("role") not in ("user", "assistant"):
            raise TranslationError("each message needs role 'user' or 'assistant'")
        role = msg["role"]
        content = msg.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        if not isinstance(content, list):
            raise TranslationError("message content must be a string or a list of blocks")
        parts = []
        tool_calls = []
        tool_results = []
        for block in content:
            if not isinstance(block, dict):
                raise TranslationError("content blocks must be objects")
            kind = block.get("type")
            if kind == "text":
                parts.append({"type": "text", "text": block.get("text", "")})
            elif kind == "image":
                parts.append(_anthropic_image_to_openai(block))
            elif kind == "tool_use":
                tool_calls.append({"id": block.get("id") or _new_id("call_"), "type": "function",
                                   "function": {"name": block.get("name", ""),
                                                "arguments": dumps(block.get("input", {})).decode()}})
            elif kind == "tool_result":
                tool_results.append({"role": "tool", "tool_call_id": block.get("tool_use_id", ""),
                                     "content": _text_of(block.get("content"))})
            elif kind in ("thinking", "redacted_thinking"):
                continue
            else:
                raise TranslationError(f"content block type {kind!r} is not supported by this provider")
        out.extend(tool_results)
        if role == "assistant":
            if parts or tool_calls:
                m = {"role": "assistant",
                     "content": "".join(p["text"] for p in parts if p["type"] == "text") or None}
                if tool_calls:
                    m["tool_calls"] = tool_calls
                out.append(m)
        elif parts:
            if all(p["type"] == "text" for p in parts):
                out.append({"role": "user", "content": "".join(p["text"] for p in parts)})
            else:
                out.append({"role": "user", "content": parts})
    body = {"model": upstream_model, "messages": out}
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
    meta = req.get("metadata")
    if isinstance(meta, dict) and meta.get("user_id"):
        body["user"] = meta["user_id"]
    return body, stream


def openai_response_to_anthropic(resp, model):
    choices = resp.get("choices") or [{}]
    choice = choices[0] or {}
    msg = choice.get("message") or {}
    content = []
    text = msg.get("content")
    if isinstance(text, list):
        text = _text_of(text)
    if text:
        content.append({"type": "text", "text": text})
    for tc in msg.get("tool_calls") or []:
        fn = tc.get("function") or {}
        try:
            args = loads(fn.get("arguments") or "{}")
        except orjson.JSONDecodeError:
            args = {"_raw": fn.get("arguments")}
        content.append({"type": "tool_use", "id": tc.get("id") or _new_id("toolu_"),
                        "name": fn.get("name", ""), "input": args})
    usage = resp.get("usage") or {}
    rid = resp.get("id") or ""
    return {
        "id": rid if rid.startswith("msg_") else "msg_" + (rid or _hex()),
        "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": _FINISH_TO_STOP.get(choice.get("finish_reason"), "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": usage.get("prompt_tokens", 0),
                  "output_tokens": usage.get("completion_tokens", 0)},
    }


class _StreamTranslator:
    """What both stream directions share: closing the stream and the token counts seen."""

    def finish(self):
        """Called at the end of the upstream body (the provider may omit its terminator)."""
        out = []
        self._finish(out)
        return b"".join(out)

    def usage(self):
        return self.input_tokens, self.output_tokens, self.usage_seen


class OpenAIToAnthropicStream(_StreamTranslator):
    """OpenAI chat.completion.chunk events -> Anthropic message stream events."""

    def __init__(self, model):
        self.model = model
        self.started = False
        self.done = False
        self.block = None        # index of the open Anthropic content block
        self.block_kind = None   # "text" or ("tool", openai tool index)
        self.next_index = 0
        self.tools = {}          # openai tool_call index -> anthropic block index
        self.finish_reason = None
        self.input_tokens = 0
        self.output_tokens = 0
        self.usage_seen = False

    def _start(self, out, rid):
        self.started = True
        mid = rid if rid and rid.startswith("msg_") else "msg_" + (rid or _hex())
        out.append(_anthropic_event(b"message_start", {"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant", "model": self.model, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0}}}))

    def _close_block(self, out):
        if self.block is not None:
            out.append(_anthropic_event(b"content_block_stop",
                                        {"type": "content_block_stop", "index": self.block}))
            self.block = None
            self.block_kind = None

    def _open(self, out, kind, content_block):
        self._close_block(out)
        self.block = self.next_index
        self.next_index += 1
        self.block_kind = kind
        out.append(_anthropic_event(b"content_block_start", {
            "type": "content_block_start", "index": self.block, "content_block": content_block}))

    def feed(self, events):
        out = []
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
                out.append(_anthropic_event(b"error", {"type": "error", "error": {
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
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                text = delta.get("content")
                if text:
                    if self.block_kind != "text":
                        self._open(out, "text", {"type": "text", "text": ""})
                    out.append(_anthropic_event(b"content_block_delta", {
                        "type": "content_block_delta", "index": self.block,
                        "delta": {"type": "text_delta", "text": text}}))
                for tc in delta.get("tool_calls") or ():
                    ti = tc.get("index", 0)
                    fn = tc.get("function") or {}
                    if ti not in self.tools:
                        self._open(out, ("tool", ti), {
                            "type": "tool_use", "id": tc.get("id") or _new_id("toolu_"),
                            "name": fn.get("name", ""), "input": {}})
                        self.tools[ti] = self.block
                    args = fn.get("arguments")
                    if args:
                        out.append(_anthropic_event(b"content_block_delta", {
                            "type": "content_block_delta", "index": self.tools[ti],
                            "delta": {"type": "input_json_delta", "partial_json": args}}))
                fr = choice.get("finish_reason")
                if fr:
                    self.finish_reason = fr
        return b"".join(out)

    def _finish(self, out):
        if self.done:
            return
        if not self.started:
            self._start(out, None)
        self._close_block(out)
        out.append(_anthropic_event(b"message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": _FINISH_TO_STOP.get(self.finish_reason, "end_turn"), "stop_sequence": None},
            "usage": {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}}))
        out.append(_anthropic_event(b"message_stop", {"type": "message_stop"}))
        self.done = True


# ====================================================== OpenAI -> Anthropic
def _openai_image_to_anthropic(part):
    url = (part.get("image_url") or {}).get("url", "")
    if url.startswith("data:"):
        head, _, data = url.partition(",")
        media = head[5:].split(";")[0] or "image/png"
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _openai_content_to_blocks(content):
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise TranslationError("message content must be a string or a list of parts")
    blocks = []
    for p in content:
        if not isinstance(p, dict):
            raise TranslationError("content parts must be objects")
        kind = p.get("type")
        if kind == "text":
            blocks.append({"type": "text", "text": p.get("text", "")})
        elif kind == "image_url":
            blocks.append(_openai_image_to_anthropic(p))
        else:
            raise TranslationError(f"content part type {kind!r} is not supported by this provider")
    return blocks


def openai_request_to_anthropic(req, upstream_model, default_max_tokens):
    """Returns (anthropic_request_dict, stream, include_usage)."""
    if not isinstance(req, dict):
        raise TranslationError("request body must be a JSON object")
    messages = req.get("messages")
    if not isinstance(messages, list):
        raise TranslationError("messages: a list is required")
    n = req.get("n", 1)
    if n not in (1, None):
        raise TranslationError("n > 1 is not supported by this provider")
    system = []
    out = []

    def push(role, blocks):
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
            system.append(_text_of(msg.get("content")))
        elif role == "user":
            push("user", _openai_content_to_blocks(msg.get("content")))
        elif role == "assistant":
            blocks = _openai_content_to_blocks(msg.get("content"))
            for tc in msg.get("tool_calls") or ():
                fn = tc.get("function") or {}
                try:
                    args = loads(fn.get("arguments") or "{}")
                except orjson.JSONDecodeError:
                    raise TranslationError("tool call arguments must be JSON") from None
                blocks.append({"type": "tool_use", "id": tc.get("id") or _new_id("toolu_"),
                               "name": fn.get("name", ""), "input": args})
            push("assistant", blocks)
        elif role == "tool":
            push("user", [{"type": "tool_result", "tool_use_id": msg.get("tool_call_id", ""),
                           "content": _text_of(msg.get("content"))}])
        else:
            raise TranslationError(f"message role {role!r} is not supported")
    max_tokens = req.get("max_completion_tokens") or req.get("max_tokens") or default_max_tokens
    body = {"model": upstream_model, "max_tokens": max_tokens, "messages": out}
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
    tools = req.get("tools")
    if tools:
        conv = []
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
    if req.get("parallel_tool_calls") is False and "tool_choice" in body:
        body["tool_choice"]["disable_parallel_tool_use"] = True
    if req.get("user"):
        body["metadata"] = {"user_id": str(req["user"])}
    return body, stream, include_usage


def anthropic_response_to_openai(resp, model):
    texts = []
    tool_calls = []
    for block in resp.get("content") or ():
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text", ""))
        elif kind == "tool_use":
            tool_calls.append({"id": block.get("id", ""), "type": "function", "function": {
                "name": block.get("name", ""), "arguments": dumps(block.get("input", {})).decode()}})
    msg = {"role": "assistant", "content": "".join(texts) if texts or not tool_calls else None}
    if tool_calls:
        msg["tool_calls"] = tool_calls
    usage = resp.get("usage") or {}
    pin = usage.get("input_tokens", 0) or 0
    pout = usage.get("output_tokens", 0) or 0
    rid = resp.get("id") or _hex()
    return {
        "id": "chatcmpl-" + rid, "object": "chat.completion", "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": msg,
                     "finish_reason": _STOP_TO_FINISH.get(resp.get("stop_reason"), "stop")}],
        "usage": {"prompt_tokens": pin, "completion_tokens": pout, "total_tokens": pin + pout},
    }


class AnthropicToOpenAIStream(_StreamTranslator):
    """Anthropic message stream events -> OpenAI chat.completion.chunk events."""

    def __init__(self, model, include_usage):
        self.model = model
        self.include_usage = include_usage
        self.id = "chatcmpl-" + _hex()
        self.created = int(time.time())
        self.tools = {}   # anthropic block index -> openai tool index
        self.finish_reason = None
        self.input_tokens = 0
        self.output_tokens = 0
        self.usage_seen = False
        self.done = False
        self.started = False

    def _chunk(self, delta, finish=None):
        return _openai_event({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                              "model": self.model,
                              "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    def feed(self, events):
        out = []
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
                msg = obj.get("message") or {}
                if msg.get("id"):
                    self.id = "chatcmpl-" + msg["id"]
                usage = msg.get("usage") or {}
                self.input_tokens = usage.get("input_tokens", 0) or 0
                self.output_tokens = usage.get("output_tokens", 0) or 0
                self.started = True
                out.append(self._chunk({"role": "assistant", "content": ""}))
            elif kind == "content_block_start":
                cb = obj.get("content_block") or {}
                if cb.get("type") == "tool_use":
                    ti = len(self.tools)
                    self.tools[obj.get("index", 0)] = ti
                    out.append(self._chunk({"tool_calls": [{
                        "index": ti, "id": cb.get("id", ""), "type": "function",
                        "function": {"name": cb.get("name", ""), "arguments": ""}}]}))
                elif cb.get("type") == "text" and cb.get("text"):
                    out.append(self._chunk({"content": cb["text"]}))
            elif kind == "content_block_delta":
                d = obj.get("delta") or {}
                dk = d.get("type")
                if dk == "text_delta":
                    out.append(self._chunk({"content": d.get("text", "")}))
                elif dk == "input_json_delta":
                    ti = self.tools.get(obj.get("index", 0), 0)
                    out.append(self._chunk({"tool_calls": [{
                        "index": ti, "function": {"arguments": d.get("partial_json", "")}}]}))
            elif kind == "message_delta":
                d = obj.get("delta") or {}
                if d.get("stop_reason"):
                    self.finish_reason = _STOP_TO_FINISH.get(d["stop_reason"], "stop")
                usage = obj.get("usage") or {}
                if usage:
                    self.usage_seen = True
                    self.output_tokens = usage.get("output_tokens", self.output_tokens) or 0
                    if usage.get("input_tokens"):
                        self.input_tokens = usage["input_tokens"]
            elif kind == "message_stop":
                self._finish(out)
            elif kind == "error":
                err = obj.get("error") or {}
                out.append(_openai_event({"error": {"message": err.get("message", "provider error"),
                                                    "type": err.get("type", "api_error"),
                                                    "param": None, "code": None}}))
                self.done = True
        return b"".join(out)

    def _finish(self, out):
        if self.done:
            return
        if not self.started:
            self.started = True
            out.append(self._chunk({"role": "assistant", "content": ""}))
        out.append(self._chunk({}, self.finish_reason or "stop"))
        if self.include_usage:
            out.append(_openai_event({
                "id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "choices": [],
                "usage": {"prompt_tokens": self.input_tokens, "completion_tokens": self.output_tokens,
                          "total_tokens": self.input_tokens + self.output_tokens}}))
        out.append(b"data: [DONE]\n\n")
        self.done = True


# ============================================================ error bodies
def upstream_error_message(body):
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
