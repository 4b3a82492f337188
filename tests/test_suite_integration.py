"""The smoke suite for real through papermill: its cells run or are excluded with the reason,
its report and notebook show them, and a copy of it compares cell by cell."""
import json
import shutil

import pytest

from harness.model.config import REPO_DIR
from harness.model.formats import SUITE_MANIFEST
from report import format as F
from report import suite_data as S

pytestmark = pytest.mark.integration


def test_smoke_suite_through_papermill(tmp_path):
    import nbformat  # a 1.8 s import: only the tests that read notebooks pay it
    import papermill
    out = tmp_path / "suites"
    executed = tmp_path / "suite.ipynb"
    papermill.execute_notebook(
        str(REPO_DIR / "notebooks" / "suite.ipynb"), str(executed), kernel_name="python3",
        cwd=str(REPO_DIR / "notebooks"), progress_bar=False,
        parameters={"suite_file": "notebooks/suites/smoke.toml", "out_dir": str(out),
                    "suite_id": "smoke-test"})
    suite_dir = out / "smoke-test"
    manifest = json.loads((suite_dir / "manifest.json").read_text())
    assert manifest["schema_version"] == SUITE_MANIFEST.version and manifest["status"] == "completed"
    by_status = {}
    for cell in manifest["cells"]:
        by_status.setdefault(cell["status"], []).append(cell)
    assert len(by_status["completed"]) == 2 and len(by_status["excluded"]) == 2
    assert all("request_timeout_s: must exceed the mock latency" in c["excluded"]
               for c in by_status["excluded"])
    for cell in by_status["completed"]:
        study = json.loads((suite_dir / cell["dir"] / "manifest.json").read_text())
        assert study["status"] == "completed" and study["config"]["gateways"] == ["direct", "nginx"]
        assert [r["status"] for r in study["runs"]] == ["completed", "completed"]
        assert study["config"]["stream"] == cell["values"]["request.stream"]
    report = (suite_dir / "report.html").read_text()
    assert 'id="suite-cells-table"' in report and 'id="suite-table"' in report
    assert "cell-01/report.html" in report and F.heading("ttft_overhead_p50_ms") in report
    nb = nbformat.read(executed, as_version=4)
    text = json.dumps([c.get("outputs") for c in nb.cells if c.cell_type == "code"])
    assert "cannot run" in text and F.heading("overhead_vs_direct_p99_ms") in text
    # a second suite with the same cells is comparable cell by cell, by key
    shutil.copytree(suite_dir, out / "copy")
    compared, apart = S.compare_suites(S.collect_suite(suite_dir), S.collect_suite(out / "copy"))
    assert set(compared["cell_a"]) == {c["cell_id"] for c in by_status["completed"]} and apart.empty
