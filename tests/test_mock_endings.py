"""What the mock sent and how each response ended, on the wire: the request log's
content_chars_sent, frames_sent, client_closed_t_unix_ns and ended against what a client
really received; a client closing between frames, noticed at once; and the stream and
answer faults (mid_stream_error, stream_cut, no_response, non_retriable) read by the official
openai and anthropic SDKs where a client would read them.

Every test starts the real mock on a free 127.0.0.1 port (one shared mock for most).
"""
import json
import socket
import time

import anthropic
import openai
import pytest
from mock_helpers import (
    ANTHROPIC,
    OPENAI,
    Mock,
    call,
    raw_request,
    split_head,
    sse_events,
    stream,
    wait_logged,
)
from polling import wait_for

from mocks.faults import BLOCK, FaultPlan, parse_schedule
from mocks.request_log import ENDED, read_request_log
from mocks.stats import read_stats

pytestmark = [pytest.mark.timeout(90), pytest.mark.integration]

CHUNKS, DELAY_MS, LATENCY_MS, TOKENS = 6, 30, 20, 24


@pytest.fixture(scope="module")
def mock(tmp_path_factory):
    m = Mock(tmp_path_factory.mktemp("endings"), "--latency-ms", str(LATENCY_MS), "--stream-chunks", str(CHUNKS),
             "--chunk-delay-ms", str(DELAY_MS), "--response-tokens", str(TOKENS))
    yield m
    assert m.stop() == 0


def _body(rid, stream=False, path=OPENAI):
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": f"Hello there. [rid:{rid}]"}]}
    if path == ANTHROPIC:
        body["max_tokens"] = TOKENS
    if stream:
        body["stream"] = True
    return body


def _assembled(path, lines):
    """The content a client assembles from a stream's SSE lines, and its content frames."""
    pieces = []
    for _, event, data in sse_events(lines):
        if data == "[DONE]":
            continue
        obj = json.loads(data)
        if path == OPENAI and obj.get("choices") and "content" in obj["choices"][0]["delta"]:
            if obj["choices"][0]["delta"].get("role") is None:
                pieces.append(obj["choices"][0]["delta"]["content"])
        elif event == "content_block_delta":
            pieces.append(obj["delta"]["text"])
    return "".join(pieces), len(pieces)


def _sse_body(raw_body):
    """The SSE text of a chunked body (its chunk-size lines dropped)."""
    out, rest = b"", raw_body
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out, rest = out + rest[:size], rest[size + 2:]
    return out


# ----------------------------------------------------------------------------- whole answers

@pytest.mark.parametrize("path", [OPENAI, ANTHROPIC])
def test_a_whole_answer_logs_the_content_a_client_assembles(mock, path):
    c = mock.client()
    try:
        rid_u, rid_s = f"whole-u{path[4]}", f"whole-s{path[4]}"
        status, _, raw, _ = call(c, "POST", path, _body(rid_u, path=path))
        d = json.loads(raw)
        text = d["choices"][0]["message"]["content"] if path == OPENAI else d["content"][0]["text"]
        assert status == 200 and text
        status, _, lines = stream(c, path, _body(rid_s, stream=True, path=path))
        streamed, frames = _assembled(path, lines)
        assert status == 200 and streamed == text and frames == CHUNKS
    finally:
        c.close()
    rows = wait_logged(mock.stats_dir, [rid_u, rid_s])
    u, s = rows[rid_u], rows[rid_s]
    assert (u.content_chars_sent, u.frames_sent, u.client_closed_t_unix_ns, u.ended) == (len(text), 0, 0, "complete")
    assert (s.content_chars_sent, s.frames_sent, s.client_closed_t_unix_ns, s.ended) == (len(text), CHUNKS, 0, "complete")
    assert set(read_request_log(mock.stats_dir)["ended"]) <= set(ENDED)


# ----------------------------------------------------------------------------- clients who leave

def _open_stream(port, path, rid, headers=b""):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    data = json.dumps(_body(rid, stream=True, path=path)).encode()
    s.sendall(b"POST %s HTTP/1.1\r\nHost: m\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s"
              % (path.encode(), headers, len(data), data))
    return s


def _read_until(s, done):
    """Bytes from ``s`` until ``done(bytes so far)``."""
    got = b""
    while not done(got):
        chunk = s.recv(65536)
        assert chunk, got
        got += chunk
    return got


def test_a_client_closing_before_the_next_frame_is_noticed_at_once(mock):
    """Frames 4 s apart: the client reads the opening frame and leaves; the mock logs its close
    when it came, long before the next frame was due, and writes nothing more."""
    _leaves_before_the_next_frame(mock, "leaves-early")


