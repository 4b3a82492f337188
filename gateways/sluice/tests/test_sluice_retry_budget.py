"""The retry budget on its own: a token bucket charged when a retry is decided, refunded by
successes, with a floor per second; no wait past the request's deadline. A gateway of its own
(a fresh, full bucket) in front of stub providers whose failures the tests script."""
import json
import threading
import time

import pytest
from sluice_helpers import metric_sum, post_model
from sluice_stub import Stub, free_port

pytestmark = pytest.mark.integration

BUDGET_CONFIG = """
[server]
listen = "127.0.0.1:{port}"
workers = 1

[retry_budget]
capacity = 10
deposit_per_success = 0.5
min_retries_per_s = 2

[outage]
max_held_requests = 0            # the budget on its own: refused connections are retried, not held

[providers.c]
base_url = "C/v1"

[providers.d]
base_url = "D/v1"

[providers.down]
base_url = "http://127.0.0.1:DOWN/v1"

[models.r3down]
provider = "down"
retry = { max_attempts = 3, backoff_base_ms = 1, backoff_max_ms = 5 }

[models.r3]
provider = "c"
retry = { max_attempts = 3, backoff_base_ms = 1, backoff_max_ms = 5 }

[models.slow429]
provider = "c"
retry = { max_attempts = 3, retry_after_max_ms = 10000, deadline_s = 1 }

[models.slow429-again]
provider = "c"
retry = { max_attempts = 3, retry_after_max_ms = 10000, deadline_s = 1 }

[models.fb]
provider = "c"
fallbacks = ["fb-back"]

[models.fb-back]
provider = "d"
"""


@pytest.fixture
def budget_gw(tmp_path):
    """A gateway of its own (a fresh, full bucket) and its own stubs ``c`` and ``d``."""
    from sluice_helpers import Sluice
    c, d = Stub().start(), Stub().start()
    g = Sluice(BUDGET_CONFIG.replace("C/v1", c.url + "/v1").replace("D/v1", d.url + "/v1")
               .replace("DOWN", str(free_port())), str(tmp_path)).start()
    try:
        yield g, c, d
    finally:
        g.stop()
        c.stop()
        d.stop()


def _paced(gw, model, n, seconds, marks=(), threads=10):
    """``n`` requests spread evenly over ``seconds`` by ``threads`` clients; ``marks``: callables
    run at their offsets [(offset_s, fn)]. Returns the statuses."""
    statuses = []
    t0 = time.monotonic()
    per = n // threads
    gap = seconds / per

    def worker(i):
        for k in range(per):
            due = t0 + k * gap + i * gap / threads
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            statuses.append(post_model(gw, model)[0])

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for offset, fn in marks:
        wait = t0 + offset - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        fn()
    for t in ts:
        t.join()
    return statuses


def test_retry_budget_against_a_provider_that_is_down(budget_gw):
    """Every attempt fails and there is nowhere else to go: once the bucket is spent (10 tokens),
    retries are 2 a second (min_retries_per_s), so after the first 2 s the attempts per client
    request stay <= 1.1 however many attempts each request may make (max_attempts = 3)."""
    g, c, _ = budget_gw
    c.fail_status = 500
    seen = {}
    statuses = _paced(g, "r3", 200, 4.0, marks=[(2.0, lambda: seen.update(at=len(c.requests)))])
    assert len(statuses) == 200 and set(statuses) == {500}  # the last failure, relayed
    after = len(c.requests) - seen["at"]
    sent_after = 100  # the requests due in the last 2 s
    assert after <= 1.1 * sent_after, (after, sent_after)
    assert metric_sum(g, "sluice_retry_budget_exhausted_total") > 0
    assert metric_sum(g, "sluice_retries_in_flight") == 0


def test_retry_budget_against_connects_refused(budget_gw):
    """The same with the provider's port closed (every attempt a refused connect, counted in
    sluice_upstream_errors_total): after the first 2 s, <= 1.1 attempts per request."""
    g, _, _ = budget_gw

    def attempts():
        return metric_sum(g, 'sluice_upstream_errors_total{provider="down"')

    seen = {}
    statuses = _paced(g, "r3down", 200, 4.0, marks=[(2.0, lambda: seen.update(at=attempts()))])
    assert len(statuses) == 200 and set(statuses) == {502}, set(statuses)
    after = attempts() - seen["at"]
    assert 100 <= after <= 1.1 * 100, after


