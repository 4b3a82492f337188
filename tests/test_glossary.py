"""One name per idea: a word the glossary retired (harness.model.glossary.RETIRED) is in no
document and no code in the sense retired, no notebook takes a retired parameter, and a study
given one is refused with the name that replaced it."""
from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import Path

import pytest

from harness.model import glossary
from harness.model.config import REPO_DIR, ConfigError, StudyConfig, from_profile, parse_overrides
from harness.model.suite import SuiteError, field_of

# What is read: the documents, the code and the notebooks, each system's declaration.
FILES = ("README.md", "CHANGELOG.md", "CONTRIBUTING.md", "Makefile", "artifacts/README.md",
         "gateways/README.md")
TREES = ("docs", "harness", "report", "mocks", "notebooks", "scripts", "examples")
GLOBS = ("gateways/*/gateway.toml",)
TEXT = {".py", ".md", ".toml", ".ipynb", ".j2", ".html", ".css", ".txt", ".sh", ".yml", ".yaml"}
# The one place that lists the retired words, and the one that reads artifacts written with them.
NAMING_THEM = ("harness/model/glossary.py", "harness/model/migrate.py")


def read_files(root: Path) -> list[Path]:
    found = [root / name for name in FILES if (root / name).is_file()]
    for tree in TREES:
        found += [p for p in sorted((root / tree).rglob("*"))
                  if p.is_file() and p.suffix in TEXT and "__pycache__" not in p.parts]
    for pattern in GLOBS:
        found += sorted(root.glob(pattern))
    return [p for p in found if p.relative_to(root).as_posix() not in NAMING_THEM]


def retired_words(root: Path = REPO_DIR) -> list[str]:
    """path:line: every retired word found, with what says it now."""
    found = []
    for path in read_files(root):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for word in glossary.RETIRED:
                if re.search(word.pattern, line):
                    found.append(f"{path.relative_to(root)}:{number}: {word.word!r} is retired, "
                                 f"use {word.use!r} ({word.why})")
    return found


def notebook_parameters(path: Path) -> set[str]:
    """The names a notebook's papermill parameters cell assigns."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    names = set()
    for cell in cells:
        if "parameters" in cell.get("metadata", {}).get("tags", ()):
            tree = ast.parse("".join(cell["source"]))
            names |= {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                      for t in node.targets if isinstance(t, ast.Name)}
    return names


def test_no_retired_word_in_the_code_or_the_documents():
    assert retired_words() == []


def test_the_check_finds_a_retired_word_and_leaves_the_kept_names(tmp_path):
    """A planted retired word is found, so the test above can fail; the gate's records
    (baselines/) and the parameter that replaced runs are not."""
    (tmp_path / "README.md").write_text(
        "Overheads against the direct Baseline.\n"            # 1: found
        "The gate's records are in baselines/gate/.\n"        # kept
        "papermill -p runs 3 notebooks/head_to_head.ipynb\n"  # 3: found
        "make study SET='--set runs_per_gateway=1'\n")        # kept
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "x.py").write_text("baseline_stats = {}\nruns = [1]\n")
    found = retired_words(tmp_path)
    assert [line.partition(": ")[0] for line in found] == ["README.md:1", "README.md:3",
                                                          "harness/x.py:1"]
    assert "'baseline' is retired, use 'floor'" in found[0]


def test_no_notebook_takes_a_retired_parameter():
    notebooks = sorted((REPO_DIR / "notebooks").glob("*.ipynb"))
    assert notebooks
    for path in notebooks:
        taken = notebook_parameters(path)
        assert not [n for n in taken if glossary.retired_parameter(n)], path.name
    # the study notebook takes its settings as one table, checked by from_profile (below)
    assert "settings" in notebook_parameters(REPO_DIR / "notebooks" / "head_to_head.ipynb")


@pytest.mark.parametrize("given", [
    lambda: from_profile("smoke", runs=3),
    lambda: from_profile("smoke", **parse_overrides(["runs=3"])),
])
def test_a_retired_parameter_is_refused_naming_its_replacement(given):
    with pytest.raises(ConfigError, match="^invalid study parameter: runs: retired; use "
                                          "runs_per_gateway$"):
        given()


def test_a_suite_naming_a_retired_parameter_is_told_its_replacement():
    with pytest.raises(SuiteError, match="^runs: retired; use runs_per_gateway$"):
        field_of("runs")


def test_each_retired_word_names_what_replaced_it():
    """A retired word points at a glossary word, or (a parameter) at a study setting."""
    words = {w for term in glossary.TERMS for w in term.word.split(", ")}
    settings = {f.name for f in dataclasses.fields(StudyConfig)}
    for word in glossary.RETIRED:
        assert word.use in (settings if word.parameter else words), word.word
        assert re.search(word.pattern, word.word if not word.parameter else f"-p {word.word} 3")
