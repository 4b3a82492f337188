"""The numbers every section of a suite's report reads: each cell's study collected once
(report.data.collect, the figures its own report shows), then the per-cell table, the
provider-fault lane's table and timelines, the in-flight lanes, and two suites compared cell by
cell where their comparison keys are equal, all from those figures. The suite manifest is read
through its reader."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.files.study_files import SuiteFiles
from harness.model import migrate
from harness.model.config import StudyConfig
from harness.model.manifests import StudyManifest, from_plain
from harness.model.suite import CellEntry, SuiteManifest, axis_text, field_of
from harness.stats.across import describe, side_by_side, verdict
from harness.stats.fault_lane import system_figures
from harness.stats.inflight_limits import Lane
from harness.stats.loading import Study
from harness.stats.machines import MachineMatch, same_machine
from report.data import ReportData, collect

# The per-cell table's figures (run_summary columns; how each is shown: the metric registry),
# then each lane's own headline when the cell ran it.
CELL_METRICS = ("throughput_rps", "overhead_vs_direct_p50_ms", "overhead_vs_direct_p99_ms",
                "cpu_ms_per_request", "errors_total")
LANE_METRICS = ("ttft_overhead_p50_ms", "stopped_at_rps")


@dataclass(frozen=True, eq=False)
class SuiteData:
    path: Path
    manifest: SuiteManifest
    cells: tuple[tuple[CellEntry, ReportData], ...]   # every cell with a study, manifest order


def collect_suite(suite_dir: str | Path) -> SuiteData:
    """The suite manifest, and every cell's study collected once."""
    files = SuiteFiles(Path(suite_dir))
    manifest = files.read_manifest()
    cells = tuple((entry, collect(files.cell(entry.dir).dir)) for entry in manifest.cells
                  if entry.dir and files.cell(entry.dir).exists())
    return SuiteData(Path(suite_dir), manifest, cells)


def inflight_lanes(suite: SuiteData) -> list[tuple[CellEntry, Lane]]:
    """(entry, its in-flight lane) of every cell whose study held requests open in steps."""
    return [(entry, data.inflight) for entry, data in suite.cells if not data.inflight.empty]


def suite_table(suite: SuiteData) -> pd.DataFrame:
    """One row per cell and system: axis values, completed runs, and n, mean and sd over them
    (``{metric}_n``, ``_mean``, ``_sd``) of each CELL_METRICS figure, plus the lane's own
    headline when the cell streamed (TTFT added) or ran open loop (where it stopped keeping
    up); a lane's columns are NaN in the other lane's cells."""
    rows = []
    for entry, data in suite.cells:
        rs, summary = data.rs, data.summary
        stream = data.stream
        capacity = data.open_loop_capacity if not data.open_loop.empty else None
        for system in data.study.systems:
            sub = rs[rs["system"] == system] if len(rs) else rs
            row = {"cell": entry.cell_id, **{k: axis_text(v) for k, v in entry.values.items()},
                   "system": system, "key": entry.comparison_key[:12],
                   "runs": f"{int((sub['status'] == 'completed').sum())} of {len(sub)}"}
            figures = {}
            for m in CELL_METRICS:
                d = summary[(summary["system"] == system) & (summary["metric"] == m)]
                figures[m] = d.iloc[0].to_dict() if len(d) else describe([])
            if not stream.empty:
                s = stream[(stream["system"] == system) & (stream["status"] == "completed")]
                figures["ttft_overhead_p50_ms"] = describe(s["ttft_overhead_p50_ms"])
            if capacity is not None:
                c = capacity[capacity["system"] == system]
                figures["stopped_at_rps"] = ({k: c[f"stopped_at_rps_{k}"].iloc[0]
                                              for k in ("n", "mean", "sd")} if len(c) else describe([]))
            for m, d in figures.items():
                row.update({f"{m}_{k}": d[k] for k in ("n", "mean", "sd")})
            rows.append(row)
    return pd.DataFrame(rows)


# Axes every fault table shows in its own columns: the others label a row's configuration.
FAULT_AXES = ("fault_scenario", "resilience")