def test_the_loop_timer_notices_a_client_closing_between_frames_too(tmp_path):
    m = Mock(tmp_path, "--latency-ms", "0", "--timer", "loop")
    try:
        _leaves_before_the_next_frame(m, "leaves-early-loop-timer")
    finally:
        assert m.stop() == 0


def _leaves_before_the_next_frame(mock, rid):
    s = _open_stream(mock.port, OPENAI, rid, b"x-mock-chunk-delay-ms: 4000\r\nx-mock-chunks: 3\r\n")
    got = _read_until(s, lambda got: b"data: " in got and got.endswith(b"\n\n\r\n"))  # the opening frame
    t_close_ns = time.time_ns()
    s.close()
    r = wait_logged(mock.stats_dir, [rid], timeout_s=3.0)[rid]
    assert (r.status_code, r.ended, r.frames_sent, r.content_chars_sent) == (499, "client_closed", 0, 0)
    assert r.client_closed_t_unix_ns >= t_close_ns - 5_000_000          # when the close came ...
    assert r.client_closed_t_unix_ns < r.head_written_t_unix_ns + 4_000_000_000  # ... not at the next frame
    assert r.last_frame_written_t_unix_ns <= r.client_closed_t_unix_ns
    assert r.bytes_out == len(got)  # only what the client had read went out


def test_frames_sent_before_the_client_left_are_counted(mock):
    """Frames 1 s apart: the client reads one content frame, then leaves."""
    s = _open_stream(mock.port, ANTHROPIC, "leaves-after-one", b"x-mock-chunk-delay-ms: 1000\r\nx-mock-chunks: 4\r\n")
    got = _read_until(s, lambda got: b"event: content_block_delta" in got and got.endswith(b"\n\n\r\n"))
    s.close()
    r = wait_logged(mock.stats_dir, ["leaves-after-one"], timeout_s=3.0)["leaves-after-one"]
    text = json.loads(_sse_body(split_head(got)[2]).split(b"event: content_block_delta\ndata: ")[1].split(b"\n")[0])
    assert (r.status_code, r.ended, r.frames_sent) == (499, "client_closed", 1)
    assert r.content_chars_sent == len(text["delta"]["text"]) > 0
    assert r.client_closed_t_unix_ns < r.head_written_t_unix_ns + 2_000_000_000  # before frame 2 was due


def test_a_client_leaving_during_the_hold_is_logged_with_its_close_time(mock):
    s = socket.create_connection(("127.0.0.1", mock.port), timeout=10)
    data = json.dumps(_body("leaves-in-hold")).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: m\r\nx-mock-latency-ms: 1500\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
    time.sleep(0.2)
    s.close()
    r = wait_logged(mock.stats_dir, ["leaves-in-hold"])["leaves-in-hold"]
    assert (r.status_code, r.ended, r.content_chars_sent) == (499, "client_closed", 0)
    assert r.body_end_t_unix_ns < r.client_closed_t_unix_ns < r.body_end_t_unix_ns + 1_500_000_000


def test_a_stream_the_mock_closes_itself_is_not_a_client_leaving(tmp_path):
    """A down window closes every connection: the open stream ends mock_closed, with no client
    close time (the client did not leave)."""
    arm = tmp_path / "arm.json"
    m = Mock(tmp_path / "stats", "--latency-ms", "0", "--faults", '[{"kind": "down", "start_s": 0, "duration_s": 1}]',
             "--fault-arm-file", str(arm))
    try:
        s = _open_stream(m.port, OPENAI, "cut-by-down", b"x-mock-chunk-delay-ms: 3000\r\nx-mock-chunks: 3\r\n")
        got = _read_until(s, lambda got: b"data: " in got and got.endswith(b"\n\n\r\n"))
        (tmp_path / "arm.tmp").write_text(json.dumps({"epoch_unix_s": time.time()}))
        (tmp_path / "arm.tmp").replace(arm)  # the window opens now, before the next frame is due
        s.settimeout(5)
        while s.recv(65536):  # until the mock closes it, at the window's start
            pass
        s.close()
        r = wait_logged(m.stats_dir, ["cut-by-down"])["cut-by-down"]
    finally:
        assert m.stop() == 0
    assert got and (r.ended, r.client_closed_t_unix_ns, r.frames_sent) == ("mock_closed", 0, 0)


# ----------------------------------------------------------------------------- mid_stream_error

