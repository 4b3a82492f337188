"""A study directory as one object: its manifests, rows, samples and the providers' rows (each
read through harness.files.study_files, checked against the recorded hashes), and what each
manifest says about its run. Statistics take a Study and read no file."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from harness.files.readers import empty_frame, verify_run_files
from harness.files.study_files import RunFiles, StudyFiles
from harness.model.manifests import PlanEntry, RunEntry, RunManifest, StudyManifest
from harness.model.schema import REQUESTS, SAMPLES, Table

# --- loading -------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Study:
    """One study directory, loaded and brought to the current artifact version. ``requests`` and
    ``samples`` hold every run's rows, with an extra ``run_status`` column (the run manifest's
    status) so incomplete runs stay visible. ``missing_columns``: table version -> table ->
    the columns that version's files did not have (present here as missing values)."""

    path: Path
    manifest: StudyManifest
    runs: list[RunManifest]               # in plan order
    requests: pd.DataFrame
    samples: pd.DataFrame
    mock_stats: dict[str, dict] = field(default_factory=dict)   # run_id -> mock_stats.json
    run_dirs: dict[str, Path] = field(default_factory=dict)     # run_id -> run directory
    missing_columns: dict[int, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    fault_epochs: dict[str, float] = field(default_factory=dict)  # run_id -> faults armed at
    counts: dict | None = None   # the counting lane's counts.json (None: no counting lane)
    # The providers' rows are read on first use: a standard study's are millions.
    _mock_rows: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)

    def mock_requests(self, run_id: str) -> pd.DataFrame:
        """The providers' per-request rows of a run (harness.model.schema.MOCK_REQUESTS)."""
        if run_id not in self._mock_rows:
            self._mock_rows[run_id] = RunFiles(self.run_dirs[run_id]).read_mock_requests()
        return self._mock_rows[run_id]

    def probes(self, run_id: str) -> pd.DataFrame:
        """The in-flight lane's health probe rows of a run (empty when it probed nothing)."""
        return RunFiles(self.run_dirs[run_id]).read_probes()

    def has_mock_requests(self, run_id: str) -> bool:
        """Whether the run stored the providers' table (older artifact versions did not)."""
        return run_id in self.run_dirs and RunFiles(self.run_dirs[run_id]).has_mock_requests_table()

    def run(self, run_id: str) -> RunManifest:
        for r in self.runs:
            if r.run_id == run_id:
                return r
        raise KeyError(f"no run {run_id!r} in study {self.path}")

    @property
    def systems(self) -> list[str]:
        return system_order(self)

    @property
    def completed_run_ids(self) -> list[str]:
        return [r.run_id for r in self.runs if r.status == "completed"]

    def not_measured(self, table: str, column: str) -> str:
        """Why a column holds no values ("" when it was measured): for the report."""
        versions = [v for v, tables in sorted(self.missing_columns.items())
                    if column in tables.get(table, ())]
        if not versions:
            return ""
        return (f"not measured in {table} table version {', '.join(map(str, versions))} "
                f"({table}.{column})")


def _concat(frames: list[pd.DataFrame], table: Table) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        df = empty_frame(table)
        df["run_status"] = pd.Series(dtype="str")
        return df
    return pd.concat(frames, ignore_index=True)


def _placeholder(entry: RunEntry, planned: PlanEntry | None, manifest_path: Path) -> RunManifest:
    """A run that died before writing its manifest: kept, marked failed."""
    return RunManifest(run_id=entry.run_id, system=entry.system, run_index=entry.run_index,
                       round=planned.round if planned else 0,
                       position=planned.position if planned else 0,
                       comparison_key=entry.comparison_key, spec=None,
                       status=entry.status or "failed",
                       reason=entry.reason or f"no run manifest at {manifest_path}")


def _run_entries(files: StudyFiles, manifest: StudyManifest) -> tuple[list[RunEntry], dict[Path, RunManifest]]:
    """The run directories: those the study manifest lists, then any other found on disk, in
    plan order; and the run manifests read on the way (by directory)."""
    entries: list[RunEntry] = list(manifest.runs)
    on_disk: dict[Path, RunManifest] = {}
    listed = {e.run_id for e in entries}
    for run, rm in files.run_manifests():
        if rm.run_id not in listed:
            entries.append(RunEntry(run_id=rm.run_id, system=rm.system, run_index=rm.run_index,
                                    status=rm.status, reason=rm.reason,
                                    dir=str(run.dir.relative_to(files.dir))))
            listed.add(rm.run_id)
        on_disk[run.dir] = rm
    plan_pos = {p.run_id: i for i, p in enumerate(manifest.plan)}
    entries.sort(key=lambda e: (plan_pos.get(e.run_id, len(plan_pos)), str(e.run_id)))
    return entries, on_disk


