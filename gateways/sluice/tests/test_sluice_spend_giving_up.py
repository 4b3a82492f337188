"""When Sluice gives up on a request it has written to a provider, the provider may have acted on
it and billed it: the key pays the whole reservation (as for a client gone mid-exchange), not
the prompt's estimate alone. A provider that answers with an error status says it did not act:
that attempt costs the prompt's estimate. With ``retry_after_send``, an attempt given up on
costs its reservation on top of what the attempt that answered reports."""
import json

import pytest
from sluice_helpers import chat, tokens_spent
from sluice_scripted_provider import ScriptedProvider
from sluice_spend_provider import MAX_TOKENS, client_request, head, openai_unary, settled, start

pytestmark = pytest.mark.integration

USAGE = {"prompt_tokens": 4000, "completion_tokens": 50, "total_tokens": 4050}
# a provider that answers in 0.3 s at most, and a model retried after a timeout (on it again)
EXTRA = """
[providers.quick]
base_url = "URL/v1"
response_timeout_s = 0.3

[models.q]
provider = "quick"

[models.qr]
provider = "quick"

[models.qr.retry]
on = ["timeout"]
retry_after_send = true
max_attempts = 2
backoff_base_ms = 1
"""


@pytest.fixture(scope="module")
def provider():
    p = ScriptedProvider(None)
    yield p
    p.close()


@pytest.fixture(scope="module")
def gw(provider, tmp_path_factory):
    g = start(provider, tmp_path_factory.mktemp("giving-up"), EXTRA.replace("URL", provider.url))
    yield g
    g.stop()


def _spend(gw, model, path="/v1/chat/completions", dialect="openai"):
    """(status, tokens charged, the reservation) of one request to ``model``."""
    _, body, reserved = client_request(dialect, model, False)
    before = tokens_spent(gw, "k")
    status, _, _ = chat(gw.port, body, path=path)
    return status, settled(gw, before), reserved


def _silent(p, c, request_head, body):
    p.hold(c, 5)  # read, never answered: the provider may be generating


def test_a_response_timeout_is_charged_the_reservation(gw, provider):
    provider.script = _silent
    status, charged, reserved = _spend(gw, "q")
    assert status == 504
    assert charged == reserved


def test_a_provider_closing_after_the_request_is_charged_the_reservation(gw, provider):
    provider.script = lambda p, c, request_head, body: None  # read, then closed without a byte
    status, charged, reserved = _spend(gw, "oa")
    assert status == 502
    assert charged == reserved


def test_an_answer_that_cannot_be_translated_is_charged_the_reservation(gw, provider):
    # an Anthropic client on an OpenAI provider: a 200 Sluice cannot translate was billed
    def script(p, c, request_head, body):
        data = json.dumps({"usage": "none", "choices": 7}).encode()
        c.sendall(head(b"application/json", len(data)) + data)
    provider.script = script
    status, charged, reserved = _spend(gw, "oa", "/v1/messages", "anthropic")
    assert status == 502
    assert charged == reserved


def test_an_error_status_is_charged_the_prompt_only(gw, provider):
    # the provider says it did not act: the prompt's estimate, no completion
    def script(p, c, request_head, body):
        data = b'{"error":{"message":"no","type":"invalid_request_error"}}'
        c.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
                  b"content-length: %d\r\nconnection: close\r\n\r\n" % len(data) + data)
    provider.script = script
    status, charged, reserved = _spend(gw, "oa")
    assert status == 400
    assert charged == reserved - MAX_TOKENS


def test_a_timed_out_attempt_is_charged_beside_the_one_that_answered(gw, provider):
    attempts = []

    def script(p, c, request_head, body):
        attempts.append(1)
        if len(attempts) == 1:
            p.hold(c, 5)
            return
        data = openai_unary(USAGE)
        c.sendall(head(b"application/json", len(data)) + data)
    provider.script = script
    status, charged, reserved = _spend(gw, "qr")
    assert status == 200
    assert len(attempts) == 2
    assert charged == reserved + USAGE["prompt_tokens"] + USAGE["completion_tokens"]
