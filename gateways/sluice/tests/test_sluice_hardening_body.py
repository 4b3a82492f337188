"""A chat request's body, as Sluice reads it, over raw sockets to a running Sluice: the token
budget reserves the most a request can spend (every output limit, ``n``, the cap written into
the body when the client gave none, a disconnect charged in full); repeated keys Sluice decides
on are refused; bad input is a 400 in the client's dialect, never a 500."""
import json
import socket

import pytest
from sluice_helpers import ENV, METRICS_TOKEN_LINE, MSG, raw_exchange, raw_post, server_config, tokens_spent
from sluice_stub import wait_until

pytestmark = pytest.mark.integration

BUDGET_KEYS = """
[keys.small]
key = "sk-small"
token_budget = 2000

[keys.big]
key = "sk-big"
token_budget = 100000000

[models.capped]
provider = "stub"
max_output_tokens = 500
"""
SMALL = b"authorization: Bearer sk-small\r\n"
BIG = b"authorization: Bearer sk-big\r\n"
LIMITED = b"authorization: Bearer sk-test-limited\r\n"
ANTHROPIC = b"anthropic-version: 2023-06-01\r\n"


@pytest.fixture(params=[True, False], ids=["validate_json", "no_validate_json"])
def gw(request, make_sluice, stub):
    return make_sluice(server_config(stub.url, f"validate_json = {str(request.param).lower()}\n"
                                     + METRICS_TOKEN_LINE, extra=BUDGET_KEYS), env=ENV)


@pytest.fixture
def fast_gw(make_sluice, stub):
    """validate_json = false: the body is read without parsing when that is sure."""
    return make_sluice(server_config(stub.url, "validate_json = false", extra=BUDGET_KEYS), env=ENV)


def _answer(buf):
    """(status, the JSON body) of the one response in ``buf``."""
    head, _, body = buf.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


def _post(gw, body, auth=BIG, path=b"/v1/chat/completions", headers=b""):
    return _answer(raw_exchange(gw.port, raw_post(body, path=path, headers=headers, auth=auth), timeout=10))


def _openai_error(obj):
    return isinstance(obj.get("error"), dict) and obj["error"]["type"] == "invalid_request_error"


def _anthropic_error(obj):
    return obj.get("type") == "error" and obj["error"]["type"] == "invalid_request_error"


# ------------------------------------------------------------------ the budget is an upper bound
def test_n_is_multiplied_into_the_reservation(gw, stub):
    sent = len(stub.requests)
    # 300 tokens for each of 5 choices: 1500 and the prompt, within the budget of 2000
    status, _ = _post(gw, {"model": "mock-model", "messages": MSG, "max_tokens": 300, "n": 5}, auth=SMALL)
    assert status == 200
    # 400 for each of 5: 2000 and the prompt, more than the key can ever spend
    status, obj = _post(gw, {"model": "mock-model", "messages": MSG, "max_tokens": 400, "n": 5}, auth=SMALL)
    assert status == 429, obj
    assert len(stub.requests) == sent + 1


def test_the_cap_is_written_into_a_body_without_an_output_limit(gw, stub):
    status, _ = _post(gw, {"model": "capped", "messages": MSG})
    assert status == 200
    sent = json.loads(stub.requests[-1]["body"])
    assert sent["max_completion_tokens"] == 500, sent
    status, _ = _post(gw, {"model": "claude", "messages": MSG}, path=b"/v1/messages", headers=ANTHROPIC)
    assert status == 200
    assert json.loads(stub.requests[-1]["body"])["max_tokens"] == 4096


def test_every_output_limit_field_is_reserved(gw, stub):
    sent = len(stub.requests)
    # an Anthropic client to an OpenAI provider: the translation forwards max_tokens
    body = {"model": "mock-model", "messages": MSG, "max_tokens": 100000, "max_completion_tokens": 1}
    status, obj = _post(gw, body, auth=SMALL, path=b"/v1/messages", headers=ANTHROPIC)
    assert status == 429, obj
    assert len(stub.requests) == sent


def test_a_nested_max_tokens_does_not_fool_the_fast_scan(fast_gw, stub):
    body = (b'{"model":"capped","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function",'
            b'"function":{"name":"f","parameters":{"type":"object","max_tokens":1}}}]}')
    status, _ = _post(fast_gw, body)
    assert status == 200
    sent = json.loads(stub.requests[-1]["body"])
    assert sent.get("max_completion_tokens") == 500, sent


def test_the_fast_scan_reads_a_last_or_leading_max_tokens(fast_gw, stub):
    for body in (b'{"model":"capped","messages":[{"role":"user","content":"[hi]"}],"max_tokens":7}',
                 b'{"model":"capped","max_tokens":7,"messages":[{"role":"user","content":"hi"}]}'):
        status, _ = _post(fast_gw, body)
        assert status == 200
        assert stub.requests[-1]["body"] == body  # the client's bytes: nothing to add


