"""Running a suite: its cells expanded, each cleared by its study's preflight (nothing started),
then each cleared cell run as a whole study in its own directory, the suite manifest rewritten
after each (the suite file's format: harness.model.suite). Each cell's preflight runs once: its
result is what run_study takes.

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
from harness.model.plan import RunSpec
from harness.model.roles import FLOOR
from harness.model.suite import (
    DEFAULT_OUT_DIR,
    CellEntry,
    Suite,
    SuiteManifest,
    axis_text,
    cell_key,
    field_of,
)
from harness.run.load import expected_load_s
from harness.run.preflight import Cleared, preflight
from harness.run.run import instruments

# A run's cost beyond its planned load and its idle and cool-down seconds (the system's start
# and check, Locust's start and stop, the artifacts): about this here for most systems, so the
# expected duration is a floor (LiteLLM's start alone takes ~20 s); and each Locust process after
# the first adds about this to the start (the in-flight lane's four: ~17 s, measured 19 s).
RUN_FIXED_S = 8.0
LOCUST_PROCESS_START_S = 3.0


@dataclass(frozen=True)
class Cell:
    cell_id: str
    values: dict                  # axis path -> this cell's value
    cleared: Cleared | None       # its study's preflight; None for a cell left out
    comparison_key: str           # "" for a cell left out
    excluded: str                 # "" = runnable; otherwise why it was left out

    @property
    def config(self) -> StudyConfig | None:
        return self.cleared.config if self.cleared else None

    @property
    def runs(self) -> tuple[RunSpec, ...]:
        """Its runnable systems' runs, as its preflight planned them."""
        if self.cleared is None:
            return ()
        return tuple(r for r in self.cleared.plan if self.cleared.specs[r.system].runnable)


@dataclass(frozen=True)
class ClearedSuite:
    """A suite ready to run: its directory and every cell, each runnable one cleared."""
    suite: Suite
    suite_dir: Path
    cells: tuple[Cell, ...]


def suite_dir_of(suite: Suite, out_dir: str = DEFAULT_OUT_DIR, suite_id: str = "") -> Path:
    """<out_dir>/<suite_id>, by default <name>-<UTC timestamp>."""
    suite_id = suite_id or f"{suite.name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    return config_mod.repo_path(out_dir) / suite_id


def preflight_suite(suite: Suite, out_dir: str = DEFAULT_OUT_DIR, suite_id: str = "") -> ClearedSuite:
    """The suite's cells, each cleared by its study's preflight; nothing is created."""
    suite_dir = suite_dir_of(suite, out_dir, suite_id)
    return ClearedSuite(suite, suite_dir, tuple(expand(suite, suite_dir)))


def expand(suite: Suite, suite_dir: Path | None = None) -> list[Cell]:
    """Every combination of the axes, in file order; each runnable one cleared by its study's
    preflight, with the floor (the system whose role is "floor") among its systems, its study in
    ``suite_dir``/<cell id> (default: suite_dir_of's). Nothing is started or created."""
    suite_dir = suite_dir or suite_dir_of(suite)
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
            config = config_mod.from_profile(suite.profile, **settings, out_dir=str(suite_dir),
                                             study_id=cell_id)
            config = _with_floor(config)
            cleared = preflight(config)
            key = cell_key(config, instruments())
        except ConfigError as exc:
            cells.append(Cell(cell_id, values, None, "", "cannot run: " + "; ".join(exc.problems)))
            continue
        except GatewaySpecError as exc:
            cells.append(Cell(cell_id, values, None, "", f"cannot run: {exc}"))
            continue
        cells.append(Cell(cell_id, values, cleared, key, ""))
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
    """(runs, seconds) the runnable cells' runnable systems are expected to take when every run
    holds every step: a step a system fails, or that cannot fit, ends its run sooner."""
    runs, total_s = 0, 0.0
    for cell in cells:
        runs += len(cell.runs)
        total_s += sum(expected_load_s(r) + r.idle_s + r.cooldown_s + RUN_FIXED_S
                       + LOCUST_PROCESS_START_S * (r.load.locust_processes - 1) for r in cell.runs)
    return runs, total_s


def run_suite(cleared: ClearedSuite, progress: Callable[[str], None] = print) -> SuiteResult:
    """Run every cleared cell as a study (with its floor) in its own directory, one after the
    other; the suite manifest is rewritten after each. A suite run again in the same directory
    keeps every run that completed with the same comparison key."""
    from harness.run.study import (
        run_study,  # here: expanding a suite must not need the runner
    )

    suite, suite_dir, cells = cleared.suite, cleared.suite_dir, cleared.cells
    suite_dir.mkdir(parents=True, exist_ok=True)
    manifest = SuiteManifest(
        suite_id=suite_dir.name, name=suite.name, description=suite.description,
        suite_file=str(suite.path), suite_file_sha256=sha256_file(suite.path),
        suite_text=suite.text, profile=suite.profile, axes=suite.axes, status="running",
        started_t_unix_s=time.time(), cells=tuple(_cell_entry(c) for c in cells))
    _write(suite_dir, manifest)
    runnable = [(i, c) for i, c in enumerate(cells) if c.cleared is not None]
    runs, expected_s = expected(cells)
    progress(f"suite {suite_dir.name}: {len(runnable)} cells, {runs} runs, expected "
             f"{expected_s / 60:.0f} min if every run holds every step (each run's load, idle and "
             f"cool-down, ~{RUN_FIXED_S:g} s to start and stop and {LOCUST_PROCESS_START_S:g} s "
             "more a Locust process; a step the system fails or that cannot fit ends its run "
             "sooner)")
    began = time.monotonic()
    status = "completed"
    try:
        for n, (i, cell) in enumerate(runnable, 1):
            label = f"[cell {n}/{len(runnable)} {cell.cell_id} " + \
                    ", ".join(f"{k}={axis_text(v)}" for k, v in cell.values.items()) + "]"
            progress(f"{label} starting")
            result = run_study(cell.cleared, progress=lambda m, label=label: progress(f"{label} {m}"))
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
    progress(f"suite {status} in {(time.monotonic() - began) / 60:.0f} min (expected "
             f"{expected_s / 60:.0f} min if every run held every step): {suite_dir}")
    return SuiteResult(suite_dir, status, tuple(cells))


def _write(suite_dir: Path, manifest: SuiteManifest) -> None:
    SuiteFiles(suite_dir).write_manifest(manifest)


def _cell_entry(cell: Cell) -> CellEntry:
    return CellEntry(cell_id=cell.cell_id, values=cell.values, comparison_key=cell.comparison_key,
                     excluded=cell.excluded, status="excluded" if cell.excluded else "pending",
                     config=cell.config.to_dict() if cell.config else None)
