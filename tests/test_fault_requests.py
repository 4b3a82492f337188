"""The fault lane counted per request, on synthetic client and mock rows: every attempt of a
request sent in the window counts wherever it landed, and a failure is never a fast success."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from harness.stats import fault_lane as lane
from harness.stats.fault_requests import attempt_failed, provider_failure_shares, request_figures, request_outcomes

T0 = 1_800_000_000.0
WINDOW = (T0, T0 + 30.0)
N = 1000
SET_MS = 60.0


def _figures(client: pd.DataFrame, mock: pd.DataFrame) -> dict:
    return request_figures(request_outcomes(client, mock, *WINDOW), *WINDOW,
                           provider_failure_shares(client, mock, *WINDOW))


def _client(latency_ms, error_kind) -> pd.DataFrame:
    start = T0 + np.arange(N) * 30.0 / N
    return pd.DataFrame({"request_id": [f"r{i}" for i in range(N)], "start_t_unix_s": start,
                         "latency_ms": latency_ms, "error_kind": error_kind,
                         "status_code": [200 if not e else 500 for e in error_kind]})


def _attempt(rid: str, t_s: float, status: int) -> dict:
    return {"request_id": rid, "path": "/v1/chat/completions", "status_code": status,
            "fault": "" if status == 200 else f"status:{status}",
            "body_end_t_unix_ns": int(t_s * 1e9)}


def slow_retrier():
    """20% of first attempts fail; each retry comes 5 s after the one before and fails 20% of
    the time too (200 requests retried, 40 twice, 8 three times, 2 four times: 1,250 attempts),
    and every request succeeds. Retries of requests sent late land after the window."""
    extra = {**{i: 1 for i in range(0, N, 5)}}
    for i in range(0, N, 25):
        extra[i] = 2
    for i in range(0, N, 125):
        extra[i] = 3
    for i in range(0, N, 500):
        extra[i] = 4
    client = _client(np.full(N, SET_MS), [""] * N)
    rows = []
    for i, t in enumerate(client["start_t_unix_s"]):
        k = extra.get(i, 0)
        for a in range(k + 1):
            rows.append(_attempt(f"r{i}", t + 5.0 * a + 0.001, 500 if a < k else 200))
    client["latency_ms"] = [SET_MS + 5000.0 * extra.get(i, 0) for i in range(N)]
    return client, pd.DataFrame(rows)


def fast_failer():
    """The same 20% first-attempt failures, answered at once as errors, never retried."""
    failed = [i % 5 == 0 for i in range(N)]
    client = _client(np.where(failed, 5.0, SET_MS), ["http" if f else "" for f in failed])
    rows = [_attempt(f"r{i}", t + 0.001, 500 if failed[i] else 200)
            for i, t in enumerate(client["start_t_unix_s"])]
    return client, pd.DataFrame(rows)


def test_a_slow_retrier_shows_its_true_amplification():
    client, mock = slow_retrier()
    assert len(mock) == 1250
    figures = _figures(client, mock)
    assert figures["success_share"] == 1.0 and figures["first_attempt_failure_share"] == 0.2
    assert figures["amplification"] == pytest.approx(1.25)
    assert figures["excess_amplification"] == pytest.approx(0.0, abs=1e-12)
    assert figures["attempts_after_window_share"] > 0
    # counted by landing time, its retries after the window would have flattered it
    landed = lane.window_figures(client, mock, *WINDOW, SET_MS)
    assert landed["amplification"] < 1.25


def test_a_fast_failer_shows_its_failures_in_the_tail():
    client, mock = fast_failer()
    figures = _figures(client, mock)
    assert figures["success_share"] == pytest.approx(0.8)
    assert figures["amplification"] == 1.0 and figures["excess_amplification"] == pytest.approx(0.0)
    assert figures["tts_p50_ms"] == SET_MS
    assert figures["tts_p99_ms"] == math.inf          # not reached: 20% never succeeded
    # the successes-only tail hides them
    assert lane.window_figures(client, mock, *WINDOW, SET_MS)["added_p99_ms"] == pytest.approx(0.0)


def test_excess_amplification_is_the_waste_beyond_the_success_bought():
    """A hedger sends every request twice: the second attempt is pure waste."""
    client, mock = fast_failer()
    hedged = pd.concat([mock, mock.assign(body_end_t_unix_ns=mock["body_end_t_unix_ns"] + 1000,
                                          status_code=200, fault="")], ignore_index=True)
    ok_client = client.assign(error_kind="", latency_ms=SET_MS)
    figures = _figures(ok_client, hedged)
    assert figures["amplification"] == 2.0
    assert figures["excess_amplification"] == pytest.approx(2.0 - 1.0 / 0.8)


def _failover(ejected_after: int):
    """The primary fails every attempt, the standby none: the first ``ejected_after`` requests
    try the primary first, the rest go straight to the standby."""
    client = _client(np.full(N, SET_MS), [""] * N)
    rows = []
    for i, t in enumerate(client["start_t_unix_s"]):
        if i < ejected_after:
            rows.append({**_attempt(f"r{i}", t + 0.001, 503), "provider": "primary"})
        rows.append({**_attempt(f"r{i}", t + 0.002, 200), "provider": "standby"})
    return client, pd.DataFrame(rows)


def test_trying_a_dead_primary_first_is_waste_when_a_standby_stands_by():
    """Always trying the failed primary first costs one attempt per request beyond the
    success; ejecting it costs almost nothing. Neither floor is the first attempts' own
    (p̂ = 1 for the one, 0.01 for the other), which would make the first's excess unknowable."""
    always = _figures(*_failover(N))
    assert always["first_attempt_failure_share"] == 1.0
    assert always["floor_failure_share"] == 0.0
    assert always["excess_amplification"] == pytest.approx(1.0)
    ejecting = _figures(*_failover(10))
    assert ejecting["excess_amplification"] == pytest.approx(0.01)
    assert provider_failure_shares(*_failover(10), *WINDOW) == {"primary": 1.0, "standby": 0.0}


