"""The lane's new scenarios (harness/model/fault_scenarios.py) rendered into the real mock's
schedule, on the wire: retry_after's share of 429s with their Retry-After, flapping's 2 s
failing and 2 s healthy, and all_rate_limited's standby, started by the harness with the
primary's schedule (a healthy one beside failover).  What each fault kind does: test_mock_endings.py
and test_mock_faults.py.
"""
import http.client
import json
import os
import time
from contextlib import ExitStack
from types import SimpleNamespace

import pytest
from mock_helpers import BODY, OPENAI, Mock, call, fault_epoch, wait_for_epoch
from polling import wait_for

from harness.files.study_files import RunFiles
from harness.model import fault_scenarios
from harness.model.config import from_profile
from harness.run import run as run_mod
from harness.run.preflight import preflight

pytestmark = [pytest.mark.timeout(120), pytest.mark.integration]


def _schedule(name, start_s=0.0, duration_s=0.0):
    return fault_scenarios.schedule_json(name, start_s, fault_scenarios.duration_of(name, duration_s))


def test_retry_after_answers_a_fifth_429_with_retry_after_2(tmp_path):
    m = Mock(tmp_path, "--latency-ms", "0", "--faults", _schedule("retry_after"),
             "--fault-epoch-unix-s", repr(time.time() - 1.0))
    try:
        c = m.client()
        answers = [call(c, "POST", OPENAI, BODY) for _ in range(100)]
        c.close()
    finally:
        assert m.stop() == 0
    limited = [(hdrs, raw) for status, hdrs, raw, _ in answers if status == 429]
    assert len(limited) == 20 and {status for status, *_ in answers} == {200, 429}  # exact per 100
    for hdrs, raw in limited:
        assert hdrs["Retry-After"] == "2" and json.loads(raw)["error"]["code"] == "rate_limit_exceeded"


def test_flapping_fails_two_seconds_then_serves_two(tmp_path):
    epoch = fault_epoch()
    m = Mock(tmp_path, "--latency-ms", "0", "--faults", _schedule("flapping", 0.0, 8.0),
             "--fault-epoch-unix-s", repr(epoch))
    try:
        wait_for_epoch(epoch, 1.0)
        c = m.client()
        seen = []  # (sent, answered) in seconds after the epoch, status; paced: time ends the loop
        while time.time() < epoch + 4.5 and len(seen) < 5000:
            sent = time.time() - epoch
            status = call(c, "POST", OPENAI, BODY)[0]
            seen.append((sent, time.time() - epoch, status))
            time.sleep(0.01)
        c.close()
    finally:
        assert m.stop() == 0

    def within(lo, hi):  # the mock had the body between sent and answered: wholly inside [lo, hi)
        return [s for a, b, s in seen if lo + 0.002 < a and b < hi - 0.002]
    assert set(within(-9, 0)) == {200} and set(within(2, 4)) == {200}
    assert set(within(0, 2)) == {503} and set(within(4, 6)) == {503}
    assert len(within(0, 2)) > 10 and len(within(2, 4)) > 10


def _providers(tmp_path, scenario):
    """A one-system faults study with ``scenario``: its plan's first run and a run directory."""
    config = from_profile("faults", gateways=("direct",), fault_scenario=scenario, out_dir=str(tmp_path / "out"))
    spec = preflight(config).plan[0]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    return spec, run_dir


def _arm(run_dir, epoch):
    path = RunFiles(run_dir).fault_arm_path
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"epoch_unix_s": epoch}))
    os.replace(tmp, path)


def _status(handle):
    conn = http.client.HTTPConnection("127.0.0.1", handle.port, timeout=10)
    try:
        return call(conn, "POST", OPENAI, BODY)
    finally:
        conn.close()


@pytest.mark.parametrize("scenario, standby_status", [("all_rate_limited", 429), ("failover", 200)])
def test_the_standby_is_faulted_only_where_the_scenario_says(tmp_path, scenario, standby_status):
    spec, run_dir = _providers(tmp_path, scenario)
    r = SimpleNamespace(mock=None, standby=None)
    with ExitStack() as processes:
        run_mod._start_providers(r, spec, run_dir, processes)
        assert _status(r.mock)[0] == _status(r.standby)[0] == 200  # nothing before the arm
        _arm(run_dir, time.time() - spec.mock.fault_start_s)      # the window is open now
        assert wait_for(lambda: _status(r.mock)[0] != 200, 10.0)
        primary, standby = _status(r.mock), _status(r.standby)
    assert standby[0] == standby_status
    if scenario == "all_rate_limited":
        for status, hdrs, raw, _ in (primary, standby):
            assert status == 429 and hdrs["Retry-After"] == "3"
            assert json.loads(raw)["error"]["code"] == "rate_limit_exceeded"
    else:
        assert primary[0] == 503
