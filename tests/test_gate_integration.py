"""The gate, for real at tiny scale: two builds of Sluice side by side (the base a worktree of
this repository's HEAD, built the same way), an unchanged head passes the comparison and a head
slowed on purpose (SLUICE_TEST_DELAY_MS, its environment alone) fails it."""
import pytest

from harness.model.config import from_profile
from harness.run.preflight import preflight
from harness.run.study import run_study
from harness.verdicts import gate

pytestmark = pytest.mark.integration


def tiny_gate(tmp_path, study_id, head_env=()):
    config = from_profile("gate", gateways=["sluice~base", "sluice"], aa_pair=(), users=10,
                          ramp_s=2.0, hold_s=5.0, warmup_s=1.0, idle_s=0.5, cooldown_s=0.5,
                          runs_per_gateway=2, wire_capture_s=0, out_dir=str(tmp_path),
                          study_id=study_id, builds=["sluice~base=HEAD"],
                          system_env=[f"sluice:{item}" for item in head_env])
    result = run_study(preflight(config), progress=lambda m: None)
    assert [r.status for r in result.records] == ["completed"] * 4, [r.reason for r in result.records]
    return result.study_dir


def test_a_slowed_head_fails_against_its_base_build(tmp_path):
    slowed = tiny_gate(tmp_path, "slowed", head_env=("SLUICE_TEST_DELAY_MS=25",))
    verdict = gate.judge(slowed, tmp_path / "no-history")
    assert verdict.exit_code == gate.EXIT_FAIL, verdict.text
    failed = [line for line in verdict.lines if line.startswith("FAIL")]
    assert any("net overhead p50 (sluice/sluice~base)" in line for line in failed), verdict.text
    assert "base sluice~base (" in verdict.lines[1]
