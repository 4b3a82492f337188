"""Suites of cells: a base configuration plus axes, expanded into studies that can be compared.

    python -m harness suite notebooks/suites/streaming.toml --dry-run     # cells, exclusions, keys
    python -m harness suite notebooks/suites/streaming.toml [--out-dir artifacts/suites] [--suite-id ID]
    python -m harness suite --compare artifacts/suites/A artifacts/suites/B

A suite file is TOML::

    name = "streaming"                 # names the suite's directory
    profile = "streaming"              # the preset the base starts from (default: standard)
    [base]                             # settings every cell shares, by path (see below)
    gateways = ["nginx", "sluice"]     # the direct baseline is added to every cell
    load.users = 200
    [axes]                             # path = [values]; the cells are every combination
    request.stream = [false, true]
    mock.latency_ms = [60, 500]
    [[exclude]]                        # optional: combinations left out on purpose, and why
    where = { request.stream = false, mock.latency_ms = 500 }
    reason = "..."

A path is a StudyConfig field by its own name (``users``) or a dotted path ``section.name``
that means the field ``name`` or ``section_name`` of that section (``mock.latency_ms`` is
``mock_latency_ms``); the sections and their fields are ``NAMESPACE``. Each runnable cell is a
whole study in ``<out-dir>/<suite-id>/<cell-id>/``; the suite's ``manifest.json`` lists every
cell with its axis values, its comparison key and, for a cell left out, the reason (a declared
exclusion or the configuration's validation error). Two suites are compared cell by cell only
where the comparison keys are equal.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from harness.model import config as config_mod
from harness.model import toml_schema as T
from harness.model.config import ConfigError, StudyConfig
from harness.model.gateway_spec import GatewaySpecError, load_gateway_spec
from harness.model.roles import FLOOR, Roles
from harness.run.store import read_json, sha256_file, write_json
from harness.run.study import prepare
from harness.stats.across import describe, side_by_side, system_summary, verdict
from harness.stats.faults import fault_summary, fault_timelines, system_figures
from harness.stats.loading import Study, load_study
from harness.stats.machines import MachineMatch, same_machine
from harness.stats.open_loop import open_loop_capacity, open_loop_steps
from harness.stats.runs import run_summary
from harness.stats.streaming import stream_summary

DEFAULT_OUT_DIR = "artifacts/suites"
NAMESPACE: dict[str, tuple[str, ...]] = {
    "load": ("users", "ramp_s", "hold_s", "min_hold_requests", "max_hold_s", "warmup_s",
             "warmup_users", "think_time_s", "locust_processes", "request_timeout_s",
             "open_loop_rates_per_s", "open_loop_step_s"),
    "mock": ("mock_latency_ms", "mock_workers", "mock_response_tokens", "stream_chunks",
             "chunk_delay_ms"),
    "request": ("stream", "feature", "request_bytes"),
    "gateway": ("gateways", "gateway_workers", "ready_timeout_s"),
    "study": ("runs_per_gateway", "seed", "idle_s", "cooldown_s"),
}
# Set by the suite itself, never by a cell; and left out of the comparison key because they
# do not change what runs (where it is written, what it is called, which preset it came from).
SUITE_OWNED = ("out_dir", "study_id", "profile")
NOT_IN_KEY = SUITE_OWNED + ("base_port", "gateways_dir")
# Settings that change nothing while empty: in the key only when set, so cells from before they
# existed keep their keys.
IN_KEY_WHEN_SET = ("cpu_affinity_load", "cpu_affinity_mock", "cpu_affinity_system", "nice_load",
                   "nice_mock", "nice_system", "gate_base_system", "builds", "system_env")
# The per-cell table's figures (run_summary columns; how each is shown: the metric registry),
# then each lane's own headline when the cell ran it.
CELL_METRICS = ("throughput_rps", "overhead_vs_direct_p50_ms", "overhead_vs_direct_p99_ms",
                "cpu_ms_per_request", "errors_total")
LANE_METRICS = ("ttft_overhead_p50_ms", "stopped_at_rps")


# The format of a suite file (this module's docstring); paths and values are checked after.
SCHEMA = T.Table({"name": T.STR, "description": T.STR, "profile": T.STR,
                  "base": T.Table(each=T.ANY), "axes": T.Table(each=T.ANY),
                  "exclude": T.Tables(T.Table({"where": T.Table(each=T.ANY), "reason": T.STR},
                                              required=("where", "reason")))})


class SuiteError(ValueError):
    """A suite file that cannot be expanded; raised before any process starts."""


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    profile: str
    base: dict            # field -> value
    axes: dict            # dotted path -> list of values, in file order
    exclude: tuple        # ({path: value}, reason) pairs
    path: Path
    text: str


@dataclass(frozen=True)
class Cell:
    cell_id: str
    values: dict                  # axis path -> this cell's value
    config: StudyConfig | None    # None when the combination cannot even be built
    comparison_key: str           # "" for a cell left out
    excluded: str                 # "" = runnable; otherwise why it was left out


def field_of(path: str) -> str:
    """The StudyConfig field a path names; SuiteError when it names none."""
    fields = {f.name for f in dataclasses.fields(StudyConfig)} - set(SUITE_OWNED)
    section, dot, name = path.partition(".")
    if not dot:
        if path in fields:
            return path
        raise SuiteError(f"{path}: not a setting; use a StudyConfig field or one of "
                         f"{sorted(NAMESPACE)}.<name>")
    if section not in NAMESPACE:
        raise SuiteError(f"{path}: unknown section {section!r}; sections: {sorted(NAMESPACE)}")
    for candidate in (name, f"{section}_{name}"):
        if candidate in NAMESPACE[section]:
            return candidate
    raise SuiteError(f"{path}: {section} has no {name!r}; it has "
                     f"{[f.removeprefix(section + '_') for f in NAMESPACE[section]]}")


def _flatten(table: dict, prefix: str = "") -> dict:
    """TOML's dotted keys arrive nested ({load: {users: 1}}); paths are flat ('load.users')."""
    flat = {}
    for key, value in table.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, path + "."))
        else:
            flat[path] = value
    return flat


