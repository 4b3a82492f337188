"""Lying providers, scripted over raw sockets behind a running Sluice: bytes after the end of an
answer never reach the client, usage that cannot be true leaves the key usable, provider-account
headers are not forwarded either way, a request the provider may have acted on is not sent
again, and connect errors do not show addresses."""
import time

import pytest
from sluice_helpers import (
    KEY,
    METRICS_TOKEN_LINE,
    MSG,
    chat,
    count_responses,
    raw_exchange,
    raw_post,
    start_tls_stub,
    tls_provider_config,
    tokens_spent,
)
from sluice_scripted_provider import RawListener

pytestmark = pytest.mark.integration


class LyingProvider(RawListener):
    """A provider that answers every request with scripted raw bytes, on a kept-open connection."""

    def __init__(self, answer, close_after_s=None):
        self.answer = answer
        self.close_after_s = close_after_s
        self.requests = []
        super().__init__()

    def _serve(self, c):
        try:
            for head, _ in self._requests(c):
                if self.close_after_s is not None:
                    time.sleep(self.close_after_s)
                    return
                answer = self.answer(head) if callable(self.answer) else self.answer
                c.sendall(answer)
        except OSError:
            return
        finally:
            c.close()


def _liar_config(url, dialect="openai", server_extra=""):
    return f"""
[server]
listen = "127.0.0.1:{{port}}"
workers = 1
debug_endpoints = true
{server_extra}

[providers.liar]
base_url = "{url}/v1"
dialect = "{dialect}"
response_timeout_s = 5

[models.m]
provider = "liar"

[keys.k]
key = "{KEY}"
token_budget = 100000
"""


class _StaleAfterFirst(LyingProvider):
    """Each connection: the first request is answered; any later one is read, then the
    connection is closed ``delay_s`` later without a byte of answer."""

    def __init__(self, answer, delay_s):
        super().__init__(answer)
        self.delay_s = delay_s

    def _serve(self, c):
        try:
            for n, _ in enumerate(self._requests(c), 1):
                if n > 1:
                    time.sleep(self.delay_s)
                    return
                c.sendall(self.answer)
        except OSError:
            return
        finally:
            c.close()


# ------------------------------------------------------------------ a provider that says too much
def test_bytes_after_content_length_never_reach_the_client(make_sluice):
    evil = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nEVIL!"
    liar = LyingProvider(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}" + evil)
    try:
        gw = make_sluice(_liar_config(liar.url))
        req = raw_post({"model": "m", "messages": MSG})
        buf = raw_exchange(gw.port, req + req, expect_responses=2, timeout=5)
        assert count_responses(buf) == 2
        assert b"EVIL" not in buf
        # the connection that carried the extra bytes was not reused
        assert len(liar.requests) == 2
    finally:
        liar.close()


def test_bytes_after_a_chunked_end_never_reach_the_client(make_sluice):
    answer = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
              b"2\r\n{}\r\n0\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nEVIL!")
    liar = LyingProvider(answer)
    try:
        gw = make_sluice(_liar_config(liar.url))
        req = raw_post({"model": "m", "messages": MSG})
        buf = raw_exchange(gw.port, req + req, expect_responses=2, timeout=5)
        assert count_responses(buf) == 2 and b"EVIL" not in buf
    finally:
        liar.close()


def test_usage_that_cannot_be_true_leaves_the_key_usable(make_sluice):
    for usage in (b'"x"', b"null", b"-5", b"99999999999999999999999"):
        body = (b'{"id":"m","type":"message","role":"assistant","model":"m","content":[{"type":"text",'
                b'"text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":' + usage
                + b',"output_tokens":' + usage + b"}}")
        liar = LyingProvider(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                             % len(body) + body)
        try:
            gw = make_sluice(_liar_config(liar.url, dialect="anthropic", server_extra=METRICS_TOKEN_LINE))
            for _ in range(2):
                status, _, _ = chat(gw.port, {"model": "m", "messages": MSG})
                assert status in (200, 502)
            assert gw.state()["in_flight"] == 0
            assert 0 <= tokens_spent(gw, "k") < 100000
            gw.stop()
        finally:
            liar.close()


# ------------------------------------------------------------------ provider-account headers
def test_account_headers_are_not_forwarded_either_way(make_sluice):
    liar = LyingProvider(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nopenai-organization: org-secret\r\n"
                         b"openai-project: proj-secret\r\nx-ratelimit-remaining-tokens: 99\r\nx-request-id: r1\r\n"
                         b"content-length: 2\r\n\r\n{}")
    try:
        gw = make_sluice(_liar_config(liar.url))
        status, headers, _ = chat(gw.port, {"model": "m", "messages": MSG},
                                  headers={"OpenAI-Organization": "org-other", "OpenAI-Project": "p",
                                           "anthropic-beta": "paid", "x-custom": "1"})
        assert status == 200
        sent = liar.requests[-1][0].lower()
        assert b"openai-organization" not in sent and b"openai-project" not in sent
        assert b"anthropic-beta" not in sent and b"x-custom" not in sent
        assert b"user-agent" in sent or b"content-type" in sent
        assert "openai-organization" not in headers and "openai-project" not in headers
        assert not any(k.startswith("x-ratelimit") for k in headers)
        assert headers["x-request-id"] == "r1"
    finally:
        liar.close()


# ------------------------------------------------------------------ pooled connections
def test_a_late_close_is_not_retried(make_sluice):
    # the second request goes out on the pooled connection of the first; the provider reads
    # it and closes 2 s later without answering: it may have acted on it, so it is not sent again
    ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
    liar = _StaleAfterFirst(ok, delay_s=2.0)
    try:
        gw = make_sluice(_liar_config(liar.url))
        status, _, _ = chat(gw.port, {"model": "m", "messages": MSG}, timeout=10)
        assert status == 200
        marker = "late-close-%d" % time.monotonic_ns()
        status, _, _ = chat(gw.port, {"model": "m", "messages": [{"role": "user", "content": marker}]},
                            timeout=15)
        time.sleep(0.5)
        got = sum(1 for _, body in liar.requests if marker.encode() in body)
        assert got == 1, f"the request reached the provider {got} times"
        assert status == 502
    finally:
        liar.close()


# ------------------------------------------------------------------ connect errors
def test_connect_errors_do_not_show_addresses(sluice, make_sluice, tmp_path):
    status, _, data = chat(sluice.port, {"model": "down-model", "messages": MSG})
    assert status == 502 and b"127.0.0.1" not in data
    # a TLS provider whose certificate names another host: the verification error names the
    # address Sluice connected to; the client gets the provider's name only
    tls = start_tls_stub(str(tmp_path), "other.example", "DNS:other.example")
    try:
        gw = make_sluice(tls_provider_config(tls.url, f'ca_file = "{tls.cert}"'))
        status, _, data = chat(gw.port, {"model": "m", "messages": MSG}, key=None)
        assert status == 502, data
        assert b"127.0.0.1" not in data and str(tls.port).encode() not in data, data
        assert b"secure" in data
    finally:
        tls.stop()