def load_study(study_dir: str | Path, verify: bool = True) -> Study:
    """Load a study directory. Runs that did not complete are kept (``status`` in their manifest,
    ``run_status`` in the rows); a run whose files no longer match their recorded SHA-256 is
    refused with IntegrityError naming the file (``verify=False`` skips the check). Every
    manifest and table states its schema version; an unknown one is refused (ArtifactError),
    an older one is migrated (harness.model.migrate)."""
    files = StudyFiles(Path(study_dir))
    manifest = files.read_manifest()

    entries, on_disk = _run_entries(files, manifest)
    planned = {p.run_id: p for p in manifest.plan}

    runs: list[RunManifest] = []
    reqs: list[pd.DataFrame] = []
    samps: list[pd.DataFrame] = []
    mock_stats: dict[str, dict] = {}
    run_dirs: dict[str, Path] = {}
    fault_epochs: dict[str, float] = {}
    missing_columns: dict[int, dict[str, tuple[str, ...]]] = {}
    for entry in entries:
        run = files.at(entry.dir or f"runs/{entry.system}/{entry.run_index}")
        if run.dir in on_disk:
            rm = on_disk[run.dir]
        elif run.manifest_path.is_file():
            rm = run.read_manifest()
        else:
            rm = _placeholder(entry, planned.get(entry.run_id), run.manifest_path)
        if verify:
            verify_run_files(run.dir, rm)
        runs.append(rm)
        run_dirs[entry.run_id] = run.dir
        for table, frames in ((REQUESTS, reqs), (SAMPLES, samps)):
            df, version, missing = run.read_table(table)
            if missing:
                seen = missing_columns.setdefault(version, {})
                seen[table.name] = tuple(dict.fromkeys(seen.get(table.name, ()) + missing))
            df["run_status"] = rm.status or "unknown"
            frames.append(df)
        mock_stats[entry.run_id] = run.read_mock_stats()
        epoch = run.fault_epoch()
        if epoch is not None:
            fault_epochs[entry.run_id] = epoch

    return Study(path=files.dir, manifest=manifest, runs=runs,
                 requests=_concat(reqs, REQUESTS), samples=_concat(samps, SAMPLES),
                 mock_stats=mock_stats, run_dirs=run_dirs, missing_columns=missing_columns,
                 fault_epochs=fault_epochs, counts=files.read_counts())


# --- small helpers -------------------------------------------------------------------------------

def system_order(study: Study) -> list[str]:
    """Systems in the study's configured order, then any others in plan order."""
    order: list[str] = []
    for name in [*study.manifest.config.gateways, *study.manifest.systems]:
        if name not in order:
            order.append(name)
    for r in study.runs:
        if r.system not in order:
            order.append(r.system)
    return order


def as_float(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def mock_latency_ms(study: Study, run: RunManifest) -> float:
    """The mock's set latency for a run (the study's setting for a run without a manifest)."""
    if run.spec is None:
        return as_float(study.manifest.config.mock_latency_ms)
    return as_float(run.spec.mock.mock_latency_ms)


def mock_workers(study: Study, run: RunManifest) -> float:
    n = as_float(run.spec.mock.mock_workers if run.spec else study.manifest.config.mock_workers)
    return n if n > 0 else 1.0


def locust_processes(study: Study, run: RunManifest) -> float:
    """Load-generating Locust processes (a topology's workers when it has them)."""
    n = as_float(run.spec.load.locust_processes if run.spec
             else study.manifest.config.locust_processes)
    return n if n > 0 else 1.0


def load_avg_before(run: RunManifest, samples: pd.DataFrame) -> float:
    """The machine's 1-minute load average when the run began (else its first sample)."""
    if run.host_before is not None and run.host_before.load_avg_1m is not None:
        return as_float(run.host_before.load_avg_1m)
    if len(samples):
        first = samples.sort_values("t_unix_s").iloc[0]
        return as_float(first["load_avg_1m"])
    return math.nan


def cpu_count(study: Study) -> float:
    return as_float(study.manifest.machine.get("cpu_count"))
