"""The mock's provider faults (mocks/faults.py) before any traffic: the schedule and its
validation (in process and on the command line), the x-mock-fault header, the seeded plan's
exact shares and windows, mid_stream_error's seeded split, the providers' error bodies and
events, and the fault figures merged across workers.  What each fault does on the wire: test_mock_faults.py.
"""
import json

import pytest

from mocks.faults import (
    BLOCK,
    OVERLOADED_STATUS,
    FaultError,
    FaultPlan,
    anthropic_context_length_body,
    anthropic_error_body,
    anthropic_error_event,
    broken_frame,
    openai_context_length_body,
    openai_error_body,
    openai_error_event,
    parse_header,
    parse_schedule,
)
from mocks.stats import diff_stats, merge_worker_snapshots

pytestmark = pytest.mark.timeout(60)


# ----------------------------------------------------------------------------- schedule and header

@pytest.mark.parametrize("spec, key", [
    ('[{"kind": "status", "status": 500, "share": 1.5}]', "faults[0].share"),
    ('[{"kind": "status"}]', "faults[0].status"),
    ('[{"kind": "status", "status": 200}]', "faults[0].status"),
    ('[{"kind": "slow", "hold_ms": 5, "retry_after_s": 1}]', "faults[0].retry_after_s"),
    ('[{"kind": "reset"}, {"kind": "explode"}]', "faults[1].kind"),
    ('[{"kind": "down", "duration_s": 1, "share": 0.5}]', "faults[0].share"),
    ('[{"kind": "down", "start_s": 1}]', "faults[0].duration_s"),
    ('[{"kind": "down", "duration_s": 5}, {"kind": "down", "start_s": 2, "duration_s": 1}]',
     "faults[1].start_s"),
    ('[{"kind": "stall", "after_frames": 1.5}]', "faults[0].after_frames"),
    ('[{"kind": "slow", "hold_ms": "2000"}]', "faults[0].hold_ms"),
    ('[{"kind": "reset", "duration_s": 0}]', "faults[0].duration_s"),
    ('[{"kind": "mid_stream_error", "mode": "half"}]', "faults[0].mode"),
    ('[{"kind": "mid_stream_error", "mode": 1}]', "faults[0].mode"),
    ('[{"kind": "mid_stream_error", "status": 200}]', "faults[0].status"),
    ('[{"kind": "stream_cut", "mode": "reset"}]', "faults[0].mode"),
    ('[{"kind": "no_response", "hold_ms": 5}]', "faults[0].hold_ms"),
    ('[{"kind": "non_retriable", "status": 413}]', "faults[0].status"),
    ('{"kind": "reset"}', "faults:"),
    ('[{"kind": "reset"', "faults:"),
])
def test_schedule_errors_name_the_key(spec, key):
    with pytest.raises(FaultError) as e:
        parse_schedule(spec)
    assert str(e.value).startswith(key) and "\n" not in str(e.value)


def test_header_syntax():
    f = parse_header("status=429")
    assert (f.kind, f.status, f.retry_after_s, f.label) == ("status", 429, 1, "status:429")
    f = parse_header("status=503; retry_after_s=3; hold_ms=5")
    assert (f.status, f.retry_after_s, f.hold_ns) == (503, 3, 5_000_000)
    assert parse_header("status=500").retry_after_s is None
    assert parse_header("slow=2000").hold_ns == 2_000_000_000
    f = parse_header("stall;after_frames=2;stall_s=1.5")
    assert (f.kind, f.after_frames, f.stall_s) == ("stall", 2, 1.5)
    assert parse_header("reset").after_bytes is None and parse_header("malformed").kind == "malformed"
    for bad in ("down", "status", "status=abc", "reset=5", "reset;share=0.5", "slow=-1", "stall;foo=1",
                "malformed;after_bytes=3", ""):
        with pytest.raises(FaultError):
            parse_header(bad)


