"""Sluice's own GET endpoints, from a real client: /v1/models lists what the key may call (and
checks a key presented, as the chat paths do), and /metrics is rendered at most once a second
by each worker, so a flood of scrapes does not read /proc and walk every task each."""
import http.client
import json
import math
import time

import pytest
from sluice_helpers import ENV, KEY, MSG, chat, request, server_config
from sluice_stub import wait_until

pytestmark = pytest.mark.integration


def _ids(port, headers):
    status, _, body = request(port, "GET", "/v1/models", headers=headers)
    assert status == 200, body
    return [m["id"] for m in json.loads(body)["data"]]


def test_models_lists_what_the_key_may_call(sluice):
    # the "limited" key may call claude only (and so its alias)
    limited = {"authorization": "Bearer sk-test-limited"}
    assert sorted(_ids(sluice.port, limited)) == ["claude", "claude-alias"]
    doc = json.loads(request(sluice.port, "GET", "/v1/models",
                             headers={"x-api-key": "sk-test-limited", "anthropic-version": "2023-06-01"})[2])
    assert [m["id"] for m in doc["data"]] == ["claude", "claude-alias"]
    assert (doc["first_id"], doc["last_id"], doc["has_more"]) == ("claude", "claude-alias", False)
    # a key that may call every model sees them all, aliases included
    assert {"mock-model", "fast", "gpt-4o-mini", "claude", "claude-alias", "down-model",
            "slow-model"} == set(_ids(sluice.port, {"authorization": f"Bearer {KEY}"}))
    assert request(sluice.port, "GET", "/v1/models", headers={"authorization": "Bearer sk-nope"})[0] == 401


def test_models_without_auth_lists_all_and_checks_a_key_presented(make_sluice, stub):
    gw = make_sluice(server_config(stub.url, "require_auth = false"), env=ENV)
    assert "mock-model" in _ids(gw.port, {})
    assert sorted(_ids(gw.port, {"authorization": "Bearer sk-test-limited"})) == ["claude", "claude-alias"]
    # as a chat request with an unknown key is refused
    assert chat(gw.port, {"model": "mock-model", "messages": MSG}, key="sk-nope")[0] == 401
    assert request(gw.port, "GET", "/v1/models", headers={"authorization": "Bearer sk-nope"})[0] == 401


def test_metrics_is_rendered_at_most_once_a_second_however_often_requests_are_counted(make_sluice, stub):
    # a scrape after each counted request, on one keep-alive connection: each render of the
    # worker's numbers is told by its text (the requests counter moves with every request), so
    # the renders this client saw are counted, and bounded by the seconds the exchange took
    gw = make_sluice(server_config(stub.url), env=ENV)
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    body = json.dumps({"model": "mock-model", "messages": MSG})
    headers = {"content-type": "application/json", "authorization": f"Bearer {KEY}"}
    texts = []
    try:
        t0 = time.monotonic()
        for _ in range(40):
            conn.request("POST", "/v1/chat/completions", body, headers)
            resp = conn.getresponse()
            assert resp.status == 200, resp.read()
            resp.read()
            conn.request("GET", "/metrics")
            resp = conn.getresponse()
            assert resp.status == 200
            texts.append(resp.read())
        took_s = time.monotonic() - t0
    finally:
        conn.close()
    renders = len(set(texts))
    # renders at least a second apart, within took_s: at most 1 + took_s of them
    assert renders <= 1 + math.floor(took_s), (renders, took_s)
    # a render is reused, never kept past its second: the counted requests do show
    done = 'sluice_requests_total{model="mock-model",status="200"} 40'
    assert wait_until(lambda: done in gw.metrics(), timeout=10, interval=0.2)
