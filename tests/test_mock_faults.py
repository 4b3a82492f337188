"""The mock's provider faults on the wire (mocks/fault_replies.py, mocks/worker.py): what each
fault does to a request, exact shares, the windows, the down window over several workers, the
log's fault column, and a bad schedule refused at start.  The schedule, the header and the plan
themselves: test_mock_fault_plan.py.

Wire tests start the real mock on a free 127.0.0.1 port; windows are a few seconds long.
"""
import json
import socket
import subprocess
import time

import pytest
from mock_helpers import (
    ANTHROPIC,
    BODY,
    OPENAI,
    PY,
    REPO_DIR,
    Mock,
    call,
    fault_epoch,
    raw_request,
    split_head,
    sse_data,
    sse_events,
    stream,
    wait_for_epoch,
    wait_logged,
)

from mocks.faults import BLOCK, FaultPlan, parse_schedule
from mocks.request_log import read_request_log
from mocks.stats import diff_stats, read_stats

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

CHUNKS, DELAY_MS, LATENCY_MS = 4, 30, 20


@pytest.fixture(scope="module")
def mock(tmp_path_factory):
    m = Mock(tmp_path_factory.mktemp("fault-stats"), "--latency-ms", str(LATENCY_MS),
             "--stream-chunks", str(CHUNKS), "--chunk-delay-ms", str(DELAY_MS))
    yield m
    assert m.stop() == 0


@pytest.fixture()
def conn(mock):
    c = mock.client()
    yield c
    c.close()


# ----------------------------------------------------------------------------- on the wire (header)

@pytest.mark.parametrize("path, header, status, retry_after, error_type", [
    (OPENAI, "status=429", 429, "1", "requests"),
    (OPENAI, "status=500", 500, None, "server_error"),
    (OPENAI, "status=503;retry_after_s=4", 503, "4", "server_error"),
    (ANTHROPIC, "status=529", 529, None, "overloaded_error"),
    (ANTHROPIC, "status=429;retry_after_s=2", 429, "2", "rate_limit_error"),
])
def test_status_fault(conn, path, header, status, retry_after, error_type):
    for body in (BODY, dict(BODY, stream=True)):  # a stream request gets the same JSON error
        got, hdrs, raw, elapsed = call(conn, "POST", path, body, {"x-mock-fault": header, "x-mock-latency-ms": "5000"})
        assert got == status and hdrs.get("Retry-After") == retry_after
        assert hdrs["Content-Type"].startswith("application/json") and hdrs["x-mock-request-id"]
        d = json.loads(raw)
        if path == OPENAI:
            assert set(d["error"]) == {"message", "type", "param", "code"} and d["error"]["type"] == error_type
        else:
            assert d["type"] == "error" and d["error"]["type"] == error_type and d["request_id"]
        assert elapsed < 2.5  # answered at once, not after the 5 s hold (unless hold_ms says so)


@pytest.mark.parametrize("path, status", [(OPENAI, 503), (ANTHROPIC, 529)])
def test_overloaded_in_the_providers_dialect(mock, conn, path, status):
    rid = f"overloaded-{status}"
    body = dict(BODY, messages=[{"role": "user", "content": f"[rid:{rid}] hi"}])
    for b in (body, dict(body, stream=True)):  # a stream request gets the same JSON error
        got, hdrs, raw, elapsed = call(conn, "POST", path, b, {"x-mock-fault": "overloaded",
                                                               "x-mock-latency-ms": "5000"})
        assert got == status and hdrs["Content-Type"].startswith("application/json")
        assert hdrs.get("Retry-After") is None and elapsed < 2.5  # at once, not after the hold
        d = json.loads(raw)
        if path == ANTHROPIC:
            assert d["type"] == "error" and d["request_id"]
            assert d["error"] == {"type": "overloaded_error", "message": "Overloaded"}
        else:
            assert set(d["error"]) == {"message", "type", "param", "code"}
            assert d["error"]["type"] == "server_error" and "overloaded" in d["error"]["message"]
    r = wait_logged(mock.stats_dir, [rid])[rid]
    assert (r.fault, r.status_code) == ("overloaded", status)


def test_status_fault_hold(conn):
    _, _, _, elapsed = call(conn, "POST", OPENAI, BODY, {"x-mock-fault": "status=500;hold_ms=150"})
    assert elapsed >= 0.150


def test_slow_holds_at_least_hold_ms(conn):
    got, _, raw, elapsed = call(conn, "POST", OPENAI, BODY, {"x-mock-fault": "slow=300"})
    assert got == 200 and json.loads(raw)["object"] == "chat.completion" and elapsed >= 0.300
    got, _, lines = stream(conn, ANTHROPIC, dict(BODY, stream=True), {"x-mock-fault": "slow=250"})
    assert got == 200 and lines[0][0] >= 0.250 and sse_events(lines)[-1][1] == "message_stop"


