"""The broken-stream scenarios for real at tiny scale, against the floor (direct) and Sluice: the
mock really sends its dialect's error event, resets, or ends a stream cleanly without its
terminal event; the load generator really assembles the content and judges the stream; the join
with the mock's log really stores a silent truncation as a failure."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.model.config import from_profile
from harness.run.preflight import preflight
from harness.stats import fault_lane as fstats
from harness.stats.fault_scenarios import STREAM_OUTCOMES

pytestmark = [pytest.mark.integration]


def _study(tmp_path, scenario: str):
    from harness.run.study import run_study
    from harness.stats.loading import load_study
    config = from_profile("smoke", gateways=("direct", "sluice"), out_dir=str(tmp_path),
                          study_id=scenario, fault_scenario=scenario, stream=True, users=20,
                          stream_chunks=6, chunk_delay_ms=5.0, hold_s=5.0, max_hold_s=8.0,
                          fault_start_s=1.0, fault_duration_s=3.0)
    result = run_study(preflight(config), progress=lambda line: None)
    assert result.status == "completed"
    return load_study(result.study_dir)


def _joined(study, run_id: str) -> pd.DataFrame:
    """Each client row with the fault and ending of its request's first attempt at the mock."""
    client = study.requests[study.requests["run_id"] == run_id]
    mock = pd.read_parquet(study.run_dirs[run_id] / "mock_requests.parquet")
    mock = mock[mock["request_id"] != ""].sort_values("body_end_t_unix_ns")
    first = mock.drop_duplicates("request_id")[["request_id", "fault", "ended"]]
    return client.merge(first, on="request_id", how="left")


def _whole_answers_are_not_judged_truncated(rows: pd.DataFrame) -> None:
    ok = rows[(rows["error_kind"] == "") & (rows["fault"].fillna("") == "")]
    assert len(ok) and (ok["content_chars"] == ok["content_chars_sent"]).all()
    assert ok["stream_done"].all()


def test_a_mid_stream_error_is_a_clean_error_or_a_broken_transport(tmp_path):
    study = _study(tmp_path, "mid_stream_error")
    direct = _joined(study, "direct-1")
    _whole_answers_are_not_judged_truncated(direct)
    event = direct[direct["fault"] == "mid_stream_error:event"]
    reset = direct[direct["fault"] == "mid_stream_error:reset"]
    assert len(event) and len(reset)
    # straight from the provider: its error event is the client's clean error, its reset the
    # client's broken transport; the content before it was assembled (3 frames)
    assert set(event["error_class"]) == {"error_event"}
    assert set(event["error_body_dialect"]) == {"client"}
    assert (event["content_chars"] > 0).all()
    assert set(reset["error_class"]) <= {"reset_during_body", "closed_during_body"}
    _, per_run = fstats.fault_summary(study)
    figures = per_run.set_index("system")
    assert figures.loc["direct", "clean_error_share"] + \
        figures.loc["direct", "broken_transport_share"] == pytest.approx(1.0)
    # whatever Sluice does, each broken stream is classed, and the figures add up
    shares = [figures.loc["sluice", f"{o}_share"] for o in STREAM_OUTCOMES]
    assert figures.loc["sluice", "broken_streams"] > 0 and sum(shares) == pytest.approx(1.0)
    assert not math.isnan(figures.loc["sluice", "fault_to_end_p50_ms"])


def test_a_stream_cut_without_its_terminal_event_is_a_truncation_never_a_success(tmp_path):
    study = _study(tmp_path, "stream_cut")
    direct = _joined(study, "direct-1")
    _whole_answers_are_not_judged_truncated(direct)
    cut = direct[direct["fault"] == "stream_cut"]
    # a whole chunked body at HTTP level: only the missing [DONE] and the short content tell
    assert len(cut) and set(cut["error_kind"]) == {"truncated"}
    assert (cut["status_code"] == 200).all() and not cut["stream_done"].any()
    assert (cut["content_chars"] == cut["content_chars_sent"]).all()
    _, per_run = fstats.fault_summary(study)
    figures = per_run.set_index("system")
    assert figures.loc["direct", "silent_truncation_share"] == 1.0
    assert figures.loc["direct", "silent_truncations"] == len(
        cut[cut["request_id"].isin(set(_sent_during(study, "direct-1")))])
    sluice = _joined(study, "sluice-1")
    _whole_answers_are_not_judged_truncated(sluice)
    # a stream Sluice relayed short without an error is counted, never a success: what it
    # passed as a success is whole
    relayed = sluice[sluice["fault"] == "stream_cut"]
    passed = relayed[relayed["error_kind"] == ""]
    assert len(relayed) and passed["stream_done"].all()
    assert (passed["content_chars"] >= passed["content_chars_sent"]).all()


def _sent_during(study, run_id: str) -> list[str]:
    from harness.stats.fault_requests import sent_in
    _, per_run = fstats.fault_summary(study)
    r = per_run.set_index("run_id").loc[run_id]
    client = study.requests[study.requests["run_id"] == run_id]
    return list(sent_in(client, r["fault_start_t_unix_s"], r["fault_end_t_unix_s"])["request_id"])