def test_overloaded_kind_takes_only_a_hold():
    f = parse_header("overloaded")
    assert (f.kind, f.label, f.hold_ns, f.retry_after_s) == ("overloaded", "overloaded", 0, None)
    assert parse_header("overloaded;hold_ms=5").hold_ns == 5_000_000
    for bad in ("overloaded=503", "overloaded;status=503", "overloaded;retry_after_s=1"):
        with pytest.raises(FaultError):
            parse_header(bad)
    (f,) = parse_schedule('[{"kind": "overloaded", "share": 0.5, "start_s": 1, "duration_s": 3}]')
    assert f.record() == {"kind": "overloaded", "start_s": 1.0, "duration_s": 3.0, "share": 0.5,
                          "hold_ms": 0.0}
    with pytest.raises(FaultError, match=r"faults\[0\]\.status: unknown key"):
        parse_schedule('[{"kind": "overloaded", "status": 529}]')
    assert OVERLOADED_STATUS == {"openai": 503, "anthropic": 529}


def test_the_stream_and_answer_kinds_and_their_keys():
    f = parse_header("mid_stream_error;after_frames=3;mode=reset")
    assert (f.kind, f.after_frames, f.mode, f.status, f.label) == ("mid_stream_error", 3, "reset", None,
                                                                   "mid_stream_error")
    assert parse_header("mid_stream_error").mode == "event" and parse_header("mid_stream_error;status=429").status == 429
    assert parse_header("stream_cut;after_frames=1").after_frames == 1
    assert parse_header("no_response").label == "no_response"
    assert parse_header("non_retriable;hold_ms=5").hold_ns == 5_000_000
    for bad in ("mid_stream_error;mode=both", "mid_stream_error=3", "stream_cut;after_bytes=2",
                "no_response;after_frames=1", "non_retriable;retry_after_s=1"):
        with pytest.raises(FaultError):
            parse_header(bad)
    (m, c, n, r) = parse_schedule(json.dumps([
        {"kind": "mid_stream_error", "after_frames": 3, "mode": "split", "share": 0.2},
        {"kind": "stream_cut", "share": 0.2}, {"kind": "no_response", "duration_s": 10},
        {"kind": "non_retriable"}]))
    assert m.record() == {"kind": "mid_stream_error", "start_s": 0.0, "duration_s": None, "share": 0.2,
                          "after_frames": 3, "mode": "split"}
    assert c.record() == {"kind": "stream_cut", "start_s": 0.0, "duration_s": None, "share": 0.2}
    assert n.record() == {"kind": "no_response", "start_s": 0.0, "duration_s": 10.0, "share": 1.0}
    assert r.record()["hold_ms"] == 0.0 and r.retry_after_s is None


def test_split_mode_is_an_exact_seeded_half():
    def modes(seed, mode="split", n=4 * BLOCK):
        (f,) = parse_schedule(json.dumps([{"kind": "mid_stream_error", "mode": mode}]))
        FaultPlan([f], seed, 0.0, 0.0, 0)
        return [f.resets() for _ in range(n)]
    got = modes(3)
    for b in range(4):
        assert sum(got[b * BLOCK:(b + 1) * BLOCK]) == BLOCK // 2  # exact in every 100
    assert got == modes(3) and got != modes(4)
    assert not any(modes(3, "event", 50)) and all(modes(3, "reset", 50))


def test_stream_error_events_and_context_length_bodies_are_the_providers_shapes():
    frame = openai_error_event(500)
    assert frame.startswith(b"data: {") and frame.endswith(b"\n\n") and b"event:" not in frame
    e = json.loads(frame[6:])["error"]  # what the openai SDK raises APIError for
    assert set(e) == {"message", "type", "param", "code"} and e["type"] == "server_error" and e["message"]
    assert json.loads(openai_error_event(429)[6:])["error"]["code"] == "rate_limit_exceeded"
    event = anthropic_error_event(529)
    name, data = event.split(b"\n", 1)
    assert name == b"event: error" and data.startswith(b"data: ") and event.endswith(b"\n\n")
    assert json.loads(data[6:]) == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert json.loads(anthropic_error_event(429).split(b"data: ")[1])["error"]["type"] == "rate_limit_error"
    e = json.loads(openai_context_length_body())["error"]
    assert (e["type"], e["param"], e["code"]) == ("invalid_request_error", "messages", "context_length_exceeded")
    assert "maximum context length" in e["message"]
    a = json.loads(anthropic_context_length_body("1-2"))
    assert a["type"] == "error" and a["request_id"] == "req_1-2"
    assert a["error"]["type"] == "invalid_request_error" and a["error"]["message"].startswith("prompt is too long")


def _picked(plan, n):
    return [i for i in range(n) if plan.pick(0) is not None]


