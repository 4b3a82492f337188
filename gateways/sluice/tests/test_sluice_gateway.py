"""Sluice end to end against the stub provider: routing, relaying, translation, HTTP details."""
import json
import socket

import pytest
from sluice_helpers import (
    HASHED_SECRET,
    KEY,
    chat,
    count_responses,
    raw_exchange,
    request,
)

pytestmark = pytest.mark.integration

MSG = [{"role": "user", "content": "hi"}]


def test_health_models_metrics(sluice):
    status, headers, body = request(sluice.port, "GET", "/health")
    assert status == 200 and json.loads(body)["status"] == "ok"
    assert int(headers["x-gateway-overhead-us"]) >= 0

    status, _, body = request(sluice.port, "GET", "/v1/models", headers={"authorization": f"Bearer {KEY}"})
    assert status == 200
    ids = {m["id"] for m in json.loads(body)["data"]}
    assert {"mock-model", "fast", "claude", "claude-alias"} <= ids

    status, _, body = request(sluice.port, "GET", "/v1/models",
                              headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"})
    assert status == 200
    doc = json.loads(body)
    assert doc["data"][0]["type"] == "model" and "has_more" in doc

    status, _, _ = request(sluice.port, "GET", "/v1/models")
    assert status == 401

    chat(sluice.port, {"model": "mock-model", "messages": MSG})
    text = sluice.metrics()
    for name in ("sluice_requests_total", "sluice_requests_in_flight", "sluice_overhead_seconds_bucket",
                 "sluice_upstream_latency_seconds_bucket", "sluice_stream_relay_seconds_count",
                 "sluice_client_connections", "sluice_upstream_connections", "sluice_asyncio_tasks"):
        assert name in text, name
    assert 'sluice_requests_total{model="mock-model",status="200"}' in text


def test_unary_relay_and_alias_patches_only_the_model(sluice, stub):
    body = (b'{"model":"fast","messages":[{"role":"user","content":"caf\\u00e9 \\"q\\" model"}],'
            b'"temperature":0.25,"max_tokens":7,"x_extra":{"model":"not-me"}}')
    status, headers, data = chat(sluice.port, body)
    assert status == 200, data
    assert json.loads(data)["choices"][0]["message"]["content"] == "Hello from stub"
    assert int(headers["x-gateway-overhead-us"]) >= 0
    sent = stub.requests[-1]
    assert sent["path"] == "/v1/chat/completions"
    # "model" spelled twice: the bytes cannot tell which one the parser read, so the body is
    # written again from the parsed object (the same JSON, the escapes decoded)
    assert json.loads(sent["body"]) == json.loads(body.replace(b'"model":"fast"', b'"model":"mock-model"', 1))
    # spelled once, the model alone is patched in the bytes
    once = body.replace(b'{"model":"not-me"}', b'{"mode":"not-me"}')
    assert chat(sluice.port, once)[0] == 200
    assert stub.requests[-1]["body"] == once.replace(b'"model":"fast"', b'"model":"mock-model"', 1)
    # the provider sees the provider's key, never the client's virtual key
    assert sent["headers"]["Authorization"] == "Bearer sk-provider-secret"
    assert KEY not in json.dumps(sent["headers"])


def test_alias_when_model_is_not_the_first_key(sluice, stub):
    body = b'{"messages": [{"role": "user", "content": "hi"}], "model": "gpt-4o-mini", "n": 1}'
    status, _, data = chat(sluice.port, body)
    assert status == 200, data
    assert stub.requests[-1]["body"] == body.replace(b'"gpt-4o-mini"', b'"mock-model"')


def test_canonical_model_body_is_forwarded_byte_for_byte(sluice, stub):
    body = b'{ "model" : "mock-model",\n  "messages": [{"role":"user","content":"x"}] }'
    status, _, _ = chat(sluice.port, body)
    assert status == 200
    assert stub.requests[-1]["body"] == body


def test_client_headers_forwarded_hop_by_hop_dropped(sluice, stub):
    status, _, _ = chat(sluice.port, {"model": "mock-model", "messages": MSG},
                        headers={"x-custom-thing": "42", "x-mock-latency-ms": "0"})
    assert status == 200
    h = {k.lower(): v for k, v in stub.requests[-1]["headers"].items()}
    assert h["x-custom-thing"] == "42" and h["x-mock-latency-ms"] == "0"
    assert h["host"] == stub.url.split("//")[1]
    assert "x-api-key" not in h


def test_stream_is_relayed_frame_by_frame(sluice, stub):
    """The first frame reaches the client while the provider still holds the rest back."""
    s = socket.create_connection(("127.0.0.1", sluice.port), timeout=10)
    body = json.dumps({"model": "fast", "stream": True, "messages": MSG}).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + KEY.encode()
              + b"\r\nx-test-gate: g1\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
    buf = b""
    while b'"role": "assistant"' not in buf:
        chunk = s.recv(65536)
        assert chunk, buf
        buf += chunk
    head = buf.split(b"\r\n\r\n")[0].lower()
    assert b"200 ok" in head and b"text/event-stream" in head and b"x-gateway-overhead-us:" in head
    assert b"[DONE]" not in buf
    stub.open_gate("g1")
    while not buf.endswith(b"\r\n0\r\n\r\n"):
        chunk = s.recv(65536)
        assert chunk
        buf += chunk
    s.close()
    assert buf.count(b"data: ") == 6 and b"data: [DONE]" in buf


def test_keep_alive_and_chunked_request_body(sluice, stub):
    body = json.dumps({"model": "fast", "messages": MSG}).encode()
    one = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + KEY.encode()
           + b"\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
    half = len(body) // 2
    chunked = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + KEY.encode()
               + b"\r\ntransfer-encoding: chunked\r\n\r\n"
               + b"%x\r\n%s\r\n" % (half, body[:half]) + b"%x\r\n%s\r\n" % (len(body) - half, body[half:])
               + b"0\r\n\r\n")
    s = socket.create_connection(("127.0.0.1", sluice.port), timeout=10)
    try:
        buf = b""
        for i, req in enumerate((one, chunked, one)):
            s.sendall(req)
            while count_responses(buf) < i + 1:
                chunk = s.recv(65536)
                assert chunk, buf
                buf += chunk
        assert buf.count(b"HTTP/1.1 200 OK") == 3
        assert b"connection: close" not in buf.lower()
    finally:
        s.close()
    assert stub.requests[-2]["body"] == body.replace(b'"fast"', b'"mock-model"')


