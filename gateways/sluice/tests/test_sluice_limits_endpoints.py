"""Sluice's own GET endpoints, from a real client: /v1/models lists what the key may call (and
checks a key presented, as the chat paths do), and /metrics is rendered at most once a second
while no request is counted, so a flood of scrapes does not read /proc and walk every task each."""
import json
import re
import socket
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


def _gauge(text, name):
    return int(re.search(rf"^{name} (\d+)$", text, re.M).group(1))


def test_metrics_rendering_is_reused_within_a_second(make_sluice, stub):
    gw = make_sluice(server_config(stub.url), env=ENV)
    idle = []
    try:
        for _ in range(5):  # the two scrapes must fall within a second of each other
            t0 = time.monotonic()
            first = gw.metrics()
            for _ in range(20):  # the client connections gauge changes; no request is counted
                idle.append(socket.create_connection(("127.0.0.1", gw.port), timeout=10))
            assert wait_until(lambda: gw.state()["client_connections"] > len(idle))
            second = gw.metrics()
            if time.monotonic() - t0 < 0.8:
                break
        assert second == first, "a second scrape within a second was rendered again"
        # a second later, the gauges are new
        assert wait_until(lambda: _gauge(gw.metrics(), "sluice_client_connections") > len(idle),
                          timeout=5, interval=0.2)
        # a request counted is in the very next scrape, whenever it comes
        before = gw.metrics()
        assert chat(gw.port, {"model": "mock-model", "messages": MSG})[0] == 200
        after = gw.metrics()
        assert 'sluice_requests_total{model="mock-model",status="200"} 1' in after, after
        assert 'sluice_requests_total{model="mock-model",status="200"}' not in before
    finally:
        for s in idle:
            s.close()