@pytest.mark.parametrize("path", [OPENAI, ANTHROPIC])
def test_reset_unary_cuts_mid_body_with_rst(mock, path):
    raw, end, _, _ = raw_request(mock.port, path, headers=b"x-mock-fault: reset;after_bytes=25\r\n")
    status, hdrs, body = split_head(raw)
    assert end == "reset" and status == 200
    assert len(body) == 25 < int(hdrs["content-length"])  # the head promised the whole body
    raw, end, _, _ = raw_request(mock.port, path, headers=b"x-mock-fault: reset\r\n")  # default: half
    _, hdrs, body = split_head(raw)
    assert end == "reset" and len(body) == int(hdrs["content-length"]) // 2


def test_reset_stream_after_frames(mock):
    raw, end, t_last, _ = raw_request(mock.port, OPENAI, dict(BODY, stream=True),
                                      b"x-mock-fault: reset;after_frames=2\r\n")
    status, hdrs, body = split_head(raw)
    assert end == "reset" and status == 200 and hdrs["content-type"].startswith("text/event-stream")
    assert body.count(b"data: ") == 3 and b"[DONE]" not in body  # the opening frame and 2 content frames
    assert t_last >= (LATENCY_MS + 2 * DELAY_MS) / 1000 * 0.95      # on the frame schedule


def test_stall_stream_goes_silent_then_closes(mock):
    raw, end, t_last, t_end = raw_request(mock.port, ANTHROPIC, dict(BODY, stream=True),
                                          b"x-mock-fault: stall;after_frames=1;stall_s=0.8\r\n")
    _, _, body = split_head(raw)
    assert end == "eof" and b"message_stop" not in body and not body.endswith(b"0\r\n\r\n")
    assert body.count(b"event: content_block_delta") == 1  # one content frame, then nothing
    assert t_end - t_last >= 0.8 - 0.05                   # silent for stall_s, then closed


def test_stall_unary_and_client_giving_up(mock):
    s = socket.create_connection(("127.0.0.1", mock.port), timeout=5)
    data = json.dumps(dict(BODY, messages=[{"role": "user", "content": "[rid:stall-gives-up] hi"}])).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: m\r\nx-mock-fault: stall;after_bytes=10;stall_s=50\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
    got = b""
    while b"\r\n\r\n" not in got or len(got.partition(b"\r\n\r\n")[2]) < 10:
        chunk = s.recv(65536)
        assert chunk, got
        got += chunk
    s.settimeout(0.3)
    with pytest.raises(TimeoutError):  # nothing more comes
        s.recv(65536)
    s.close()  # the client gives up; the mock must not wait the 50 s
    rows = wait_logged(mock.stats_dir, ["stall-gives-up"])
    r = rows["stall-gives-up"]
    assert r.fault == "stall" and r.status_code == 200


def test_malformed_unary_and_stream(conn):
    got, hdrs, raw, _ = call(conn, "POST", OPENAI, BODY, {"x-mock-fault": "malformed"})
    assert got == 200 and int(hdrs["Content-Length"]) == len(raw) and raw.startswith(b'{"id":')
    with pytest.raises(ValueError):
        json.loads(raw)
    got, _, lines = stream(conn, OPENAI, dict(BODY, stream=True), {"x-mock-fault": "malformed;after_frames=1"})
    data = sse_data(lines)
    assert got == 200 and data[-1] == "[DONE]" and len(data) == CHUNKS + 3
    bad = []
    for i, d in enumerate(data[:-1]):
        try:
            json.loads(d)
        except ValueError:
            bad.append(i)
    assert bad == [2]  # content frame 1 (after the opening frame)


def test_bad_header_is_400_and_bad_body_is_never_faulted(conn):
    got, _, raw, _ = call(conn, "POST", OPENAI, BODY, {"x-mock-fault": "explode"})
    assert got == 400 and json.loads(raw)["error"]["param"] == "x-mock-fault"
    got, _, raw, _ = call(conn, "POST", ANTHROPIC, BODY, {"x-mock-fault": "slow=nope"})
    assert got == 400 and "x-mock-fault" in json.loads(raw)["error"]["message"]
    got, _, _, _ = call(conn, "POST", OPENAI, b"{not json", {"x-mock-fault": "status=503"})
    assert got == 400


