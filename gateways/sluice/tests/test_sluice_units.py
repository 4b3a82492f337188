"""In-process unit tests: translation, SSE parsing, rate limits and budgets, config checks."""
import json
import re

import pytest

from sluice import translate
from sluice.config import Config, ConfigError, split_url
from sluice.keys import KeyStore
from sluice.shared import Shared


def test_sse_parser_handles_split_frames_and_crlf():
    p = translate.SSEParser()
    assert p.feed(b"event: a\r\ndata: {\"x\":") == []
    assert p.feed(b"1}\r\n\r\ndata: line1\ndata: line2\n\n: comment\n\ndata: [DO") == [
        (b"a", b'{"x":1}'), (None, b"line1\nline2")]
    assert p.feed(b"NE]\n\n") == [(None, b"[DONE]")]


def test_anthropic_request_with_tools_to_openai():
    req = {"model": "m", "max_tokens": 10, "system": [{"type": "text", "text": "S"}],
           "stop_sequences": ["END"], "tools": [{"name": "get", "description": "d",
                                                 "input_schema": {"type": "object"}}],
           "tool_choice": {"type": "any"},
           "messages": [
               {"role": "user", "content": "q"},
               {"role": "assistant", "content": [{"type": "text", "text": "calling"},
                                                 {"type": "tool_use", "id": "t1", "name": "get",
                                                  "input": {"a": 1}}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}]}]}
    out, stream = translate.anthropic_request_to_openai(req, "up")
    assert not stream
    assert out["model"] == "up" and out["stop"] == ["END"] and out["tool_choice"] == "required"
    assert out["tools"][0]["function"]["name"] == "get"
    assert out["messages"][0] == {"role": "system", "content": "S"}
    assert out["messages"][2]["tool_calls"][0]["function"] == {"name": "get", "arguments": '{"a":1}'}
    assert out["messages"][3] == {"role": "tool", "tool_call_id": "t1", "content": "42"}


