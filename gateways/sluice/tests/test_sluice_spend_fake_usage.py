"""A unary answer's usage is its last top-level one: a usage object inside a tool call's input
(JSON a client can shape, which an Anthropic body puts before its own usage) is never believed,
wherever the provider's reads cut the body; and a unary body cut before its end is charged the
whole reservation."""
import json
import socket
import threading
import time

import pytest
from sluice_helpers import AUTH, raw_post, tokens_spent
from sluice_scripted_provider import ScriptedProvider
from sluice_spend_provider import client_request, head, settled, start

pytestmark = pytest.mark.integration

FAKE = {"input_tokens": 900, "output_tokens": 0}
REAL = {"input_tokens": 900, "output_tokens": 60000}


def _body():
    """An Anthropic answer whose tool call's input holds a fake usage, 5000 bytes before the real
    one; and where the real one's output count starts (a read ends there)."""
    body = json.dumps({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "an",
        "content": [{"type": "tool_use", "id": "t1", "name": "f",
                     "input": {"usage": FAKE, "pad": "x" * 5000}}],
        "stop_reason": "tool_use", "stop_sequence": None, "usage": REAL}).encode()
    return body, body.rfind(b'"output_tokens"') + 5


@pytest.fixture(scope="module")
def provider():
    p = ScriptedProvider(None)
    yield p
    p.close()


@pytest.fixture(scope="module")
def gw(provider, tmp_path_factory):
    g = start(provider, tmp_path_factory.mktemp("fake-usage"))
    yield g
    g.stop()


def test_a_usage_inside_a_tool_input_is_not_the_answer_s(gw, provider):
    body, cut = _body()

    def script(p, c, request_head, request_body):
        c.sendall(head(b"application/json", len(body)) + body[:cut])
        time.sleep(0.1)  # the rest in a read of its own: the real usage split between two reads
        c.sendall(body[cut:])
    provider.script = script
    path, request_body, _ = client_request("anthropic", "an", False)
    before = tokens_spent(gw, "k")
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    s.sendall(raw_post(request_body, path=path, auth=AUTH))
    got = b""
    while not got.endswith(body):
        piece = s.recv(65536)
        assert piece, got[:300]
        got += piece
    s.close()
    assert settled(gw, before) == REAL["input_tokens"] + REAL["output_tokens"]


def test_a_unary_answer_cut_before_its_end_is_charged_the_reservation(gw, provider):
    body, cut = _body()
    sent = threading.Event()

    def script(p, c, request_head, request_body):
        c.sendall(head(b"application/json", len(body)) + body[:cut])
        sent.set()
        p.hold(c, 30)  # the rest never comes: the client leaves first
    provider.script = script
    path, request_body, reserved = client_request("anthropic", "an", False)
    before = tokens_spent(gw, "k")
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    s.sendall(raw_post(request_body, path=path, auth=AUTH))
    assert sent.wait(10)
    got = b""
    while b'"pad"' not in got:  # the fake usage reached the client
        piece = s.recv(65536)
        assert piece, got[:300]
        got += piece
    s.close()
    assert settled(gw, before) == reserved