def test_log_fault_column_and_stats(mock, conn):
    before = read_stats(mock.stats_dir, fresher_than_t_unix_s=time.time())
    cases = {"lg-429": "status=429", "lg-slow": "slow=30", "lg-mal": "malformed", "lg-none": None}
    for rid, header in cases.items():
        hdrs = {"x-request-id": rid}
        if header:
            hdrs["x-mock-fault"] = header
        call(conn, "POST", OPENAI, BODY, hdrs)
    raw_request(mock.port, headers=b"x-request-id: lg-reset\r\nx-mock-fault: reset\r\n")
    rows = wait_logged(mock.stats_dir, [*cases, "lg-reset"])
    assert {r: (rows[r].fault, rows[r].status_code) for r in [*cases, "lg-reset"]} == {
        "lg-429": ("status:429", 429), "lg-slow": ("slow", 200), "lg-mal": ("malformed", 200),
        "lg-none": ("", 200), "lg-reset": ("reset", 200)}
    assert rows["lg-slow"].hold_set_ns == 30_000_000 and rows["lg-429"].hold_set_ns == 0
    d = diff_stats(read_stats(mock.stats_dir, fresher_than_t_unix_s=time.time()), before)
    assert d["faults"] == {"malformed": 1, "reset": 1, "slow": 1, "status:429": 1}
    assert d["by_status"]["429"] == 1 and d["count"] == 3 and d["incomplete"] == 1


# ----------------------------------------------------------------------------- schedules

def _send(conn, n, prefix):
    for i in range(n):
        call(conn, "POST", OPENAI, BODY, {"x-request-id": f"{prefix}{i}"})


def test_schedule_share_exact_and_matches_the_seeded_plan(tmp_path):
    schedule = [{"kind": "status", "status": 500, "share": 0.2}, {"kind": "malformed", "share": 0.1}]
    m = Mock(tmp_path, "--latency-ms", "0", "--faults", json.dumps(schedule), "--fault-seed", "42")
    try:
        c = m.client()
        _send(c, 2 * BLOCK, "sh")
        c.close()
        rows = wait_logged(m.stats_dir, [f"sh{i}" for i in range(2 * BLOCK)])
        config = read_stats(m.stats_dir)["config"]
    finally:
        assert m.stop() == 0
    got = [rows[f"sh{i}"].fault for i in range(2 * BLOCK)]
    assert got.count("status:500") == 40  # exact over every 100 requests
    assert abs(got.count("malformed") - 16) <= 10  # 10% of the 160 the first spec left
    plan = FaultPlan(parse_schedule(json.dumps(schedule)), 42, 0.0, 0.0, 0)
    assert got == [(f.label if (f := plan.pick(0)) else "") for _ in range(2 * BLOCK)]  # reproducible
    assert config["fault_seed"] == 42 and config["faults"][0]["share"] == 0.2


def test_window_start_and_end_are_respected(tmp_path):
    epoch = fault_epoch()
    schedule = [{"kind": "status", "status": 503, "share": 0.5, "start_s": 1.0, "duration_s": 1.0}]
    m = Mock(tmp_path, "--latency-ms", "0", "--faults", json.dumps(schedule),
             "--fault-epoch-unix-s", repr(epoch))
    try:
        wait_for_epoch(epoch, 0.5)
        c = m.client()
        i = 0
        # paced, so the time bound ends the loop, not the count (an idle machine answered
        # 20,000 requests before the window ended)
        while time.time() < epoch + 2.5 and i < 20_000:
            call(c, "POST", OPENAI, BODY)
            i += 1
            time.sleep(0.001)
        c.close()
        time.sleep(0.4)
        log = read_request_log(m.stats_dir)
    finally:
        assert m.stop() == 0
    t_s = (log["body_end_t_unix_ns"] / 1e9) - epoch
    before, inside, after = log[t_s < 1.0], log[(t_s >= 1.0) & (t_s < 2.0)], log[t_s >= 2.0]
    assert len(before) > 10 and len(inside) > 10 and len(after) > 10
    assert (before["fault"] == "").all() and (after["fault"] == "").all()
    faulted = inside["fault"] == "status:503"
    assert (inside["fault"][~faulted] == "").all() and (inside["status_code"][faulted] == 503).all()
    assert abs(faulted.sum() - len(inside) / 2) <= BLOCK / 2  # exact per block; the last one is partial


def test_faults_wait_for_the_arm_file_then_count_from_its_epoch(tmp_path):
    arm = tmp_path / "arm.json"
    schedule = [{"kind": "status", "status": 503, "start_s": 0.5, "duration_s": 1.0}]
    m = Mock(tmp_path / "stats", "--latency-ms", "0", "--faults", json.dumps(schedule),
             "--fault-arm-file", str(arm), workers=2)
    try:
        before = [_status_on_new_connection(m) for _ in range(20)]  # spread over the workers
        time.sleep(1.0)            # unarmed, the schedule's window never opens by itself
        before += [_status_on_new_connection(m) for _ in range(20)]
        epoch = time.time() + 0.3
        (tmp_path / "arm.tmp").write_text(json.dumps({"epoch_unix_s": epoch}))
        (tmp_path / "arm.tmp").replace(arm)
        seen = []   # (sent after, answered by: seconds after the epoch, status)
        while time.time() < epoch + 2.0:
            sent = time.time() - epoch
            status = _status_on_new_connection(m)
            seen.append((sent, time.time() - epoch, status))
            time.sleep(0.01)
        stats = read_stats(m.stats_dir, fresher_than_t_unix_s=time.time())
    finally:
        assert m.stop() == 0
    assert set(before) == {200}
    # every worker faulted exactly inside [epoch + 0.5, epoch + 1.5): the mock's body time is
    # between a request's send and its answer, however long a loaded machine made that
    outside = [status for sent, answered, status in seen if answered < 0.5 or sent >= 1.5]
    inside = [status for sent, answered, status in seen if sent >= 0.5 and answered < 1.5]
    assert len(outside) >= 10 and set(outside) == {200}, seen
    assert len(inside) >= 10 and set(inside) == {503}, seen
    assert stats["config"]["fault_epoch_unix_s"] == pytest.approx(epoch)