def test_openai_request_with_tools_to_anthropic():
    req = {"model": "m", "messages": [
        {"role": "system", "content": "S"},
        {"role": "user", "content": [{"type": "text", "text": "q"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"k\":2}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "res"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "tool_choice": "auto", "temperature": 1.7, "stop": "X", "stream": True,
        "stream_options": {"include_usage": True}}
    out, stream, usage = translate.openai_request_to_anthropic(req, "claude", 321)
    assert stream and usage
    assert out["max_tokens"] == 321 and out["system"] == "S" and out["temperature"] == 1.0
    assert out["stop_sequences"] == ["X"] and out["tool_choice"] == {"type": "auto"}
    assert out["messages"][0]["content"][1]["source"] == {"type": "base64", "media_type": "image/png", "data": "AAA"}
    assert out["messages"][1] == {"role": "assistant", "content": [
        {"type": "tool_use", "id": "c1", "name": "f", "input": {"k": 2}}]}
    assert out["messages"][2]["content"][0] == {"type": "tool_result", "tool_use_id": "c1", "content": "res"}
    with pytest.raises(translate.TranslationError):
        translate.openai_request_to_anthropic({"messages": [], "n": 3}, "c", 1)


def test_tool_call_responses_both_ways():
    oa = {"id": "x", "choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
        "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
    an = translate.openai_response_to_anthropic(oa, "m")
    assert an["stop_reason"] == "tool_use"
    assert an["content"] == [{"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}}]
    back = translate.anthropic_response_to_openai(an, "m")
    assert back["choices"][0]["finish_reason"] == "tool_calls"
    assert json.loads(back["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]) == {"a": 1}


def test_stream_translators_tool_calls():
    t = translate.OpenAIToAnthropicStream("m")
    chunks = [
        {"id": "a", "choices": [{"delta": {"role": "assistant", "content": "Hi"}}]},
        {"id": "a", "choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {
            "name": "f", "arguments": ""}}]}}]},
        {"id": "a", "choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\""}}]}}]},
        {"id": "a", "choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
    ]
    out = t.feed([(None, json.dumps(c).encode()) for c in chunks]) + t.feed([(None, b"[DONE]")])
    kinds = [line[7:] for line in out.decode().split("\n") if line.startswith("event: ")]
    assert kinds == ["message_start", "content_block_start", "content_block_delta", "content_block_stop",
                     "content_block_start", "content_block_delta", "content_block_stop", "message_delta",
                     "message_stop"]
    assert b'"stop_reason":"tool_use"' in out
    assert t.finish() == b""

    a = translate.AnthropicToOpenAIStream("m", include_usage=False)
    events = [
        (b"message_start", {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 5}}}),
        (b"content_block_start", {"type": "content_block_start", "index": 0,
                                  "content_block": {"type": "tool_use", "id": "t", "name": "f"}}),
        (b"content_block_delta", {"type": "content_block_delta", "index": 0,
                                  "delta": {"type": "input_json_delta", "partial_json": "{}"}}),
        (b"message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                            "usage": {"output_tokens": 7}}),
        (b"message_stop", {"type": "message_stop"})]
    out = a.feed([(k, json.dumps(v).encode()) for k, v in events]).decode()
    frames = [f[6:] for f in out.split("\n\n") if f.startswith("data: ")]
    assert frames[-1] == "[DONE]"
    assert json.loads(frames[1])["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "f"
    assert json.loads(frames[-2])["choices"][0]["finish_reason"] == "tool_calls"
    assert a.usage() == (5, 7, 0, 0, True)  # prompt, completion, cache write, cache read, final


class _K:
    def __init__(self, name, **kw):
        self.name = name
        self.key = "k-" + name
        self.key_sha256 = None
        self.models = kw.get("models", ["*"])
        self.rpm = kw.get("rpm", 0)
        self.token_budget = kw.get("budget", 0)
        self.budget_period_s = kw.get("period", 0)
        self.max_in_flight = kw.get("max_in_flight", 0)


def _workers(key, n):
    """``n`` workers' key stores over one shared memory, each with its record of ``key``."""
    shared = Shared(1, n)
    stores = [KeyStore({key.name: key}, shared, w, n) for w in range(n)]
    return [(ks, ks.lookup(key.key.encode())) for ks in stores]


def test_rpm_sliding_window_across_workers():
    (w0, rec0), (w1, rec1) = _workers(_K("a", rpm=4), 2)
    t = 6000.0  # start of a window
    assert w0.take_request(rec0, t) == 0
    assert w1.take_request(rec1, t + 1) == 0
    assert w0.take_request(rec0, t + 2) == 0
    assert w1.take_request(rec1, t + 3) == 0
    wait = w0.take_request(rec0, t + 4)  # the fifth within the minute, counted over both workers
    assert 50 <= wait <= 120
    # next window: the previous one still weighs (4 * 0.75 = 3 at +15 s): one more is allowed
    assert w1.take_request(rec1, t + 75) == 0
    assert w0.take_request(rec0, t + 76) > 0
    # two windows later everything has decayed
    assert w0.take_request(rec0, t + 200) == 0


def test_budget_reserve_and_settle():
    [(ks, rec)] = _workers(_K("b", budget=100), 1)
    assert ks.reserve(rec, 60) == 0
    assert ks.reserve(rec, 50) == 1          # in flight reservations may still settle lower
    ks.settle(rec, 60, 10)
    assert ks.budget_state(rec) == (10, 0)
    assert ks.reserve(rec, 90) == 0
    ks.settle(rec, 90, 90)
    assert ks.reserve(rec, 1) == 86400       # exhausted, never resets
    assert ks.budget_state(rec) == (100, 0)


def _cfg(extra):
    base = {"providers": {"p": {"base_url": "http://127.0.0.1:9/v1"}}, "models": {"m": {"provider": "p"}}}
    for k, v in extra.items():
        base.setdefault(k, {}).update(v)
    return Config(base)


def test_config_validation():
    c = _cfg({})
    assert c.providers["p"].chat_path == "/v1/chat/completions" and c.providers["p"].port == 9
    assert not c.server.require_auth
    with pytest.raises(ConfigError, match="provider"):
        _cfg({"models": {"x": {"provider": "nope"}}})
    with pytest.raises(ConfigError, match="used by both"):
        _cfg({"models": {"x": {"provider": "p", "aliases": ["m"]}}})
    with pytest.raises(ConfigError, match="exactly one"):
        _cfg({"keys": {"k": {"models": ["m"]}}})
    with pytest.raises(ConfigError, match="unknown model"):
        _cfg({"keys": {"k": {"key": "s", "models": ["zz"]}}})
    with pytest.raises(ConfigError, match="not set"):
        _cfg({"providers": {"q": {"base_url": "https://h", "api_key_env": "SLUICE_SURELY_UNSET_VAR"}}})
    assert _cfg({"keys": {"k": {"key": "s"}}}).server.require_auth
    assert split_url("https://[::1]:8443/a/b?x") == ("https", "::1", 8443, "/a/b")
    assert split_url("http://api.example.com") == ("http", "api.example.com", None, "")


def test_usage_scanner_across_chunk_edges():
    from sluice.usage import UsageScan
    data = b'data: {"id":"x","choices":[],"usage":{"prompt_tokens":123,"completion_tokens":45}}\n\n'
    for cut in range(1, len(data)):
        scan = UsageScan((1000, 1000, 1000, 1000))  # weight 1 each, in thousandths
        scan.feed(data[:cut])
        scan.feed(data[cut:])
        assert scan.counts == {b"prompt_tokens": 123, b"completion_tokens": 45}, cut
        assert scan.tokens() == (123, 45)



def test_usage_scanner_on_a_stream_that_says_usage_null_in_every_chunk():
    """OpenAI's stream with include_usage: "usage": null in each chunk, the counts in the last.
    Cut into two reads at every byte, and read a chunk a read: the same counts; what is kept
    across reads stays within one chunk."""
    from sluice.usage import UsageScan
    chunk = b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}\n\n'
    last = b'data: {"id":"x","choices":[],"usage":{"prompt_tokens":123,"completion_tokens":45}}\n\n'
    stream = chunk * 6 + last + b"data: [DONE]\n\n"
    for cut in range(1, len(stream)):
        scan = UsageScan((1000, 1000, 1000, 1000))
        scan.feed(stream[:cut])
        scan.feed(stream[cut:])
        assert scan.tokens() == (123, 45), cut
    scan = UsageScan((1000, 1000, 1000, 1000))
    for _ in range(50):
        scan.feed(chunk)
        assert len(scan.tail) <= len(chunk)
    scan.feed(last)
    assert scan.tokens() == (123, 45)

