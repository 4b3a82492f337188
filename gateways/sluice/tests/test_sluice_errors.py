"""Bad input and provider faults: one test each, the error in the client's dialect."""
import json
import socket

import pytest
from sluice_helpers import KEY, chat, raw_exchange, request
from sluice_stub import wait_until

pytestmark = pytest.mark.integration

MSG = [{"role": "user", "content": "hi"}]


def _openai_error(data):
    err = json.loads(data)["error"]
    assert isinstance(err["message"], str) and err["message"]
    return err


def _anthropic_error(data):
    doc = json.loads(data)
    assert doc["type"] == "error" and doc["error"]["message"]
    return doc["error"]


def test_malformed_json_400(sluice):
    status, headers, data = chat(sluice.port, b'{"model": "mock-model", "messages": [}')
    assert status == 400
    assert _openai_error(data)["type"] == "invalid_request_error"
    assert "x-gateway-overhead-us" in headers
    status, _, data = chat(sluice.port, b"not json", key=None, path="/v1/messages", headers={"x-api-key": KEY})
    assert status == 400
    assert _anthropic_error(data)["type"] == "invalid_request_error"


def test_missing_model_400(sluice):
    status, _, data = chat(sluice.port, {"messages": MSG})
    assert status == 400 and "model" in _openai_error(data)["message"]


def test_unknown_model_404(sluice):
    status, _, data = chat(sluice.port, {"model": "no-such-model", "messages": MSG})
    assert status == 404
    assert _openai_error(data)["code"] == "model_not_found"
    status, _, data = chat(sluice.port, {"model": "no-such-model", "max_tokens": 1, "messages": MSG}, key=None,
                           path="/v1/messages", headers={"x-api-key": KEY})
    assert status == 404 and _anthropic_error(data)["type"] == "not_found_error"


def test_missing_key_401(sluice):
    status, _, data = chat(sluice.port, {"model": "mock-model", "messages": MSG}, key=None)
    assert status == 401 and _openai_error(data)["type"] == "authentication_error"


def test_wrong_key_401(sluice):
    status, _, data = chat(sluice.port, {"model": "mock-model", "messages": MSG}, key="sk-wrong")
    assert status == 401 and _openai_error(data)["code"] == "invalid_api_key"
    status, _, data = chat(sluice.port, {"model": "mock-model", "max_tokens": 1, "messages": MSG}, key=None,
                           path="/v1/messages", headers={"x-api-key": "sk-wrong"})
    assert status == 401 and _anthropic_error(data)["type"] == "authentication_error"


def test_model_not_allowed_403(sluice):
    status, _, data = chat(sluice.port, {"model": "mock-model", "messages": MSG}, key="sk-test-limited")
    assert status == 403 and _openai_error(data)["type"] == "permission_error"
    # the same key may use its model, also through an alias
    assert chat(sluice.port, {"model": "claude-alias", "messages": MSG}, key="sk-test-limited")[0] == 200


def test_rate_limit_429_with_retry_after(sluice):
    body = {"model": "mock-model", "messages": MSG}
    assert chat(sluice.port, body, key="sk-test-rpm")[0] == 200
    assert chat(sluice.port, body, key="sk-test-rpm")[0] == 200
    status, headers, data = chat(sluice.port, body, key="sk-test-rpm")
    assert status == 429
    assert _openai_error(data)["type"] == "rate_limit_error"
    assert 1 <= int(headers["retry-after"]) <= 120


def test_token_budget_429_with_retry_after(sluice):
    # budget 200: the first call reserves ~150 + prompt/4 and settles the provider's usage (16)
    status, _, _ = chat(sluice.port, {"model": "mock-model", "max_tokens": 150, "messages": MSG},
                        key="sk-test-budget")
    assert status == 200
    assert 'sluice_key_tokens_spent{key="budget"} 16' in sluice.metrics()
    status, headers, data = chat(sluice.port, {"model": "mock-model", "max_tokens": 190, "messages": MSG},
                                 key="sk-test-budget")
    assert status == 429
    assert "budget" in _openai_error(data)["message"]
    assert int(headers["retry-after"]) >= 1
    # a smaller reservation still fits
    assert chat(sluice.port, {"model": "mock-model", "max_tokens": 100, "messages": MSG},
                key="sk-test-budget")[0] == 200