def _status_on_new_connection(m) -> int:
    conn = m.client()
    try:
        return call(conn, "POST", OPENAI, BODY)[0]
    finally:
        conn.close()


def test_down_window_refuses_connects_on_every_worker_then_accepts(tmp_path):
    epoch = fault_epoch()
    m = Mock(tmp_path, "--latency-ms", "0", "--faults", '[{"kind": "down", "start_s": 1.0, "duration_s": 1.0}]',
             "--fault-epoch-unix-s", repr(epoch), workers=2)
    try:
        wait_for_epoch(epoch, 0.5)
        keep = m.client()
        call(keep, "POST", OPENAI, BODY)  # a keep-alive connection open before the window
        # (seconds after the epoch when the probe began and when it ended, "ok" | "refused")
        seen = []
        # Probe until the window has ended and a connect succeeded again (bounded: a loaded
        # machine may reopen the listeners late, which is allowed, never early).
        while time.time() < epoch + 8.0:
            began = time.time() - epoch
            try:
                socket.create_connection(("127.0.0.1", m.port), timeout=1).close()
                r = "ok"
            except ConnectionRefusedError:
                r = "refused"
            seen.append((began, time.time() - epoch, r))
            if r == "ok" and seen[-1][0] > 2.0 and any(x == "refused" for _, _, x in seen):
                break
            time.sleep(0.005)
        with pytest.raises((ConnectionError, OSError)):  # it was closed at the start of the window
            call(keep, "POST", OPENAI, BODY)
        keep.close()
        # Served again once every worker is back; on a loaded machine one worker may still be
        # reopening (a connection it had accepted is then closed), so allow a few tries.
        got = None
        for _ in range(5):
            fresh = m.client()
            try:
                got, _, _, _ = call(fresh, "POST", OPENAI, BODY)
                break
            except (ConnectionError, OSError):
                time.sleep(0.5)
            finally:
                fresh.close()
        stats = read_stats(m.stats_dir, fresher_than_t_unix_s=time.time())
    finally:
        assert m.stop() == 0
    runs = [r for i, (_, _, r) in enumerate(seen) if i == 0 or seen[i - 1][2] != r]
    assert runs[0] == "ok" and "refused" in runs and runs[-1] == "ok" and got == 200
    # Refusals only inside the window: never before its start; after its end only while a
    # worker is still reopening. A refusal came between its probe's beginning and end.
    refused = [(began, ended) for began, ended, r in seen if r == "refused"]
    assert min(ended for _, ended in refused) >= 0.99, refused[:3]
    windows = stats["down_windows"]
    assert sorted(w["pid"] for w in windows) == sorted(m.workers)
    for w in windows:
        assert w["start_t_unix_s"] >= epoch + 0.99 and w["end_t_unix_s"] >= epoch + 1.99
    assert max(began for began, _ in refused) <= max(w["end_t_unix_s"] for w in windows) - epoch + 0.05


def test_two_mocks_side_by_side(tmp_path):
    a = Mock(tmp_path / "a", "--latency-ms", "0", "--faults", '[{"kind": "status", "status": 503}]')
    b = Mock(tmp_path / "b", "--latency-ms", "0")
    try:
        assert call(a.client(), "POST", OPENAI, BODY)[0] == 503
        assert call(b.client(), "POST", OPENAI, BODY)[0] == 200
    finally:
        assert a.stop() == 0 and b.stop() == 0


def test_cli_rejects_a_bad_schedule_in_one_line(tmp_path):
    bad = tmp_path / "faults.json"
    bad.write_text('[{"kind": "status", "status": 503, "shares": 0.2}]')
    for arg, key in ((str(bad), "faults[0].shares"), (str(tmp_path / "missing.json"), "cannot read")):
        p = subprocess.run([PY, "-m", "mocks.server", "--port", "1", "--faults", arg], cwd=REPO_DIR,
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and key in p.stderr.strip().splitlines()[-1], p.stderr
