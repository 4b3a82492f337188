"""Retries, the retry budget, fallbacks, weighted deployments and outlier ejection, against a
real Sluice and two stub providers (``a`` and ``b``) whose failures the tests script."""
import http.client
import json
import os
import threading
import time

import pytest
from sluice_helpers import METRICS_TOKEN_LINE, metric_sum, post_model
from sluice_stub import free_port, wait_until

pytestmark = pytest.mark.integration

MSG = [{"role": "user", "content": "hi"}]

CONFIG = """
[server]
listen = "127.0.0.1:{port}"
workers = 1
access_log = "ACCESS"
access_log_flush_s = 0.05
forward_request_headers = ["content-type", "x-test-*"]
METRICS_TOKEN_LINE


[providers.a]
base_url = "A/v1"
response_timeout_s = 0.5
stream_idle_timeout_s = 0.5

[providers.b]
base_url = "B/v1"

[providers.b-anth]
base_url = "B/v1"
dialect = "anthropic"

[providers.down]
base_url = "http://127.0.0.1:DOWN/v1"

[models.plain]
provider = "a"

[models.retrying]
provider = "a"
retry = { max_attempts = 2, backoff_base_ms = 1, backoff_max_ms = 5 }

[models.retry-all]
provider = "a"
retry = { max_attempts = 3, on = ["5xx", "timeout", "reset"], backoff_base_ms = 1, retry_after_send = true }

[models.retry-no-send]
provider = "a"
retry = { max_attempts = 3, on = ["5xx", "timeout", "reset"], backoff_base_ms = 1 }

[models.prim]
provider = "a"
fallbacks = ["back"]
fallback_on = ["overloaded"]

[models.back]
provider = "b"

[models.prim-x]
provider = "a"
fallbacks = ["back-claude"]

[models.back-claude]
provider = "b-anth"
upstream_model = "claude-x"

[providers.a2]
base_url = "A/v1"

[models.dual]
deployments = [{ provider = "a", weight = 1 }, { provider = "b", weight = 1 }]
outlier = { min_requests = 3, failure_margin = 0.3, ejection_s = 2 }

[models.alike]
deployments = [{ provider = "a", weight = 1 }, { provider = "b", weight = 1 }]
outlier = { min_requests = 3, failure_margin = 0.3, ejection_s = 2 }

[models.trio]
deployments = [{ provider = "a", weight = 1 }, { provider = "a2", weight = 1 }, { provider = "b", weight = 1 }]
outlier = { min_requests = 3, failure_margin = 0.3, max_ejection_percent = 50, ejection_s = 30 }

[models.solo]
provider = "a"
outlier = { min_requests = 3, failure_margin = 0.3 }

[models.dual429]
deployments = [{ provider = "a", weight = 1 }, { provider = "b", weight = 1 }]
outlier = { min_requests = 3, failure_margin = 0.3, ejection_s = 2 }
retry = { max_attempts = 3 }

[models.prim429]
provider = "a"
retry = { max_attempts = 3 }
fallbacks = ["back"]
fallback_on = ["429"]

[models.overload-slow]
provider = "a"
retry = { max_attempts = 3, overload_backoff_min_ms = 1500, overload_backoff_max_ms = 3000, deadline_s = 1 }

[models.dual503]
deployments = [{ provider = "a", weight = 1 }, { provider = "b", weight = 1 }]
retry = { max_attempts = 3 }

[models.defaults]
provider = "a"
retry = { backoff_base_ms = 1, backoff_max_ms = 5 }

[models.standby]
deployments = [{ provider = "down", weight = 1 }, { provider = "b", weight = 0 }]
retry = { max_attempts = 2, on = ["connect"], backoff_base_ms = 1 }
"""