@pytest.mark.parametrize("share", [0.05, 0.2, 0.3, 0.29, 0.333, 1.0, 0.0])
def test_share_is_exact_per_block_and_reproducible(share):
    def plan(seed):
        return FaultPlan(parse_schedule(json.dumps([{"kind": "reset", "share": share}])), seed, 0.0, 0.0, 0)
    picked = _picked(plan(7), 10 * BLOCK)
    for b in range(10):
        in_block = sum(b * BLOCK <= i < (b + 1) * BLOCK for i in picked)
        assert abs(in_block - share * BLOCK) < 1  # floor steps: exact to the request
    assert abs(len(picked) - share * 10 * BLOCK) < 1
    assert picked == _picked(plan(7), 10 * BLOCK)
    if 0 < share < 1:
        assert picked != _picked(plan(8), 10 * BLOCK)


def test_specs_tried_in_order_and_windowed():
    faults = parse_schedule(json.dumps([
        {"kind": "status", "status": 500, "share": 0.5, "start_s": 1, "duration_s": 1},
        {"kind": "slow", "hold_ms": 10, "share": 1.0, "start_s": 1.5}]))
    plan = FaultPlan(faults, 0, epoch_unix_s=100.0, now_unix_s=100.0, now_mono_ns=0)
    assert plan.pick(999_999_999) is None                                   # before any window
    first = [plan.pick(1_000_000_000) for _ in range(BLOCK)]              # only spec 0's window
    assert sum(f is not None for f in first) == BLOCK // 2 and {f.label for f in first if f} == {"status:500"}
    both = [plan.pick(1_600_000_000) for _ in range(BLOCK)]
    assert {f.label for f in both} == {"status:500", "slow"}              # spec 0 first, the rest slow
    assert all(plan.pick(2_000_000_000).label == "slow" for _ in range(10))  # spec 0 ended


def test_error_bodies_are_the_providers_shapes():
    e = json.loads(openai_error_body(429, 1))["error"]
    assert set(e) == {"message", "type", "param", "code"} and e["code"] == "rate_limit_exceeded"
    assert e["type"] == "requests" and e["param"] is None and "1s" in e["message"]
    for status in (500, 503):
        e = json.loads(openai_error_body(status))["error"]
        assert e["type"] == "server_error" and e["code"] is None and e["message"]
    a = json.loads(anthropic_error_body(529, "1-2"))
    assert a == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"},
                 "request_id": "req_1-2"}
    assert json.loads(anthropic_error_body(429, "x", 2))["error"]["type"] == "rate_limit_error"
    assert json.loads(anthropic_error_body(500, "x"))["error"]["type"] == "api_error"
    frame = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0}\n\n'
    broken = broken_frame(frame)
    assert broken.startswith(b"event: content_block_delta\ndata: {") and broken.endswith(b"\n\n")
    with pytest.raises(ValueError):
        json.loads(broken.split(b"data: ")[1])


# ----------------------------------------------------------------------------- stats

def test_merge_and_diff_carry_faults_and_windows():
    w1 = {"pid": 1, "faults": {"reset": 2}, "down_windows": [
        {"pid": 1, "fault_index": 0, "start_t_unix_s": 5.0, "end_t_unix_s": 6.0}]}
    w2 = {"pid": 2, "faults": {"reset": 1, "status:429": 4}, "down_windows": []}
    merged = merge_worker_snapshots([w1, w2])
    assert merged["faults"] == {"reset": 3, "status:429": 4} and len(merged["down_windows"]) == 1
    later = merge_worker_snapshots([dict(w1, faults={"reset": 5}, down_windows=w1["down_windows"] + [
        {"pid": 1, "fault_index": 1, "start_t_unix_s": 9.0, "end_t_unix_s": 10.0}]), w2])
    d = diff_stats(later, merged)
    assert d["faults"] == {"reset": 3} and [w["fault_index"] for w in d["down_windows"]] == [1]


def test_the_arm_file_and_a_fixed_epoch_are_refused_together(tmp_path):
    from mocks.server import _parse_args
    with pytest.raises(SystemExit):
        _parse_args(["--port", "1", "--faults", "[]", "--fault-arm-file", str(tmp_path / "a"),
                     "--fault-epoch-unix-s", "1"])