def test_mid_stream_error_event_is_an_apierror_in_the_openai_sdk(mock):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{mock.port}/v1", api_key="k", max_retries=0)
    got = []
    with pytest.raises(openai.APIError) as info:
        for chunk in client.chat.completions.create(
                model="gpt-test", messages=_body("mse-openai")["messages"], stream=True,
                extra_headers={"x-mock-fault": "mid_stream_error;after_frames=3"}):
            got.append(chunk.choices[0].delta.content or "")
    assert info.value.body["type"] == "server_error" and info.value.message
    r = wait_logged(mock.stats_dir, ["mse-openai"])["mse-openai"]
    assert (r.fault, r.status_code, r.ended, r.frames_sent) == ("mid_stream_error:event", 200, "fault_error_event", 3)
    assert r.content_chars_sent == len("".join(got)) > 0 and r.client_closed_t_unix_ns == 0


def test_mid_stream_error_event_is_an_error_in_the_anthropic_sdk(mock):
    client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{mock.port}", api_key="k", max_retries=0)
    got = []
    with pytest.raises(anthropic.APIStatusError) as info:
        for event in client.messages.create(
                model="gpt-test", max_tokens=TOKENS, messages=_body("mse-anthropic")["messages"], stream=True,
                extra_headers={"x-mock-fault": "mid_stream_error;after_frames=2;status=529"}):
            if event.type == "content_block_delta":
                got.append(event.delta.text)
    assert info.value.body == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    r = wait_logged(mock.stats_dir, ["mse-anthropic"])["mse-anthropic"]
    assert (r.fault, r.ended, r.frames_sent, r.content_chars_sent) == (
        "mid_stream_error:event", "fault_error_event", 2, len("".join(got)))


def test_mid_stream_error_reset_cuts_the_stream_with_an_rst(mock):
    raw, end, _, _ = raw_request(mock.port, OPENAI, _body("mse-reset", stream=True),
                                 b"x-mock-fault: mid_stream_error;after_frames=3;mode=reset\r\n")
    status, _, body = split_head(raw)
    assert end == "reset" and status == 200
    assert body.count(b"data: ") == 4 and b"[DONE]" not in body and b'"error"' not in body
    r = wait_logged(mock.stats_dir, ["mse-reset"])["mse-reset"]
    assert (r.fault, r.ended, r.frames_sent) == ("mid_stream_error:reset", "fault_reset", 3)


def test_a_split_schedule_gives_each_stream_one_ending_as_the_seeded_plan_says(tmp_path):
    schedule = [{"kind": "mid_stream_error", "after_frames": 1, "mode": "split"}]
    m = Mock(tmp_path, "--latency-ms", "0", "--chunk-delay-ms", "0", "--stream-chunks", "3",
             "--faults", json.dumps(schedule), "--fault-seed", "5")
    n = 40
    try:
        ends = [raw_request(m.port, OPENAI, _body(f"sp{i}", stream=True), b"Connection: close\r\n")[1]
                for i in range(n)]
        rows = wait_logged(m.stats_dir, [f"sp{i}" for i in range(n)])
    finally:
        assert m.stop() == 0
    (fault,) = parse_schedule(json.dumps(schedule))
    FaultPlan([fault], 5, 0.0, 0.0, 0)
    expected = ["reset" if fault.resets() else "event" for _ in range(n)]
    assert [rows[f"sp{i}"].fault for i in range(n)] == [f"mid_stream_error:{e}" for e in expected]
    assert [rows[f"sp{i}"].ended for i in range(n)] == [
        "fault_reset" if e == "reset" else "fault_error_event" for e in expected]
    assert ends == ["reset" if e == "reset" else "eof" for e in expected]
    assert 0 < expected.count("reset") < n and BLOCK == 100  # a half of each 100: both kinds in 40


# ----------------------------------------------------------------------------- stream_cut

