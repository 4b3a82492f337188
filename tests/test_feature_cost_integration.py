"""The feature-cost lane for real at tiny scale, through papermill: every feature of Sluice
beside the direct floor in both dialects, with agent-sized bodies, and the report's section."""
import json
import math
import subprocess
import sys

import pandas as pd
import pytest

from harness import stats as A
from harness.model.config import REPO_DIR

pytestmark = [pytest.mark.integration, pytest.mark.slow]   # ~90 s: seven systems through papermill


def test_feature_cost_lane_runs_through_papermill(tmp_path):
    """Every feature of Sluice for real, beside the floor (direct) in both dialects, with
    32 KiB agent-style bodies; the report gains its feature-cost section."""
    out = tmp_path / "artifacts"
    done = subprocess.run(
        [sys.executable, "-m", "harness", "notebook", "--profile", "feature_cost",
         "--set", "runs_per_gateway=1", "--set", "users=3", "--set", "warmup_users=1",
         "--set", "ramp_s=1", "--set", "hold_s=2", "--set", "warmup_s=1", "--set", "idle_s=0.5",
         "--set", "cooldown_s=0.5", "--set", f'out_dir="{out}"', "--set", 'study_id="fc"'],
        cwd=REPO_DIR, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    study = out / "fc"
    assert json.loads((study / "manifest.json").read_text())["status"] == "completed"
    for run_dir in (study / "runs").glob("*/1"):
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["status"] == "completed", (run_dir, manifest["reason"])
        assert (run_dir / "request-body.json").stat().st_size == 32768
        rows = pd.read_parquet(run_dir / "requests.parquet")
        assert len(rows) and (rows["status_code"] == 200).all()
        assert manifest["checks"]["count_match"]
        expected = "anthropic" if "anthropic_to_openai" in run_dir.parent.name else "openai"
        assert manifest["request"]["dialect"] == expected
    mock = json.loads((study / "runs" / "sluice@anthropic_to_openai" / "1" / "mock_stats.json").read_text())
    assert "/v1/chat/completions" in json.dumps(mock)  # translated: the provider saw OpenAI calls
    html = (study / "report.html").read_text()
    assert 'id="feature-cost-table"' in html and "sluice@openai_to_anthropic" in html
    assert not math.isnan(A.feature_cost(A.load_study(study))["mean"].iloc[0])
