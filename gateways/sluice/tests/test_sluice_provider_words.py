"""A provider's error answers never reach clients in its own words: behind a lying provider
(scripted raw bytes over a real socket), in the same dialect and translated, unary and streamed
(the error comes before any stream head), the client gets Sluice's body in its own dialect, the
provider's status (401 and 403 become 502 provider_auth) and its Retry-After; the provider's body
goes to Sluice's log, bounded and once per interval. A provider 401/403 marks its deployment as
failing. A misbehaving provider costs one log line per event, never a traceback."""
import json
import re

import pytest
from sluice_helpers import KEY, MSG, chat, metric_sum, raw_exchange, raw_post
from sluice_scripted_provider import RawListener
from sluice_stub import wait_until

pytestmark = pytest.mark.integration

SECRET = "org-SECRET42"
# what OpenAI's own 429 says: the organisation and its limits
OPENAI_429 = json.dumps({"error": {
    "message": f"Rate limit reached for gpt-4o in organization {SECRET} on tokens per min (TPM): "
               "Limit 30000, Used 29962, Requested 1000.", "type": "tokens", "param": None,
    "code": "rate_limit_exceeded"}}).encode()
ANTHROPIC_429 = json.dumps({"type": "error", "error": {
    "type": "rate_limit_error",
    "message": f"This request would exceed the rate limit for your organization ({SECRET})"}}).encode()
AUTH_BODY = json.dumps({"error": {"message": f"Incorrect API key provided: sk-prov***cret ({SECRET})",
                                  "type": "invalid_request_error", "code": "invalid_api_key"}}).encode()
FORBIDDEN_BODY = json.dumps({"error": {"message": f"Project proj_x of {SECRET} has no access",
                                       "type": "permission_error"}}).encode()
SERVER_BODY = f"upstream trace 0xdeadbeef in {SECRET}".encode()
# the status each provider status reaches the client with
STATUS_SEEN = {429: 429, 401: 502, 403: 502, 500: 500}


def _answer(status, body, chunked=False, extra=b""):
    head = b"HTTP/1.1 %d Whatever\r\ncontent-type: application/json\r\n" % status + extra
    if chunked:  # the body in two chunks: Sluice reads it through the parser
        half = len(body) // 2
        return (head + b"transfer-encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n" % (half, body[:half])
                + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body) - half, body[half:]))
    return head + b"content-length: %d\r\n\r\n" % len(body) + body


