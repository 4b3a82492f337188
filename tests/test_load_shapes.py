"""The load generator's three shapes (harness/run/loadgen/shapes.py, in a subprocess: importing
Locust patches the interpreter), tick by tick on a driven clock: the closed loop's warm-up, ramp
and hold (until both its length and its request count are met, bounded by max_hold_s); the
in-flight steps and their skip rule (a step that ended with a failed request is the last); the
open loop's phases at its schedule's boundaries; and where each arms the mock's faults."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from locust_settings import load_settings

from harness.model.config import REPO_DIR

DRIVER = r"""
import json, sys, types
from harness.files import producers
from harness.run.loadgen import schedule, shapes
clock = [1000.0]
fake_time = types.SimpleNamespace(time=lambda: clock[0], perf_counter=lambda: clock[0],
                                  monotonic=lambda: clock[0])
shapes.time = schedule.time = fake_time
settings = producers.read_load_settings(sys.argv[1])
counts = json.loads(sys.argv[2])  # {"failures": {clock time: count from then}, "requests": ...}
shape = shapes.shape_class(settings, shapes.UsersRecord(settings.raw_dir),
                           schedule.Schedule.of(settings))()
total = types.SimpleNamespace(num_failures=0, num_requests=0, response_times={})
sent = []
shape.runner = types.SimpleNamespace(stats=types.SimpleNamespace(total=total), user_count=0,
                                     send_message=lambda kind, data: sent.append([t, kind, data]))
shape.get_run_time = lambda: clock[0] - 1000.0
out = []
for t in [1000.0 + 0.5 * k for k in range(80)]:
    clock[0] = t
    for name, at in counts.items():
        for since, n in at.items():
            if t >= float(since):  # "answers": Locust's response-time histogram (ms -> count)
                if name == "answers":
                    total.response_times = {int(ms): c for ms, c in n.items()}
                else:
                    setattr(total, "num_" + name, n)
    out.append(shape.tick())
    if out[-1] is None:
        break
shape.users.close()
print(json.dumps({"ticks": out, "phases": shape.phases, "shape": type(shape).__name__,
                  "sent": sent}))
