"""Every file of a study: where it lives and how it is read and written, in one place
(artifacts/README.md describes the layout). run/ writes a study through ``StudyFiles`` and
``RunFiles``, harness.stats.loading reads one through them, and nothing else names a study's
files: a layer test fails on a read or write of one outside harness/files/."""
from __future__ import annotations

import glob
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.files.atomic import write_atomic
from harness.files.producers import USERS_FILE
from harness.files.readers import (
    ArtifactError,
    empty_frame,
    read_counts,
    read_fault_schedule,
    read_mock_requests,
    read_mock_stats,
    read_run_manifest,
    read_study_manifest,
    read_suite_manifest,
    read_table,
)
from harness.files.store import (
    hash_run_files,
    parquet_rows,
    read_raw_csv,
    sha256_file,
    tree_bytes,
    write_json,
    write_table,
)
from harness.model import migrate
from harness.model.formats import COUNTS, FAULT_SCHEDULE, MOCK_STATS
from harness.model.load_settings import LoadSettings
from harness.model.manifests import RunManifest, StudyManifest
from harness.model.plan import RunSpec
from harness.model.schema import MOCK_REQUESTS, PROBES, REQUESTS, SAMPLES, Table
from harness.model.suite import SuiteManifest
from mocks.request_log import LOG_PREFIX, LOG_SUFFIX

MANIFEST = "manifest.json"
# Written by the load generator while it runs (the harness polls it), gone once the run ends:
# its times are then in the run manifest's phases.
PHASES = "phases.json"
# The load generator arms the mock's faults through this file when its warm-up starts (the mock
# polls it); afterwards its epoch goes to faults.json and the file is removed.
FAULT_ARM = "fault-arm.json"
PCAP = "wire.pcap"          # the run's wire capture (harness.run.wire_window)


def is_suite(directory: Path) -> bool:
    """A suite directory holds its cells' studies and a manifest listing them."""
    try:
        return "cells" in json.loads((Path(directory) / MANIFEST).read_text())
    except (OSError, ValueError):
        return False