@pytest.mark.parametrize("path, terminal", [(OPENAI, "[DONE]"), (ANTHROPIC, "message_stop")])
def test_stream_cut_is_a_whole_http_body_without_the_terminal_event(mock, path, terminal):
    rid = f"cut-{path[4]}"
    c = mock.client()
    try:
        status, hdrs, lines = stream(c, path, _body(rid, stream=True, path=path), {"x-mock-fault": "stream_cut"})
        text, frames = _assembled(path, lines)
        # the chunked body ended cleanly: the same connection serves the next request
        assert call(c, "POST", path, _body(rid + "-next", path=path))[0] == 200
    finally:
        c.close()
    assert status == 200 and hdrs["Content-Type"].startswith("text/event-stream")
    assert frames == CHUNKS // 2 and not any(terminal in line for _, line in lines)
    r = wait_logged(mock.stats_dir, [rid])[rid]
    assert (r.fault, r.status_code, r.ended, r.frames_sent, r.content_chars_sent) == (
        "stream_cut", 200, "fault_cut", CHUNKS // 2, len(text))


def test_the_openai_sdk_takes_a_cut_stream_as_a_short_success(mock):
    """What makes it a silent truncation: the official client raises nothing."""
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{mock.port}/v1", api_key="k", max_retries=0)
    got = [chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(
        model="gpt-test", messages=_body("cut-sdk")["messages"], stream=True,
        extra_headers={"x-mock-fault": "stream_cut;after_frames=2"})]
    r = wait_logged(mock.stats_dir, ["cut-sdk"])["cut-sdk"]
    assert r.content_chars_sent == len("".join(got)) > 0 and r.frames_sent == 2


def test_a_stream_only_fault_leaves_a_unary_request_alone(mock):
    c = mock.client()
    try:
        status, _, raw, _ = call(c, "POST", OPENAI, _body("unary-cut"), {"x-mock-fault": "stream_cut"})
    finally:
        c.close()
    assert status == 200 and json.loads(raw)["object"] == "chat.completion"
    r = wait_logged(mock.stats_dir, ["unary-cut"])["unary-cut"]
    assert (r.fault, r.ended, r.content_chars_sent > 0) == ("", "complete", True)


# ----------------------------------------------------------------------------- no_response

def test_no_response_never_answers_until_the_client_leaves(mock):
    s = socket.create_connection(("127.0.0.1", mock.port), timeout=10)
    data = json.dumps(_body("silent")).encode()
    t_send_ns = time.time_ns()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: m\r\nx-mock-fault: no_response\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
    s.settimeout(1.0)
    with pytest.raises(TimeoutError):  # not a byte, well past the mock's 20 ms hold
        s.recv(65536)
    t_close_ns = time.time_ns()
    s.close()
    r = wait_logged(mock.stats_dir, ["silent"])["silent"]
    assert (r.fault, r.status_code, r.ended, r.bytes_out, r.content_chars_sent) == (
        "no_response", 499, "never_answered", 0, 0)
    assert t_send_ns - 5_000_000 <= r.body_end_t_unix_ns and r.client_closed_t_unix_ns >= t_close_ns - 5_000_000
    assert r.head_written_t_unix_ns == r.last_frame_written_t_unix_ns == r.body_end_t_unix_ns  # nothing written


def test_no_response_is_bounded_by_the_mocks_shutdown(tmp_path):
    m = Mock(tmp_path, "--latency-ms", "0", "--shutdown-grace-s", "0.5",
             "--faults", '[{"kind": "no_response", "share": 1.0}]')
    s = socket.create_connection(("127.0.0.1", m.port), timeout=10)
    try:
        data = json.dumps(_body("held-at-stop", stream=True)).encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: m\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data))
        assert wait_for(lambda: read_stats(m.stats_dir)["faults"].get("no_response") == 1, 10.0)  # read, held
        assert m.stop(timeout_s=15) == 0  # the held request does not keep the mock up
        s.settimeout(5)
        assert s.recv(65536) == b""  # closed without an answer
    finally:
        s.close()
    r = {row.request_id: row for row in read_request_log(m.stats_dir).itertuples()}["held-at-stop"]
    assert (r.fault, r.status_code, r.ended, r.client_closed_t_unix_ns, r.bytes_out) == (
        "no_response", 499, "never_answered", 0, 0)


# ----------------------------------------------------------------------------- non_retriable

def test_non_retriable_is_each_sdks_bad_request_with_the_context_length_error(mock):
    oa = openai.OpenAI(base_url=f"http://127.0.0.1:{mock.port}/v1", api_key="k", max_retries=0)
    for rid, stream_ in (("nr-o", False), ("nr-os", True)):
        with pytest.raises(openai.BadRequestError) as info:
            oa.chat.completions.create(model="gpt-test", messages=_body(rid)["messages"], stream=stream_,
                                       extra_headers={"x-mock-fault": "non_retriable"})
        assert info.value.status_code == 400 and info.value.code == "context_length_exceeded"
        assert info.value.param == "messages" and info.value.type == "invalid_request_error"
    an = anthropic.Anthropic(base_url=f"http://127.0.0.1:{mock.port}", api_key="k", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as info:
        an.messages.create(model="gpt-test", max_tokens=TOKENS, messages=_body("nr-a")["messages"],
                           extra_headers={"x-mock-fault": "non_retriable"})
    assert info.value.body["error"]["type"] == "invalid_request_error"
    assert info.value.body["error"]["message"].startswith("prompt is too long")
    rows = wait_logged(mock.stats_dir, ["nr-o", "nr-os", "nr-a"])
    for rid in ("nr-o", "nr-os", "nr-a"):
        r = rows[rid]
        assert (r.fault, r.status_code, r.ended, r.content_chars_sent, r.frames_sent) == (
            "non_retriable", 400, "complete", 0, 0)
