"""The mock stands alone: nothing in mocks/ imports the harness or the report (the
instrument must not depend on what it measures for)."""
import ast
from pathlib import Path

MOCKS_DIR = Path(__file__).resolve().parent.parent / "mocks"
FORBIDDEN = ("harness", "report")


def _imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import statement and every importlib/__import__ call with a
    literal name, anywhere in the file (functions included)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Name) and node.func.id == "__import__")
                   or (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"))):
            found.append((node.lineno, node.args[0].value))
    return found


def test_mocks_import_neither_harness_nor_report():
    sources = sorted(MOCKS_DIR.glob("*.py"))
    assert len(sources) > 5, f"no mock sources found in {MOCKS_DIR}"
    offending = [f"{path.name}:{line}: {module}"
                 for path in sources
                 for line, module in _imported_modules(ast.parse(path.read_text(), filename=str(path)))
                 if module.split(".")[0] in FORBIDDEN]
    assert offending == []


def test_the_import_check_sees_a_harness_import():
    code = ("import os\nfrom harness.stats.identity import mock_self_time\n"
            "def f():\n    import report.tables\n    importlib.import_module('harness.run')\n")
    assert [module for _, module in _imported_modules(ast.parse(code))] == [
        "os", "harness.stats.identity", "report.tables", "harness.run"]
