"""Suites of cells: a base configuration plus axes, each combination run as a whole study with
the floor (direct) (file format: harness/model/suite.py). The cells are cleared here (each
study's preflight), then papermill executes notebooks/suite.ipynb with them handed on, which runs
them and builds the suite's report. What `make faults` and `make inflight` run.

    python -m harness suite notebooks/suites/load-levels.toml --dry-run   # cells, exclusions, keys
    python -m harness suite notebooks/suites/streaming.toml [--out-dir artifacts/suites] [--suite-id ID]
    python -m harness suite notebooks/suites/faults.toml --runs-per-gateway 1   # 1 run per configured system
    python -m harness suite --compare artifacts/suites/A artifacts/suites/B

Each suite writes <out-dir>/<suite-id>/: its manifest, one study per cell, the executed notebook
(suite.ipynb) and report.html (`python -m harness report <suite-dir>` builds it again).
"""
from __future__ import annotations

import argparse

HELP = "run a suite of cells through notebooks/suite.ipynb (or list them, or compare two suites)"
NOTEBOOK = "suite.ipynb"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("suite", nargs="?", help="a suite file, e.g. notebooks/suites/streaming.toml")
    parser.add_argument("--out-dir", default="artifacts/suites")
    parser.add_argument("--suite-id", default="", help="default: <name>-<UTC timestamp>; an "
                        "existing one resumes it")
    parser.add_argument("--runs-per-gateway", default=None, metavar="N",
                        help="runs per configured system, overriding the suite's (make faults RUNS=N)")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the cells, the combinations left out and why, and the keys")
    parser.add_argument("--compare", nargs=2, metavar=("SUITE_DIR_A", "SUITE_DIR_B"))


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from harness.model.suite import SuiteError, load_suite, with_runs_per_gateway
    from harness.run.suite_run import cells_table, preflight_suite
    with pd.option_context("display.width", 200, "display.max_columns", 50,
                           "display.max_colwidth", 120):
        if args.compare:
            from report.suite_report import compare_suites, comparison_text
            print(comparison_text(compare_suites(*args.compare)))
            return 0
        if not args.suite:
            raise SuiteError("a suite file (or --compare A B) is needed")
        suite = with_runs_per_gateway(load_suite(args.suite), args.runs_per_gateway)
        cleared = preflight_suite(suite, args.out_dir, args.suite_id)
        print(cells_table(cleared.cells).to_string(index=False), flush=True)
    if args.dry_run:
        return 0
    if not any(c.cleared for c in cleared.cells):
        raise SuiteError("no cell of this suite can run")
    from harness.commands.executing import execute
    from harness.files.study_files import SuiteFiles
    from report.suite_report import REPORT_NAME
    executed = cleared.suite_dir / NOTEBOOK
    if not execute(NOTEBOOK, executed, cleared):
        return 1
    status = SuiteFiles(cleared.suite_dir).read_manifest().status
    print(f"\nsuite {status}: {cleared.suite_dir}\n  notebook:  {executed}\n"
          f"  report:    {cleared.suite_dir / REPORT_NAME}")
    return 0 if status == "completed" else 1
