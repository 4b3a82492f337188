"""A suite's results across its cells: the per-cell table, the provider-fault lane's table and
timelines, and two suites compared cell by cell where their comparison keys are equal. Every
cell's study is read through harness.stats.loading; the suite manifest through its reader."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterator

import pandas as pd

from harness.files.study_files import StudyFiles, SuiteFiles
from harness.model import migrate
from harness.model.config import StudyConfig
from harness.model.manifests import StudyManifest, from_plain
from harness.model.roles import Roles
from harness.model.suite import CellEntry, SuiteManifest, axis_text, field_of
from harness.stats.across import describe, side_by_side, system_summary, verdict
from harness.stats.fault_lane import fault_summary, fault_timelines, system_figures
from harness.stats.inflight_limits import Lane, lane
from harness.stats.loading import Study, cpu_count, load_study
from harness.stats.machines import MachineMatch, same_machine
from harness.stats.open_loop import open_loop_capacity, open_loop_steps
from harness.stats.runs import run_summary
from harness.stats.streaming import stream_summary

# The per-cell table's figures (run_summary columns; how each is shown: the metric registry),
# then each lane's own headline when the cell ran it.
CELL_METRICS = ("throughput_rps", "overhead_vs_direct_p50_ms", "overhead_vs_direct_p99_ms",
                "cpu_ms_per_request", "errors_total")
LANE_METRICS = ("ttft_overhead_p50_ms", "stopped_at_rps")


def cell_studies(suite_dir: Path) -> Iterator[tuple[CellEntry, Path]]:
    """(entry, study directory) of every cell of the suite that has a study, in manifest order."""
    suite = SuiteFiles(Path(suite_dir))
    for entry in suite.read_manifest().cells:
        if entry.dir and suite.cell(entry.dir).exists():
            yield entry, suite.cell(entry.dir).dir


def _cell_summaries(suite_dir: Path) -> tuple[SuiteManifest, list[tuple[CellEntry, pd.DataFrame, Study]]]:
    """The suite manifest, and per cell that has a study: (entry, run_summary, study)."""
    out = []
    for entry, study_dir in cell_studies(suite_dir):
        study = load_study(study_dir)
        out.append((entry, run_summary(study), study))
    return SuiteFiles(Path(suite_dir)).read_manifest(), out


def inflight_lanes(suite_dir: str | Path) -> list[tuple[CellEntry, Lane]]:
    """(entry, its in-flight lane) of every cell whose study held requests open in steps."""
    out = []
    for entry, study_dir in cell_studies(Path(suite_dir)):
        study = load_study(study_dir)
        cell_lane = lane(study, Roles.of(study.manifest).floor, cpu_count(study))
        if not cell_lane.empty:
            out.append((entry, cell_lane))
    return out


def suite_table(suite_dir: str | Path) -> pd.DataFrame:
    """One row per cell and system: axis values, completed runs, and n, mean and sd over them
    (``{metric}_n``, ``_mean``, ``_sd``) of each CELL_METRICS figure, plus the lane's own
    headline when the cell streamed (TTFT added) or ran open loop (where it stopped keeping
    up); a lane's columns are NaN in the other lane's cells."""
    manifest, cells = _cell_summaries(Path(suite_dir))
    rows = []
    for entry, rs, study in cells:
        floor = Roles.of(study.manifest).floor
        summary = system_summary(rs, CELL_METRICS, floor=floor) if len(rs) else None
        stream = stream_summary(study, floor=floor)
        steps = open_loop_steps(study, floor=floor)
        capacity = open_loop_capacity(steps, floor) if not steps.empty else None
        for system in study.systems:
            sub = rs[rs["system"] == system] if len(rs) else rs
            row = {"cell": entry.cell_id, **{k: axis_text(v) for k, v in entry.values.items()},
                   "system": system, "key": entry.comparison_key[:12],
                   "runs": f"{int((sub['status'] == 'completed').sum())} of {len(sub)}"}
            figures = {}
            for m in CELL_METRICS:
                d = summary[(summary["system"] == system) & (summary["metric"] == m)] \
                    if summary is not None else pd.DataFrame()
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


def fault_table(suite_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The provider-fault lane across a suite. First, one row per fault cell that has a study and
    per system of it: ``cell``, ``scenario``, ``asked`` (the cell's resilience setting),
    ``axes`` (its other axis values), ``system``, ``kind``, ``role``, ``not_run`` (why a system
    has no fault run that reached the hold; "" when it has), ``dialect_missing`` (why the
    artifact judged no error body; "" when it did) and harness.stats.fault_lane.system_figures'
    columns (NaN for a system that did not run). Second, every fault run's 1-s timeline with its
    cell, scenario and ``asked``. Cells left out or without a study have no rows: the suite
    manifest says why."""
    rows, lines = [], []
    for entry, study_dir in cell_studies(Path(suite_dir)):
        if not entry.scenario:
            continue
        study = load_study(study_dir)
        per_window, per_run = fault_summary(study)
        figures = system_figures(per_window, per_run).set_index("system")
        where = {"cell": entry.cell_id, "scenario": entry.scenario,
                 "asked": study.manifest.config.resilience,
                 "axes": ", ".join(f"{k} = {axis_text(v)}" for k, v in entry.values.items()
                                   if field_of(k) not in FAULT_AXES)}
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
        timelines = fault_timelines(study, per_run)
        if len(timelines):
            lines.append(timelines.assign(**{k: where[k] for k in ("cell", "scenario", "asked")}))
    return (pd.DataFrame(rows),
            pd.concat(lines, ignore_index=True) if lines else pd.DataFrame())


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


