"""Faults injected for real: a gateway killed mid-run, one that never becomes ready, garbage
answers, a missing binary, a taken port, an interrupt, and resuming a study."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pandas as pd
import psutil
import pytest

from harness.model.config import GATEWAYS_DIR, REPO_DIR, ConfigError, from_profile
from harness.run.preflight import preflight
from harness.run.study import run_study

pytestmark = [pytest.mark.integration, pytest.mark.slow]   # ~80 s: six studies, each with a fault
FIXTURES = REPO_DIR / "tests" / "fixtures" / "gateways"


@pytest.fixture()
def systems_dir(tmp_path):
    """The real baselines plus the broken fixtures, in one folder of systems."""
    d = tmp_path / "gateways"
    for name in ("direct", "nginx"):
        shutil.copytree(GATEWAYS_DIR / name, d / name)
    for fixture in FIXTURES.iterdir():
        shutil.copytree(fixture, d / fixture.name)
    return d


def smoke(systems_dir, tmp_path, gateways, **overrides):
    return from_profile("smoke", gateways=gateways, gateways_dir=str(systems_dir),
                        out_dir=str(tmp_path / "artifacts"), **overrides)


def manifest(run_dir):
    return json.loads((run_dir / "manifest.json").read_text())


def test_gateway_killed_mid_run_fails_that_run_only(systems_dir, tmp_path):
    def kill_nginx():
        for p in psutil.Process().children(recursive=True):
            if p.name() == "nginx":
                p.kill()

    def progress(message):
        if "nginx" in message and "starting load" in message:
            threading.Timer(2.5, kill_nginx).start()

    config = smoke(systems_dir, tmp_path, ["nginx", "direct"], hold_s=6.0, seed=1)
    result = run_study(preflight(config), progress=progress)
    by_system = {r.system: r for r in result.records}
    assert result.status == "completed"
    assert by_system["direct"].status == "completed"
    failed = by_system["nginx"]
    assert failed.status == "failed" and "exited during the load" in failed.reason
    m = manifest(failed.run_dir)
    assert m["status"] == "failed" and m["failed_t_unix_s"] > m["started_t_unix_s"]
    rows = pd.read_parquet(failed.run_dir / "requests.parquet")
    assert len(rows) > 0 and set(m["files"]) >= {"requests.parquet", "samples.parquet"}
    study = json.loads((result.study_dir / "manifest.json").read_text())
    assert [r["status"] for r in study["runs"] if r["system"] == "nginx"] == ["failed"]


def test_never_ready_ends_at_the_deadline_with_log_tail(systems_dir, tmp_path):
    config = smoke(systems_dir, tmp_path, ["never-ready"], ready_timeout_s=2.0)
    start = time.monotonic()
    result = run_study(preflight(config), progress=lambda m: None)
    assert time.monotonic() - start < 30
    record = result.records[0]
    assert record.status == "failed" and "not ready after 2 s" in record.reason
    assert "warming caches forever" in record.reason
    assert "warming caches forever" in (record.run_dir / "system.log").read_text()
    assert "artifacts not written" not in record.reason  # its (empty) tables exist all the same
    assert len(pd.read_parquet(record.run_dir / "requests.parquet")) == 0
    leftovers = [p for p in psutil.process_iter(["cmdline"])
                 if "warming caches forever" in " ".join(p.info["cmdline"] or [])]
    assert leftovers == []


def test_garbage_answers_are_errors_of_that_gateway(systems_dir, tmp_path):
    result = run_study(preflight(smoke(systems_dir, tmp_path, ["garbage"])),
                       progress=lambda m: None)
    record = result.records[0]
    assert record.status == "completed", record.reason
    rows = pd.read_parquet(record.run_dir / "requests.parquet")
    errors = rows[rows.error_kind != ""]
    assert len(errors) > 0 and len(rows[rows.error_kind == ""]) > 0
    assert {"http"} <= set(errors.error_kind)
    assert errors.error.str.contains("503").any()
    assert errors.error.str.contains("without a chat completion").any()


def test_missing_binary_is_rejected_before_anything_starts(systems_dir, tmp_path):
    with pytest.raises(ConfigError) as info:
        run_study(preflight(smoke(systems_dir, tmp_path, ["direct", "missing-binary"])))
    assert "missing-binary needs 'sluice-test-no-such-gateway-binary'" in str(info.value)
    assert not (tmp_path / "artifacts").exists() or not any((tmp_path / "artifacts").iterdir())


def test_port_in_use_is_rejected_before_anything_starts(systems_dir, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"base_port: port {port} .*already in use"):
            run_study(preflight(smoke(systems_dir, tmp_path, ["nginx"], base_port=port)))


def test_interrupt_stops_every_process_and_marks_the_study(systems_dir, tmp_path):
    out = tmp_path / "artifacts"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "study", "--profile", "smoke", "--gateways", "direct,nginx",
         "--set", "hold_s=60", "--set", "max_hold_s=60", "--set", "seed=3",
         "--set", f'out_dir="{out}"', "--set", 'study_id="intr"'],
        cwd=REPO_DIR, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen, children = [], []
    deadline = time.monotonic() + 60
    for line in proc.stdout:
        seen.append(line)
        if "run 1] users" in line and "starting load" not in line:
            children = psutil.Process(proc.pid).children(recursive=True)
            break
        assert time.monotonic() < deadline, seen
    assert children, seen
    first_run = [line for line in seen if "starting (" in line][0].split()[1]
    os.kill(proc.pid, signal.SIGINT)
    start = time.monotonic()
    proc.communicate(timeout=30)
    assert time.monotonic() - start < 15
    assert proc.returncode == 1
    psutil.wait_procs(children, timeout=5)
    assert [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE] == []
    study = json.loads((out / "intr" / "manifest.json").read_text())
    assert study["status"] == "interrupted"
    assert manifest(out / "intr" / "runs" / first_run / "1")["status"] == "interrupted"


def test_resume_keeps_completed_runs_and_redoes_the_rest(systems_dir, tmp_path):
    config = smoke(systems_dir, tmp_path, ["direct", "nginx"], study_id="resume")
    first = run_study(preflight(config), progress=lambda m: None)
    assert [r.status for r in first.records] == ["completed", "completed"]
    nginx_dir = next(r.run_dir for r in first.records if r.system == "nginx")
    (nginx_dir / "requests.parquet").write_bytes(b"tampered")  # no longer matches its hash
    lines = []
    second = run_study(preflight(config), progress=lines.append)
    kept = [line for line in lines if "kept" in line]
    assert len(kept) == 1 and "direct" in kept[0]
    assert {r.system: r.status for r in second.records} == {"direct": "completed", "nginx": "completed"}
    assert pd.read_parquet(nginx_dir / "requests.parquet").shape[0] > 0
    study = json.loads((first.study_dir / "manifest.json").read_text())
    assert len(study["attempts"]) == 1 and study["attempts"][0]["status"] == "completed"