def test_body_over_limit_413(sluice):
    big = json.dumps({"model": "mock-model", "messages": [{"role": "user", "content": "x" * 70000}]}).encode()
    status, headers, data = chat(sluice.port, big)
    assert status == 413 and _openai_error(data)["code"] == "request_too_large"
    assert headers.get("connection") == "close"
    # chunked body that grows over the limit
    head = (b"POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: " + KEY.encode()
            + b"\r\ntransfer-encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n%s\r\n" % (40000, b"y" * 40000)
    buf = raw_exchange(sluice.port, head + chunk + chunk + b"0\r\n\r\n", until_closed=True)
    assert buf.startswith(b"HTTP/1.1 413")
    assert json.loads(buf.split(b"\r\n\r\n", 1)[1])["error"]["type"] == "request_too_large"


def test_provider_refuses_connection_502(sluice):
    status, headers, data = chat(sluice.port, {"model": "down-model", "messages": MSG})
    assert status == 502 and _openai_error(data)["type"] == "api_error"
    assert "x-gateway-overhead-us" in headers
    assert 'sluice_upstream_errors_total{provider="down",kind="connect_refused"}' in sluice.metrics()


def test_provider_too_slow_504(sluice):
    status, _, data = chat(sluice.port, {"model": "slow-model", "messages": MSG},
                           headers={"x-test-delay-ms": "3000"})
    assert status == 504 and _openai_error(data)["code"] == "upstream_timeout"
    status, _, data = chat(sluice.port, {"model": "slow-model", "max_tokens": 3, "messages": MSG}, key=None,
                           path="/v1/messages", headers={"x-api-key": KEY, "x-test-delay-ms": "3000"})
    assert status == 504 and _anthropic_error(data)["type"] == "timeout_error"
    st = sluice.state()["upstream"]["slow"]
    assert st["busy"] == 0


def test_provider_stalls_mid_stream_connection_closed(sluice):
    """Head already sent: the stream ends with an error event (which the client's SDK raises),
    never as if the answer were complete."""
    body = json.dumps({"model": "slow-model", "stream": True, "messages": MSG}).encode()
    buf = raw_exchange(sluice.port, b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer "
                       + KEY.encode() + b"\r\nx-test-hang: 1\r\ncontent-length: %d\r\n\r\n" % len(body) + body,
                       until_closed=True)
    assert buf.startswith(b"HTTP/1.1 200")
    assert b"[DONE]" not in buf
    assert buf.endswith(b'data: {"error":{"message":"provider stream failed","type":"api_error",'
                        b'"param":null,"code":null}}\n\n\r\n0\r\n\r\n')


def test_provider_closes_without_answer_502(sluice):
    status, _, data = chat(sluice.port, {"model": "mock-model", "messages": MSG}, headers={"x-test-close": "1"})
    assert status == 502 and "closed" in _openai_error(data)["message"]


def test_client_disconnect_mid_stream_cancels_upstream(sluice, stub):
    before = sluice.state()
    body = json.dumps({"model": "mock-model", "stream": True, "messages": MSG}).encode()
    s = socket.create_connection(("127.0.0.1", sluice.port), timeout=10)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + KEY.encode()
              + b"\r\nx-test-hang: 1\r\nx-test-tag: drop-me\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
    buf = b""
    while b"data: " not in buf:
        chunk = s.recv(65536)
        assert chunk
        buf += chunk
    assert sluice.state()["upstream"]["stub"]["busy"] == 1
    s.close()
    # the provider sees its request cancelled (its connection closed), and nothing stays busy
    assert wait_until(lambda: "drop-me" in stub.cancelled_tags)
    assert wait_until(lambda: sluice.state()["in_flight"] == 0)
    st = sluice.state()
    assert st["upstream"]["stub"]["busy"] == 0
    # closed, not returned to the pool
    assert st["upstream"]["stub"]["idle"] <= before["upstream"]["stub"]["idle"]
    assert st["client_disconnects"] == before["client_disconnects"] + 1
    assert st["tasks"] == 0


def test_unknown_route_and_method(sluice):
    status, _, data = request(sluice.port, "GET", "/nope")
    assert status == 404 and _openai_error(data)
    status, headers, _ = request(sluice.port, "GET", "/v1/chat/completions")
    assert status == 405 and headers["allow"] == "POST"


def test_garbage_request_400_and_close(sluice):
    buf = raw_exchange(sluice.port, b"\x16\x03\x01 this is not http\r\n\r\n", until_closed=True)
    assert buf.startswith(b"HTTP/1.1 400")
    assert b"x-gateway-overhead-us: " in buf