def compare_suites(a_dir: str | Path, b_dir: str | Path,
                   metrics: tuple[str, ...] = tuple(m for m in CELL_METRICS if m != "errors_total"),
                   ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Suite B against suite A, cell by cell where the comparison keys are equal: per system and
    metric, the means, B/A and the verdict (harness.stats.across.verdict). A pair of cells run on
    different machines (cell_machines) gets each side's n, mean and sd only, no verdict, and
    ``same_machine`` False. The second table lists the cells of either suite that have no equal
    key in the other, which are not compared. Keys recorded with different recipes meet in the
    older one (harness.model.migrate), the newer record re-keyed in it."""
    ma, ca = _cell_summaries(Path(a_dir))
    mb, cb = _cell_summaries(Path(b_dir))
    version = migrate.oldest_recipe(e.comparison_key for e, _, _ in (*ca, *cb))
    by_key_a = {_cell_key_in(version, e, st.manifest): (e, rs, st) for e, rs, st in ca}
    by_key_b = {_cell_key_in(version, e, st.manifest): (e, rs, st) for e, rs, st in cb}
    rows = []
    for key in [k for k in by_key_b if k in by_key_a]:
        (ea, ra, sa), (eb, rb, sb) = by_key_a[key], by_key_b[key]
        same = same_machine(sa.manifest.machine, sb.manifest.machine).same
        for system in [s for s in pd.unique(rb["system"]) if s in set(ra["system"])]:
            da = ra[(ra["system"] == system) & (ra["status"] == "completed")]
            db = rb[(rb["system"] == system) & (rb["status"] == "completed")]
            for m in metrics:
                xb, xa = db[m].astype("float64").tolist(), da[m].astype("float64").tolist()
                figures = dataclasses.asdict(verdict(xb, xa, m)) if same else side_by_side(xb, xa)
                rows.append({"cell_a": ea.cell_id, "cell_b": eb.cell_id,
                             **{k: axis_text(x) for k, x in eb.values.items()}, "system": system,
                             "metric": m, "same_machine": same, **figures})
    apart = []
    for suite_id, own, other in ((ma.suite_id, by_key_a, by_key_b), (mb.suite_id, by_key_b, by_key_a)):
        for key, (entry, *_) in own.items():
            if key not in other:
                apart.append({"suite": suite_id, "cell": entry.cell_id,
                              **{k: axis_text(x) for k, x in entry.values.items()},
                              "comparison_key": entry.comparison_key[:12],
                              "why": "no cell with this comparison key in the other suite"})
    return pd.DataFrame(rows), pd.DataFrame(apart)


def cell_machines(a_dir: str | Path, b_dir: str | Path) -> list[tuple[str, str, MachineMatch]]:
    """(cell of A, cell of B, their machines) per pair of cells with equal comparison keys, in B's
    order: what compare_suites decides "same machine" on, from the cells' study manifests (their
    keys meeting in the older recipe, as there)."""
    def cells(suite_dir: Path) -> list[tuple[CellEntry, StudyManifest]]:
        return [(entry, StudyFiles(study_dir).read_manifest())
                for entry, study_dir in cell_studies(suite_dir)]
    both = (cells(Path(a_dir)), cells(Path(b_dir)))
    version = migrate.oldest_recipe(e.comparison_key for side in both for e, _ in side)
    a, b = ({_cell_key_in(version, e, m): (e.cell_id, m.machine) for e, m in side} for side in both)
    return [(a[k][0], cell_b, same_machine(a[k][1], machine_b))
            for k, (cell_b, machine_b) in b.items() if k in a]
