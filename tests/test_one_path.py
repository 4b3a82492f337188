"""One path from study to report, through every entry point as a user starts it (the study
notebook's command, a suite, the fault lane's and the in-flight lane's suites as `make faults` and
`make inflight` run them), at tiny scale with the real processes: each study is cleared by its
preflight once, and its statistics are computed once (its figures collected once, its raw rows
loaded once, its per-run summary computed once), however many things show them (the notebook,
the study's report, the suite's report). The calls are counted in every process of the command
(tests/call_counting/sitecustomize.py)."""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.model.config import REPO_DIR

pytestmark = pytest.mark.integration

COUNTING = Path(__file__).resolve().parent / "call_counting"
ONCE = {"preflight": 1, "collect": 1, "load_study": 1, "run_summary": 1}

# The lanes' suites at tiny scale, the floor (direct) alone: one cell each (the plain suite two).
SUITES = {
    "suite": '''name = "tiny"
description = "two cells of the smoke profile"
profile = "smoke"
[base]
gateways = ["direct"]
[axes]
users = [1, 2]
''',
    "faults": '''name = "tiny-faults"
description = "the fault lane's shape, tiny: open loop, an error burst"
profile = "faults"
[base]
gateways = ["direct"]
users = 20
warmup_s = 1.0
open_loop_rates_per_s = [20.0]
open_loop_step_s = 6.0
fault_start_s = 2.0
fault_duration_s = 2.0
[axes]
fault_scenario = ["error_burst"]
''',
    "inflight": '''name = "tiny-inflight"
description = "the in-flight lane's shape, tiny: 50 requests held open 1 s"
profile = "inflight"
[base]
gateways = ["direct"]
users = 50
warmup_s = 1.0
idle_s = 0.5
cooldown_s = 0.5
inflight_steps = [50]
inflight_hold_s = 1.0
inflight_step_s = 5.0
request_timeout_s = 10.0
locust_processes = 1
mock_workers = 1
[axes]
stream = [false]
''',
}


def counted(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """Run `python -m harness ARGS` with its calls counted: (the process, study directory ->
    function -> calls)."""
    log = tmp_path / "calls.log"
    env = {**os.environ, "SLUICE_CALL_LOG": str(log),
           "PYTHONPATH": os.pathsep.join(p for p in (str(COUNTING), os.environ.get("PYTHONPATH"))
                                         if p)}
    done = subprocess.run([sys.executable, "-m", "harness", *args], cwd=REPO_DIR, env=env,
                          capture_output=True, text=True, timeout=600)
    calls: dict = collections.defaultdict(collections.Counter)
    for line in log.read_text().splitlines() if log.exists() else ():
        function, _, study_dir = line.partition(" ")
        calls[Path(study_dir)][function] += 1
    return done, dict(calls)


def test_the_study_notebook_clears_and_computes_once(tmp_path):
    """`make study`'s command: papermill runs the study notebook, which shows the built report's
    sections."""
    out = tmp_path / "artifacts"
    done, calls = counted(tmp_path, "notebook", "--profile", "smoke", "--gateways", "direct,nginx",
                          "--set", f"out_dir={out}", "--set", "study_id=nb")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    study = out / "nb"
    assert calls == {study: ONCE}
    output = done.stdout + done.stderr
    assert "nginx run 1] verified" in output and "completed in" in output  # progress is visible
    assert f"report:    {study / 'report.html'}" in done.stdout and (study / "report.html").is_file()
    assert json.loads((study / "manifest.json").read_text())["status"] == "completed"
    executed = json.loads((study / "head_to_head.ipynb").read_text())
    html = "".join("".join(o.get("data", {}).get("text/html", ""))
                   for c in executed["cells"] for o in c.get("outputs", []))
    assert 'id="headline-table"' in html and 'id="artifacts"' in html   # the report's sections
    assert "direct" in html and "nginx" in html and "throughput (req/s)" in html


@pytest.mark.parametrize("lane", list(SUITES))
def test_a_suite_clears_and_computes_once_per_cell(tmp_path, lane):
    suite_file = tmp_path / f"{lane}.toml"
    suite_file.write_text(SUITES[lane])
    out = tmp_path / "suites"
    # the command line of `make faults` / `make inflight`, with a suite file of its own
    done, calls = counted(tmp_path, "suite", str(suite_file), "--out-dir", str(out),
                          "--suite-id", lane)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    suite_dir = out / lane
    manifest = json.loads((suite_dir / "manifest.json").read_text())
    cells = [suite_dir / c["dir"] for c in manifest["cells"]]
    assert manifest["status"] == "completed" and cells
    assert calls == {cell: ONCE for cell in cells}
    output = done.stdout + done.stderr   # the notebook's lines come through papermill's log
    assert "if every run holds every step" in output and "suite completed in" in output
    assert (suite_dir / "report.html").is_file() and (suite_dir / "suite.ipynb").is_file()
    assert all((cell / "report.html").is_file() for cell in cells)