class WordyProvider(RawListener):
    """Answers each request by its ``x-test-answer`` header (a status, or "ok"), in the dialect its
    path says; under /good/ always a normal answer."""

    def __init__(self):
        self.requests = []
        super().__init__()

    def _serve(self, c):
        try:
            for head, _ in self._requests(c):
                c.sendall(self.answer(head))
        except OSError:
            return
        finally:
            c.close()

    @staticmethod
    def answer(head):
        anthropic = b"/messages " in head.split(b"\r\n", 1)[0]
        m = re.search(rb"x-test-answer: *([^\r]+)", head, re.I)
        what = m.group(1).decode() if m else "ok"
        if b" /good/" in head.split(b"\r\n", 1)[0] or what == "ok":
            if anthropic:
                body = json.dumps({"id": "msg_1", "type": "message", "role": "assistant", "model": "x",
                                   "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
                                   "usage": {"input_tokens": 1, "output_tokens": 1}}).encode()
            else:
                body = json.dumps({"id": "c1", "object": "chat.completion", "model": "x", "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
            return _answer(200, body)
        if what == "429":
            return _answer(429, ANTHROPIC_429 if anthropic else OPENAI_429,
                           extra=b"retry-after: 7\r\nx-ratelimit-limit-tokens: 30000\r\n")
        if what == "401":
            return _answer(401, AUTH_BODY)
        if what == "403":
            return _answer(403, FORBIDDEN_BODY)
        if what == "500":
            return _answer(500, SERVER_BODY, chunked=True)
        if what == "big":  # an error body far over what the log keeps
            return _answer(400, b'{"error":"' + b"x" * 100000 + SECRET.encode() + b'"}')
        raise AssertionError(what)


def _config(url, server_extra=""):
    return f"""
[server]
listen = "127.0.0.1:{{port}}"
workers = 1
metrics_token = "sk-metrics"
debug_endpoints = true
forward_request_headers = ["content-type", "x-test-*"]
{server_extra}

[providers.oai]
base_url = "{url}/v1"
api_key = "sk-provider"

[providers.ant]
base_url = "{url}/v1"
dialect = "anthropic"
api_key = "sk-provider"

[providers.bad]
base_url = "{url}/v1"
api_key = "sk-provider"

[providers.good]
base_url = "{url}/good/v1"
api_key = "sk-provider"

[models.m-oai]
provider = "oai"

[models.m-ant]
provider = "ant"

[models.pair]
deployments = [{{ provider = "bad", weight = 1 }}, {{ provider = "good", weight = 1 }}]
outlier = {{ min_requests = 4, failure_margin = 0.3, window_s = 60, ejection_s = 60 }}

[keys.k]
key = "{KEY}"
"""


@pytest.fixture(scope="module")
def provider():
    p = WordyProvider()
    yield p
    p.close()


@pytest.fixture
def gw(make_sluice, provider):
    return make_sluice(_config(provider.url))


def _call(gw, client, model, answer, stream):
    body = {"model": model, "messages": MSG, "max_tokens": 5, "stream": stream}
    if client == "anthropic":
        return chat(gw.port, body, path="/v1/messages", headers={"x-test-answer": answer,
                                                                  "anthropic-version": "2023-06-01"})
    return chat(gw.port, body, headers={"x-test-answer": answer})


def _metrics(gw):
    return gw.metrics().replace("sk-metrics", "")


CASES = [pytest.param(client, model, stream, id=f"{client}-client-{model}-{'stream' if stream else 'unary'}")
         for client in ("openai", "anthropic") for model in ("m-oai", "m-ant") for stream in (False, True)]


@pytest.mark.parametrize("client, model, stream", CASES)
def test_provider_errors_reach_the_client_in_sluices_words(gw, client, model, stream):
    for answer, seen in STATUS_SEEN.items():
        status, headers, data = _call(gw, client, model, str(answer), stream)
        assert status == seen, (answer, status, data)
        assert SECRET.encode() not in data and b"0xdeadbeef" not in data, (answer, data)
        doc = json.loads(data)
        if client == "anthropic":
            assert doc["type"] == "error" and set(doc["error"]) == {"type", "message"}, doc
            err_type = doc["error"]["type"]
        else:
            assert set(doc["error"]) == {"message", "type", "param", "code"}, doc
            err_type = doc["error"]["type"]
        assert len(doc["error"]["message"]) <= 100, doc
        if answer == 429:
            assert headers["retry-after"] == "7"
            assert err_type == "rate_limit_error"
            assert not any(k.startswith("x-ratelimit") for k in headers)
        elif seen == 502:
            assert err_type == "api_error"
            if client == "openai":
                assert doc["error"]["code"] == "provider_auth", doc
        else:
            assert err_type == "api_error"
    assert gw.state()["in_flight"] == 0
    provider_name = "oai" if model == "m-oai" else "ant"
    assert metric_sum(gw, f'sluice_upstream_errors_total{{provider="{provider_name}",kind="provider_auth"}}') == 2


def test_a_provider_auth_failure_marks_its_deployment_failing(gw):
    # deployments "bad" (answers 401) and "good", equal weights: the failures make "bad" an
    # outlier once each has 4 recent attempts; counted healthy, it never would be
    statuses = set()
    for _ in range(40):
        status, _, _ = chat(gw.port, {"model": "pair", "messages": MSG}, headers={"x-test-answer": "401"})
        statuses.add(status)
    assert statuses <= {200, 502} and 502 in statuses
    assert metric_sum(gw, 'sluice_ejections_total{model="pair",provider="bad"}') == 1
    assert metric_sum(gw, 'sluice_ejections_total{model="pair",provider="good"}') == 0


def test_the_providers_body_goes_to_the_log_bounded_and_once_per_interval(gw):
    for _ in range(3):
        assert chat(gw.port, {"model": "m-oai", "messages": MSG}, headers={"x-test-answer": "429"})[0] == 429
    assert chat(gw.port, {"model": "m-oai", "messages": MSG}, headers={"x-test-answer": "big"})[0] == 400
    lines = gw.output().splitlines()
    said = [ln for ln in lines if "provider oai answered 429" in ln]
    assert len(said) == 1, lines            # once per provider and status per interval
    assert SECRET in said[0]                # the provider's own words are kept for the operator
    big = [ln for ln in lines if "provider oai answered 400" in ln]
    assert len(big) == 1 and SECRET not in big[0] and 1024 <= len(big[0]) <= 1400, big
    assert not any("Traceback" in ln for ln in lines)


# ------------------------------------------------------------------ misbehaving providers
def _sse(body):
    return b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n" % len(body) + body


class Misbehaving(RawListener):
    """Answers each request with the raw bytes its ``x-test-answer`` header names."""
    ANSWERS = {
        "garbage": b"NOT HTTP AT ALL\r\n\r\n",
        "interim": b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n",
        # an event the translation cannot take: "choices" is no list
        "nonsense-event": _sse(b'data: {"choices": 5}\n\n'),
        "after-the-end": (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
                          b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nEVIL!"),
    }

    def __init__(self):
        self.requests = []
        super().__init__()

    def _serve(self, c):
        try:
            for head, _ in self._requests(c):
                what = re.search(rb"x-test-answer: *([^\r]+)", head, re.I).group(1).decode()
                c.sendall(self.ANSWERS[what])
        except OSError:
            return
        finally:
            c.close()


def test_a_misbehaving_provider_costs_one_line_per_event_and_no_traceback(make_sluice):
    liar = Misbehaving()
    try:
        gw = make_sluice(_config(liar.url))
        assert wait_until(lambda: "listening on" in gw.output())  # the start's lines are all out
        for what, path, stream, event in (
                ("garbage", b"/v1/chat/completions", False, "sent an invalid response"),
                ("interim", b"/v1/chat/completions", False, None),  # the same event again: counted
                ("nonsense-event", b"/v1/messages", True, "sent a body Sluice cannot relay"),
                ("after-the-end", b"/v1/chat/completions", False, "sent bytes after its response")):
            before = len(gw.output().splitlines())
            body = {"model": "m-oai", "messages": MSG, "max_tokens": 5, "stream": stream}
            got = raw_exchange(gw.port, raw_post(body, path, b"x-test-answer: " + what.encode() + b"\r\n"),
                               until_closed=stream, timeout=5)
            assert got.startswith((b"HTTP/1.1 200", b"HTTP/1.1 502")), (what, got)
            # (the line is written before the client's answer)
            new = gw.output().splitlines()[before:]
            assert not any("Traceback" in ln for ln in new), (what, new)
            if event is None:
                assert new == [], (what, new)
            else:
                assert len(new) == 1 and new[0].startswith(f"sluice: provider oai {event}"), (what, new)
    finally:
        liar.close()
