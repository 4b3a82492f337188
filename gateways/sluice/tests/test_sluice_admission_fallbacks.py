"""A fallback is no way around a key's model list: against a real Sluice and two stub providers,
a key that may call the primary but not one of its fallbacks never reaches that fallback (the
next one it may use takes the request, or the failure is relayed, or a 429's Retry-After is
waited for on the primary), while a key that may call every model still gets the fallback."""
import json

import pytest
from sluice_helpers import Sluice, chat

pytestmark = pytest.mark.integration

MSG = [{"role": "user", "content": "hi"}]

CONFIG = """
[server]
listen = "127.0.0.1:{port}"
workers = 1

[providers.a]
base_url = "A/v1"

[providers.b]
base_url = "B/v1"

[models.prim]
provider = "a"
fallbacks = ["secret", "open"]
fallback_on = ["5xx"]

[models.only-secret]
provider = "a"
fallbacks = ["secret"]
fallback_on = ["5xx"]

[models.prim429]
provider = "a"
retry = { max_attempts = 2, retry_after_max_ms = 5000 }
fallbacks = ["secret"]
fallback_on = ["429"]

[models.secret]
provider = "b"
upstream_model = "secret-upstream"

[models.open]
provider = "b"
upstream_model = "open-upstream"

[keys.narrow]
key = "sk-narrow"
models = ["prim", "only-secret", "prim429", "open"]

[keys.wide]
key = "sk-wide"
"""


@pytest.fixture(scope="module")
def gw(stubs, tmp_path_factory):
    a, b = stubs
    text = CONFIG.replace("A/v1", a.url + "/v1").replace("B/v1", b.url + "/v1")
    g = Sluice(text, str(tmp_path_factory.mktemp("fallbacks"))).start()
    yield g
    g.stop()


@pytest.fixture(autouse=True)
def reset(stubs):
    for s in stubs:
        s.plan = []
        s.fail_status = 0
        s.retry_after = None
        s.requests.clear()


def _models_sent(stub):
    return [json.loads(r["body"])["model"] for r in stub.requests]


def test_a_fallback_the_key_may_not_use_is_skipped(gw, stubs):
    a, b = stubs
    a.fail_status = 500
    status, _, data = chat(gw.port, {"model": "prim", "messages": MSG}, key="sk-narrow")
    assert status == 200, data
    assert _models_sent(b) == ["open-upstream"]  # "secret" skipped: the key may not call it
    # a key that may call every model gets the first fallback, as before
    status, _, data = chat(gw.port, {"model": "prim", "messages": MSG}, key="sk-wide")
    assert status == 200, data
    assert _models_sent(b) == ["open-upstream", "secret-upstream"]


def test_no_fallback_the_key_may_use_relays_the_failure(gw, stubs):
    a, b = stubs
    a.fail_status = 500
    status, _, data = chat(gw.port, {"model": "only-secret", "messages": MSG}, key="sk-narrow")
    assert status == 500, data
    assert b.requests == []
    assert len(a.requests) == 1


def test_a_429_waits_on_the_primary_when_no_fallback_is_usable(gw, stubs):
    a, b = stubs
    a.plan = [429]  # then a normal answer
    a.retry_after = 1
    status, _, data = chat(gw.port, {"model": "prim429", "messages": MSG}, key="sk-narrow")
    # the primary's Retry-After is honoured and its second attempt answers: no fallback it may
    # not use, and no 429 relayed as if one had been tried
    assert status == 200, data
    assert b.requests == []
    assert len(a.requests) == 2