def test_a_unary_body_s_usage_is_its_last_top_level_one():
    """A tool call's input before the real usage may hold a usage object: cut anywhere, only the
    body's own (the last, at the top level) counts; a body whose last usage is nested, or that
    was not read whole, has none (the reservation is charged)."""
    import json

    from sluice.usage import UsageScan
    fake = {"input_tokens": 900, "output_tokens": 0}
    body = json.dumps({"content": [{"type": "tool_use", "input": {"usage": fake, "pad": "x" * 5000}}],
                       "usage": {"input_tokens": 900, "output_tokens": 60000}}).encode()
    for cut in range(0, len(body), 97):
        scan = UsageScan((1000, 1000, 1000, 1000))
        scan.unary = True
        scan.feed(body[:cut])
        scan.feed(body[cut:])
        assert scan.tokens() == (None, None), cut  # not whole yet
        scan.end()
        assert scan.tokens() == (900, 60000), cut
    nested_last = json.dumps({"usage": {"input_tokens": 9, "output_tokens": 9},
                              "content": [{"input": {"usage": fake}}]}).encode()
    scan = UsageScan((1000, 1000, 1000, 1000))
    scan.unary = True
    scan.feed(nested_last)
    scan.end()
    assert scan.tokens() == (None, None)


def test_rpm_leases_never_let_workers_exceed_the_limit():
    """With room to spare a worker claims a lease; the others count it as used."""
    (w0, rec0), (w1, rec1) = _workers(_K("a", rpm=100), 2)
    t = 6000.0
    assert w0.take_request(rec0, t) == 0
    assert rec0.rpm_lease == (100 - 1) // 4  # a quarter of the free room (two workers)
    admitted = 1
    for i in range(300):  # the two workers take turns within one minute
        w, rec = (w0, rec0) if i % 2 else (w1, rec1)
        if w.take_request(rec, t + 1 + i * 0.1) == 0:
            admitted += 1
    assert admitted <= 100
    # leases unused at the end are given back: the room is there again
    w0.return_leases()
    w1.return_leases()
    assert rec0.rpm_lease == rec1.rpm_lease == 0
    spent = rec0.rpm_count + rec1.rpm_count
    assert spent == admitted


