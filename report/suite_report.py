"""The HTML report of a suite: every cell with its axis values and headline figures, the
combinations left out and why, and a link to each cell's own study report. A suite of
provider-fault cells also gets, per scenario, every system's figures before, during and after
the fault in each configuration, the sentences they support and their timeline.

    python -m harness report SUITE_DIR [--compare OTHER_SUITE_DIR]

writes SUITE_DIR/report.html (and each cell's report.html when it is missing). Each cell's study
is collected once (report.suite_data): its own report and the suite's tables read the same
figures. compare_suites is the one comparison of two suites: this report, the suite command's
``--compare`` text and the suite notebook (which shows this report) all read it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from markupsafe import Markup

from harness.model.config import RESILIENCE
from harness.model.dialects import ERROR_BODY_PREFIX_BYTES
from harness.model.fault_scenarios import duration_of
from harness.model.metrics import metric
from harness.model.suite import CellEntry, axis_text
from harness.stats.across import VERDICT_ONLY
from harness.stats.fault_lane import RECOVERY_MS, RECOVERY_SHARE
from report import build, inflight_tables
from report import format as F
from report import suite_data as S
from report.data import system_colors
from report.fault_first_screen import first_screen, runs_lost
from report.fault_tables import fault_suite
from report.grid import Cell, Part, Row, Table, cell, from_frame, table
from report.plots import plot_fault_frontier, plot_fault_timelines, plot_fault_tts
from report.sections import render, style
from report.summary import fault_findings
from report.tables import suite_cells

REPORT_NAME = build.REPORT_NAME


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
    """What a suite comparison says about its machines (report.suite_data.cell_machines): each
    suite's machines in words, and one sentence per distinct pair of different machines."""
    lines_a = list(dict.fromkeys(F.machine_line(m.a) for _, _, m in pairs))
    lines_b = list(dict.fromkeys(F.machine_line(m.b) for _, _, m in pairs))
    different = list(dict.fromkeys(F.different_machines(m.a, m.b) for _, _, m in pairs
                                   if not m.same))
    return {"a": lines_a, "b": lines_b, "different": different}


@dataclass(frozen=True, eq=False)
class SuiteComparison:
    """Suite B against suite A where their cells' comparison keys are equal: each side's
    machines, the cells on the same machine judged, the cells on different machines side by side
    (each side's n, mean and sd, nothing judged), and the cells not comparable."""
    a: str
    b: str
    machines: dict                   # machines_of
    judged: pd.DataFrame             # S.compare_suites' rows on the same machine
    side_by_side: pd.DataFrame       # its rows on different machines: axes, then each side
    apart: pd.DataFrame


# what a row of two cells on different machines shows: each side's figures, nothing judged
_SIDE_BY_SIDE = {"n_ref": "n_A", "mean_ref": "mean_A", "sd_ref": "sd_A", "n": "n_B", "mean": "mean_B",
                 "sd": "sd_B"}


def compare_suites(a: str | Path | S.SuiteData, b: str | Path | S.SuiteData) -> SuiteComparison:
    """Suite B against suite A (a directory, or its figures already collected)."""
    a, b = (x if isinstance(x, S.SuiteData) else S.collect_suite(x) for x in (a, b))
    compared, apart = S.compare_suites(a, b)
    same = (compared["same_machine"].astype(bool) if len(compared)
            else pd.Series(dtype=bool))
    other = compared[~same] if len(compared) else compared
    axes = [c for c in other.columns if c not in VERDICT_ONLY and c not in _SIDE_BY_SIDE
            and c != "same_machine"]
    return SuiteComparison(
        str(a.path), str(b.path), machines_of(S.cell_machines(a, b)),
        compared[same].drop(columns="same_machine") if len(compared) else compared,
        other[axes + list(_SIDE_BY_SIDE)] if len(other) else other, apart)


def comparison_text(c: SuiteComparison) -> str:
    """The comparison as text: both suites' machines, the different-machines sentences, the
    verdicts, the bare figures side by side, and the cells not comparable."""
    out = [f"A ({c.a}) measured on {'; '.join(c.machines['a']) or '—'}",
           f"B ({c.b}) measured on {'; '.join(c.machines['b']) or '—'}", *c.machines["different"],
           ""]
    if not len(c.judged) and not len(c.side_by_side):
        out.append("no cell has a key in both")
    if len(c.judged):
        out.append(c.judged.to_string(index=False))
    if len(c.side_by_side):
        out.append(("\n" if len(c.judged) else "")
                   + "on different machines (figures side by side, no verdict):\n"
                   + c.side_by_side.rename(columns=_SIDE_BY_SIDE).to_string(index=False))
    if len(c.apart):
        out.append("\nnot comparable:\n" + c.apart.to_string(index=False))
    return "\n".join(out)


def cells_frame(suite: S.SuiteData) -> pd.DataFrame:
    """The per-cell table as the report shows it."""
    return suite_cells(S.suite_table(suite), S.CELL_METRICS + S.LANE_METRICS, "").frame()


