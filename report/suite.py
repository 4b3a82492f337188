"""The HTML report of a suite: every cell with its axis values and headline figures, the
combinations left out and why, and a link to each cell's own study report.

    python -m harness report SUITE_DIR [--compare OTHER_SUITE_DIR]

writes SUITE_DIR/report.html (and each cell's report.html when it is missing).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
from markupsafe import Markup

from harness.model.metrics import metric
from harness.run import suite as S
from harness.run.store import read_json
from report import build
from report import format as F
from report.sections import render, style
from report.table import Cell, Part, Row, Table, cell, from_frame, table
from report.tables import suite_cells

REPORT_NAME = "report.html"


def compare_table(comparison: pd.DataFrame) -> Table:
    """compare_suites' rows: per cell, system and metric, A and B, B/A and the verdict."""
    rows = []
    for r in comparison.to_dict("records"):
        m = metric(r["metric"])
        axes = [r[c] for c in comparison.columns if c not in _COMPARE_NUMBERS]
        rows.append([*axes, F.heading(m), F.value(r["mean_ref"], m), F.value(r["mean"], m),
                     F.effect(r, m), F.DASH if F.isnan(r["p_value"]) else f"{r['p_value']:.3g}",
                     cell(F.verdict_word(r["outcome"], m), span=F.verdict_class(r["outcome"])),
                     F.verdict_reason(r)])
    axes = [c for c in comparison.columns if c not in _COMPARE_NUMBERS]
    return table([*axes, "metric", "mean A", "mean B", "B / A (or B − A)", "Welch p", "verdict", "why"],
                 rows, "suite-compare-table", wide=True)


_COMPARE_NUMBERS = {"metric", "n", "n_ref", "mean", "sd", "mean_ref", "sd_ref", "ratio", "ratio_sd",
                    "diff", "diff_low", "diff_high", "t", "p_value", "outcome", "basis"}


def cells_frame(suite_dir: str | Path) -> pd.DataFrame:
    """The per-cell table as the report shows it (for notebooks)."""
    return suite_cells(S.suite_table(suite_dir), S.CELL_METRICS + S.LANE_METRICS, "").frame()


def render_suite_html(suite_dir: str | Path, compare_with: str | Path | None = None) -> str:
    suite_dir = Path(suite_dir)
    manifest = read_json(suite_dir / "manifest.json")
    cells = []
    for entry in manifest["cells"]:
        study = suite_dir / entry["dir"] if entry.get("dir") else None
        if study is not None and (study / "manifest.json").is_file() and not (study / REPORT_NAME).is_file():
            build.build_report(study)
        report = (f"{entry['dir']}/{REPORT_NAME}" if study is not None
                  and (study / REPORT_NAME).is_file() else "")
        cells.append(Row((cell(entry["cell_id"]),
                          cell(", ".join(f"{k} = {S._show(v)}" for k, v in entry["values"].items())),
                          cell(entry["status"]), cell(entry["comparison_key"][:12]),
                          cell(entry["excluded"]), Cell((Part(report, href=report),))),
                         "failed" if entry["excluded"] else "ok"))
    comparison = apart = None
    if compare_with:
        comparison, apart = S.compare_suites(compare_with, suite_dir)
    cells_table = table(["cell", "axis values", "status", "comparison key", "left out because",
                         "study report"], cells, "suite-cells-table")
    body = render("suite.html.j2", m=manifest, cells=cells_table,
                  per_cell=suite_cells(S.suite_table(suite_dir), S.CELL_METRICS + S.LANE_METRICS,
                                       "suite-table"),
                  comparison=None if comparison is None else compare_table(comparison),
                  apart=None if apart is None else from_frame(apart, "suite-not-comparable-table",
                                                              wide=True),
                  other=str(compare_with))
    return render("page.html.j2", title_prefix="Sluice suite", title=manifest["suite_id"],
                  sections=[Markup(style()), Markup(body)])


def build_suite_report(suite_dir: str | Path, compare_with: str | Path | None = None) -> Path:
    out = Path(suite_dir) / REPORT_NAME
    build.write(out, render_suite_html(suite_dir, compare_with))
    return out
