"""The load generator's in-flight steps (harness/run/locustfile.py's StudyShape, in a subprocess:
importing Locust patches the interpreter): each step's users after the warm-up, and the skip
rule: a step that ended with a failed request is the last, the steps above it are not run."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from locust_settings import load_settings

from harness.model.config import REPO_DIR

DRIVER = r"""
import importlib.util, json, sys, types
spec = importlib.util.spec_from_file_location("locustfile", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
clock = [1000.0]
mod.time = types.SimpleNamespace(time=lambda: clock[0], perf_counter=lambda: clock[0],
                                 monotonic=lambda: clock[0])
failures_at = json.loads(sys.argv[2])  # {clock time: failures counted from then}
shape = mod.StudyShape()
total = types.SimpleNamespace(num_failures=0, num_requests=0)
shape.runner = types.SimpleNamespace(stats=types.SimpleNamespace(total=total), user_count=0)
shape.get_run_time = lambda: clock[0] - 1000.0
out = []
for t in [1000.0 + 0.5 * k for k in range(80)]:
    clock[0] = t
    for at, n in failures_at.items():
        if t >= float(at):
            total.num_failures = n
    out.append(shape.tick())
    if out[-1] is None:
        break
print(json.dumps({"ticks": out, "phases": shape.phases}))
"""


def _drive(tmp_path: Path, failures_at: dict, steps_run: int = 3) -> dict:
    path = tmp_path / "load.json"
    path.write_text(load_settings(tmp_path, warmup_s=2.0, warmup_users=3, users=400,
                                  inflight_steps=(100, 200, 400), inflight_steps_run=steps_run,
                                  inflight_step_s=10.0, inflight_hold_s=4.0,
                                  inflight_drain_margin_s=1.0).to_json())
    done = subprocess.run([sys.executable, "-c", DRIVER, str(REPO_DIR / "harness/run/locustfile.py"),
                           json.dumps(failures_at)],
                          env={"SLUICE_LOAD_FILE": str(path), "PYTHONPATH": str(REPO_DIR),
                               "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_step_runs_for_its_length_after_the_warmup(tmp_path):
    out = _drive(tmp_path, {})
    users = [t[0] if t else None for t in out["ticks"]]
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
    out = _drive(tmp_path, {"1015.0": 1})                   # a failure during the second step
    users = [t[0] if t else None for t in out["ticks"]]
    assert 200 in users and 400 not in users and users[-1] is None
    assert users[-11:-1] == [200] * 10                      # its users drained, not a step above
    phases = out["phases"]
    assert phases["hold_end_t_unix_s"] - phases["hold_start_t_unix_s"] == 25.0


def test_steps_that_do_not_fit_the_machines_limits_are_never_run(tmp_path):
    out = _drive(tmp_path, {}, steps_run=2)
    users = [t[0] if t else None for t in out["ticks"]]
    assert 200 in users and 400 not in users and users[-1] is None
    phases = out["phases"]
    assert phases["hold_end_t_unix_s"] - phases["hold_start_t_unix_s"] == 25.0
    none_fit = _drive(tmp_path, {}, steps_run=0)["phases"]
    assert none_fit["hold_end_t_unix_s"] == none_fit["hold_start_t_unix_s"]
