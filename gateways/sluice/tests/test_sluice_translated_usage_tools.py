"""What a translated answer tells its client: the usage in the client's dialect with the prompt
cache's counts where that dialect keeps them (OpenAI's prompt_tokens include every prompt token,
cached ones detailed in prompt_tokens_details.cached_tokens; Anthropic's input_tokens leave out
cache reads and writes, given apart), unary and streamed; and tool calls as the other dialect
says them (an Anthropic stream never writes into a block it stopped; parallel_tool_calls = false
kept without a tool_choice). A real Sluice between a real client socket and a scripted provider."""
import json

import pytest
from sluice_helpers import chat
from sluice_scripted_provider import ScriptedProvider
from sluice_spend_provider import (
    anthropic_events,
    anthropic_unary,
    head,
    is_stream,
    openai_events,
    openai_unary,
    send_chunked,
    start,
)

pytestmark = pytest.mark.integration

MSG = [{"role": "user", "content": "hi"}]
# an Anthropic provider's usage: 600 uncached prompt tokens, 800 written to the cache, 1600 read
ANTHROPIC_USAGE = {"input_tokens": 600, "cache_creation_input_tokens": 800,
                   "cache_read_input_tokens": 1600, "output_tokens": 700}
# an OpenAI provider's: 3000 prompt tokens, 2400 of them read from the cache
OPENAI_USAGE = {"prompt_tokens": 3000, "completion_tokens": 700, "total_tokens": 3700,
                "prompt_tokens_details": {"cached_tokens": 2400}}


def _send(c, data, content_type):
    c.sendall(head(content_type))
    send_chunked(c, [data], pause_s=0)


def _answer(p, c, request_head, body):
    """The provider's answer in its dialect, unary or streamed, with the usage above."""
    anthropic = b"/messages " in request_head.split(b"\r\n", 1)[0]
    if is_stream(body):
        events = anthropic_events(ANTHROPIC_USAGE) if anthropic else openai_events(OPENAI_USAGE, True)
        _send(c, b"".join(events), b"text/event-stream")
    else:
        _send(c, anthropic_unary(ANTHROPIC_USAGE) if anthropic else openai_unary(OPENAI_USAGE),
              b"application/json")


@pytest.fixture(scope="module")
def provider():
    p = ScriptedProvider(_answer)
    yield p
    p.close()


@pytest.fixture(scope="module")
def gw(provider, tmp_path_factory):
    g = start(provider, tmp_path_factory.mktemp("translated"))
    yield g
    g.stop()


@pytest.fixture(autouse=True)
def answers(provider):
    provider.script = _answer


def _events(body):
    """The (event name or None, data object) pairs of an SSE body ([DONE] left out)."""
    out = []
    for block in body.decode().split("\n\n"):
        name, data = None, None
        for line in block.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data = line[5:].strip()
        if data and data != "[DONE]":
            out.append((name, json.loads(data)))
    return out


# ------------------------------------------------------------------ usage, both ways
@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_an_openai_client_gets_every_prompt_token_and_the_cached_ones(gw, stream):
    body = {"model": "an", "messages": MSG, "max_tokens": 1000}
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    status, _, answer = chat(gw.port, body)
    assert status == 200, answer[:300]
    if stream:
        usages = [e["usage"] for _, e in _events(answer) if e.get("usage")]
        assert len(usages) == 1, answer
        usage = usages[0]
    else:
        usage = json.loads(answer)["usage"]
    # OpenAI's prompt_tokens count the whole prompt: the cache's reads and writes are in it
    assert usage["prompt_tokens"] == 600 + 800 + 1600, usage
    assert usage["prompt_tokens_details"] == {"cached_tokens": 1600}, usage
    assert usage["completion_tokens"] == 700
    assert usage["total_tokens"] == 3000 + 700


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_an_anthropic_client_gets_input_tokens_without_the_cache_reads(gw, stream):
    body = {"model": "oa", "messages": MSG, "max_tokens": 1000}
    if stream:
        body["stream"] = True
    status, _, answer = chat(gw.port, body, path="/v1/messages")
    assert status == 200, answer[:300]
    if stream:
        deltas = [e for name, e in _events(answer) if name == "message_delta"]
        assert len(deltas) == 1, answer
        usage = deltas[0]["usage"]
    else:
        usage = json.loads(answer)["usage"]
    # Anthropic's input_tokens are the prompt tokens not read from (nor written to) the cache
    assert usage["input_tokens"] == 3000 - 2400, usage
    assert usage["cache_read_input_tokens"] == 2400, usage
    assert usage["cache_creation_input_tokens"] == 0, usage
    assert usage["output_tokens"] == 700


