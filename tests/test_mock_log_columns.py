"""The request log's content and ending columns in process (mocks/request_log.py,
mocks/bodies.py): the content characters the mock counts are the ones a client assembles from
its frames in either dialect, the close time shares the log's wall clock, and a log written by
a mock from before these columns reads with them missing.  On the wire: test_mock_endings.py.
"""
import json

import pytest

from mocks.bodies import Renderer, content_text
from mocks.request_log import ENDED, REQUEST_LOG_COLUMNS, RequestLog, read_request_log


def _contents(frames, anthropic):
    out = []
    for frame in frames:
        data = json.loads(frame.split(b"data: ", 1)[1])
        out.append(data["delta"]["text"] if anthropic else data["choices"][0]["delta"]["content"])
    return out


@pytest.mark.parametrize("tokens, chunks", [(16, 5), (24, 6), (3, 5), (0, 2), (1000, 7)])
def test_content_chars_are_what_a_client_assembles(tokens, chunks):
    r = Renderer()
    chars = r.content_chars(tokens, chunks)
    assert len(chars) == chunks + 1 and chars[0] == 0 and chars[-1] == len(content_text(tokens))
    for anthropic in (False, True):
        if anthropic:
            _, middle, _ = r.anthropic_stream(b"1-1", "m", tokens, chunks, 3)
        else:
            _, middle, _ = r.openai_stream(b"1-1", "m", tokens, chunks, 3, True)
        pieces = _contents(middle, anthropic)
        assert [sum(map(len, pieces[:k])) for k in range(chunks + 1)] == list(chars)
    unary = json.loads(r.openai_unary(b"1-1", "m", tokens, 3))["choices"][0]["message"]["content"]
    assert r.content_chars(tokens, 1)[1] == len(unary)
    assert json.loads(r.anthropic_unary(b"1-1", "m", tokens, 3))["content"][0]["text"] == unary


def test_a_line_carries_what_was_sent_and_how_it_ended(tmp_path):
    log = RequestLog(str(tmp_path), pid=9)
    offset = log._offset_ns
    log.record("a", "9-1", "/p", 200, "", 1_000, 0, 0, 2_000, 3_000, 10, 20, 0, 0, 1, 90, 6, 0, "complete")
    log.record("b", "9-2", "/p", 499, "", 1_000, 0, 0, 2_000, 2_500, 10, 20, 0, 0, 1, 15, 1, 2_700, "client_closed")
    log.close()
    df = read_request_log(str(tmp_path))
    assert list(df.columns) == [c for c, _ in REQUEST_LOG_COLUMNS]
    a, b = df.iloc[0], df.iloc[1]
    assert (a.content_chars_sent, a.frames_sent, a.client_closed_t_unix_ns, a.ended) == (90, 6, 0, "complete")
    assert (b.content_chars_sent, b.frames_sent, b.ended) == (15, 1, "client_closed")
    # the close time is on the log's wall clock: durations between logged times are monotonic ones
    assert b.client_closed_t_unix_ns == 2_700 + offset
    assert b.client_closed_t_unix_ns - b.last_frame_written_t_unix_ns == 200
    assert set(ENDED) == {"complete", "client_closed", "fault_reset", "fault_closed", "fault_cut",
                          "fault_error_event", "never_answered", "mock_closed"}


def test_a_log_from_before_the_columns_reads_them_as_missing(tmp_path):
    old = [c for c, _ in REQUEST_LOG_COLUMNS][:16]  # the columns a mock before 1.3 wrote
    (tmp_path / "requests-5.csv").write_text(
        ",".join(old) + "\n" + "r1,5-1,/v1/chat/completions,5,200,,100,0,0,200,300,10,20,0,0,4000\n")
    new = RequestLog(str(tmp_path), pid=6)  # and a current worker's beside it
    new.record("r2", "6-1", "/v1/chat/completions", 200, "", 150, 0, 0, 250, 350, 10, 20, 0, 0, 4001, 90, 0, 0,
               "complete")
    new.close()
    df = read_request_log(str(tmp_path))
    assert list(df.columns) == [c for c, _ in REQUEST_LOG_COLUMNS]
    by_id = df.set_index("request_id")
    for name in ("content_chars_sent", "frames_sent", "client_closed_t_unix_ns", "ended"):
        assert by_id.loc["r1", name] is None, name  # missing, never 0 or "complete"
    assert by_id.loc["r2", "content_chars_sent"] == 90 and by_id.loc["r2", "ended"] == "complete"
    assert by_id.loc["r1", "status_code"] == 200
