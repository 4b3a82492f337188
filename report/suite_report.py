"""The HTML report of a suite: every cell with its axis values and headline figures, the
combinations left out and why, and a link to each cell's own study report. A suite of
provider-fault cells also gets, per scenario, every system's figures before, during and after
the fault in each configuration, the sentences they support and their timeline.

    python -m harness report SUITE_DIR [--compare OTHER_SUITE_DIR]

writes SUITE_DIR/report.html (and each cell's report.html when it is missing).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
from markupsafe import Markup

from harness.files.study_files import SuiteFiles
from harness.model.config import RESILIENCE
from harness.model.dialects import ERROR_BODY_PREFIX_BYTES
from harness.model.fault_scenarios import duration_of
from harness.model.metrics import metric
from harness.model.suite import CellEntry, SuiteManifest, axis_text
from harness.stats import suite_cells as S
from harness.stats.fault_lane import RECOVERY_MS, RECOVERY_SHARE
from report import build, inflight_tables
from report import format as F
from report.data import system_colors
from report.fault_tables import fault_suite
from report.grid import Cell, Part, Row, Table, cell, from_frame, table
from report.plots import plot_fault_frontier, plot_fault_timelines, plot_fault_tts
from report.sections import render, style
from report.summary import fault_findings
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
                    "diff", "diff_low", "diff_high", "t", "p_value", "outcome", "basis",
                    "same_machine"}


def side_by_side_table(comparison: pd.DataFrame, table_id: str) -> Table:
    """Rows of two studies on different machines: per system and metric, A's and B's mean ± sd
    (n), and nothing judged: no ratio, no test, no verdict."""
    axes = [c for c in comparison.columns if c not in _COMPARE_NUMBERS]
    rows = []
    for r in comparison.to_dict("records"):
        m = metric(r["metric"])
        rows.append([*(r[c] for c in axes), F.heading(m),
                     F.mean_sd({"n": r["n_ref"], "mean": r["mean_ref"], "sd": r["sd_ref"]}, m),
                     F.mean_sd({"n": r["n"], "mean": r["mean"], "sd": r["sd"]}, m)])
    return table([*axes, "metric", "A: mean ± sd", "B: mean ± sd"], rows, table_id, wide=True,
                 numeric=["A: mean ± sd", "B: mean ± sd"])


def machines_of(pairs: list) -> dict:
    """What a suite comparison says about its machines (harness.stats.suite_cells.cell_machines): each
    suite's machines in words, and one sentence per distinct pair of different machines."""
    lines_a = list(dict.fromkeys(F.machine_line(m.a) for _, _, m in pairs))
    lines_b = list(dict.fromkeys(F.machine_line(m.b) for _, _, m in pairs))
    different = list(dict.fromkeys(F.different_machines(m.a, m.b) for _, _, m in pairs
                                   if not m.same))
    return {"a": lines_a, "b": lines_b, "different": different}


def cells_frame(suite_dir: str | Path) -> pd.DataFrame:
    """The per-cell table as the report shows it (for notebooks)."""
    return suite_cells(S.suite_table(suite_dir), S.CELL_METRICS + S.LANE_METRICS, "").frame()


def _values(entry: CellEntry) -> str:
    return ", ".join(f"{k} = {axis_text(v)}" for k, v in entry.values.items())