def test_rpm_lease_is_not_counted_as_requests_in_the_next_window():
    [(ks, rec)] = _workers(_K("a", rpm=1000), 1)
    assert ks.take_request(rec, 6000.0) == 0
    assert rec.rpm_lease == 999  # one worker: all the free room (1 + 999 = the limit)
    assert ks.take_request(rec, 6001.0) == 0  # from the lease
    assert ks.take_request(rec, 6065.0) == 0  # next window: two requests before, not 1000
    assert rec.rpm_previous_count == 2


def test_budget_leases_keep_spent_plus_held_constant():
    (w0, rec0), (w1, rec1) = _workers(_K("b", budget=1000), 2)
    assert w0.reserve(rec0, 100) == 0
    assert rec0.budget_lease == (1000 - 100) // 4
    held = rec0.spent + rec0.reserved + rec0.budget_lease
    assert w0.reserve(rec0, 50) == 0          # from the lease: nothing published
    w0.settle(rec0, 100, 30)                  # 70 back into the lease
    w0.settle(rec0, 50, 60)                   # 10 more than reserved, out of the lease
    assert rec0.spent + rec0.reserved + rec0.budget_lease == held
    assert w0.budget_state(rec0) == (90, 0)
    # the other worker sees worker 0's published numbers (spent, reserved and lease) as taken
    assert w1.reserve(rec1, 1000 - held + 1) == 1  # blocked by a lease: room comes back soon
    w0.return_leases()
    assert w1.reserve(rec1, 1000 - 90) == 0
    assert w1.budget_state(rec1) == (90, 910)


def test_budget_overdraft_beyond_the_lease_is_published():
    (w0, rec0), (w1, rec1) = _workers(_K("b", budget=100), 2)
    assert w0.reserve(rec0, 10) == 0
    w0.settle(rec0, 10, 95)                   # the provider used far more than reserved
    assert rec0.budget_lease == 0
    assert w1.budget_state(rec1) == (95, 0)   # seen by the other worker at once
    assert w1.reserve(rec1, 10) == 86400


def test_bench_hotpath_completes_exchanges_in_memory():
    """The tuning tool runs Sluice's own request and response path end to end without sockets."""
    import subprocess
    import sys
    from pathlib import Path
    tool = Path(__file__).resolve().parents[1] / "bench_hotpath.py"
    for extra, what in (([], "key + alias"), (["--plain"], "plain relay")):
        out = subprocess.run([sys.executable, str(tool), "--requests", "200", *extra],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        m = re.fullmatch(r"(\d+\.\d+) us of Python per request \((.+); best of 5 x (\d+)\)\n", out.stdout)
        assert m is not None, out.stdout
        assert (m.group(2), int(m.group(3))) == (what, 200)
        # microseconds per exchange: more than an empty loop takes, less than anything plausible
        assert 0.5 < float(m.group(1)) < 10_000, out.stdout


def test_budget_settled_after_its_period_ended_is_published_in_the_new_period():
    (w0, rec0), (w1, rec1) = _workers(_K("b", budget=1000, period=3600), 2)
    assert w0.reserve(rec0, 100) == 0
    rec0.budget_until = 0.0                   # as if the period ended while the request was in flight
    w0.settle(rec0, 100, 40)
    assert w1.budget_state(rec1)[1] == 0      # the reservation is gone for the other worker too
    assert w1.budget_state(rec1)[0] in (0, 40)  # 40 in the new period (0 if the hour turned meanwhile)
    import time
    assert w1._budget_totals(rec1, time.time())[2] == rec0.budget_lease  # its lease, as published
