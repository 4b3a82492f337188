"""The gate catches a Sluice slowed on purpose (SLUICE_TEST_DELAY_MS), measured for real."""
import pytest

from harness.checks import gate
from harness.model.config import from_profile
from harness.run.study import run_study

pytestmark = pytest.mark.integration


def tiny_gate(tmp_path, study_id):
    config = from_profile("gate", gateways=["nginx", "sluice"], aa_pair=[], users=10, ramp_s=2.0, hold_s=5.0,
                          warmup_s=1.0, idle_s=0.5, cooldown_s=0.5, runs_per_gateway=2,
                          out_dir=str(tmp_path), study_id=study_id)
    result = run_study(config, progress=lambda m: None)
    assert [r.status for r in result.records] == ["completed"] * 4, [r.reason for r in result.records]
    return result.study_dir


def test_slowed_sluice_fails_the_gate(tmp_path, monkeypatch):
    baseline = tmp_path / "gate.json"
    normal = tiny_gate(tmp_path, "normal")
    assert gate.refresh(normal, baseline).exit_code == gate.EXIT_OK
    monkeypatch.setenv("SLUICE_TEST_DELAY_MS", "25")
    slowed = tiny_gate(tmp_path, "slowed")
    verdict = gate.check(slowed, baseline)
    assert verdict.exit_code == gate.EXIT_FAIL, verdict.text
    failed = [line for line in verdict.lines if line.startswith("FAIL")]
    assert any("median overhead ratio" in line for line in failed), verdict.text
    assert all("baseline from commit" in line for line in failed)
