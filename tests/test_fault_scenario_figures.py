"""Each fault scenario's own figures on synthetic rows with known answers: retries before the
Retry-After (per request id, at the same provider), what a rate-limited client was told, what a
client got from a stream broken after it started and how long after the fault it ended, a
provider that never answers, a request no retry saves, and the standby's share."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.stats import fault_scenarios as FS

S = 1_000_000_000   # ns


def _client(rows):
    """rows: (request_id, status, error_kind, error_class, dialect, content_chars, sent_chars,
    latency_ms, retry_after_s)"""
    frame = pd.DataFrame(rows, columns=["request_id", "status_code", "error_kind", "error_class",
                                        "error_body_dialect", "content_chars",
                                        "content_chars_sent", "latency_ms", "retry_after_s"])
    return frame.assign(start_t_unix_s=100.0)


def _mock(rows):
    """rows: (request_id, provider, status, fault, ended, body_end_s, last_written_s)"""
    frame = pd.DataFrame(rows, columns=["request_id", "provider", "status_code", "fault", "ended",
                                        "body_end_t_unix_ns", "last_frame_written_t_unix_ns"])
    for col in ("body_end_t_unix_ns", "last_frame_written_t_unix_ns"):
        frame[col] = (frame[col] * S).astype("int64")
    return frame


OK = ("", "", "", 90.0, 90.0, 70.0, math.nan)


def test_retries_before_the_retry_after_are_counted_per_request_at_the_same_provider():
    mock = _mock([
        ("a", "primary", 429, "status:429", "complete", 100.0, 100.1),
        ("a", "primary", 200, "", "complete", 100.6, 100.7),     # 0.5 s later: early
        ("b", "primary", 429, "status:429", "complete", 100.0, 100.1),
        ("b", "primary", 200, "", "complete", 102.6, 102.7),     # 2.5 s later: waited
        ("c", "primary", 429, "status:429", "complete", 100.0, 100.1),
        ("c", "standby", 200, "", "complete", 100.2, 100.3),     # another provider: not a retry of it
        ("d", "primary", 200, "", "complete", 100.0, 100.1),
    ])
    client = _client([("a", 200, *OK), ("b", 200, *OK), ("c", 200, *OK),
                      ("d", 200, *OK)])
    f = FS.scenario_figures(client, mock, retry_after_s=2.0)
    assert f["retries_after_429"] == 2 and f["early_retry_share"] == 0.5
    assert f["retry_gap_p50_ms"] == pytest.approx(1500.0)
    # standby answered 1 of the 4 attempts that were not errors
    assert f["standby_share"] == 0.25
    assert math.isnan(FS.scenario_figures(client, mock, math.nan)["early_retry_share"])


def test_a_rate_limited_client_is_told_its_status_and_whether_a_retry_after_came():
    client = _client([("a", 429, "http", "http_4xx", "client", 0.0, math.nan, 5.0, 3.0),
                      ("b", 429, "http", "http_4xx", "client", 0.0, math.nan, 5.0, math.nan),
                      ("c", 503, "http", "http_5xx", "other", 0.0, math.nan, 5.0, 1.0),
                      ("d", 200, *OK)])
    mock = _mock([(r, "primary", 429, "status:429", "complete", 100.0, 100.1) for r in "abcd"])
    f = FS.scenario_figures(client, mock, retry_after_s=3.0)
    assert f["client_statuses"] == "200:1 429:2 503:1"
    assert f["retry_after_passed_share"] == pytest.approx(1 / 3)


def test_each_broken_stream_is_classed_by_what_its_client_got():
    client = _client([
        ("e", 200, "http", "error_event", "client", 30.0, 30.0, 1000.0, math.nan),   # clean error
        ("r", 200, "connection", "reset_during_body", "none", 30.0, 30.0, 1000.0, math.nan),
        ("t", 200, "truncated", "truncated", "none", 45.0, 90.0, 1000.0, math.nan),
        ("h", 200, "timeout", "read_timeout", "none", 30.0, 30.0, 31000.0, math.nan),
        ("d", 200, "", "", "", 120.0, 90.0, 1000.0, math.nan),                    # replayed
        ("w", 200, "", "", "", 90.0, 90.0, 1000.0, math.nan),                     # recovered
        ("x", 502, "http", "http_5xx", "other", 0.0, math.nan, 1000.0, math.nan),
        ("n", 200, *OK),                                                      # not faulted
    ])
    faults = {"e": ("mid_stream_error:event", "fault_error_event"),
              "r": ("mid_stream_error:reset", "fault_reset"), "t": ("stream_cut", "fault_cut"),
              "h": ("stream_cut", "fault_cut"), "d": ("stream_cut", "fault_cut"),
              "w": ("stream_cut", "fault_cut"), "x": ("stream_cut", "fault_cut")}
    mock = _mock([(r, "primary", 200, f, e, 100.0, 100.5) for r, (f, e) in faults.items()]
                 + [("n", "primary", 200, "", "complete", 100.0, 100.5)])
    f = FS.scenario_figures(client, mock, retry_after_s=math.nan)
    assert f["broken_streams"] == 7
    for outcome in ("clean_error", "broken_transport", "silent_truncation", "hang",
                    "duplicated", "recovered", "other_error"):
        assert f[f"{outcome}_share"] == pytest.approx(1 / 7), outcome
    assert f["silent_truncations"] == 1
    # every client ended 1 s after sending (but the hang): 0.5 s after the fault's last byte
    assert f["fault_to_end_p50_ms"] == pytest.approx(500.0)


def test_a_client_answered_before_the_fault_has_no_time_from_it():
    """A system that gave up on the stream (answered 500) before the provider broke it: the
    stream counts, its negative "time from the fault" does not."""
    client = _client([("x", 500, "http", "http_5xx", "other", 0.0, 90.0, 100.0, math.nan),
                      ("y", 200, "http", "error_event", "client", 30.0, 30.0, 1000.0, math.nan)])
    mock = _mock([("x", "primary", 200, "stream_cut", "fault_cut", 100.0, 100.5),
                  ("y", "primary", 200, "stream_cut", "fault_cut", 100.0, 100.5)])
    f = FS.scenario_figures(client, mock, retry_after_s=math.nan)
    assert f["broken_streams"] == 2 and f["other_error_share"] == 0.5
    assert f["fault_to_end_p50_ms"] == pytest.approx(500.0)
    alone = FS.scenario_figures(client[client["request_id"] == "x"], mock, math.nan)
    assert math.isnan(alone["fault_to_end_p50_ms"])


def test_a_provider_that_never_answers_is_timed_at_the_client():
    client = _client([("a", 504, "http", "http_5xx", "client", 0.0, math.nan, 10000.0, math.nan),
                      ("b", 0, "timeout", "read_timeout", "none", math.nan, math.nan, 30000.0,
                       math.nan),
                      ("c", 200, *OK)])
    mock = _mock([("a", "primary", 499, "no_response", "never_answered", 100.0, 100.0),
                  ("b", "primary", 499, "no_response", "never_answered", 100.0, 100.0),
                  ("c", "primary", 200, "", "complete", 100.0, 100.1)])
    f = FS.scenario_figures(client, mock, retry_after_s=math.nan)
    assert f["never_answered_requests"] == 2 and f["answered_share"] == 0.5
    assert f["time_to_answer_p50_ms"] == 10000.0


def test_a_non_retriable_error_is_tried_once_per_request():
    client = _client([("a", 400, "http", "http_4xx", "client", 0.0, math.nan, 5.0, math.nan),
                      ("b", 400, "http", "http_4xx", "client", 0.0, math.nan, 5.0, math.nan)])
    mock = _mock([("a", "primary", 400, "non_retriable", "complete", 100.0, 100.0),
                  ("b", "primary", 400, "non_retriable", "complete", 100.0, 100.0),
                  ("b", "primary", 400, "non_retriable", "complete", 100.2, 100.2),
                  ("b", "primary", 400, "non_retriable", "complete", 100.4, 100.4)])
    f = FS.scenario_figures(client, mock, retry_after_s=math.nan)
    assert f["attempts_per_faulted_request"] == 2.0
    assert f["client_statuses"] == "400:2"
    assert math.isnan(f["standby_share"]) and math.isnan(f["answered_share"])
