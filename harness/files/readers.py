"""The one reader of each artifact kind: it checks the file's format version (harness.model.
formats), refuses one it does not know with ArtifactError naming the file, and brings an older
one to the current version (harness.model.migrate). Nothing else reads an artifact."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.files.store import parquet_version, read_json, sha256_file
from harness.model import migrate
from harness.model.errors import UserError
from harness.model.formats import (
    COUNTS,
    FAULT_SCHEDULE,
    MOCK_STATS,
    PUBLICATION,
    TABLE_FORMATS,
    Format,
    UnknownVersionError,
)
from harness.model.manifests import ManifestError, RunManifest, StudyManifest
from harness.model.schema import MOCK_REQUESTS, Table
from harness.model.suite import SuiteManifest


class ArtifactError(UserError, RuntimeError):
    """A study directory that cannot be analysed as it is."""


class IntegrityError(ArtifactError):
    """A run's file no longer matches the SHA-256 its run manifest recorded."""


def verify_run_files(run_dir: Path, run_manifest: RunManifest) -> None:
    """Raise IntegrityError naming the first file whose SHA-256 differs from the manifest's."""
    for name, expected in sorted(run_manifest.files.items()):
        path = Path(run_dir) / name
        if not path.is_file():
            raise IntegrityError(f"{path}: listed in the run manifest's files but missing; "
                                 f"refusing to analyse run {run_manifest.run_id!r}")
        actual = sha256_file(path)
        if actual != str(expected).lower():
            raise IntegrityError(
                f"{path}: SHA-256 {actual} does not match {expected} recorded in "
                f"{Path(run_dir) / 'manifest.json'}; the artifact changed after run "
                f"{run_manifest.run_id!r} ended, refusing to analyse it")


def read_study_manifest(path: Path) -> StudyManifest:
    return _manifest(StudyManifest, path)


def read_run_manifest(path: Path) -> RunManifest:
    return _manifest(RunManifest, path)


def _manifest(cls, path: Path):
    try:
        return cls.from_json(Path(path).read_text(encoding="utf-8"), source=str(path))
    except (ManifestError, UnknownVersionError) as exc:
        raise ArtifactError(str(exc)) from None


def read_mock_stats(path: Path) -> dict:
    """A run's mock_stats.json (the mock's counters over the load), current version."""
    return migrate.unstamped(*_json(path, MOCK_STATS))


def read_counts(path: Path) -> dict:
    """counts.json: what the counting gate or lane counted (harness/run/count_system.py)."""
    data, _ = _json(path, COUNTS)
    if not isinstance(data.get("builds"), list):
        raise ArtifactError(f"{path}: a counts file without its builds")
    return data


def read_publication(path: Path) -> dict:
    """artifacts/published/publication.json: what a publication holds and where it came from
    (report/publish.py)."""
    data, _ = _json(path, PUBLICATION)
    if not isinstance(data.get("standard"), dict) or not isinstance(data.get("lanes"), dict):
        raise ArtifactError(f"{path}: a publication without its standard study or its lanes")
    return data


def read_published_table(path: Path) -> pd.DataFrame:
    """One of the publication's Parquet tables (artifacts/published/*.parquet), its version
    the publication's."""
    try:
        PUBLICATION.check(parquet_version(path), f"{path} (Parquet metadata)")
        return pd.read_parquet(path)
    except UnknownVersionError as exc:
        raise ArtifactError(str(exc)) from None


def read_fault_schedule(path: Path) -> dict:
    """A run's faults.json: the mock's fault schedule, its seed and its epoch."""
    return migrate.unstamped(*_json(path, FAULT_SCHEDULE))


def _json(path: Path, fmt: Format) -> tuple[dict, int]:
    try:
        return read_json(path, fmt)
    except UnknownVersionError as exc:
        raise ArtifactError(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"{path}: not a readable {fmt.kind} ({exc})") from None


def empty_frame(table: Table) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in table.pandas_dtypes.items()})


def read_table(path: Path, table: Table) -> tuple[pd.DataFrame, int, tuple[str, ...]]:
    """A run's Parquet table in the current version: (rows, the file's version, the columns
    that version lacked). A missing file is an empty table."""
    fmt = TABLE_FORMATS[table.name]
    if not path.is_file():
        return empty_frame(table), fmt.version, ()
    try:
        version = fmt.check(parquet_version(path), f"{path} (Parquet metadata)")
        df, missing = migrate.table(pd.read_parquet(path), table, version, str(path))
    except (UnknownVersionError, migrate.TableFormatError) as exc:
        raise ArtifactError(str(exc)) from None
    return df, version, missing


def read_mock_requests(run_dir: Path) -> pd.DataFrame:
    """The providers' per-request log of a run, current version: mock_requests.parquet, or for
    a run from before that file (MOCK_REQUESTS_TABLE's first version) the raw logs in
    mock-stats/ and, when a standby ran, mock-standby-stats/."""
    from mocks.request_log import read_request_log
    stored = Path(run_dir) / MOCK_REQUESTS.file
    if stored.is_file():
        return read_table(stored, MOCK_REQUESTS)[0]
    logs = [read_request_log(str(Path(run_dir) / name)) for name in ("mock-stats", "mock-standby-stats")]
    return pd.concat(logs, ignore_index=True).sort_values("body_end_t_unix_ns", kind="stable",
                                                         ignore_index=True)


def read_suite_manifest(suite_dir: Path) -> SuiteManifest:
    """A suite directory's manifest.json."""
    path = Path(suite_dir) / "manifest.json"
    if not path.is_file():
        raise ArtifactError(f"{path}: no suite manifest; is {suite_dir} a suite directory?")
    return _manifest(SuiteManifest, path)