def test_retry_budget_refills_with_successes(budget_gw):
    """Successes deposit tokens: after the bucket was spent on a provider failing everything,
    a recovering provider's successes pay for retries again."""
    g, c, _ = budget_gw
    c.fail_status = 500
    for _ in range(20):
        post_model(g, "r3")
    c.fail_status = 0
    for _ in range(40):  # 40 successes deposit 20 tokens (up to capacity 10)
        assert post_model(g, "r3")[0] == 200
    c.requests.clear()
    c.plan = [500, 500, 500, 500, 500, 500]
    assert post_model(g, "r3")[0] == 500 and post_model(g, "r3")[0] == 500
    assert len(c.requests) == 6  # both requests retried twice: the budget was there


def test_budget_also_bounds_fallbacks(budget_gw):
    """Fallback attempts take tokens too ([retry_budget] fallbacks = true, the default)."""
    g, c, d = budget_gw
    c.fail_status = 503
    statuses = _paced(g, "fb", 100, 2.0)
    # 10 tokens, 2 a second, 0.5 back per success: about 2 x (10 + 2 x 2) = 28 at most
    assert 10 <= len(d.requests) <= 35, len(d.requests)
    assert statuses.count(200) == len(d.requests)


def test_no_wait_past_the_deadline(budget_gw):
    """A wait that would end past the request's deadline (deadline_s = 1) is not made: the client
    gets the last failure at once, in its dialect, with the provider's Retry-After."""
    g, c, _ = budget_gw
    c.plan = [429]
    c.retry_after = 3  # within retry_after_max_ms, past the deadline
    t0 = time.monotonic()
    status, headers, data = post_model(g, "slow429")
    assert status == 429 and time.monotonic() - t0 < 0.8
    assert "error" in json.loads(data) and headers.get("retry-after") == "3"
    assert len(c.requests) == 1
    c.plan = [429]
    c.retry_after = 0.3  # within the deadline: waited, then answered (another model's deployment:
    t0 = time.monotonic()  # slow429's still has the 3 s it was asked to wait)
    assert post_model(g, "slow429-again")[0] == 200
    assert 0.25 <= time.monotonic() - t0 < 1.0


def test_retries_decided_each_second_stay_within_the_budget():
    """2,000 requests a second for 5 s against a provider answering 503 to every attempt, every
    retry waiting its backoff: the retries decided in any second stay within the tokens the
    bucket held and took in (a bucket debited only when a retry is sent would still look full
    to the failures that arrive while the first backoffs wait, and let ten times more through)."""
    import heapq
    import random
    from types import SimpleNamespace

    from sluice import resilience
    from sluice.config import Config
    from sluice.metrics import Metrics

    random.seed(0)
    cfg = Config({"providers": {"p": {"base_url": "http://127.0.0.1:1/v1"}},
                  "retry_budget": {"capacity": 100, "deposit_per_success": 0.5,
                                   "min_retries_per_s": 10},
                  "models": {"m": {"provider": "p", "retry": {"deadline_s": 10, "max_attempts": 100}}}})
    target = SimpleNamespace(provider=SimpleNamespace(name="p"), upstream="m")
    policy = resilience.Policy(cfg.models["m"], [target])
    budget = resilience.RetryBudget(cfg.retry_budget)
    budget.t = 0.0
    app = SimpleNamespace(retry_budget=budget, metrics=Metrics())
    route = SimpleNamespace(policy=policy, name="m")
    # (time, request, sent): each first attempt fails as it arrives; a retry is sent when its
    # backoff ends, and fails at once
    pending = [(i / 2000.0, i, False) for i in range(10_000)]
    requests = {i: SimpleNamespace(route=route, deployment=policy.deployments[0], retry_state=None,
                                   t0=t) for t, i, _ in pending}
    heapq.heapify(pending)
    decided = [0] * 16
    while pending:
        now, i, sent = heapq.heappop(pending)
        if sent:
            resilience.attempt_sending(app, requests[i], now)
        delay = resilience.on_failure(app, requests[i], "overloaded", -1.0, now)
        if delay >= 0:
            decided[int(now)] += 1
            heapq.heappush(pending, (now + delay, i, True))
    assert decided[0] <= 100 + 10
    assert all(n <= 10 + 1 for n in decided[1:]), decided
    assert sum(decided) <= 100 + 10 * 15 + 1