# ------------------------------------------------------------------ tool calls
def _openai_stream(chunks):
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "oa"}
    events = [dict(base, choices=[{"index": 0, "delta": d, "finish_reason": f}]) for d, f in chunks]
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def _call(index, args, id_name=None):
    call = {"index": index, "function": {"arguments": args}}
    if id_name:
        call.update(id=f"call_{id_name}", type="function")
        call["function"]["name"] = id_name
    return {"tool_calls": [call]}


def test_a_late_delta_of_an_earlier_tool_call_never_goes_into_a_stopped_block(gw, provider):
    # OpenAI may interleave parallel tool calls: call 0 gets more arguments after call 1 began,
    # and text comes after both
    chunks = [({"role": "assistant", "content": ""}, None),
              (_call(0, '{"city":', "weather"), None),
              (_call(1, '{"q":', "search"), None),
              (_call(0, ' "Paris"}'), None),
              (_call(1, ' "news"}'), None),
              ({"content": "done"}, None),
              ({}, "tool_calls")]
    provider.script = lambda p, c, h, b: _send(c, _openai_stream(chunks), b"text/event-stream")
    status, _, answer = chat(gw.port, {"model": "oa", "messages": MSG, "max_tokens": 100, "stream": True,
                                       "tools": [{"name": "weather", "input_schema": {"type": "object"}},
                                                 {"name": "search", "input_schema": {"type": "object"}}]},
                             path="/v1/messages")
    assert status == 200, answer[:300]
    events = _events(answer)
    open_blocks, stopped, blocks = set(), set(), {}
    for name, e in events:
        if name == "content_block_start":
            assert e["index"] not in blocks, events
            # the Anthropic stream's blocks come one after another: one open at a time
            assert not open_blocks, events
            open_blocks.add(e["index"])
            blocks[e["index"]] = dict(e["content_block"], json="", text=e["content_block"].get("text", ""))
        elif name == "content_block_delta":
            assert e["index"] in open_blocks and e["index"] not in stopped, (e, events)
            d = e["delta"]
            if d["type"] == "input_json_delta":
                blocks[e["index"]]["json"] += d["partial_json"]
            else:
                blocks[e["index"]]["text"] += d["text"]
        elif name == "content_block_stop":
            open_blocks.discard(e["index"])
            stopped.add(e["index"])
    assert not open_blocks and sorted(blocks) == list(range(len(blocks))), events
    tools = {b["name"]: json.loads(b["json"]) for b in blocks.values() if b["type"] == "tool_use"}
    assert tools == {"weather": {"city": "Paris"}, "search": {"q": "news"}}, blocks
    assert [b["text"] for b in blocks.values() if b["type"] == "text"] == ["done"], blocks
    assert [e["delta"]["stop_reason"] for name, e in events if name == "message_delta"] == ["tool_use"]


@pytest.mark.parametrize("tool_choice, expected", [
    (None, {"type": "auto", "disable_parallel_tool_use": True}),
    ("auto", {"type": "auto", "disable_parallel_tool_use": True}),
    ("required", {"type": "any", "disable_parallel_tool_use": True}),
    ("none", {"type": "none"}),   # Anthropic's "none" takes no such field (no tool is called)
])
def test_parallel_tool_calls_false_reaches_an_anthropic_provider(gw, provider, tool_choice, expected):
    body = {"model": "an", "messages": MSG, "max_tokens": 100, "parallel_tool_calls": False,
            "tools": [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]}
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    n = len(provider.requests)
    status, _, answer = chat(gw.port, body)
    assert status == 200, answer[:300]
    sent = json.loads(provider.requests[n][1])
    assert sent["tool_choice"] == expected, sent
    # without tools there is no tool_choice to carry it (Anthropic refuses one without tools)
    body = {"model": "an", "messages": MSG, "max_tokens": 100, "parallel_tool_calls": False}
    n = len(provider.requests)
    assert chat(gw.port, body)[0] == 200
    assert "tool_choice" not in json.loads(provider.requests[n][1])