@dataclass(frozen=True)
class RunFiles:
    """One run's directory (``<study>/runs/<system>/<run index>``)."""
    dir: Path

    # --- paths handed to the processes that write them --------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.dir / MANIFEST

    @property
    def raw_dir(self) -> Path:
        return self.dir / "raw"

    @property
    def phases_path(self) -> Path:
        return self.dir / PHASES

    @property
    def fault_arm_path(self) -> Path:
        return self.dir / FAULT_ARM

    @property
    def pcap_path(self) -> Path:
        return self.dir / PCAP

    @property
    def load_settings_path(self) -> Path:
        return self.dir / "load.json"

    @property
    def locust_csv_prefix(self) -> Path:
        return self.dir / "locust"

    def log(self, name: str) -> Path:
        """A process's own log (``system.log``, ``mock.log``, ``locust.log``, …)."""
        return self.dir / f"{name}.log"

    def stats_dir(self, provider: str) -> Path:
        """Where a mock provider keeps its counters and per-request log."""
        return self.dir / f"{provider}-stats"

    def pid_file(self, label: str) -> Path:
        return self.dir / "pids" / f"{label}.pid"

    def sampler_spec(self, host: str) -> Path:
        return self.dir / "pids" / f"sampler-{host}.json"

    def raw_samples(self, host: str | None = None) -> Path:
        """This machine's samples (host None), or those a sampler on ``host`` writes."""
        return self.raw_dir / ("samples.csv" if host is None else f"samples-{host}.csv")

    def raw_probes(self) -> Path:
        """The in-flight lane's health probe rows while the load runs."""
        return self.raw_dir / "probes.csv"

    def named(self, name: str) -> Path:
        """A file of the run by its name relative to the run directory (one the run manifest
        names, or a system's configuration rendered for the run)."""
        return self.dir / name

    # --- writes -----------------------------------------------------------------------------
    def fresh(self) -> "RunFiles":
        """An empty directory (an earlier, unfinished attempt of the run is removed)."""
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.raw_dir.mkdir(parents=True)
        return self

    def write_manifest(self, manifest: RunManifest) -> None:
        write_atomic(self.manifest_path, manifest.to_json())

    def write_body(self, body: bytes) -> Path:
        path = self.dir / "request-body.json"
        path.write_bytes(body)
        return path

    def write_load_settings(self, settings: LoadSettings) -> Path:
        write_atomic(self.load_settings_path, settings.to_json())
        return self.load_settings_path

    def write_rendered(self, name: str, text: str) -> Path:
        path = self.named(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def write_sampler_spec(self, host: str, spec: dict) -> Path:
        path = self.sampler_spec(host)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(spec, indent=2))
        return path

    def write_requests(self, frame: pd.DataFrame) -> None:
        write_table(self.dir / REQUESTS.file, frame, REQUESTS)

    def write_samples(self, frame: pd.DataFrame) -> None:
        write_table(self.dir / SAMPLES.file, frame, SAMPLES)

    def write_mock_requests(self, frame: pd.DataFrame) -> None:
        write_table(self.dir / MOCK_REQUESTS.file, frame, MOCK_REQUESTS)

    def write_probes(self, frame: pd.DataFrame) -> None:
        write_table(self.dir / PROBES.file, frame, PROBES)

    def write_mock_stats(self, stats: dict) -> None:
        write_json(self.dir / MOCK_STATS.file, stats, MOCK_STATS)

    def record_fault_epoch(self, schedule: dict, seed: int) -> None:
        """faults.json: the schedule, its seed and the epoch the load armed it with (from the
        arm file, which then goes). Nothing when the load never armed the faults."""
        if not self.fault_arm_path.is_file():
            return
        epoch = float(json.loads(self.fault_arm_path.read_text())["epoch_unix_s"])
        write_json(self.dir / FAULT_SCHEDULE.file,
                   {"schedule": schedule, "seed": seed, "epoch_unix_s": epoch}, FAULT_SCHEDULE)
        self.fault_arm_path.unlink()

    def drop_phases(self) -> None:
        self.phases_path.unlink(missing_ok=True)

    def drop(self, name: str) -> None:
        """Delete one of the run's files (a capture whose figures are in requests.parquet)."""
        (self.dir / name).unlink(missing_ok=True)

    def drop_request_logs(self, stats_dirs: list[Path], rows: int) -> None:
        """Delete the providers' raw request logs once mock_requests.parquet holds their
        ``rows``: the table is then the one copy. ArtifactError, and the logs kept, when the
        stored table holds another number of rows."""
        stored = parquet_rows(self.dir / MOCK_REQUESTS.file)
        if stored != rows:
            raise ArtifactError(f"{self.dir / MOCK_REQUESTS.file} holds {stored} rows, not the "
                                f"{rows} written: the raw request logs are kept")
        for stats_dir in stats_dirs:
            for path in Path(stats_dir).glob(f"{LOG_PREFIX}*{LOG_SUFFIX}"):
                path.unlink()

    def hash_files(self) -> dict[str, str]:
        return hash_run_files(self.dir)

    # --- reads while and after the run ------------------------------------------------------
    def phases(self) -> dict:
        """The phases the load generator has reached so far ({} before it wrote any)."""
        try:
            return json.loads(self.phases_path.read_text())
        except (OSError, ValueError):
            return {}

    def inflight_at_stop(self) -> int:
        """Requests the load generator's processes still had open when they stopped."""
        total = 0
        for path in glob.glob(str(self.raw_dir / "inflight-*.json")):
            try:
                total += int(json.loads(Path(path).read_text()).get("inflight_at_stop", 0))
            except (OSError, ValueError):
                pass
        return total

    def cpu_warnings(self) -> list[str]:
        """Locust's high-CPU warnings, one line per load-generating process that had any."""
        lines = []
        for path in sorted(self.raw_dir.glob("cpu-*.json")):
            try:
                w = json.loads(path.read_text())
                lines.append(f"{path.stem[len('cpu-'):]}: CPU above Locust's threshold "
                             f"{int(w['count'])} times, at most {float(w['max_cpu_percent']):.0f}%")
            except (OSError, ValueError, KeyError, TypeError):
                lines.append(f"{path.name}: a CPU warning that could not be read")
        return lines

    def progress(self) -> tuple[int, int]:
        """(users now, requests so far), from the load generator's last record; (0, 0) before
        its first."""
        try:
            with open(self.raw_dir / USERS_FILE, "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - 4096))
                last = f.read().decode(errors="replace").splitlines()[-1].split(",")
            return int(last[1]), int(last[2])
        except (OSError, ValueError, IndexError):
            return 0, 0

    def users_history(self) -> pd.DataFrame | None:
        """The whole load's user count each second (t_unix_s, users); None without a record."""
        try:
            return pd.read_csv(self.raw_dir / USERS_FILE, usecols=["t_unix_s", "users"])
        except (OSError, ValueError):
            return None

    def read_raw_requests(self) -> pd.DataFrame:
        return read_raw_csv(sorted(self.raw_dir.glob("requests-*.csv")), REQUESTS)

    def read_raw_samples(self) -> pd.DataFrame:
        """This machine's samples, then those of each other host."""
        return read_raw_csv([self.raw_samples(), *sorted(self.raw_dir.glob("samples-*.csv"))],
                            SAMPLES)

    def read_manifest(self) -> RunManifest:
        return read_run_manifest(self.manifest_path)

    def completed(self, spec: RunSpec) -> RunManifest | None:
        """The manifest of a run finished here earlier that ran what ``spec`` runs (its recorded
        comparison key is spec's, in the recipe it was recorded with: migrate.same_run) with
        files that still match their recorded SHA-256; None: the run must be (re)done. A key of
        a recipe this harness does not know is refused (KeyVersionError)."""
        try:
            manifest = self.read_manifest()
        except (OSError, ArtifactError):
            return None
        if manifest.status != "completed" or not migrate.same_run(manifest.comparison_key, spec):
            return None
        files = manifest.files
        if not files or any(not (self.dir / name).is_file()
                            or sha256_file(self.dir / name) != digest
                            for name, digest in files.items()):
            return None
        return manifest

    def read_table(self, table: Table) -> tuple[pd.DataFrame, int, tuple[str, ...]]:
        return read_table(self.dir / table.file, table)

    def read_raw_probes(self) -> pd.DataFrame:
        return read_raw_csv([self.raw_probes()], PROBES)

    def read_probes(self) -> pd.DataFrame:
        """The health probe's rows (empty for a run that probed nothing)."""
        path = self.dir / PROBES.file
        return read_table(path, PROBES)[0] if path.is_file() else empty_frame(PROBES)

    def read_mock_stats(self) -> dict:
        path = self.dir / MOCK_STATS.file
        return read_mock_stats(path) if path.is_file() else {}

    def has_mock_requests_table(self) -> bool:
        """Whether the run stored the providers' per-request table (runs of an older artifact
        version, or whose mock never started, did not)."""
        return (self.dir / MOCK_REQUESTS.file).is_file()

    def read_mock_requests(self) -> pd.DataFrame:
        """The providers' per-request log (of an older run: their raw logs)."""
        return read_mock_requests(self.dir)

    def fault_epoch(self) -> float | None:
        """When the load armed the mock's faults; None when it never did."""
        path = self.dir / FAULT_SCHEDULE.file
        return float(read_fault_schedule(path)["epoch_unix_s"]) if path.is_file() else None


@dataclass(frozen=True)
class StudyFiles:
    """One study's directory: its manifest, its runs, its install logs and its counts."""
    dir: Path

    @property
    def manifest_path(self) -> Path:
        return self.dir / MANIFEST

    @property
    def notebook_path(self) -> Path:
        return self.dir / "head_to_head.ipynb"

    @property
    def count_dir(self) -> Path:
        return self.dir / "count"

    def run(self, system: str, run_index: int) -> RunFiles:
        return RunFiles(self.dir / "runs" / system / str(run_index))

    def at(self, relative: str) -> RunFiles:
        """A run directory as the study manifest records it (relative to the study)."""
        path = Path(relative)
        return RunFiles(path if path.is_absolute() else self.dir / path)

    def size_bytes(self) -> int:
        """What the study holds on disk: every file under its directory."""
        return tree_bytes(self.dir)

    def install_log(self, system: str, what: str = "log") -> Path:
        return self.dir / "install" / f"{system}.{what}"

    def exists(self) -> bool:
        return self.manifest_path.is_file()

    def read_manifest(self) -> StudyManifest:
        if not self.exists():
            raise ArtifactError(f"{self.manifest_path}: no study manifest; is {self.dir} a "
                                f"study directory?")
        return read_study_manifest(self.manifest_path)

    def write_manifest(self, manifest: StudyManifest) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        write_atomic(self.manifest_path, manifest.to_json())

    def run_manifests(self) -> list[tuple[RunFiles, RunManifest]]:
        """Every run directory on disk with its manifest, in path order."""
        return [(RunFiles(p.parent), read_run_manifest(p))
                for p in sorted((self.dir / "runs").glob(f"*/*/{MANIFEST}"))]

    @property
    def counts_path(self) -> Path:
        return self.dir / COUNTS.file

    def read_counts(self) -> dict | None:
        """The counting lane's counts.json; None when the study has no counting lane."""
        return read_counts(self.counts_path) if self.counts_path.is_file() else None


@dataclass(frozen=True)
class SuiteFiles:
    """One suite's directory: its manifest and one study per cell."""
    dir: Path

    def read_manifest(self) -> SuiteManifest:
        return read_suite_manifest(self.dir)

    def write_manifest(self, manifest: SuiteManifest) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        write_atomic(self.dir / MANIFEST, manifest.to_json())

    def cell(self, relative: str) -> StudyFiles:
        return StudyFiles(self.dir / relative)