def load_suite(path: str | Path) -> Suite:
    path = resolve_path(path)
    try:
        data, raw = T.load(path, SCHEMA)
    except T.TomlSchemaError as exc:
        raise SuiteError(str(exc)) from None
    name = data.get("name") or path.stem
    if not name.replace("-", "").replace("_", "").isalnum():
        raise SuiteError(f"{path}: name {name!r} must be letters, digits, '-' or '_'")
    profile = data.get("profile", "standard")
    if profile not in config_mod.PROFILES:
        raise SuiteError(f"{path}: unknown profile {profile!r}; choose one of {sorted(config_mod.PROFILES)}")
    base = {_setting(path, "base", p, [value]): value
            for p, value in _flatten(data.get("base", {})).items()}
    axes = _flatten(data.get("axes", {}))
    if not axes:
        raise SuiteError(f"{path}: [axes] is empty; a suite needs at least one axis")
    seen: dict[str, str] = {}
    for axis, values in axes.items():
        if not isinstance(values, list) or not values:
            raise SuiteError(f"{path}: [axes] {axis}: expected a non-empty list of values, got {values!r}")
        target = _setting(path, "axes", axis, values)
        if target in seen:
            raise SuiteError(f"{path}: [axes] {axis}: sets {target}, as {seen[target]!r} does")
        seen[target] = axis
    exclude = []
    for i, rule in enumerate(data.get("exclude", [])):
        where = _flatten(rule["where"])
        if not where:
            raise SuiteError(f"{path}: [exclude[{i}]] where: names no axis")
        stray = sorted(set(where) - set(axes))
        if stray:
            raise SuiteError(f"{path}: [exclude[{i}]] where: names {stray}, which are not axes")
        exclude.append((where, rule["reason"]))
    return Suite(name=name, description=data.get("description", ""), profile=profile,
                 base=base, axes=axes, exclude=tuple(exclude), path=path, text=raw.decode())


