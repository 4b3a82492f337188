"""gateways/sluice/soak_hostile.py at a tiny scale: it starts Sluice and its providers, runs a
normal-only and a hostile phase, every attack class at least once, and writes its report.
Only the report's shape is checked here, never its verdict: the verdict is measured on an idle
machine, at full length."""
import json
import os
import subprocess
import sys

import pytest
import soak_attacks  # gateways/sluice is on the tests' path
from sluice_helpers import SLUICE_DIR

pytestmark = pytest.mark.integration

SCRIPT = os.path.join(SLUICE_DIR, "soak_hostile.py")


def test_tiny_soak_runs_every_attack_class_and_reports(tmp_path):
    out = tmp_path / "soak.json"
    done = subprocess.run([sys.executable, SCRIPT, "--minutes", "0.3", "--phase-s", "10", "--users", "5",
                           "--workers", "2", "--client-timeout-s", "2", "--overrun-cap-s", "3",
                           "--out", str(out)], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "verdict:" in done.stdout and "attack class" in done.stdout
    report = json.loads(out.read_text())
    assert report["schema_version"] == 1
    assert report["sluice_compiled"] is (os.environ.get("SLUICE_PURE_PYTHON") != "1")
    assert [p["kind"] for p in report["phases"]] == ["normal_only", "hostile"]
    for phase in report["phases"]:
        assert phase["normal_requests"] > 0 and phase["normal_p99_ms"] >= phase["normal_p50_ms"] > 0
    classes = report["attack_classes"]
    assert set(classes) == set(soak_attacks.ATTACKS) | {"lying_provider"}
    for name, c in classes.items():
        assert c["attacks"] >= 1, f"attack class {name} never ran"
        answered = sum(c["answers_by_status"].values())
        assert answered + c["no_answer"] == c["attacks"], (name, c)
        assert c["max_overrun_s"] >= 0
    assert isinstance(report["worker_deaths"], int) and len(report["worker_pids_start"]) == 2
    rss = report["rss"]
    assert min(rss["launch_mib"], rss["start_mib"], rss["end_mib"], rss["peak_mib"]) > 0
    assert rss["growth_mib"] == pytest.approx(rss["end_mib"] - rss["start_mib"], abs=0.02)
    for kind in ("normal_only", "hostile"):
        assert report["normal_latency"][kind]["p99_ms"]["phases"] == 1
    verdict = report["verdict"]
    assert set(verdict["criteria"]) == {"no_worker_death", "rss_growth_under_20_mb",
                                        "connections_within_deadline", "hostile_p99_within_normal_spread"}
    assert verdict["criteria"]["hostile_p99_within_normal_spread"]["pass"] is None  # one phase of each
    assert verdict["pass"] in (False, None)
