"""Per-request identity (harness/run/identity.py) on synthetic client and mock rows."""
import pandas as pd
import pytest

from harness.run.identity import PER_REQUEST_COLUMNS, join_requests
from harness.stats.mock_time import mock_self_time
from mocks.request_log import REQUEST_LOG_COLUMNS

T0_NS = 1_800_000_000_000_000_000
MS = 1_000_000


def _mock_row(rid, body_end_ns, hold_ms=60.0, over_us=100, lag_us=50, write_us=30, frames_ms=0.0,
              status=200, seq=1):
    hold_applied = int(hold_ms * MS) + over_us * 1000
    head = body_end_ns + hold_applied + write_us * 1000
    return {"request_id": rid, "mock_seq": f"9-{seq}", "path": "/v1/chat/completions", "worker_pid": 9,
            "status_code": status, "fault": "", "body_end_t_unix_ns": body_end_ns,
            "hold_set_ns": int(hold_ms * MS), "hold_applied_ns": hold_applied,
            "head_written_t_unix_ns": head, "last_frame_written_t_unix_ns": head + int(frames_ms * MS),
            "bytes_in": 300, "bytes_out": 600, "arrival_lag_ns": lag_us * 1000, "write_ns": write_us * 1000,
            "peer_port": 40000, "content_chars_sent": 90, "frames_sent": 0, "client_closed_t_unix_ns": 0,
            "ended": "complete"}


def _mock(rows):
    df = pd.DataFrame(rows, columns=[c for c, _ in REQUEST_LOG_COLUMNS])
    return df.astype(dict(REQUEST_LOG_COLUMNS))


def _client(rows):
    return pd.DataFrame(rows, columns=["request_id", "latency_ms", "error_kind", "start_t_unix_s"])


def test_clean_run_net_overhead_exact():
    # client latency 61.0 ms; mock service = lag 0.05 + hold 60.1 + write 0.03 = 60.18 ms
    client = _client([(f"r{i}", 61.0, "", 1800.0 + i) for i in range(5)])
    mock = _mock([_mock_row(f"r{i}", T0_NS + i * 10 * MS, seq=i) for i in range(5)])
    per, s = join_requests(client, mock)
    assert list(per.columns) == list(PER_REQUEST_COLUMNS)
    assert list(per["request_id"]) == [f"r{i}" for i in range(5)]
    assert per["mock_service_ms"].tolist() == pytest.approx([60.18] * 5)
    assert per["net_overhead_ms"].tolist() == pytest.approx([0.82] * 5)
    assert per["mock_own_ms"].tolist() == pytest.approx([0.18] * 5)
    assert (per["mock_rows"] == 1).all()
    assert s["matched"] == s["matched_once"] == s["client_ok"] == 5
    assert s["client_without_mock"] == s["mock_without_client"] == s["ids_seen_more_than_once"] == 0
    assert s["amplification"] == 1.0 and s["match_rate"] == 1.0


def test_stream_service_runs_to_the_last_frame():
    client = _client([("s1", 500.0, "", 1800.0)])
    mock = _mock([_mock_row("s1", T0_NS, frames_ms=400.0, lag_us=0, over_us=0, write_us=0)])
    per, _ = join_requests(client, mock)
    assert per.loc[0, "mock_service_ms"] == pytest.approx(460.0)
    assert per.loc[0, "net_overhead_ms"] == pytest.approx(40.0)


def test_retrying_gateway_amplification_and_last_attempt():
    """A gateway that tries each request four times (three retries): every id is seen four
    times, amplification 4, and the net overhead is taken against the last attempt."""
    client = _client([("a", 300.0, "", 1800.0), ("b", 300.0, "", 1800.1)])
    rows = []
    for k, rid in enumerate(("a", "b")):
        for attempt in range(4):
            status = 200 if attempt == 3 else 500
            rows.append(_mock_row(rid, T0_NS + k * MS + attempt * 70 * MS, status=status,
                                  seq=k * 4 + attempt, lag_us=0, over_us=0, write_us=0))
    per, s = join_requests(client, _mock(rows))
    assert s["amplification"] == 4.0
    assert s["ids_seen_more_than_once"] == 2 and s["ids_seen_more_than_once_ids"] == ["a", "b"]
    assert s["matched"] == 2 and s["matched_once"] == 0 and s["match_rate"] == 0.0
    assert (per["mock_rows"] == 4).all() and (per["mock_status_code"] == 200).all()
    assert per["net_overhead_ms"].tolist() == pytest.approx([240.0, 240.0])


def test_unmatched_both_ways_counted_listed_and_capped():
    client = _client([("ok", 61.0, "", 1.0), ("cached", 1.0, "", 2.0), ("failed", 5.0, "timeout", 3.0),
                      ("", 61.0, "", 4.0)] + [(f"lost{i}", 61.0, "", 5.0) for i in range(30)])
    mock = _mock([_mock_row("ok", T0_NS), _mock_row("ghost", T0_NS + MS), _mock_row("", T0_NS + 2 * MS)])
    per, s = join_requests(client, mock, list_cap=5)
    assert s["client_rows"] == 34 and s["client_ok"] == 33 and s["client_without_id"] == 1
    assert s["client_without_mock"] == 31  # "cached" and the 30 lost ones; not the failed one
    assert s["client_without_mock_ids"] == ["cached", "lost0", "lost1", "lost2", "lost3"]
    assert s["mock_without_client"] == 1 and s["mock_without_client_ids"] == ["ghost"]
    assert s["mock_without_id"] == 1 and s["mock_rows"] == 3
    assert s["matched"] == 1 and s["match_rate"] == pytest.approx(1 / 33)
    assert per.loc[per["request_id"] == "cached", "mock_service_ms"].isna().all()
    assert per.loc[per["request_id"] == "", "mock_rows"].tolist() == [0]
    # a failed request the mock never saw is not counted as missing
    assert per.loc[per["request_id"] == "failed", "mock_rows"].tolist() == [0]


def test_empty_inputs():
    per, s = join_requests(_client([]), _mock([]))
    assert per.empty and s["matched"] == 0 and s["amplification"] is None and s["match_rate"] is None


def test_mock_self_time():
    mock = _mock([_mock_row(f"r{i}", T0_NS + i * MS, over_us=100 + i, lag_us=20, write_us=10)
                  for i in range(101)] + [_mock_row("bad", T0_NS, status=400, hold_ms=0)])
    t = mock_self_time(mock)
    assert t["requests"] == 101
    assert t["arrival_lag_ms"]["p50"] == pytest.approx(0.02)
    assert t["hold_over_ms"]["p50"] == pytest.approx(0.15) and t["hold_over_ms"]["max"] == pytest.approx(0.2)
    assert t["write_ms"]["p99"] == pytest.approx(0.01)
    assert t["head_over_ms"]["p50"] == pytest.approx(0.02 + 0.15 + 0.01)
    assert t["hold_applied_ms"]["p50"] == pytest.approx(60.15)
