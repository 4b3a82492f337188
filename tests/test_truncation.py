"""The ``truncated`` verdict on synthetic rows: a 200 without its stream's terminal event, or
with less content than the provider sent on the attempt that answered, is a failure; the
content a client assembles is counted in the provider's unit; an attempt that ended without a
whole answer is a failed attempt, whatever its status."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from harness.model import dialects as D
from harness.model.truncation import Answering, answering, truncated
from harness.run.consolidate import judge_truncations
from harness.stats.fault_requests import attempt_failed


def _client(**cols):
    n = len(next(iter(cols.values())))
    base = {"request_id": [f"r{i}" for i in range(n)], "mock_request_id": [""] * n,
            "status_code": [200] * n, "error_kind": [""] * n, "error_class": [""] * n,
            "error": [""] * n, "error_body_dialect": [""] * n, "stream_done": [True] * n,
            "content_chars": [90.0] * n}
    return pd.DataFrame({**base, **cols})


def _mock(rows):
    """rows: (request_id, mock_seq, status, content_chars_sent, body_end_ns)"""
    return pd.DataFrame(rows, columns=["request_id", "mock_seq", "status_code",
                                       "content_chars_sent", "body_end_t_unix_ns"])


def _whole(sent_chars) -> Answering:
    """Answering attempts that sent ``sent_chars`` and ended whole."""
    return Answering(np.array(sent_chars, dtype="float64"), np.zeros(len(sent_chars), dtype=bool))


def test_the_answering_attempt_is_the_echoed_one_else_the_last_good_one():
    mock = _mock([("r0", "1-1", 200, 30, 1), ("r0", "1-2", 200, 90, 2),      # last good: 90
                  ("r1", "1-3", 200, 90, 3), ("r1", "1-4", 503, 0, 4),       # error after: 90
                  ("r2", "1-5", 200, 30, 5), ("r2", "1-6", 200, 90, 6)])     # echoed 1-5: 30
    client = _client(request_id=["r0", "r1", "r2", "r3"],
                     mock_request_id=["", "", "1-5", ""])
    sent = answering(client, mock).sent_chars
    assert sent[:3].tolist() == [90.0, 90.0, 30.0] and math.isnan(sent[3])


def test_a_short_or_endless_200_is_truncated_and_nothing_else_is():
    client = _client(content_chars=[90.0, 45.0, 90.0, 120.0, 45.0, math.nan],
                     stream_done=[True, True, False, True, True, True],
                     status_code=[200, 200, 200, 200, 502, 200],
                     error_kind=["", "", "", "", "http", ""])
    sent = _whole([90.0, 90.0, 90.0, 90.0, 90.0, math.nan])
    # whole; short; no terminal event; more than sent (duplicated, not truncated); a failure
    # already; nothing to compare with
    assert truncated(client, sent, stream=True).tolist() == [False, True, True, False, False, False]
    # a unary answer has no terminal event to miss
    assert truncated(client, sent, stream=False).tolist() == [False, True, False, False, False, False]


def test_a_truncation_is_stored_as_a_failure_of_kind_truncated():
    client = _client(content_chars=[90.0, 45.0, 90.0], stream_done=[True, True, False])
    judged = judge_truncations(client, _whole([90.0, 90.0, 90.0]), stream=True)
    assert judged["error_kind"].tolist() == ["", "truncated", "truncated"]
    assert judged["error_class"].tolist() == ["", "truncated", "truncated"]
    assert "less content" in judged["error"][1] and "terminal event" in judged["error"][2]
    assert client["error_kind"].tolist() == ["", "", ""]    # the raw rows are left as they were


def test_a_broken_stream_closed_as_whole_is_truncated():
    """The provider cut r0's stream after 54 characters and the system ended it with its own
    terminal event: the client got all the provider sent, and still less than an answer. r1's
    cut attempt was retried and the retry answered whole; r2's cut reached the client as an
    error."""
    mock = _mock([("r0", "1-1", 200, 54, 1), ("r1", "1-2", 200, 54, 2),
                  ("r1", "1-3", 200, 90, 3), ("r2", "1-4", 200, 54, 4)])
    mock["ended"] = ["fault_cut", "fault_cut", "complete", "fault_cut"]
    client = _client(request_id=["r0", "r1", "r2"], content_chars=[54.0, 90.0, 54.0],
                     error_kind=["", "", "http"])
    answer = answering(client, mock)
    assert answer.broken.tolist() == [True, False, True]
    assert truncated(client, answer, stream=True).tolist() == [True, False, False]
    judged = judge_truncations(client, answer, stream=True)
    assert judged["error"][0] == "a 200 from an answer the provider broke off"


def _openai_frame(text):
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}).encode()


def test_content_is_counted_in_characters_as_the_provider_counts_it():
    assert D.frame_content_chars("openai", _openai_frame("héllo ")) == 6
    anthropic = b'data: ' + json.dumps({"type": "content_block_delta", "index": 0,
                                         "delta": {"type": "text_delta", "text": "abc"}}).encode()
    assert D.frame_content_chars("anthropic", anthropic) == 3
    assert D.frame_content_chars("openai", b"data: [DONE]") == 0
    assert D.unary_content_chars("openai", json.dumps(
        {"choices": [{"message": {"content": "four"}}]}).encode()) == 4
    assert D.unary_content_chars("anthropic", json.dumps(
        {"content": [{"type": "text", "text": "five!"}, {"type": "tool_use"}]}).encode()) == 5
    assert D.unary_content_chars("openai", b"{not json") == 0


def test_each_dialects_error_event_is_recognised_and_only_it():
    openai_error = b'data: {"error": {"message": "overloaded", "type": "server_error"}}'
    anthropic_error = (b'data: {"type": "error", "error": {"type": "overloaded_error", '
                       b'"message": "Overloaded"}}')
    assert D.is_error_event("openai", openai_error)
    assert D.is_error_event("anthropic", anthropic_error)
    assert not D.is_error_event("openai", anthropic_error)
    assert not D.is_error_event("openai", _openai_frame("x"))


def test_an_attempt_that_ended_without_a_whole_answer_failed_whatever_its_status():
    endings = ["complete", "fault_reset", "fault_cut", "fault_error_event", "never_answered",
               "fault_closed", "mock_closed", "client_closed", "complete", ""]
    mock = pd.DataFrame({"status_code": [200, 200, 200, 200, 499, 200, 200, 200, 429, 200],
                         "fault": ["", "mid_stream_error:reset", "stream_cut",
                                   "mid_stream_error:event", "no_response", "stall", "", "",
                                   "status:429", "reset"],
                         "ended": endings})
    assert attempt_failed(mock).tolist() == [False, True, True, True, True, True, True, False,
                                             True, True]   # "": an older log, read by its fault
    older = mock.drop(columns="ended")
    # before the column: the injected faults known to cut an answer (reset, stall, malformed)
    assert attempt_failed(older).tolist() == [False, False, False, False, True, True, False,
                                              False, True, True]


def test_a_retry_after_header_is_kept_in_seconds():
    import email.utils
    import time

    from harness.run.loadgen.rows import retry_after_s
    assert retry_after_s("3") == 3.0 and retry_after_s(None) == "" and retry_after_s("soon") == ""
    in_ten = email.utils.formatdate(time.time() + 10, usegmt=True)
    assert 0.0 < retry_after_s(in_ten) <= 10.0   # seconds until that date, never negative