def test_the_floor_is_the_first_attempts_when_one_provider_serves():
    """One provider, 20% of first attempts failing: its own share is its first attempts', not
    diluted by the retries (250 of 1,250 attempts failed)."""
    client, mock = slow_retrier()
    shares = provider_failure_shares(client, mock, *WINDOW)
    assert shares == {"": pytest.approx(0.2)}
    assert _figures(client, mock)["floor_failure_share"] == pytest.approx(0.2)


def test_time_weighted_success_weighs_each_second_alike():
    client, mock = fast_failer()
    # every request of the first 10 s failed, and they were a third of the requests
    early = client["start_t_unix_s"] < T0 + 10.0
    client.loc[early, "error_kind"] = "http"
    figures = _figures(client, mock)
    assert figures["time_weighted_success"] == pytest.approx(
        (0 * 10 + 0.8 * 20) / 30, abs=0.01)


def test_what_counts_as_a_failed_attempt():
    mock = pd.DataFrame({"status_code": [200, 500, 429, 200, 200, 200],
                         "fault": ["", "status:500", "status:429", "reset", "slow", "malformed"]})
    assert attempt_failed(mock).tolist() == [False, True, True, True, False, True]


def test_requests_without_an_id_are_counted_apart():
    client, mock = fast_failer()
    client.loc[:9, "request_id"] = ""
    figures = _figures(client, mock)
    assert figures["requests"] == N - 10 and figures["requests_without_id"] == 10


def test_failback_is_the_first_second_back_on_the_primary():
    end = T0 + 30.0
    t = np.concatenate([T0 + 30.0 + np.arange(0, 5, 0.1), T0 + 35.0 + np.arange(0, 5, 0.1)])
    provider = ["standby"] * 50 + ["primary"] * 50      # back on the primary 5 s after the end
    generation = pd.DataFrame({"body_end_t_unix_ns": (t * 1e9).astype("int64"),
                               "provider": provider})
    assert lane.failback_s(generation, end, T0 + 60.0) == 5.0
    never = generation.assign(provider="standby")
    assert math.isnan(lane.failback_s(never, end, T0 + 60.0))          # "not back"


def test_the_frontier_is_who_no_one_beats_on_all_three():
    from harness.stats.fault_requests import frontier
    rows = [{"name": "a", "success": 0.99, "excess": 0.0, "tts_p99": 100.0},
            {"name": "b", "success": 0.95, "excess": 0.0, "tts_p99": 200.0},   # a beats it
            {"name": "c", "success": 1.0, "excess": 0.3, "tts_p99": 150.0},    # best success
            {"name": "d", "success": 0.9, "excess": 0.0, "tts_p99": math.inf},
            {"name": "e", "success": math.nan, "excess": 0.0, "tts_p99": 1.0}]
    assert [r["name"] for r in frontier(rows)] == ["a", "c"]


def test_refused_connections_make_a_provider_down_amplification_whole():
    """A refused connection reaches no provider log: the capture's refused SYNs are added to
    the attempts the mock saw, and a run without a capture says it counted none."""
    client = _client(np.full(N, SET_MS), [""] * N)
    mock = pd.DataFrame([_attempt(f"r{i}", t + 0.001, 200)
                         for i, t in enumerate(client["start_t_unix_s"])])
    mock["last_frame_written_t_unix_ns"] = mock["body_end_t_unix_ns"]
    recs = [{"window": "during", "start_t_unix_s": WINDOW[0], "end_t_unix_s": WINDOW[1]}]
    whole = lane._sent_during(client, mock, recs, "provider_down", list(range(250)))
    assert whole["refused_attempts"] == 250 and whole["attempts_seen"] == N
    assert whole["amplification_sent_during"] == pytest.approx((N + 250) / N)
    seen = lane._sent_during(client, mock, recs, "provider_down", None)
    assert math.isnan(seen["refused_attempts"])
    assert seen["amplification_sent_during"] == 1.0
