"""Papermill smoke run of the study notebook through the study command, as a user runs it."""
import json
import subprocess
import sys

import pytest

from harness.model.config import REPO_DIR

pytestmark = pytest.mark.integration


def test_study_command_executes_the_notebook(tmp_path):
    import nbformat  # a 1.8 s import: only the tests that read notebooks pay it
    out = tmp_path / "artifacts"
    done = subprocess.run(
        [sys.executable, "-m", "harness", "notebook", "--profile", "smoke", "--gateways", "direct,nginx",
         "--set", f'out_dir="{out}"', "--set", "study_id=\"nb-smoke\""],
        cwd=REPO_DIR, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    study = out / "nb-smoke"
    assert "report:" in done.stdout and str(study) in done.stdout
    output = done.stdout + done.stderr
    assert "nginx run 1] verified" in output and "completed in" in output  # progress is visible
    assert json.loads((study / "manifest.json").read_text())["status"] == "completed"
    executed = nbformat.read(study / "head_to_head.ipynb", as_version=4)
    outputs = [o for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert "direct" in html and "nginx" in html and "throughput (req/s)" in html  # head-to-head
    assert (study / "report.html").is_file()


def test_committed_notebooks_have_no_outputs():
    import nbformat  # a 1.8 s import: only the tests that read notebooks pay it
    for path in (REPO_DIR / "notebooks").glob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), path
        assert any("parameters" in c.metadata.get("tags", []) for c in nb.cells), path
