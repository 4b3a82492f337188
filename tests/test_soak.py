"""A short, bounded soak of the in-house gateway: flat under load, back to idle after it."""
import pytest

from harness.model.config import from_profile
from harness.run.preflight import preflight
from harness.run.study import run_study
from harness.stats import load_study
from harness.verdicts.soak import soak_summary

pytestmark = pytest.mark.integration


def test_sluice_soak_is_flat_and_returns_to_idle(tmp_path):
    config = from_profile("soak", hold_s=12.0, max_hold_s=20.0, cooldown_s=13.0, users=40,
                          out_dir=str(tmp_path))
    result = run_study(preflight(config), progress=lambda m: None)
    assert result.status == "completed" and result.records[0].status == "completed", \
        result.records[0].reason
    study = load_study(result.study_dir)
    system = study.samples[study.samples.role == "system"]
    assert system.inflight_requests.notna().all()  # read from Sluice's /metrics every second
    assert system.inflight_requests.max() >= 1
    table = soak_summary(study)
    row = table.iloc[0]
    assert row.requests_in_hold > 500
    assert row.inflight_after == 0 and row.fds_after <= row.fds_idle + 2, row.to_dict()
    assert row.verdict == "flat", row.reasons