def scenario_sections(suite_dir: str | Path, manifest: SuiteManifest) -> list[dict]:
    """Per fault scenario of the suite, in the order of its cells: its window, the sentences, the
    table (systems in the suite's order, then the resilience asked, shipped first), the plot in
    the report's system colours, and its cells without figures and why."""
    entries = [e for e in manifest.cells if e.scenario]
    if not entries:
        return []
    rows, timelines = S.fault_table(suite_dir)
    systems = list(dict.fromkeys(rows["system"])) if len(rows) else []
    colors = system_colors(systems)
    out = []
    for scenario in dict.fromkeys(e.scenario for e in entries):
        cells = [e for e in entries if e.scenario == scenario]
        sub = rows[rows["scenario"] == scenario] if len(rows) else rows
        if len(sub):
            sub = sub.assign(_s=sub["system"].map(systems.index),
                             _a=sub["asked"].map(lambda a: RESILIENCE.index(a) if a in RESILIENCE
                                                 else len(RESILIENCE)))
            sub = sub.sort_values(["_s", "_a", "cell"], kind="mergesort").drop(columns=["_s", "_a"])
        config = next((e.config for e in cells if e.config), None)
        table_id = f"suite-faults-{scenario}"
        lines = timelines[timelines["scenario"] == scenario] if len(timelines) else timelines
        out.append({
            "name": scenario, "id": table_id,
            "start_s": f"{config['fault_start_s']:g}" if config else "",
            "duration_s": (f"{duration_of(scenario, config['fault_duration_s']):g}"
                           if config else ""),
            "findings": fault_findings(sub, f"#{table_id}") if len(sub) else [],
            "table": fault_suite(sub, table_id) if len(sub) else None,
            "plot": plot_fault_timelines(lines, colors, f"{scenario}: while the provider fails "
                                         "(each run a line)"),
            "frontier": plot_fault_frontier(sub, colors, f"{scenario}: success against attempts "
                                            "for the requests sent during the fault"),
            "tts": plot_fault_tts(sub, colors, f"{scenario}: time to success of the requests "
                                  "sent during the fault"),
            "left_out": [(e.cell_id, _values(e), e.excluded or f"no study ({e.status})")
                         for e in cells if not len(sub) or e.cell_id not in set(sub["cell"])]})
    return out


def inflight_sections(suite_dir: str | Path) -> list[dict]:
    """Per in-flight cell (unary, streamed, ...): its axis values, the sentences and where each
    system stops; the full tables are in the cell's own report."""
    out = []
    for entry, cell_lane in S.inflight_lanes(suite_dir):
        order = list(dict.fromkeys(cell_lane.table["system"]))
        out.append({"cell": entry.cell_id, "values": _values(entry),
                    "sentences": inflight_tables.sentences(cell_lane, order),
                    "stops": inflight_tables.stops_table(cell_lane, order)})
    return out


def render_suite_html(suite_dir: str | Path, compare_with: str | Path | None = None) -> str:
    suite_dir = Path(suite_dir)
    suite = SuiteFiles(suite_dir)
    manifest = suite.read_manifest()
    cells = []
    for entry in manifest.cells:
        study = suite_dir / entry.dir if entry.dir else None
        if study is not None and suite.cell(entry.dir).exists() and not (study / REPORT_NAME).is_file():
            build.build_report(study)
        report = (f"{entry.dir}/{REPORT_NAME}" if study is not None
                  and (study / REPORT_NAME).is_file() else "")
        cells.append(Row((cell(entry.cell_id),
                          cell(_values(entry)),
                          cell(entry.status), cell(entry.comparison_key[:12]),
                          cell(entry.excluded), Cell((Part(report, href=report),))),
                         "failed" if entry.excluded else "ok"))
    comparison = apart = machines = None
    if compare_with:
        comparison, apart = S.compare_suites(compare_with, suite_dir)
        machines = machines_of(S.cell_machines(compare_with, suite_dir))
    judged = elsewhere = None
    if comparison is not None and len(comparison):
        same = comparison["same_machine"].astype(bool)
        judged = compare_table(comparison[same]) if same.any() else None
        elsewhere = (side_by_side_table(comparison[~same], "suite-side-by-side-table")
                     if (~same).any() else None)
    cells_table = table(["cell", "axis values", "status", "comparison key", "left out because",
                         "study report"], cells, "suite-cells-table")
    body = render("suite.html.j2", m=manifest, cells=cells_table,
                  per_cell=suite_cells(S.suite_table(suite_dir), S.CELL_METRICS + S.LANE_METRICS,
                                       "suite-table"),
                  comparison=judged, side_by_side=elsewhere, machines=machines,
                  compared=comparison is not None,
                  apart=None if apart is None else from_frame(apart, "suite-not-comparable-table",
                                                              wide=True),
                  other=str(compare_with), faults=scenario_sections(suite_dir, manifest),
                  inflight=inflight_sections(suite_dir),
                  share=f"{RECOVERY_SHARE:.0%}", slack=f"{RECOVERY_MS:g}",
                  prefix=f"{ERROR_BODY_PREFIX_BYTES // 1024} KiB")
    return render("page.html.j2", title_prefix="Sluice suite", title=manifest.suite_id,
                  sections=[Markup(style()), Markup(body)])


def build_suite_report(suite_dir: str | Path, compare_with: str | Path | None = None) -> Path:
    out = Path(suite_dir) / REPORT_NAME
    build.write(out, render_suite_html(suite_dir, compare_with))
    return out
