"""Usage bodies split at every byte (hypothesis, a bounded number of examples): a raw provider
answers a budget key's same-dialect request, unary or streamed, with a usage object of random
counts, field order and spacing (cache counts included), sent as two chunks cut at each byte
from the final usage's start (an Anthropic stream's message_delta event) to its end. Sluice
re-frames the chunked body; whatever the cut, it settles exactly the provider's billed counts."""
import json
import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sluice_helpers import chat, tokens_spent
from sluice_scripted_provider import ScriptedProvider, chunk
from sluice_spend_provider import client_request, head, settled, start

pytestmark = pytest.mark.integration

COUNT = st.integers(0, 50000)
SPACE = st.sampled_from(["", " ", "\n  "])


@st.composite
def usage_bodies(draw):
    """(dialect, stream, the usage object's text, the tokens it bills at weight 1)."""
    dialect = draw(st.sampled_from(["openai", "anthropic"]))
    stream = draw(st.booleans())
    if dialect == "openai":
        prompt, completion = draw(COUNT), draw(COUNT)
        cached = draw(st.integers(0, prompt))
        fields = [("prompt_tokens", prompt), ("completion_tokens", completion), ("total_tokens", prompt + completion),
                  ("prompt_tokens_details", {"cached_tokens": cached, "audio_tokens": 0})]
        billed = prompt + completion  # the cached tokens are part of prompt_tokens
    else:
        counts = [draw(COUNT) for _ in range(4)]
        fields = list(zip(("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
                           "output_tokens"), counts))
        billed = sum(counts)
    fields = draw(st.permutations(fields))
    text = "{" + ",".join(f'{draw(SPACE)}"{k}"{draw(SPACE)}:{draw(SPACE)}{json.dumps(v)}' for k, v in fields) + "}"
    return dialect, stream, text, billed


def _answer(dialect, stream, usage_text, asked):
    """The provider's body with ``usage_text`` as its final usage, and where that usage's
    region (to be cut at every byte) starts."""
    if not stream:
        shell = ({"id": "c", "object": "chat.completion", "created": 1, "model": "oa", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
            if dialect == "openai" else
            {"id": "msg_1", "type": "message", "role": "assistant", "model": "an",
             "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn"})
        data = json.dumps(shell)[:-1].encode() + b', "usage": ' + usage_text.encode() + b"}"
        return data, data.rfind(b'"usage"')
    if dialect == "openai":
        base = '{"id":"c","object":"chat.completion.chunk","created":1,"model":"oa","choices":'
        data = (f'data: {base}[{{"index":0,"delta":{{"content":"hi"}},"finish_reason":null}}]}}\n\n'
                f'data: {base}[{{"index":0,"delta":{{}},"finish_reason":"stop"}}]}}\n\n').encode()
        if asked:
            data += f'data: {base}[],"usage":{usage_text}}}\n\n'.encode()
        data += b"data: [DONE]\n\n"
        return data, data.rfind(b'"usage"')
    start_usage = json.loads(usage_text)
    start_usage["output_tokens"] = 1
    data = ('event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message",'
            '"role":"assistant","model":"an","content":[],"usage":' + json.dumps(start_usage) + '}}\n\n'
            'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
            '"delta":{"type":"text_delta","text":"hi"}}\n\n'
            'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
            '"usage":' + usage_text + '}\n\n'
            'event: message_stop\ndata: {"type":"message_stop"}\n\n').encode()
    return data, data.rfind(b"event: message_delta")


class SplitProvider(ScriptedProvider):
    """Answers with ``body`` as two chunks cut at ``at``, each in a write of its own."""

    def __init__(self):
        self.body = b""
        self.at = 0
        super().__init__(self._split)

    def _split(self, p, c, request_head, request_body):
        stream = self.body.startswith((b"data:", b"event:"))
        c.sendall(head(b"text/event-stream" if stream else b"application/json"))
        for piece in (self.body[:self.at], self.body[self.at:]):
            if piece:
                c.sendall(chunk(piece))
                time.sleep(0.002)  # apart, as far as the pause makes it (joined, nothing changes)
        c.sendall(b"0\r\n\r\n")


@pytest.fixture(scope="module")
def split_gw(tmp_path_factory):
    provider = SplitProvider()
    g = start(provider, tmp_path_factory.mktemp("fuzz-usage"))
    g.provider = provider
    yield g
    g.stop()
    provider.close()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                HealthCheck.too_slow])
@given(case=usage_bodies())
@example(case=("openai", False, '{"prompt_tokens": 3000, "completion_tokens": 503, "total_tokens": 3503, '
                                '"prompt_tokens_details": {"cached_tokens": 2400}}', 3503))
@example(case=("anthropic", True, '{"input_tokens": 600, "cache_creation_input_tokens": 800, '
                                  '"cache_read_input_tokens": 1600, "output_tokens": 503}', 3503))
def test_usage_split_at_every_byte_is_charged_whole(split_gw, case):
    dialect, stream, usage_text, billed = case
    model = "oa" if dialect == "openai" else "an"
    path, body, _ = client_request(dialect, model, stream)
    provider = split_gw.provider
    # a budget key's OpenAI stream asks for the usage chunk (and gets it: this provider honours it)
    provider.body, region = _answer(dialect, stream, usage_text, asked=True)
    for at in range(region, region + len(usage_text) + 40):
        provider.at = at
        before = tokens_spent(split_gw, "k")
        status, _, answer = chat(split_gw.port, body, path=path.decode())
        assert status == 200, answer[:300]
        assert settled(split_gw, before) == billed, (at, provider.body[region:at][-60:])