def fault_table(suite: SuiteData) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The provider-fault lane across a suite. First, one row per fault cell that has a study and
    per system of it: ``cell``, ``scenario``, ``asked`` (the cell's resilience setting),
    ``axes`` (its values of the other axes that tell the scenario's cells apart), ``system``,
    ``kind``, ``role``, ``not_run`` (why a system has no fault run that reached the hold; ""
    when it has), ``dialect_missing`` (why the
    artifact judged no error body; "" when it did) and harness.stats.fault_lane.system_figures'
    columns (NaN for a system that did not run). Second, every fault run's 1-s timeline with its
    cell, scenario and ``asked``. Cells left out or without a study have no rows: the suite
    manifest says why."""
    rows, lines = [], []
    labels = _configuration_axes(suite)
    for entry, data in suite.cells:
        if not entry.scenario:
            continue
        study = data.study
        figures = system_figures(data.fault_windows, data.fault_runs).set_index("system")
        where = {"cell": entry.cell_id, "scenario": entry.scenario,
                 "asked": study.manifest.config.resilience,
                 "axes": ", ".join(f"{k} = {axis_text(entry.values[k])}"
                                   for k in labels[entry.scenario])}
        missing = study.not_measured("requests", "error_body_dialect")
        for system in study.systems:
            meta = study.manifest.systems.get(system)
            row = {**where, "system": system, "kind": meta.kind if meta else "",
                   "role": meta.role if meta else "", "not_run": "", "dialect_missing": missing}
            if system in figures.index:
                row.update(figures.loc[system].to_dict())
            else:
                row["not_run"] = _why_not_run(study, system, entry.skipped)
            rows.append(row)
        if len(data.fault_timelines):
            lines.append(data.fault_timelines.assign(**{k: where[k] for k in ("cell", "scenario", "asked")}))
    return (pd.DataFrame(rows),
            pd.concat(lines, ignore_index=True) if lines else pd.DataFrame())


def _configuration_axes(suite: SuiteData) -> dict[str, list[str]]:
    """Per scenario, the axes besides FAULT_AXES whose values differ among its cells: the ones
    that tell its rows apart (a value every cell of the scenario shares labels nothing)."""
    values: dict[str, dict[str, set]] = {}
    for entry, _ in suite.cells:
        if entry.scenario:
            axes = values.setdefault(entry.scenario, {})
            for k, v in entry.values.items():
                if field_of(k) not in FAULT_AXES:
                    axes.setdefault(k, set()).add(axis_text(v))
    return {scenario: [k for k, seen in axes.items() if len(seen) > 1]
            for scenario, axes in values.items()}


def _why_not_run(study: Study, system: str, skipped: dict) -> str:
    meta = study.manifest.systems.get(system)
    if meta is not None and not meta.runnable:
        return meta.not_runnable_reason or skipped.get(system, "") or "not runnable here"
    runs = [r for r in study.runs if r.system == system]
    if runs:
        why = runs[0].reason or "no reason recorded"
        return f"no run reached the hold ({runs[0].status}: {why})"
    return skipped.get(system, "") or "no runs"


def _cell_key_in(version: int, entry: CellEntry, study: StudyManifest) -> str | None:
    """The cell's recorded key in recipe ``version``, from its record: the suite manifest's
    config and its study's record of each system's gateway.toml."""
    config = from_plain(StudyConfig, entry.config, "suite manifest") if entry.config else None
    tomls = {name: info.gateway_toml_sha256 for name, info in study.systems.items()}
    return migrate.cell_key_in(version, entry.comparison_key, config, tomls)


def _by_key(a: SuiteData, b: SuiteData) -> tuple[dict, dict]:
    """Each suite's cells by their key, keys recorded with different recipes meeting in the older
    one (harness.model.migrate), the newer record re-keyed in it."""
    version = migrate.oldest_recipe(e.comparison_key for e, _ in (*a.cells, *b.cells))
    return tuple({_cell_key_in(version, e, data.study.manifest): (e, data) for e, data in suite.cells}
                 for suite in (a, b))


def compare_suites(a: SuiteData, b: SuiteData,
                   metrics: tuple[str, ...] = tuple(m for m in CELL_METRICS if m != "errors_total"),
                   ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Suite B against suite A, cell by cell where the comparison keys are equal: per system and
    metric, the means, B/A and the verdict (harness.stats.across.verdict). A pair of cells run on
    different machines (cell_machines) gets each side's n, mean and sd only, no verdict, and
    ``same_machine`` False. The second table lists the cells of either suite that have no equal
    key in the other, which are not compared."""
    by_key_a, by_key_b = _by_key(a, b)
    rows = []
    for key in [k for k in by_key_b if k in by_key_a]:
        (ea, da), (eb, db) = by_key_a[key], by_key_b[key]
        ra, rb = da.rs, db.rs
        same = same_machine(da.study.manifest.machine, db.study.manifest.machine).same
        for system in [s for s in pd.unique(rb["system"]) if s in set(ra["system"])]:
            xa = ra[(ra["system"] == system) & (ra["status"] == "completed")]
            xb = rb[(rb["system"] == system) & (rb["status"] == "completed")]
            for m in metrics:
                vb, va = xb[m].astype("float64").tolist(), xa[m].astype("float64").tolist()
                figures = dataclasses.asdict(verdict(vb, va, m)) if same else side_by_side(vb, va)
                rows.append({"cell_a": ea.cell_id, "cell_b": eb.cell_id,
                             **{k: axis_text(x) for k, x in eb.values.items()}, "system": system,
                             "metric": m, "same_machine": same, **figures})
    apart = []
    for suite, own, other in ((a, by_key_a, by_key_b), (b, by_key_b, by_key_a)):
        for key, (entry, _) in own.items():
            if key not in other:
                apart.append({"suite": suite.manifest.suite_id, "cell": entry.cell_id,
                              **{k: axis_text(x) for k, x in entry.values.items()},
                              "comparison_key": entry.comparison_key[:12],
                              "why": "no cell with this comparison key in the other suite"})
    return pd.DataFrame(rows), pd.DataFrame(apart)


def cell_machines(a: SuiteData, b: SuiteData) -> list[tuple[str, str, MachineMatch]]:
    """(cell of A, cell of B, their machines) per pair of cells with equal comparison keys, in B's
    order: what compare_suites decides "same machine" on, from the cells' study manifests (their
    keys meeting in the older recipe, as there)."""
    by_key_a, by_key_b = _by_key(a, b)
    return [(by_key_a[k][0].cell_id, eb.cell_id,
             same_machine(by_key_a[k][1].study.manifest.machine, db.study.manifest.machine))
            for k, (eb, db) in by_key_b.items() if k in by_key_a]