def test_repeated_request_heads_with_new_lengths_bodies_and_splits(sluice, stub):
    """A head seen before on the connection is taken without the parser; every variation
    (another length, another header, a body split over reads, two requests in one read) must
    still be forwarded exactly."""
    def req(body, extra=b""):
        return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + KEY.encode()
                + b"\r\n" + extra + b"content-length: %d\r\ncontent-type: application/json\r\n\r\n" % len(body)
                + body)

    bodies = [json.dumps({"model": m, "messages": [{"role": "user", "content": c}]}).encode()
              for m, c in (("fast", "one"), ("fast", "a longer second one"), ("mock-model", "3"),
                           ("fast", "four"), ("fast", "five"), ("fast", "six"), ("fast", "seven"))]
    sends = [[req(bodies[0])], [req(bodies[1])], [req(bodies[2], b"x-other: yes\r\n")], [req(bodies[3])]]
    split = req(bodies[4])
    sends.append([split[:-5], split[-5:]])          # the body arrives in two reads
    sends.append([req(bodies[5]) + req(bodies[6])])  # two requests in one read
    s = socket.create_connection(("127.0.0.1", sluice.port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        buf = b""
        want = 0
        for parts in sends:
            first = len(stub.requests)
            for i, part in enumerate(parts):
                s.sendall(part)
                if i + 1 < len(parts):
                    import time
                    time.sleep(0.05)
            want += 2 if len(parts) == 1 and parts[0].count(b"POST ") == 2 else 1
            while count_responses(buf) < want:
                chunk = s.recv(65536)
                assert chunk, buf
                buf += chunk
            assert len(stub.requests) > first
    finally:
        s.close()
    assert buf.count(b"HTTP/1.1 200 OK") == 7
    sent = stub.requests[-7:]
    for body, got in zip(bodies, sent):
        assert got["body"] == body.replace(b'"fast"', b'"mock-model"'), got["body"]
    headers = [{k.lower() for k in r["headers"]} for r in sent]
    assert "x-other" in headers[2] and "x-other" not in headers[3]


def test_pipelined_requests_answered_in_order(sluice, stub):
    reqs = b""
    for tag, delay in (("first", 300), ("second", 100), ("third", 0)):
        body = json.dumps({"model": "mock-model", "messages": MSG}).encode()
        reqs += (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + KEY.encode()
                 + b"\r\nx-test-tag: " + tag.encode() + b"\r\nx-test-delay-ms: %d\r\n" % delay
                 + b"content-length: %d\r\n\r\n" % len(body) + body)
    reqs += b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n"
    buf = raw_exchange(sluice.port, reqs, expect_responses=4)
    assert count_responses(buf) == 4
    order = [buf.find(b"x-test-tag: " + t) for t in (b"first", b"second", b"third")]
    assert -1 not in order and order == sorted(order)
    assert buf.rfind(b'"status":"ok"') > order[-1]


def test_http10_client_gets_a_closed_delimited_answer(sluice):
    body = json.dumps({"model": "mock-model", "messages": MSG}).encode()
    buf = raw_exchange(sluice.port, b"POST /v1/chat/completions HTTP/1.0\r\nauthorization: Bearer "
                       + KEY.encode() + b"\r\ncontent-length: %d\r\n\r\n" % len(body) + body, until_closed=True)
    assert buf.startswith(b"HTTP/1.1 200")
    assert b"connection: close" in buf.lower()
    assert buf.endswith(b"}")


def test_http10_stream_is_reframed(sluice):
    body = json.dumps({"model": "mock-model", "stream": True, "messages": MSG}).encode()
    buf = raw_exchange(sluice.port, b"POST /v1/chat/completions HTTP/1.0\r\nauthorization: Bearer "
                       + KEY.encode() + b"\r\ncontent-length: %d\r\n\r\n" % len(body) + body, until_closed=True)
    head, _, rest = buf.partition(b"\r\n\r\n")
    assert b"transfer-encoding" not in head.lower()
    assert rest.startswith(b"data: ") and rest.endswith(b"data: [DONE]\n\n")


def test_expect_100_continue(sluice):
    body = json.dumps({"model": "mock-model", "messages": MSG}).encode()
    buf = raw_exchange(sluice.port, b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer "
                       + KEY.encode() + b"\r\nexpect: 100-continue\r\ncontent-length: %d\r\n\r\n" % len(body)
                       + body, expect_responses=2)
    assert buf.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK")


def test_sha256_key(sluice):
    status, _, _ = chat(sluice.port, {"model": "mock-model", "messages": MSG}, key=HASHED_SECRET)
    assert status == 200


def test_anthropic_client_to_openai_provider_unary(sluice, stub):
    status, headers, data = chat(sluice.port, {
        "model": "fast", "max_tokens": 50, "system": "be brief",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
        key=None, path="/v1/messages", headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"})
    assert status == 200, data
    assert "x-gateway-overhead-us" in headers
    msg = json.loads(data)
    assert msg["type"] == "message" and msg["role"] == "assistant" and msg["model"] == "fast"
    assert msg["content"] == [{"type": "text", "text": "Hello from stub"}]
    assert msg["stop_reason"] == "end_turn"
    assert msg["usage"] == {"input_tokens": 11, "cache_creation_input_tokens": 0,
                            "cache_read_input_tokens": 0, "output_tokens": 5}
    sent = json.loads(stub.requests[-1]["body"])
    assert sent["model"] == "mock-model"
    assert sent["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert sent["max_tokens"] == 50
    assert "anthropic-version" not in {k.lower() for k in stub.requests[-1]["headers"]}


def _sse_events(data):
    events = []
    for block in data.decode().split("\n\n"):
        ev = None
        payload = None
        for line in block.split("\n"):
            if line.startswith("event: "):
                ev = line[7:]
            elif line.startswith("data: "):
                payload = line[6:]
        if payload is not None:
            events.append((ev, payload))
    return events


def test_anthropic_client_to_openai_provider_stream(sluice):
    status, headers, data = chat(sluice.port, {
        "model": "mock-model", "max_tokens": 50, "stream": True, "messages": MSG},
        key=None, path="/v1/messages", headers={"x-api-key": KEY})
    assert status == 200
    assert headers["content-type"] == "text/event-stream"
    events = _sse_events(data)
    kinds = [e for e, _ in events]
    assert kinds[0] == "message_start" and kinds[1] == "content_block_start"
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    text = "".join(json.loads(p)["delta"]["text"] for e, p in events if e == "content_block_delta")
    assert text == "tok0 tok1 tok2 "
    delta = json.loads(events[-2][1])
    assert delta["delta"]["stop_reason"] == "end_turn" and delta["usage"]["output_tokens"] == 3


def test_openai_client_to_anthropic_provider(sluice, stub):
    status, _, data = chat(sluice.port, {
        "model": "claude-alias", "max_tokens": 20,
        "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]})
    assert status == 200, data
    doc = json.loads(data)
    assert doc["object"] == "chat.completion" and doc["model"] == "claude-alias"
    assert doc["choices"][0]["message"]["content"] == "Hello from stub"
    assert doc["choices"][0]["finish_reason"] == "stop"
    assert doc["usage"] == {"prompt_tokens": 13, "completion_tokens": 4, "total_tokens": 17,
                            "prompt_tokens_details": {"cached_tokens": 0}}
    sent = stub.requests[-1]
    assert sent["path"] == "/v1/messages"
    assert sent["headers"]["x-api-key"] == "sk-ant-provider"
    assert sent["headers"]["anthropic-version"] == "2023-06-01"
    body = json.loads(sent["body"])
    assert body == {"model": "claude-x", "max_tokens": 20, "system": "sys",
                    "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}


def test_openai_client_to_anthropic_provider_stream(sluice):
    status, _, data = chat(sluice.port, {
        "model": "claude", "stream": True, "stream_options": {"include_usage": True}, "messages": MSG})
    assert status == 200
    events = _sse_events(data)
    assert events[-1][1] == "[DONE]"
    chunks = [json.loads(p) for _, p in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "tok0 tok1 tok2 "
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"] == {"prompt_tokens": 13, "completion_tokens": 3, "total_tokens": 16,
                                   "prompt_tokens_details": {"cached_tokens": 0}}


def test_anthropic_passthrough_with_alias(sluice, stub):
    body = b'{"model":"claude-alias","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}'
    status, _, data = chat(sluice.port, body, key=None, path="/v1/messages",
                           headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"})
    assert status == 200
    assert json.loads(data)["id"] == "msg_stub"
    assert stub.requests[-1]["body"] == body.replace(b"claude-alias", b"claude-x")


def test_provider_error_relayed_in_dialect(sluice):
    # the provider's status, in Sluice's words (the provider's are in the log)
    status, _, data = chat(sluice.port, {"model": "mock-model", "messages": MSG}, headers={"x-test-status": "429"})
    assert status == 429 and json.loads(data)["error"]["message"] == "provider stub is rate limiting requests"
    # translated: OpenAI provider error -> Anthropic error shape
    status, _, data = chat(sluice.port, {"model": "mock-model", "max_tokens": 5, "messages": MSG}, key=None,
                           path="/v1/messages", headers={"x-api-key": KEY, "x-test-status": "500"})
    assert status == 500
    doc = json.loads(data)
    assert doc["type"] == "error" and doc["error"]["type"] == "api_error"
    assert doc["error"]["message"] == "provider stub failed (status 500)"
    # Anthropic 529 -> OpenAI client sees 503
    status, _, data = chat(sluice.port, {"model": "claude", "messages": MSG}, headers={"x-test-status": "529"})
    assert status == 503 and json.loads(data)["error"]["message"] == "provider anth is overloaded"


def test_pool_reuses_connections(sluice):
    before = sluice.state()["upstream"]["stub"]
    for _ in range(5):
        assert chat(sluice.port, {"model": "mock-model", "messages": MSG})[0] == 200
    after = sluice.state()["upstream"]["stub"]
    assert after["busy"] == 0 and after["idle"] >= 1
    assert after["idle"] <= max(1, before["idle"]) + 1