def _values(entry: CellEntry) -> str:
    return ", ".join(f"{k} = {axis_text(v)}" for k, v in entry.values.items())


def scenario_sections(suite: S.SuiteData, fault: tuple | None = None) -> list[dict]:
    """Per fault scenario of the suite, in the order of its cells: its window, the sentences, the
    table (systems in the suite's order, then the resilience asked, shipped first), the plot in
    the report's system colours, and its cells without figures and why. ``fault``: S.fault_table
    of the suite when already computed."""
    entries = [e for e in suite.manifest.cells if e.scenario]
    if not entries:
        return []
    rows, timelines = fault or S.fault_table(suite)
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


def inflight_per_open(suite: S.SuiteData) -> Table | None:
    """Memory per open unary request beside per open stream, from the suite's in-flight cells."""
    lanes = [cell_lane for _, cell_lane in S.inflight_lanes(suite)]
    order = list(dict.fromkeys(s for cell_lane in lanes for s in cell_lane.table["system"]))
    return inflight_tables.per_open_table(lanes, order)


def inflight_sections(suite: S.SuiteData) -> list[dict]:
    """Per in-flight cell (unary, streamed, ...): its axis values, the sentences and where each
    system stops, and what it did when clients left (a streamed cell that left some); the full
    tables are in the cell's own report."""
    out = []
    for entry, cell_lane in S.inflight_lanes(suite):
        order = list(dict.fromkeys(cell_lane.table["system"]))
        out.append({"cell": entry.cell_id, "axes": _values(entry),
                    "sentences": inflight_tables.sentences(cell_lane, order),
                    "stops": inflight_tables.stops_table(cell_lane, order),
                    "abandon": inflight_tables.abandon_table(cell_lane, order)})
    return out


def inflight_context(suite: S.SuiteData) -> dict:
    """What suite_inflight.html.j2 shows, for the suite page and the published page alike."""
    return {"inflight": inflight_sections(suite), "per_open": inflight_per_open(suite)}


def suite_sections(suite: S.SuiteData, comparison: SuiteComparison | None = None) -> dict[str, str]:
    """The suite page's sections (the CSS, then the suite), its cells' reports linked where
    they exist."""
    manifest = suite.manifest
    cells = []
    for entry in manifest.cells:
        report = (f"{entry.dir}/{REPORT_NAME}" if entry.dir
                  and (suite.path / entry.dir / REPORT_NAME).is_file() else "")
        cells.append(Row((cell(entry.cell_id),
                          cell(_values(entry)),
                          cell(entry.status), cell(entry.comparison_key[:12]),
                          cell(entry.excluded), Cell((Part(report, href=report),))),
                         "failed" if entry.excluded else "ok"))
    judged = elsewhere = None
    if comparison is not None:
        judged = compare_table(comparison.judged) if len(comparison.judged) else None
        elsewhere = (side_by_side_table(comparison.side_by_side, "suite-side-by-side-table")
                     if len(comparison.side_by_side) else None)
    cells_table = table(["cell", "axis values", "status", "comparison key", "left out because",
                         "study report"], cells, "suite-cells-table")
    fault = S.fault_table(suite) if any(e.scenario for e in manifest.cells) else None
    faults = scenario_sections(suite, fault)
    first = {"table": first_screen(fault[0]), "lost": runs_lost(fault[0], manifest.cells),
             "findings": [f for s in faults for f in s["findings"]]} if fault else None
    body = render("suite.html.j2", m=manifest, cells=cells_table,
                  per_cell=suite_cells(S.suite_table(suite), S.CELL_METRICS + S.LANE_METRICS,
                                       "suite-table"),
                  comparison=judged, side_by_side=elsewhere,
                  machines=comparison.machines if comparison else None,
                  compared=comparison is not None,
                  apart=None if comparison is None else from_frame(
                      comparison.apart, "suite-not-comparable-table", wide=True),
                  other=comparison.a if comparison else "",
                  faults=faults, first=first, **inflight_context(suite),
                  share=f"{RECOVERY_SHARE:.0%}", slack=f"{RECOVERY_MS:g}",
                  prefix=f"{ERROR_BODY_PREFIX_BYTES // 1024} KiB")
    return {"style": style(), "suite": body}


def build_suite_report(suite_dir: str | Path, compare_with: str | Path | None = None) -> build.Report:
    """Collect every cell's study once, write each cell's report where it is missing (from those
    figures), then SUITE_DIR/report.html (compared with the suite ``compare_with`` when given)."""
    suite = S.collect_suite(suite_dir)
    for _, data in suite.cells:
        if not (data.study.path / REPORT_NAME).is_file():
            build.write_report(data)
    sections = suite_sections(suite, compare_suites(compare_with, suite) if compare_with else None)
    out = Path(suite_dir) / REPORT_NAME
    build.write(out, render("page.html.j2", title_prefix="Sluice suite", title=suite.manifest.suite_id,
                            sections=[Markup(html) for html in sections.values()]))
    return build.Report(out, sections)
