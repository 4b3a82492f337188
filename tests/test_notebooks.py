"""The committed notebooks: parameterised, without outputs. The study notebook executed through
its command, as a user runs it: tests/test_one_path.py."""

from harness.model.config import REPO_DIR


def test_committed_notebooks_have_no_outputs():
    import nbformat  # a 1.8 s import: only the tests that read notebooks pay it
    for path in (REPO_DIR / "notebooks").glob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), path
        assert any("parameters" in c.metadata.get("tags", []) for c in nb.cells), path
