"""Running a suite: its cells expanded into checked study configurations (nothing started),
then each runnable cell run as a whole study in its own directory, the suite manifest rewritten
after each (the suite file's format: harness.model.suite).

    python -m harness suite notebooks/suites/streaming.toml --dry-run     # cells, exclusions, keys
    python -m harness suite notebooks/suites/streaming.toml [--out-dir artifacts/suites] [--suite-id ID]
"""
from __future__ import annotations

import dataclasses
import itertools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from harness.files.store import sha256_file
from harness.files.study_files import SuiteFiles
from harness.model import config as config_mod
from harness.model.config import ConfigError, StudyConfig
from harness.model.gateway_spec import GatewaySpecError, load_gateway_spec
from harness.model.roles import FLOOR
from harness.model.suite import (
    DEFAULT_OUT_DIR,
    Cell,
    CellEntry,
    Suite,
    SuiteManifest,
    axis_text,
    cell_key,
    field_of,
)
from harness.run.load import expected_load_s
from harness.run.preflight import preflight
from harness.run.run import instruments

# A run's cost beyond its planned load and its idle and cool-down seconds (the system's start
# and check, Locust's start and stop, the artifacts): about this here for most systems, so the
# expected duration is a floor (LiteLLM's start alone takes ~20 s); and each Locust process after
# the first adds about this to the start (the in-flight lane's four: ~17 s, measured 19 s).
RUN_FIXED_S = 8.0
LOCUST_PROCESS_START_S = 3.0


def expand(suite: Suite, out_dir: str = DEFAULT_OUT_DIR) -> list[Cell]:
    """Every combination of the axes, in file order; each runnable one a checked StudyConfig
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
            checked = preflight(config)  # every check its study makes before it starts
            key = cell_key(config, instruments())
        except ConfigError as exc:
            cells.append(Cell(cell_id, values, None, "", "cannot run: " + "; ".join(exc.problems)))
            continue
        except GatewaySpecError as exc:
            cells.append(Cell(cell_id, values, None, "", f"cannot run: {exc}"))
            continue
        runs = tuple(r for r in checked.plan if checked.specs[r.system].runnable)
        cells.append(Cell(cell_id, values, config, key, "", runs))
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
    return pd.DataFrame([{"cell": c.cell_id, **{k: axis_text(v) for k, v in c.values.items()},
                          "systems": ", ".join(c.config.gateways) if c.config else "",
                          "comparison_key": c.comparison_key[:12], "left out": c.excluded}
                         for c in cells])


@dataclass(frozen=True)
class SuiteResult:
    suite_dir: Path
    status: str
    cells: tuple


def expected(cells: list[Cell]) -> tuple[int, float]:
    """(runs, seconds) the runnable cells' runnable systems are expected to take at least."""
    runs, total_s = 0, 0.0
    for cell in cells:
        runs += len(cell.runs)
        total_s += sum(expected_load_s(r) + r.idle_s + r.cooldown_s + RUN_FIXED_S
                       + LOCUST_PROCESS_START_S * (r.load.locust_processes - 1) for r in cell.runs)
    return runs, total_s


def run_suite(suite: Suite, cells: list[Cell], out_dir: str = DEFAULT_OUT_DIR, suite_id: str = "",
              progress: Callable[[str], None] = print) -> SuiteResult:
    """Run every runnable cell as a study (with its baseline) in its own directory, one after
    the other; the suite manifest is rewritten after each. A suite run again with the same
    suite_id keeps every run that completed with the same comparison key."""
    from harness.run.study import (
        run_study,  # here: expanding a suite must not need the runner
    )

    suite_id = suite_id or f"{suite.name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    suite_dir = config_mod.repo_path(out_dir) / suite_id
    suite_dir.mkdir(parents=True, exist_ok=True)
    manifest = SuiteManifest(
        suite_id=suite_id, name=suite.name, description=suite.description,
        suite_file=str(suite.path), suite_file_sha256=sha256_file(suite.path),
        suite_text=suite.text, profile=suite.profile, axes=suite.axes, status="running",
        started_t_unix_s=time.time(), cells=tuple(_cell_entry(c) for c in cells))
    _write(suite_dir, manifest)
    runnable = [(i, c) for i, c in enumerate(cells) if c.config is not None]
    runs, expected_s = expected(cells)
    progress(f"suite {suite_id}: {len(runnable)} cells, {runs} runs, expected at least "
             f"{expected_s / 60:.0f} min (each run's load, idle and cool-down, ~{RUN_FIXED_S:g} s to "
             f"start and stop and {LOCUST_PROCESS_START_S:g} s more a Locust process; a step the "
             "system fails or that cannot fit ends its run early)")
    began = time.monotonic()
    status = "completed"
    try:
        for n, (i, cell) in enumerate(runnable, 1):
            label = f"[cell {n}/{len(runnable)} {cell.cell_id} " + \
                    ", ".join(f"{k}={axis_text(v)}" for k, v in cell.values.items()) + "]"
            progress(f"{label} starting")
            config = dataclasses.replace(cell.config, out_dir=str(suite_dir), study_id=cell.cell_id)
            result = run_study(preflight(config), progress=lambda m, label=label: progress(f"{label} {m}"))
            entries = list(manifest.cells)
            entries[i] = dataclasses.replace(entries[i], status=result.status, dir=cell.cell_id,
                                             skipped=dict(result.skipped))
            manifest = dataclasses.replace(manifest, cells=tuple(entries))
            _write(suite_dir, manifest)
            if result.status != "completed":
                status = "interrupted" if result.status == "interrupted" else "failed"
            if result.status == "interrupted":
                break
    except BaseException as exc:
        status = "failed"
        manifest = dataclasses.replace(manifest, reason=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        _write(suite_dir, dataclasses.replace(manifest, status=status, ended_t_unix_s=time.time()))
    progress(f"suite {status} in {(time.monotonic() - began) / 60:.0f} min (expected at least "
             f"{expected_s / 60:.0f} min): {suite_dir}")
    return SuiteResult(suite_dir, status, tuple(cells))


def _write(suite_dir: Path, manifest: SuiteManifest) -> None:
    SuiteFiles(suite_dir).write_manifest(manifest)


def _cell_entry(cell: Cell) -> CellEntry:
    return CellEntry(cell_id=cell.cell_id, values=cell.values, comparison_key=cell.comparison_key,
                     excluded=cell.excluded, status="excluded" if cell.excluded else "pending",
                     config=cell.config.to_dict() if cell.config else None)