@pytest.fixture(scope="module")
def gw(stubs, tmp_path_factory):
    from sluice_helpers import Sluice
    a, b = stubs
    d = str(tmp_path_factory.mktemp("resil"))
    text = (CONFIG.replace("A/v1", a.url + "/v1").replace("B/v1", b.url + "/v1")
            .replace("DOWN", str(free_port())).replace("ACCESS", os.path.join(d, "access.log"))
            .replace("METRICS_TOKEN_LINE", METRICS_TOKEN_LINE))
    g = Sluice(text, d).start()
    g.access_path = os.path.join(d, "access.log")
    yield g
    g.stop()


@pytest.fixture(autouse=True)
def reset(stubs):
    for s in stubs:
        s.plan = []
        s.fail_status = 0
        s.fail_share = 0.0
        s.retry_after = None
        s.requests.clear()
    yield


def _access(gw, model):
    try:
        with open(gw.access_path) as f:
            lines = [json.loads(ln) for ln in f if ln.strip()]
    except FileNotFoundError:
        return []
    return [ln for ln in lines if ln["model"] == model]


def last_access(gw, model, before):
    """The access log line of the request made after ``before`` lines of ``model`` were seen."""
    assert wait_until(lambda: len(_access(gw, model)) > before, timeout=3)
    return _access(gw, model)[-1]


def test_no_retry_unless_configured(gw, stubs):
    a, _ = stubs
    a.plan = [500]
    status, _, _ = post_model(gw, "plain")
    assert status == 500
    assert len(a.requests) == 1


def test_500_then_success_is_retried_once(gw, stubs):
    a, _ = stubs
    before = metric_sum(gw, 'sluice_retries_total{reason="5xx"}')
    a.plan = [500]
    time.sleep(0.2)
    seen = len(_access(gw, "retrying"))
    status, _, data = post_model(gw, "retrying")
    assert status == 200, data
    assert json.loads(data)["choices"][0]["message"]["content"] == "Hello from stub"
    assert len(a.requests) == 2
    assert metric_sum(gw, 'sluice_retries_total{reason="5xx"}') == before + 1
    entry = last_access(gw, "retrying", seen)
    assert entry["attempts"] == 2 and entry["status"] == 200 and entry["fallback"] is None
    # two failures: max_attempts = 2, the second one is relayed
    a.plan = [502, 500]
    status, _, _ = post_model(gw, "retrying")
    assert status == 500
    assert len(a.requests) == 4


def test_429_retry_after_is_honoured(gw, stubs):
    a, _ = stubs
    a.plan = [429]
    a.retry_after = 1
    t0 = time.monotonic()
    status, _, _ = post_model(gw, "retrying")
    assert status == 200
    assert time.monotonic() - t0 >= 0.95
    assert len(a.requests) == 2
    # longer than retry_after_max_ms (2000): relayed at once, with its Retry-After
    a.plan = [429]
    a.retry_after = 5
    t0 = time.monotonic()
    status, headers, _ = post_model(gw, "retrying")
    assert status == 429 and headers.get("retry-after") == "5"
    assert time.monotonic() - t0 < 2
    assert len(a.requests) == 3


def test_stream_failing_before_first_frame_is_retried(gw, stubs):
    a, _ = stubs
    a.plan = [503]
    status, headers, data = post_model(gw, "retrying", stream=True)
    assert status == 200 and b"data: [DONE]" in data
    assert len(a.requests) == 2


def test_no_retry_after_first_stream_byte(gw, stubs):
    a, _ = stubs
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    conn.request("POST", "/v1/chat/completions",
                  body=json.dumps({"model": "retry-all", "messages": MSG, "stream": True}),
                  headers={"content-type": "application/json", "x-test-hang": "1"})
    resp = conn.getresponse()
    assert resp.status == 200
    try:
        data = resp.read()
    except http.client.IncompleteRead as e:
        data = e.partial
    conn.close()
    assert b"chat.completion.chunk" in data
    time.sleep(0.3)
    assert len(a.requests) == 1  # stalled after the first frame: never sent again