def _setting(path: Path, table: str, setting: str, values: list) -> str:
    """The field a setting of the file names, once each of its values fits that field's type;
    otherwise SuiteError naming the file, the table, the setting and (for a value) what was
    expected."""
    try:
        name = field_of(setting)
        for value in values:
            config_mod.convert(name, value)
    except SuiteError as exc:
        raise SuiteError(f"{path}: [{table}] {exc}") from None
    except ConfigError as exc:
        raise SuiteError(f"{path}: [{table}] {setting}: {exc.problems[0].partition(': ')[2]}") from None
    return name


def resolve_path(path: str | Path) -> Path:
    """As given when it exists (relative to here), else relative to the repository."""
    p = Path(path)
    return p if p.is_absolute() or p.exists() else config_mod.REPO_DIR / p


def comparison_key(config: StudyConfig) -> str:
    """SHA-256 of everything that decides what a cell runs: every setting (where it is written
    and under which name aside) and the gateway.toml of every system in it."""
    settings = {k: v for k, v in config.to_dict().items()
                if k not in NOT_IN_KEY and (v or k not in IN_KEY_WHEN_SET)}
    tomls = {name: load_gateway_spec(name, config.systems_dir).toml_sha256 for name in config.gateways}
    canonical = json.dumps({"config": settings, "gateway_toml_sha256": tomls}, sort_keys=True,
                           separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def expand(suite: Suite, out_dir: str = DEFAULT_OUT_DIR) -> list[Cell]:
    """Every combination of the axes, in file order; each runnable one a validated StudyConfig
    with the floor (the system whose role is "floor") among its systems. Nothing is started."""
    cells = []
    combos = itertools.product(*suite.axes.values())
    for index, combo in enumerate(combos, 1):
        values = dict(zip(suite.axes, combo))
        cell_id = f"cell-{index:02d}"
        declared = [reason for where, reason in suite.exclude
                    if all(values[p] == v for p, v in where.items())]
        if declared:
            cells.append(Cell(cell_id, values, None, "", f"excluded by the suite: {declared[0]}"))
            continue
        settings = {**suite.base, **{field_of(p): v for p, v in values.items()}}
        try:
            config = config_mod.from_profile(suite.profile, **settings, out_dir=out_dir,
                                             study_id=cell_id)
            config = _with_floor(config)
            prepare(config)  # every check a study makes before it starts (features, binaries, ...)
            key = comparison_key(config)
        except ConfigError as exc:
            cells.append(Cell(cell_id, values, None, "", "cannot run: " + "; ".join(exc.problems)))
            continue
        except GatewaySpecError as exc:
            cells.append(Cell(cell_id, values, None, "", f"cannot run: {exc}"))
            continue
        cells.append(Cell(cell_id, values, config, key, ""))
    return cells


def _with_floor(config: StudyConfig) -> StudyConfig:
    """The config with the floor first among its systems, unless one is there ('folder@feature'
    of the floor counts)."""
    roles = {g: load_gateway_spec(g, config.systems_dir).role for g in config.gateways}
    if FLOOR in roles.values():
        return config
    floors = [name for name in config_mod.known_gateways(config.systems_dir)
              if load_gateway_spec(name, config.systems_dir).role == FLOOR]
    if not floors:
        raise GatewaySpecError(f"no gateway in {config.systems_dir} has role = \"floor\": a "
                               "suite's cells need one to measure added latency against")
    return dataclasses.replace(config, gateways=(floors[0], *config.gateways))


def cells_table(cells: list[Cell]) -> pd.DataFrame:
    """One row per cell: its axis values, comparison key (first 12 hex digits), and why it was
    left out ('' when it runs)."""
    return pd.DataFrame([{"cell": c.cell_id, **{k: _show(v) for k, v in c.values.items()},
                          "systems": ", ".join(c.config.gateways) if c.config else "",
                          "comparison_key": c.comparison_key[:12], "left out": c.excluded}
                         for c in cells])


def _show(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (list, tuple, bool)) else str(value)


@dataclass(frozen=True)
class SuiteResult:
    suite_dir: Path
    status: str
    cells: tuple


def run_suite(suite: Suite, cells: list[Cell], out_dir: str = DEFAULT_OUT_DIR, suite_id: str = "",
              progress: Callable[[str], None] = print) -> SuiteResult:
    """Run every runnable cell as a study (with its baseline) in its own directory, one after
    the other; the suite manifest is rewritten after each. A suite run again with the same
    suite_id keeps every run that completed with the same comparison key."""
    from harness.run.study import (
        run_study,  # here: expanding a suite must not need the runner
    )

    suite_id = suite_id or f"{suite.name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    suite_dir = config_mod._repo_path(out_dir) / suite_id
    suite_dir.mkdir(parents=True, exist_ok=True)
    manifest = {"suite_id": suite_id, "name": suite.name, "description": suite.description,
                "suite_file": str(suite.path), "suite_file_sha256": sha256_file(suite.path),
                "suite_text": suite.text, "profile": suite.profile, "axes": suite.axes,
                "status": "running", "started_t_unix_s": time.time(),
                "cells": [_cell_entry(c) for c in cells]}
    write_json(suite_dir / "manifest.json", manifest)
    runnable = [(i, c) for i, c in enumerate(cells) if c.config is not None]
    status = "completed"
    try:
        for n, (i, cell) in enumerate(runnable, 1):
            label = f"[cell {n}/{len(runnable)} {cell.cell_id} " + \
                    ", ".join(f"{k}={_show(v)}" for k, v in cell.values.items()) + "]"
            progress(f"{label} starting")
            config = dataclasses.replace(cell.config, out_dir=str(suite_dir), study_id=cell.cell_id)
            result = run_study(config, progress=lambda m, label=label: progress(f"{label} {m}"))
            manifest["cells"][i].update(status=result.status, dir=cell.cell_id,
                                        skipped=result.skipped)
            write_json(suite_dir / "manifest.json", manifest)
            if result.status != "completed":
                status = "interrupted" if result.status == "interrupted" else "failed"
            if result.status == "interrupted":
                break
    except BaseException as exc:
        status = "failed"
        manifest["reason"] = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        manifest["status"], manifest["ended_t_unix_s"] = status, time.time()
        write_json(suite_dir / "manifest.json", manifest)
    progress(f"suite {status}: {suite_dir}")
    return SuiteResult(suite_dir, status, tuple(cells))


def _cell_entry(cell: Cell) -> dict:
    return {"cell_id": cell.cell_id, "values": cell.values, "comparison_key": cell.comparison_key,
            "excluded": cell.excluded, "status": "excluded" if cell.excluded else "pending",
            "dir": "", "config": cell.config.to_dict() if cell.config else None}


# --- results -------------------------------------------------------------------------------------

def _cell_summaries(suite_dir: Path) -> tuple[dict, list[tuple[dict, pd.DataFrame, Study]]]:
    """The suite manifest, and per cell that has a study: (entry, run_summary, study)."""
    suite_dir = Path(suite_dir)
    manifest = read_json(suite_dir / "manifest.json")
    out = []
    for entry in manifest["cells"]:
        study_dir = suite_dir / entry["dir"] if entry.get("dir") else None
        if study_dir is None or not (study_dir / "manifest.json").is_file():
            continue
        study = load_study(study_dir)
        out.append((entry, run_summary(study), study))
    return manifest, out


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
            row = {"cell": entry["cell_id"], **{k: _show(v) for k, v in entry["values"].items()},
                   "system": system, "key": entry["comparison_key"][:12],
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


def cell_scenario(entry: dict) -> str:
    """The fault scenario of a suite manifest's cell ("" for a healthy provider)."""
    return ((entry.get("config") or {}).get("fault_scenario")
            or entry["values"].get("fault_scenario", ""))


def fault_table(suite_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The provider-fault lane across a suite. First, one row per fault cell that has a study and
    per system of it: ``cell``, ``scenario``, ``asked`` (the cell's resilience setting),
    ``axes`` (its other axis values), ``system``, ``kind``, ``role``, ``not_run`` (why a system
    has no fault run that reached the hold; "" when it has), ``dialect_missing`` (why the
    artifact judged no error body; "" when it did) and harness.stats.faults.system_figures'
    columns (NaN for a system that did not run). Second, every fault run's 1-s timeline with its
    cell, scenario and ``asked``. Cells left out or without a study have no rows: the suite
    manifest says why."""
    suite_dir = Path(suite_dir)
    manifest = read_json(suite_dir / "manifest.json")
    rows, lines = [], []
    for entry in manifest["cells"]:
        study_dir = suite_dir / entry["dir"] if entry.get("dir") else None
        if (not cell_scenario(entry) or study_dir is None
                or not (study_dir / "manifest.json").is_file()):
            continue
        study = load_study(study_dir)
        per_window, per_run = fault_summary(study)
        figures = system_figures(per_window, per_run).set_index("system")
        where = {"cell": entry["cell_id"], "scenario": cell_scenario(entry),
                 "asked": study.manifest.config.resilience,
                 "axes": ", ".join(f"{k} = {_show(v)}" for k, v in entry["values"].items()
                                   if field_of(k) not in FAULT_AXES)}
        missing = study.not_measured("requests", "error_body_dialect")
        for system in study.systems:
            meta = study.manifest.systems.get(system)
            row = {**where, "system": system, "kind": meta.kind if meta else "",
                   "role": meta.role if meta else "", "not_run": "", "dialect_missing": missing}
            if system in figures.index:
                row.update(figures.loc[system].to_dict())
            else:
                row["not_run"] = _why_not_run(study, system, (entry.get("skipped") or {}))
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


def compare_suites(a_dir: str | Path, b_dir: str | Path,
                   metrics: tuple[str, ...] = tuple(m for m in CELL_METRICS if m != "errors_total"),
                   ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Suite B against suite A, cell by cell where the comparison keys are equal: per system and
    metric, the means, B/A and the verdict (harness.stats.across.verdict). A pair of cells run on
    different machines (cell_machines) gets each side's n, mean and sd only, no verdict, and
    ``same_machine`` False. The second table lists the cells of either suite that have no equal
    key in the other, which are not compared."""
    ma, ca = _cell_summaries(Path(a_dir))
    mb, cb = _cell_summaries(Path(b_dir))
    by_key_a = {e["comparison_key"]: (e, rs, st) for e, rs, st in ca}
    by_key_b = {e["comparison_key"]: (e, rs, st) for e, rs, st in cb}
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
                rows.append({"cell_a": ea["cell_id"], "cell_b": eb["cell_id"],
                             **{k: _show(x) for k, x in eb["values"].items()}, "system": system,
                             "metric": m, "same_machine": same, **figures})
    apart = []
    for suite_id, own, other in ((ma["suite_id"], by_key_a, by_key_b), (mb["suite_id"], by_key_b, by_key_a)):
        for key, (entry, *_) in own.items():
            if key not in other:
                apart.append({"suite": suite_id, "cell": entry["cell_id"],
                              **{k: _show(x) for k, x in entry["values"].items()},
                              "comparison_key": key[:12],
                              "why": "no cell with this comparison key in the other suite"})
    return pd.DataFrame(rows), pd.DataFrame(apart)


def cell_machines(a_dir: str | Path, b_dir: str | Path) -> list[tuple[str, str, MachineMatch]]:
    """(cell of A, cell of B, their machines) per pair of cells with equal comparison keys, in B's
    order: what compare_suites decides "same machine" on, from the cells' study manifests."""
    def cells(suite_dir: Path) -> dict[str, tuple[str, dict]]:
        out = {}
        for entry in read_json(suite_dir / "manifest.json")["cells"]:
            study = suite_dir / entry["dir"] / "manifest.json" if entry.get("dir") else None
            if study is not None and study.is_file():
                out[entry["comparison_key"]] = (entry["cell_id"], read_json(study).get("machine"))
        return out
    a, b = cells(Path(a_dir)), cells(Path(b_dir))
    return [(a[k][0], cell_b, same_machine(a[k][1], machine_b))
            for k, (cell_b, machine_b) in b.items() if k in a]
