"""Multi-host runs with Locust's own distributed mode, on hosts made of network namespaces:
the mock in one, nginx in another, Locust's master (beside the harness) in a third and two
workers in a fourth. Traffic goes only to the namespaces' own 10.231.0.0/24 addresses."""
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import netns
import numpy as np
import pandas as pd
import pytest
from polling import wait_for
from smoke_study import SETTINGS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parent.parent
WHY = netns.unavailable()
# A paced closed loop: 4 users with 0.1 s think time offer ~25 req/s whatever the layout, so
# one-host and multi-host runs must agree: the one-host run is the session's smoke study's
# nginx, with the same settings (6 s of hold gives 6 one-second bins of spread).
STUDY_TIMEOUT_S = 240


def study_command(out: Path, study_id: str, topology: Path, **extra) -> list[str]:
    sets = {**SETTINGS, **extra, "out_dir": str(out), "study_id": study_id,
            "topology": str(topology)}
    argv = [sys.executable, "-m", "harness", "study", "--profile", "smoke", "--gateways", "nginx"]
    for name, value in sets.items():
        argv += ["--set", f"{name}={json.dumps(value)}"]
    return argv


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if WHY:
        pytest.skip(WHY)
    tmp = tmp_path_factory.mktemp("lab")
    with netns.lab(4) as hosts:
        topology = tmp / "topology.toml"
        topology.write_text(netns.four_host_topology(hosts))
        yield hosts, topology, tmp


