"""Imports run one way: each folder of harness/ (and report/, mocks/) imports only the layers
below it, as the layers table of docs/architecture.md states. The table here is that table; a new arrow
against it fails with the file and the import. And Sluice (gateways/sluice: its package, its
tests, its tools) imports nothing of the study."""
from __future__ import annotations

import ast
import importlib.util
import shutil
from pathlib import Path

from harness.model.config import REPO_DIR

# layer -> the layers it may import (besides itself, the standard library and third parties).
BELOW = {
    "mocks": set(),
    "harness.model": set(),
    "harness.files": {"harness.model", "mocks"},
    "harness.host": {"harness.model", "harness.files"},
    "harness.remote": {"harness.model", "harness.files", "harness.host"},
    "harness.run": {"harness.model", "harness.files", "harness.host", "harness.remote", "mocks"},
    "harness.stats": {"harness.model", "harness.files"},
    "harness.verdicts": {"harness.model", "harness.files", "harness.stats"},
    "report": {"harness.model", "harness.files", "harness.stats"},
    "harness.commands": {"harness.model", "harness.files", "harness.host", "harness.remote",
                         "harness.run", "harness.stats", "harness.verdicts", "report", "mocks"},
    "harness": {"harness.commands"},      # harness/__main__.py
}


def layer_of(module: str) -> str | None:
    for name in sorted(BELOW, key=len, reverse=True):
        if module == name or module.startswith(name + "."):
            return name
    return None


def _module_name(path: Path, root: Path = REPO_DIR) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def imported(path: Path, root: Path = REPO_DIR) -> list[tuple[int, str]]:
    """(line, module) of every import in a file, ``from a import b`` as ``a.b`` when b is a
    module (so ``from harness import stats`` is an arrow to harness.stats)."""
    out = []
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                ours = layer_of(base) is not None   # never import a third party to look
                out.append((node.lineno, full if ours and _is_module(full) else base))
    return out


def arrows_against_the_layers(root: Path = REPO_DIR) -> list[str]:
    wrong = []
    for top in ("harness", "report", "mocks"):
        for path in sorted((root / top).rglob("*.py")):
            source = layer_of(_module_name(path, root))
            for line, module in imported(path, root):
                target = layer_of(module)
                if target is None or target == source:
                    continue
                if target not in BELOW[source]:
                    wrong.append(f"{path.relative_to(root)}:{line}: {source} imports "
                                 f"{module} ({target} is not below {source})")
    return wrong


def test_imports_run_one_way():
    assert arrows_against_the_layers() == []


def test_the_check_sees_an_arrow_against_the_layers(tmp_path):
    """The walker finds a stats -> run import planted in a copy of the tree (so the test above
    can fail), without writing into the repository."""
    for top in ("harness", "report", "mocks"):
        shutil.copytree(REPO_DIR / top, tmp_path / top,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c"))
    (tmp_path / "harness" / "stats" / "_layer_probe.py").write_text("from harness.run import study\n")
    wrong = arrows_against_the_layers(tmp_path)
    assert wrong == ["harness/stats/_layer_probe.py:1: harness.stats imports harness.run.study "
                     "(harness.run is not below harness.stats)"]


STUDY = ("harness", "mocks", "report")


def study_imports(folder: Path) -> list[str]:
    """Every import of the study (harness/, mocks/, report/) in a folder's Python files, its
    build products left out."""
    wrong = []
    for path in sorted(folder.rglob("*.py")):
        if path.relative_to(folder).parts[0] == "build":
            continue
        for line, module in imported(path, folder):
            if module.split(".")[0] in STUDY:
                wrong.append(f"{path.relative_to(folder)}:{line}: imports {module}")
    return wrong


def test_sluice_knows_nothing_of_the_study():
    assert study_imports(REPO_DIR / "gateways" / "sluice") == []


def test_the_check_sees_sluice_import_the_study(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_probe.py").write_text("import os\nfrom mocks import server\n")
    assert study_imports(tmp_path) == ["tests/test_probe.py:2: imports mocks.server"]


def test_the_docs_state_the_same_layers():
    page = (REPO_DIR / "docs" / "architecture.md").read_text()
    for layer, below in BELOW.items():
        if layer == "harness":
            continue
        folder = layer.replace(".", "/") + "/"
        allowed = ", ".join(sorted(b.replace(".", "/") + "/" for b in below)) or "nothing"
        assert f"| `{folder}` | {allowed} |" in page, (
            f"docs/architecture.md's layers table: the row of {folder} should say it may import {allowed}")
