"""The gate's timed check for real at tiny scale: the gate profile's study of two Sluice entries
side by side, the head slowed by 1 ms a request (SLUICE_TEST_DELAY_MS, its environment alone),
judged as `gate run` judges it; it must fail in every round, so it fails every time."""
import os
import shutil

import pytest

from harness.model.config import from_profile
from harness.run.preflight import preflight
from harness.run.study import run_study
from harness.verdicts import gate

pytestmark = [
    pytest.mark.integration,
    # the wire-timed in-gateway figure is the one the delay moves most (net overhead carries
    # the load generator's own time too): the check is tried as the gate runs it, with it
    pytest.mark.skipif(not shutil.which("tcpdump") or os.geteuid() != 0,
                       reason="needs tcpdump (scripts/install-test-deps.sh) and root to capture"),
]


def test_a_head_slowed_by_one_millisecond_fails_the_timed_check(tmp_path):
    # The base is this tree's Sluice too (no `builds` entry): the two entries differ only by the
    # delay, and `make gate` builds a base commit for real.
    config = from_profile("gate", gateways=["sluice~base", "sluice"], users=10, ramp_s=2.0,
                          hold_s=5.0, warmup_s=1.0, idle_s=0.5, cooldown_s=0.5,
                          runs_per_gateway=2, wire_capture_s=3.0, wire_capture_offset_s=1.0,
                          out_dir=str(tmp_path), study_id="timed",
                          system_env=["sluice:SLUICE_TEST_DELAY_MS=1"])
    result = run_study(preflight(config), progress=lambda m: None)
    assert [r.status for r in result.records] == ["completed"] * 4, [r.reason for r in result.records]
    verdict = gate.judge(result.study_dir, tmp_path / "no-history", timed_only=True)
    assert verdict.exit_code == gate.EXIT_FAIL, verdict.text
    failed = [line for line in verdict.lines if line.startswith("FAIL")]
    assert failed and all("(sluice/sluice~base)" in line and "2 of 2 rounds worse" in line
                          for line in failed), verdict.text
    assert any(line.startswith("FAIL in-gateway time p50 (wire)") for line in failed), verdict.text