def test_timeout_retried_only_with_retry_after_send(gw, stubs):
    a, _ = stubs
    h = {"x-test-delay-ms": "1200"}
    status, _, _ = post_model(gw, "retry-no-send", headers=h)
    assert status == 504
    assert len(a.requests) == 1
    a.requests.clear()
    a.plan = [-1]  # closed after the request was sent: "reset"
    status, _, _ = post_model(gw, "retry-no-send")
    assert status == 502
    assert len(a.requests) == 1
    a.requests.clear()
    a.plan = [-1]
    status, _, _ = post_model(gw, "retry-all")
    assert status == 200
    assert len(a.requests) == 2
    assert metric_sum(gw, 'sluice_retries_total{reason="reset"}') >= 1


def _load(gw, model, n_threads, per_thread, headers=None):
    statuses = []

    def worker():
        for _ in range(per_thread):
            statuses.append(post_model(gw, model, headers=headers)[0])

    threads = [threading.Thread(target=worker) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return statuses


def test_error_burst_success_rate_and_amplification(gw, stubs):
    a, _ = stubs
    a.fail_share = 0.2
    statuses = _load(gw, "retrying", 20, 10, headers={"x-test-delay-ms": "20"})
    n = len(statuses)
    ok = statuses.count(200) / n
    attempts = len(a.requests)
    # without retries about 80% would succeed; the budget keeps attempts near 1 + 0.2
    assert ok >= 0.88, ok
    assert attempts <= 1.3 * n, attempts


def test_fallback_on_overloaded(gw, stubs):
    a, b = stubs
    before = metric_sum(gw, 'sluice_fallbacks_total{from="prim",to="back"}')
    a.fail_status = 503
    time.sleep(0.2)
    seen = len(_access(gw, "prim"))
    status, _, data = post_model(gw, "prim")
    assert status == 200, data
    assert len(a.requests) == 1 and len(b.requests) == 1
    assert json.loads(b.requests[0]["body"])["model"] == "back"
    assert metric_sum(gw, 'sluice_fallbacks_total{from="prim",to="back"}') == before + 1
    entry = last_access(gw, "prim", seen)
    assert entry["attempts"] == 2 and entry["fallback"] == "back"
    # a class not in fallback_on is relayed
    a.fail_status = 500
    status, _, _ = post_model(gw, "prim")
    assert status == 500 and len(b.requests) == 1


def test_anthropic_fallback_for_openai_primary(gw, stubs):
    a, b = stubs
    a.fail_status = 500
    status, _, data = post_model(gw, "prim-x", stream=False)
    assert status == 200, data
    doc = json.loads(data)
    assert doc["object"] == "chat.completion"  # translated back to the client's dialect
    assert doc["choices"][0]["message"]["content"] == "Hello from stub"
    assert b.requests[0]["path"] == "/v1/messages"
    assert json.loads(b.requests[0]["body"])["model"] == "claude-x"
    # a stream too
    b.requests.clear()
    status, _, data = post_model(gw, "prim-x", stream=True)
    assert status == 200 and b"data: [DONE]" in data and b"tok0" in data
    assert b.requests[0]["path"] == "/v1/messages"


def test_connect_failure_goes_to_standby_deployment(gw, stubs):
    _, b = stubs
    before = metric_sum(gw, 'sluice_retries_total{reason="connect"}')
    for _ in range(3):
        status, _, _ = post_model(gw, "standby")
        assert status == 200
    assert len(b.requests) == 3
    assert metric_sum(gw, 'sluice_retries_total{reason="connect"}') >= before + 1


def test_outlier_ejection_and_readmission(gw, stubs):
    a, b = stubs
    a.fail_status = 500
    # a fails everything, b nothing: a is out at its first failure once each has 3 recent
    # attempts (min_requests), whichever way the weighted picks fell (the metrics token: each
    # scrape sees the request before it at once)
    counts = []  # (a's, b's requests) after each request
    for _ in range(40):
        t_ejected = time.monotonic()  # a is out from this request on, for ejection_s (2 s)
        post_model(gw, "dual")
        counts.append((len(a.requests), len(b.requests)))
        if metric_sum(gw, 'sluice_ejected_deployments{model="dual",provider="a"}') == 1:
            break
    (seen, n_b), before = counts[-1], counts[:-1]
    assert seen >= 3 and n_b >= 3 and before[-1][0] == seen - 1, counts  # (the last went to a)
    assert not any(n >= 3 and m >= 3 for (n, m), (p, _) in zip(before, [(0, 0)] + before) if n > p), counts
    assert metric_sum(gw, 'sluice_ejections_total{model="dual",provider="a"}') >= 1
    sent = 0
    while sent < 10 and time.monotonic() - t_ejected < 1.0:  # all to b while a is surely out
        status, _, _ = post_model(gw, "dual")
        assert status == 200
        sent += 1
    assert sent and len(a.requests) == seen
    a.fail_status = 0
    time.sleep(max(0.0, 2.2 - (time.monotonic() - t_ejected)))
    for _ in range(200):  # re-admitted after the cool-down, on probation: a tenth of its share
        assert post_model(gw, "dual")[0] == 200
        if len(a.requests) > seen:
            break
    assert len(a.requests) > seen
    assert metric_sum(gw, 'sluice_ejected_deployments{model="dual",provider="a"}') == 0


def test_429_is_not_an_outlier_signal(gw, stubs):
    """A deployment answering only 429 (Retry-After: 1) is never ejected: each 429 goes at once to
    the other admitted deployment, no Retry-After wait."""
    a, b = stubs
    a.fail_status = 429
    a.retry_after = 1
    for _ in range(30):
        t0 = time.monotonic()
        assert post_model(gw, "dual429")[0] == 200
        assert time.monotonic() - t0 < 0.5
    assert len(a.requests) >= 5  # still picked by weight: never ejected
    assert metric_sum(gw, 'sluice_ejections_total{model="dual429",provider="a"}') == 0
    assert metric_sum(gw, 'sluice_ejected_deployments{model="dual429",provider="a"}') == 0


def test_429_goes_to_a_fallback_before_waiting(gw, stubs):
    """Rate limited with no other deployment: a fallback takes the request at once; the
    Retry-After is waited only when there is nowhere else to go (test_429_retry_after_is_honoured)."""
    a, b = stubs
    a.fail_status = 429
    a.retry_after = 1
    t0 = time.monotonic()
    assert post_model(gw, "prim429")[0] == 200
    assert time.monotonic() - t0 < 0.5
    assert len(a.requests) == 1 and len(b.requests) == 1


def test_overloaded_is_never_retried_at_once_on_the_same_deployment(gw, stubs):
    """503 and 529: a full-jitter backoff of 250 to 500 ms before the first retry on the same
    deployment (overload_backoff_min_ms = 250, its ceiling doubling from 500 up to
    overload_backoff_max_ms = 2000), though the model's own backoff is 1 to 5 ms."""
    a, _ = stubs
    for status in (503, 529):
        a.requests.clear()
        a.plan = [status]
        t0 = time.monotonic()
        assert post_model(gw, "retrying")[0] == 200
        assert 0.24 <= time.monotonic() - t0 < 0.9
        assert len(a.requests) == 2


def test_overloaded_backoff_within_the_deadline(gw, stubs):
    """A backoff that would end past deadline_s is not waited: the 503 is relayed at once."""
    a, _ = stubs
    a.plan = [503]
    t0 = time.monotonic()
    assert post_model(gw, "overload-slow")[0] == 503
    assert time.monotonic() - t0 < 0.8
    assert len(a.requests) == 1


def test_overloaded_goes_to_another_deployment_at_once(gw, stubs):
    a, b = stubs
    a.fail_status = 503
    for _ in range(10):
        t0 = time.monotonic()
        assert post_model(gw, "dual503")[0] == 200
        assert time.monotonic() - t0 < 0.2
    assert len(b.requests) == 10


def test_attempts_are_not_capped_by_default_for_5xx(gw, stubs):
    """No max_attempts: five 500s in a row still end in a success, the deadline and the retry
    budget being what ends attempts."""
    a, _ = stubs
    a.plan = [500, 502, 500, 503, 500]
    assert post_model(gw, "defaults")[0] == 200
    assert len(a.requests) == 6


def test_no_ejection_when_every_deployment_fails_alike(gw, stubs):
    """Both deployments failing (the provider side, not one deployment): neither is an outlier,
    neither is ejected."""
    a, b = stubs
    a.fail_status = b.fail_status = 500
    for _ in range(30):
        assert post_model(gw, "alike")[0] == 500
    assert len(a.requests) >= 5 and len(b.requests) >= 5
    assert metric_sum(gw, 'sluice_ejected_deployments{model="alike",provider="a"}') == 0
    assert metric_sum(gw, 'sluice_ejected_deployments{model="alike",provider="b"}') == 0


def test_at_most_max_ejection_percent_ejected(gw, stubs):
    """Two of three deployments (a, a2) fail everything: max_ejection_percent = 50 ejects one of
    them, never both; a lone deployment is never ejected at all."""
    a, b = stubs
    a.fail_status = 500
    for _ in range(60):
        post_model(gw, "trio")
    ejected = [metric_sum(gw, f'sluice_ejected_deployments{{model="trio",provider="{p}"}}')
               for p in ("a", "a2", "b")]
    assert ejected[:2] in ([1, 0], [0, 1]) and ejected[2] == 0, ejected
    for _ in range(10):
        assert post_model(gw, "solo")[0] == 500
    assert 'sluice_ejections_total{model="solo"' not in gw.metrics()


def test_ejections_in_a_row_grow_and_a_deployment_back_from_one_gets_probes():
    """Envoy's rule: the k-th ejection in a row lasts k x ejection_s (at most max_ejection_s);
    back, the deployment takes probe_share of the picks until healthy for ejection_s."""
    import random
    from types import SimpleNamespace

    from sluice.config import Config
    from sluice.metrics import Metrics
    from sluice.resilience import Policy

    random.seed(1)
    cfg = Config({"providers": {"a": {"base_url": "http://127.0.0.1:1/v1"},
                                "b": {"base_url": "http://127.0.0.1:2/v1"}},
                  "models": {"m": {"deployments": [{"provider": "a", "weight": 1},
                                                   {"provider": "b", "weight": 0}],
                                   "outlier": {"min_requests": 2, "failure_margin": 0.3,
                                               "window_s": 1, "ejection_s": 1,
                                               "max_ejection_s": 2.5, "probe_share": 0.1}}}})
    targets = [SimpleNamespace(provider=SimpleNamespace(name=n), upstream="m") for n in "ab"]
    policy = Policy(cfg.models["m"], targets)
    a, b = policy.deployments
    metrics = Metrics()
    now, lasted = 100.0, []
    for _ in range(3):   # a fails, b succeeds: ejected, back, failing again
        for _ in range(2):
            policy.success(b, now)
        while not a.ejected_until:
            policy.failure(a, now, metrics)
        lasted.append(a.ejected_until - now)
        now = a.ejected_until + 0.01
        assert policy.pick(now) in (a, b) and a.back_at == now
    assert lasted == [1.0, 2.0, 2.5]
    picks = [policy.pick(now) for _ in range(2000)]
    assert 0.07 < picks.count(a) / len(picks) < 0.13     # probes only
    policy.success(a, now + 1.0)    # healthy for ejection_s: its whole weight, its count reset
    assert a.back_at == 0.0 and a.ejections == 0
    assert all(policy.pick(now + 1.0) is a for _ in range(50))
