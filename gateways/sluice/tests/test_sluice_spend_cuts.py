"""Cutting a stream is never cheaper than its usage: a client that closes at any event boundary
(the provider holding the rest) is charged the provider's final usage when Sluice saw it (an
Anthropic message_delta, OpenAI's usage chunk), else the whole reservation. For a budget key
Sluice asks an OpenAI provider for the usage chunk and takes it out of a stream whose client did
not ask for it."""
import json
import socket
import threading
import time

import pytest
from sluice_helpers import AUTH, chat, raw_post, tokens_spent
from sluice_scripted_provider import ScriptedProvider, chunk
from sluice_spend_provider import (
    anthropic_events,
    asked_usage,
    client_request,
    head,
    openai_events,
    settled,
    start,
    usage_of,
)

pytestmark = pytest.mark.integration

PROMPT_SIDE = 3000
COMPLETION = 700
# no cache counts: what a cut costs apart from them (test_sluice_spend_usage charges those)
USAGE = {d: usage_of(d, PROMPT_SIDE, COMPLETION, 0) for d in ("openai", "anthropic")}
ROUTES = [("openai", "oa"), ("anthropic", "an"), ("openai", "an"), ("anthropic", "oa")]
IDLE_S = 0.2  # the client stops reading after this long without a byte (only when to cut)


class CutProvider(ScriptedProvider):
    """Streams the first ``upto`` events of its dialect's answer, then holds the connection
    until Sluice closes it; ``sent`` is set once they are written."""

    def __init__(self):
        self.upto = 0
        self.sent = threading.Event()
        self.bodies = []
        super().__init__(self._cut)

    def _cut(self, p, c, request_head, body):
        self.bodies.append(body)
        anthropic = b"/messages " in request_head.split(b"\r\n", 1)[0]
        events = anthropic_events(USAGE["anthropic"]) if anthropic else openai_events(USAGE["openai"], asked_usage(body))
        c.sendall(head(b"text/event-stream") + b"".join(chunk(e) for e in events[:self.upto]))
        self.sent.set()
        self.hold(c, 30)


@pytest.fixture(scope="module")
def provider():
    p = CutProvider()
    yield p
    p.close()


@pytest.fixture(scope="module")
def gw(provider, tmp_path_factory):
    g = start(provider, tmp_path_factory.mktemp("spend-cuts"))
    yield g
    g.stop()


def _read_until_idle(s):
    s.settimeout(IDLE_S)
    buf = b""
    while True:
        try:
            piece = s.recv(65536)
        except socket.timeout:
            return buf
        if not piece:
            return buf
        buf += piece


@pytest.mark.parametrize("client_dialect,model", ROUTES)
def test_a_stream_cut_at_any_event_boundary_is_charged_at_least_its_usage(gw, provider, client_dialect, model):
    path, body, reserved = client_request(client_dialect, model, True)
    # message_start .. message_stop (Anthropic), or the chunks, the usage chunk and [DONE]
    for upto in range(9):
        provider.upto = upto
        provider.sent.clear()
        before = tokens_spent(gw, "k")
        s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
        s.sendall(raw_post(body, path=path))
        assert provider.sent.wait(10)
        got = _read_until_idle(s)
        s.close()  # before the end of the stream
        assert got.startswith(b"HTTP/1.1 200"), got[:200]
        charged = settled(gw, before)
        # an Anthropic stream cut after its last content block was charged message_start's
        # input_tokens + 1, though its message_delta would have said 700 more
        assert PROMPT_SIDE + COMPLETION <= charged <= reserved, (upto, charged, reserved)


class WholeProvider(ScriptedProvider):
    """Streams its whole OpenAI answer: chunked, or framed by Content-Length."""

    def __init__(self, content_length_framed):
        self.content_length_framed = content_length_framed
        super().__init__(self._whole)

    def _whole(self, p, c, request_head, body):
        data = b"".join(openai_events(USAGE["openai"], asked_usage(body)))
        if self.content_length_framed:
            c.sendall(head(b"text/event-stream", len(data)) + data)
        else:  # each event in a read of its own, as far as the pause makes it
            c.sendall(head(b"text/event-stream"))
            for e in openai_events(USAGE["openai"], asked_usage(body)):
                c.sendall(chunk(e))
                time.sleep(0.005)
            c.sendall(b"0\r\n\r\n")


@pytest.mark.parametrize("content_length_framed", [False, True], ids=["chunked", "content-length"])
@pytest.mark.parametrize("client_asks", [None, False, True])
def test_a_budget_key_stream_asks_for_its_usage_and_the_client_gets_what_it_asked(tmp_path, content_length_framed,
                                                                                  client_asks):
    provider = WholeProvider(content_length_framed)
    g = start(provider, tmp_path)
    try:
        _, body, reserved = client_request("openai", "oa", True, client_asks)
        before = tokens_spent(g, "k")
        status, _, events = chat(g.port, body)
        assert status == 200
        sent = json.loads(provider.requests[-1][1])
        assert sent["stream_options"] == {"include_usage": True}, sent.get("stream_options")
        expected = b"".join(openai_events(USAGE["openai"], client_asks is True))
        assert events == expected  # the usage chunk taken out unless asked for; nothing else changed
        assert settled(g, before) == PROMPT_SIDE + COMPLETION
        if client_asks is True:  # the body the client sent, as it sent it
            assert provider.requests[-1][1] == body
    finally:
        g.stop()
        provider.close()


def test_a_key_without_budget_streams_as_asked(tmp_path):
    provider = WholeProvider(False)
    g = start(provider, tmp_path, '\n[keys.free]\nkey = "sk-free"\n')
    try:
        _, body, _ = client_request("openai", "oa", True)
        s = socket.create_connection(("127.0.0.1", g.port), timeout=10)
        s.sendall(raw_post(body, auth=AUTH.replace(b"sk-test-main", b"sk-free")))
        _read_until_idle(s)
        s.close()
        assert provider.requests[-1][1] == body  # nothing asked for it: nothing to charge
    finally:
        g.stop()
        provider.close()


class LongEventProvider(ScriptedProvider):
    """Streams one OpenAI event of ``size`` bytes without its blank line, then holds."""

    def __init__(self, size):
        self.size = size
        super().__init__(self._long)

    def _long(self, p, c, request_head, body):
        c.sendall(head(b"text/event-stream") + chunk(b"data: " + b"x" * self.size))
        self.hold(c, 30)


def test_an_event_held_to_take_the_usage_chunk_out_is_bounded_by_max_sse_frame_bytes(tmp_path):
    # a stream whose usage chunk is taken out is relayed event by event; an event that never
    # ends must not make Sluice hold all of it
    provider = LongEventProvider(20000)
    g = start(provider, tmp_path)
    try:
        with open(g.path) as f:
            cfg = f.read()
        g.stop()
        with open(g.path, "w") as f:
            f.write(cfg.replace("workers = 1", "workers = 1\nmax_sse_frame_bytes = 4096"))
        g.start()
        _, body, _ = client_request("openai", "oa", True)
        s = socket.create_connection(("127.0.0.1", g.port), timeout=10)
        s.sendall(raw_post(body))
        got = b""
        while got.count(b"x") < 20000:
            piece = s.recv(65536)  # held: this times out
            assert piece, got[:200]
            got += piece
        s.close()
    finally:
        g.stop()
        provider.close()