"""


def _drive(tmp_path: Path, counts: dict | None = None, **settings) -> dict:
    path = tmp_path / "load.json"
    path.write_text(load_settings(tmp_path, **settings).to_json())
    done = subprocess.run([sys.executable, "-c", DRIVER, str(path), json.dumps(counts or {})],
                          env={"PYTHONPATH": str(REPO_DIR), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    users_rows = (tmp_path / "raw" / "users.csv").read_text().splitlines()
    assert len(users_rows) == 1 + len(out["ticks"])      # the users record: a row each tick
    return out


def _users(out: dict) -> list:
    return [t[0] if t else None for t in out["ticks"]]


# --- the closed loop ---------------------------------------------------------------------------

CLOSED = dict(warmup_s=2.0, warmup_users=2, users=10, ramp_s=5.0, hold_s=4.0,
              min_hold_requests=100, max_hold_s=10.0)


def test_the_closed_loop_warms_up_ramps_linearly_and_holds(tmp_path):
    out = _drive(tmp_path, {"requests": {"1000": 0, "1008": 500}}, **CLOSED)
    assert out["shape"] == "ClosedLoop"
    users = _users(out)
    assert out["ticks"][:4] == [[2, 2]] * 4                       # the warm-up: 2 s
    # the ramp: ceil(10 users × its elapsed share), never under the warm-up's users
    assert users[4:14] == [2, 2, 2, 3, 4, 5, 6, 7, 8, 9]
    assert {t[1] for t in out["ticks"][4:-1]} == {3.0}           # 10 users / 5 s, × 1.5
    assert users[14:-1] == [10] * 8 and users[-1] is None        # the 4-s hold, then stop
    phases = out["phases"]
    assert [phases[k] - 1000.0 for k in ("warmup_start_t_unix_s", "ramp_start_t_unix_s",
                                         "hold_start_t_unix_s", "hold_end_t_unix_s")] == [0, 2, 7, 11]


def test_the_hold_waits_for_its_requests_but_not_past_max_hold(tmp_path):
    enough_late = _drive(tmp_path, {"requests": {"1000": 0, "1014": 150}}, **CLOSED)["phases"]
    assert enough_late["hold_end_t_unix_s"] - enough_late["hold_start_t_unix_s"] == 7.0
    never = _drive(tmp_path, {"requests": {"1000": 0}}, **CLOSED)["phases"]
    assert never["hold_end_t_unix_s"] - never["hold_start_t_unix_s"] == 10.0


def test_faults_arm_at_the_holds_planned_start_from_the_loads_real_start(tmp_path):
    arm = tmp_path / "arm.json"
    _drive(tmp_path, {"requests": {"1000": 500}}, fault_arm_file=str(arm), **CLOSED)
    assert json.loads(arm.read_text()) == {"epoch_unix_s": 1000.0 + 2.0 + 5.0}
    _drive(tmp_path, fault_arm_file=str(arm), warmup_s=1.0, open_loop_rates_per_s=(10.0,),
           open_loop_step_s=2.0)
    assert json.loads(arm.read_text()) == {"epoch_unix_s": 1000.0 + 1.0}  # no ramp: open loop


# --- the in-flight steps -----------------------------------------------------------------------

INFLIGHT = dict(warmup_s=2.0, warmup_users=3, users=400, inflight_steps=(100, 200, 400),
                inflight_step_s=10.0, inflight_hold_s=4.0, inflight_drain_margin_s=1.0)


def test_every_step_runs_for_its_length_after_the_warmup(tmp_path):
    out = _drive(tmp_path, inflight_steps_run=3, **INFLIGHT)
    assert out["shape"] == "InFlight"
    users = _users(out)
    assert users[:4] == [3, 3, 3, 3]                       # the warm-up: 2 s
    assert users[4] == 100 and users[4 + 20] == 200 and users[4 + 40] == 400
    # three 10-s steps, the 400 users held one more hold and 1 s (the drain), then stop
    assert users[4 + 60:4 + 70] == [400] * 10
    assert users[-1] is None and len(users) == 4 + 60 + 10 + 1
    # each step's new users spawned over one hold (4 s): 97, then 100, then 200 of them
    assert [out["ticks"][i][1] for i in (4, 24, 44)] == [97 / 4, 25.0, 50.0]
    phases = out["phases"]
    assert phases["hold_end_t_unix_s"] - phases["hold_start_t_unix_s"] == 35.0


def test_a_step_with_a_failed_request_is_the_last(tmp_path):
    out = _drive(tmp_path, {"failures": {"1015.0": 1}}, inflight_steps_run=3, **INFLIGHT)
    users = _users(out)                                     # a failure during the second step
    assert 200 in users and 400 not in users and users[-1] is None
    assert users[-11:-1] == [200] * 10                      # its users drained, not a step above
    phases = out["phases"]
    assert phases["hold_end_t_unix_s"] - phases["hold_start_t_unix_s"] == 25.0


def test_a_step_that_added_over_the_limit_at_p99_is_the_last(tmp_path):
    # the second step's window (from 1,018 s) sees 100 answers, 2 of them 1.5 s beyond the hold
    answers = {"1017.0": {"4000": 100}, "1021.0": {"4000": 198, "5500": 2}}
    out = _drive(tmp_path, {"answers": answers}, inflight_steps_run=3, **INFLIGHT)
    users = _users(out)
    assert 200 in users and 400 not in users and users[-1] is None
    phases = out["phases"]
    assert phases["hold_end_t_unix_s"] - phases["hold_start_t_unix_s"] == 25.0
    slow_enough = {"1017.0": {"4000": 100}, "1021.0": {"4000": 198, "4900": 2}}
    assert 400 in _users(_drive(tmp_path, {"answers": slow_enough}, inflight_steps_run=3,
                                **INFLIGHT))


def test_each_streamed_step_ends_with_its_abandon_wave(tmp_path):
    out = _drive(tmp_path, inflight_steps_run=3, stream=True, inflight_abandon_share=0.25,
                 **{**INFLIGHT, "inflight_step_s": 13.0})
    start = out["phases"]["hold_start_t_unix_s"]
    # each step's wave when its abandon phase (the last 3 s) begins; its users back at its end
    assert [(t - start, kind, data["step"], data["share"], data["resume_t"] - start)
            for t, kind, data in out["sent"]] == [
        (10.0, "abandon", 1, 0.25, 13.0), (23.0, "abandon", 2, 0.25, 26.0),
        (36.0, "abandon", 3, 0.25, 39.0)]
    assert _drive(tmp_path, inflight_steps_run=3, **INFLIGHT)["sent"] == []   # unary: none


def test_steps_that_do_not_fit_the_machines_limits_are_never_run(tmp_path):
    out = _drive(tmp_path, inflight_steps_run=2, **INFLIGHT)
    users = _users(out)
    assert 200 in users and 400 not in users and users[-1] is None
    phases = out["phases"]
    assert phases["hold_end_t_unix_s"] - phases["hold_start_t_unix_s"] == 25.0
    none_fit = _drive(tmp_path, inflight_steps_run=0, **INFLIGHT)["phases"]
    assert none_fit["hold_end_t_unix_s"] == none_fit["hold_start_t_unix_s"]


# --- the open loop -----------------------------------------------------------------------------

def test_the_open_loop_runs_every_user_and_its_phases_are_the_schedules(tmp_path):
    out = _drive(tmp_path, users=50, warmup_s=1.0, open_loop_rates_per_s=(10.0, 20.0),
                 open_loop_step_s=2.0, open_loop_spawn_rate_per_s=100.0,
                 # the schedule wins over the closed loop's and the in-flight lane's settings
                 ramp_s=30.0, hold_s=30.0, inflight_steps=(5,), inflight_steps_run=1)
    assert out["shape"] == "OpenLoop"
    assert out["ticks"][:-1] == [[50, 100.0]] * 10 and out["ticks"][-1] is None
    phases = out["phases"]
    # the schedule began at the first tick: 1 s of warm-up, two 2-s steps
    assert [phases[k] - 1000.0 for k in ("warmup_start_t_unix_s", "ramp_start_t_unix_s",
                                         "hold_start_t_unix_s", "hold_end_t_unix_s")] == [0, 1, 1, 5]
