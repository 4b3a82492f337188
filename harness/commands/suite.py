"""Suites of cells: a base configuration plus axes, each combination run as a whole study with
the floor (direct) (file format: harness/model/suite.py).

    python -m harness suite notebooks/suites/load-levels.toml --dry-run   # cells, exclusions, keys
    python -m harness suite notebooks/suites/streaming.toml [--out-dir artifacts/suites] [--suite-id ID]
    python -m harness suite --compare artifacts/suites/A artifacts/suites/B

Each suite writes <out-dir>/<suite-id>/ (its manifest, one study per cell); `python -m harness
report <suite-dir>` builds its report.
"""
from __future__ import annotations

import argparse

HELP = "run a suite of cells (or list them, or compare two suites)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("suite", nargs="?", help="a suite file, e.g. notebooks/suites/streaming.toml")
    parser.add_argument("--out-dir", default="artifacts/suites")
    parser.add_argument("--suite-id", default="", help="default: <name>-<UTC timestamp>; an "
                        "existing one resumes it")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the cells, the combinations left out and why, and the keys")
    parser.add_argument("--compare", nargs=2, metavar=("SUITE_DIR_A", "SUITE_DIR_B"))


# what a row of two cells on different machines shows: each side's figures, nothing judged
_SIDE_BY_SIDE = {"n_ref": "n_A", "mean_ref": "mean_A", "sd_ref": "sd_A", "n": "n_B", "mean": "mean_B",
                 "sd": "sd_B"}


def compare_text(a_dir: str, b_dir: str) -> str:
    """Suite B against suite A as text: both suites' machines, the different-machines sentence
    when their CPUs differ, the verdicts of cells on the same machine and the bare figures of
    cells on different ones, and the cells not comparable."""
    from harness.stats import suite_cells as S
    from harness.stats.across import VERDICT_ONLY
    from report.suite_report import machines_of
    compared, apart = S.compare_suites(a_dir, b_dir)
    machines = machines_of(S.cell_machines(a_dir, b_dir))
    out = [f"A ({a_dir}) measured on {'; '.join(machines['a']) or '—'}",
           f"B ({b_dir}) measured on {'; '.join(machines['b']) or '—'}", *machines["different"], ""]
    if not len(compared):
        out.append("no cell has a key in both")
    else:
        same = compared["same_machine"].astype(bool)
        if same.any():
            out.append(compared[same].drop(columns="same_machine").to_string(index=False))
        if (~same).any():
            other = compared[~same]
            axes = [c for c in other.columns if c not in VERDICT_ONLY and c not in _SIDE_BY_SIDE
                    and c != "same_machine"]
            out.append(("\n" if same.any() else "")
                       + "on different machines (figures side by side, no verdict):\n"
                       + other[axes + list(_SIDE_BY_SIDE)].rename(columns=_SIDE_BY_SIDE)
                       .to_string(index=False))
    if len(apart):
        out.append("\nnot comparable:\n" + apart.to_string(index=False))
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from harness.model.suite import SuiteError, load_suite
    from harness.run.suite_run import cells_table, expand, run_suite
    from harness.stats.suite_cells import suite_table
    with pd.option_context("display.width", 200, "display.max_columns", 50,
                           "display.max_colwidth", 120):
        if args.compare:
            print(compare_text(*args.compare))
            return 0
        if not args.suite:
            raise SuiteError("a suite file (or --compare A B) is needed")
        suite = load_suite(args.suite)
        cells = expand(suite, args.out_dir)
        print(cells_table(cells).to_string(index=False))
        if args.dry_run:
            return 0
        if not any(c.config for c in cells):
            raise SuiteError("no cell of this suite can run")
        result = run_suite(suite, cells, args.out_dir, args.suite_id)
        print(suite_table(result.suite_dir).to_string(index=False))
    return 0 if result.status == "completed" else 1