def test_a_disconnect_before_the_head_is_charged_the_reservation(gw, stub):
    body = json.dumps({"model": "mock-model", "messages": MSG, "max_tokens": 1000}).encode()
    sent = len(stub.requests)
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    s.sendall(raw_post(body, auth=BIG, headers=b"x-test-delay-ms: 1500\r\n"))
    assert wait_until(lambda: len(stub.requests) > sent, timeout=5)
    s.close()  # before the provider's response head
    assert wait_until(lambda: gw.state()["in_flight"] == 0, timeout=10)
    assert wait_until(lambda: tokens_spent(gw, "big") > 0, timeout=5)
    assert tokens_spent(gw, "big") >= 1000, tokens_spent(gw, "big")


# ------------------------------------------------------------------ repeated keys
@pytest.mark.parametrize("body", [
    b'{"model":"mock-model","model":"claude","messages":[{"role":"user","content":"x"}]}',
    b'{"model":"mock-model","mod\\u0065l":"claude","messages":[{"role":"user","content":"x"}]}',
    b'{"model":"mock-model","messages":[{"role":"user","content":"x"}],"model":"claude"}',
], ids=["repeated", "escaped", "last"])
def test_a_repeated_model_is_refused(gw, stub, body):
    sent = len(stub.requests)
    status, obj = _post(gw, body, auth=LIMITED)
    assert status == 400, obj
    assert _openai_error(obj) and "model" in obj["error"]["message"]
    status, obj = _post(gw, body, auth=LIMITED, path=b"/v1/messages", headers=ANTHROPIC)
    assert status == 400, obj
    assert _anthropic_error(obj)
    assert len(stub.requests) == sent


@pytest.mark.parametrize("body", [
    b'{"model":"mock-model","max_tokens":1,"messages":[{"role":"user","content":"x"}],"max_tokens":100000}',
    b'{"model":"mock-model","max_completion_tokens":1,"messages":[],"max_completion_tok\\u0065ns":9}',
    b'{"model":"mock-model","stream":false,"messages":[{"role":"user","content":"x"}],"stream":true}',
    b'{"model":"mock-model","n":1,"messages":[{"role":"user","content":"x"}],"n":9}',
], ids=["max_tokens", "max_completion_tokens", "stream", "n"])
def test_repeated_decided_keys_are_refused(gw, stub, body):
    sent = len(stub.requests)
    status, obj = _post(gw, body, auth=BIG)
    assert status == 400, obj
    assert _openai_error(obj)
    assert len(stub.requests) == sent


def test_a_repeat_inside_a_nested_object_is_not_refused(gw, stub):
    body = (b'{"model":"mock-model","messages":[{"role":"user","content":"x"}],"max_tokens":5,'
            b'"metadata":{"model":"a","max_tokens":1,"stream":true}}')
    status, _ = _post(gw, body)
    assert status == 200
    assert stub.requests[-1]["body"] == body


def test_an_escaped_top_level_model_is_the_one_the_alias_rewrites(gw, stub):
    # the alias "fast" is served as mock-model: the top-level model, spelled with an escape, is
    # the one the provider reads, never a nested "model" spelled literally (a model a cost
    # alias maps away from would be served)
    body = b'{"mod\\u0065l":"fast","metadata":{"model":"fast"},"messages":[{"role":"user","content":"x"}]}'
    status, obj = _post(gw, body)
    assert status == 200, obj
    sent = json.loads(stub.requests[-1]["body"])
    assert sent["model"] == "mock-model"
    assert sent["metadata"] == json.loads(body)["metadata"]


# ------------------------------------------------------------------ bad input is a 400
def test_invalid_json_on_a_translated_route_is_a_400(fast_gw, stub):
    sent = len(stub.requests)
    status, obj = _post(fast_gw, b'{"model":"claude","messages":[')
    assert status == 400, obj
    assert _openai_error(obj)
    status, obj = _post(fast_gw, b'{"model":"mock-model","messages":[', path=b"/v1/messages", headers=ANTHROPIC)
    assert status == 400, obj
    assert _anthropic_error(obj)
    assert len(stub.requests) == sent
    assert "Traceback" not in fast_gw.output()
    assert fast_gw.output().count("cannot be read are refused with 400") == 1  # logged once


def test_a_huge_max_tokens_is_a_400(gw, stub):
    sent = len(stub.requests)
    body = b'{"model":"mock-model","max_tokens":' + b"9" * 5000 + b',"messages":[]}'
    status, obj = _post(gw, body)
    assert status == 400, obj
    assert _openai_error(obj)
    status, obj = _post(gw, body, path=b"/v1/messages", headers=ANTHROPIC)
    assert status == 400, obj
    assert _anthropic_error(obj)
    for value in (b"-3", b"1.5", b"null", b'"7"', b"0", b"true"):
        status, obj = _post(gw, b'{"model":"mock-model","max_tokens":' + value + b',"messages":[]}')
        assert status == 400, (value, obj)
    assert len(stub.requests) == sent
    assert "Traceback" not in gw.output()