@pytest.fixture(scope="module")
def studies(lab, smoke_study):
    hosts, topology, tmp = lab
    done = subprocess.run([*hosts[0].prefix, *study_command(tmp, "multi", topology)], cwd=REPO,
                          capture_output=True, text=True, timeout=STUDY_TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert smoke_study.result.status == "completed"
    return tmp / "multi" / "runs" / "nginx" / "1", smoke_study.run_dir("nginx")


def test_every_request_is_verified_at_the_mock(studies):
    run, _ = studies
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "completed", manifest["reason"]
    rows = pd.read_parquet(run / "requests.parquet")
    ok = rows[(rows.status_code == 200) & (rows.error_kind == "")]
    assert len(rows) > 50 and len(ok) == len(rows)
    assert manifest["checks"]["pre_request"]["mock_saw_it"]
    assert manifest["checks"]["mock_count"] == len(ok) and manifest["checks"]["count_match"]
    assert ok.mock_request_id.str.len().gt(0).all() and ok.mock_request_id.is_unique


def test_rows_of_both_workers_are_consolidated(studies):
    run, _ = studies
    rows = pd.read_parquet(run / "requests.parquet")
    assert set(rows.worker_host) == {"load"}
    assert rows.worker_pid.nunique() == 2
    per_worker = rows.groupby("worker_pid").size()
    assert (per_worker > 10).all(), per_worker
    raw = [p for p in (run / "raw").glob("requests-load-*.csv")]
    assert len(raw) == 2
    assert sum(len(pd.read_csv(p)) for p in raw) == len(rows)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["locust"]["processes"] == 2
    assert manifest["spec"]["load"]["locust_processes"] == 2


def test_the_manifest_says_which_role_ran_where_with_each_hosts_facts(studies, lab):
    run, _ = studies
    hosts, _, _ = lab
    placed = json.loads((run / "manifest.json").read_text())["hosts"]
    assert {name: entry["roles"] for name, entry in placed.items()} == {
        "master": ["locust-master"], "upstream": ["mock"], "gateway": ["system"],
        "load": ["locust-worker", "locust-worker"]}
    assert placed["upstream"]["address"] == hosts[1].address
    for entry in placed.values():
        assert entry["before"]["kernel"] and entry["before"]["cpu_count"] >= 1
        assert entry["before"]["cpu_model"] and "load_avg_1m" in entry["before"]
        assert "load_avg_1m" in entry["after"]
    study = json.loads((run.parents[2] / "manifest.json").read_text())
    assert study["hosts"]["gateway"]["facts"]["kernel"] and study["config"]["topology"]


def test_each_hosts_samples_are_present(studies):
    run, _ = studies
    samples = pd.read_parquet(run / "samples.parquet")
    roles = samples.groupby("host").role.agg(set).to_dict()
    assert roles == {"master": {"locust", "machine"}, "upstream": {"mock", "machine"},
                     "gateway": {"system", "machine"}, "load": {"locust", "machine"}}
    system = samples[samples.role == "system"]
    assert system.rss_bytes.max() > 1_000_000 and system.pid_count.max() >= 2  # nginx master+worker
    workers = samples[(samples.host == "load") & (samples.role == "locust")]
    assert workers.pid_count.max() == 2 and workers.cpu_seconds_total.max() > 0
    # A rate, not the first sample's CPU seconds over a near-zero interval.
    assert samples[samples.role == "mock"].cpu_percent.max() < 1000


def hold_stats(run: Path) -> dict:
    phases = json.loads((run / "manifest.json").read_text())["phases"]
    rows = pd.read_parquet(run / "requests.parquet")
    hold = rows[rows.phase == "hold"]
    start, end = phases["hold_start_t_unix_s"], phases["hold_end_t_unix_s"]
    bins = start + np.arange(math.floor(end - start) + 1)  # whole seconds of the hold
    per_second = np.histogram(hold.start_t_unix_s, bins=bins)[0]
    q1, median, q3 = np.percentile(hold.latency_ms, [25, 50, 75])
    return {"rps": len(hold) / (end - start), "bins_mean": per_second.mean(),
            "bins_se": per_second.std(ddof=1) / math.sqrt(len(per_second)),
            "p50_ms": median, "iqr_ms": q3 - q1, "errors": int((rows.error_kind != "").sum())}


def test_results_match_a_single_host_run_within_its_spread(studies):
    multi, single = (hold_stats(run) for run in studies)
    print(f"single-host: {single}\nmulti-host: {multi}")
    assert multi["errors"] == single["errors"] == 0
    # Throughput of the paced loop: the difference of the per-second means within 3 standard
    # errors of that difference (at least 5 %, the resolution of a 6 s hold).
    spread = 3 * math.hypot(multi["bins_se"], single["bins_se"])
    assert abs(multi["bins_mean"] - single["bins_mean"]) <= max(spread, 0.05 * single["bins_mean"])
    # Median latency within twice the runs' interquartile ranges (plus 2 ms of scheduling noise
    # on a shared 2-core machine): a real extra hop or a stall would be far outside.
    assert abs(multi["p50_ms"] - single["p50_ms"]) <= 2 * (multi["iqr_ms"] + single["iqr_ms"]) + 2.0


def test_stopping_the_study_stops_every_process_in_every_namespace(lab):
    hosts, topology, tmp = lab
    argv = study_command(tmp, "stopped", topology, hold_s=60.0, max_hold_s=60.0)
    proc = subprocess.Popen([*hosts[0].prefix, *argv], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        seen = []
        for line in proc.stdout:  # bounded: the study prints a line at least every 5 s
            seen.append(line)
            if "starting load" in line or time.monotonic() > deadline:
                break
        assert any("starting load" in line for line in seen), "".join(seen)
        run = tmp / "stopped" / "runs" / "nginx" / "1"
        # master and both workers running, processes (samplers included) on every host
        assert wait_for(lambda: len(list((run / "pids").glob("locust-worker-*.pid"))) == 2
                        and all(netns.pids_in(h.netns) for h in hosts[1:]), 30)
        os.kill(proc.pid, signal.SIGTERM)  # `ip netns exec` execs: this is the study itself
        proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert proc.returncode == 1
    left = {h.netns: netns.pids_in(h.netns) for h in hosts}
    assert not any(left.values()), left
    manifest = json.loads((tmp / "stopped" / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert json.loads((run / "manifest.json").read_text())["status"] == "interrupted"
