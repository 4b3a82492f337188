"""What a run's producers write while it goes on: the load generator's processes (the
locustfile) and the samplers, here or on another host. Raw CSV rows reach the disk at least
once a second; the small JSON files the harness polls are written whole (harness.files.atomic).
Standard library only: the locustfile and a sampler on another host import it. Where each file
lives is harness.files.study_files'; the producers are handed its paths."""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path

from harness.files.atomic import write_atomic
from harness.model.load_settings import LoadSettings


class RawCsv:
    """One producer's raw row file: a header, then rows keyed by its names (a name it lacks
    fails the write), buffered so the hot path only appends."""

    def __init__(self, path: str | Path, fieldnames: list[str], buffering: int = -1):
        os.makedirs(os.path.dirname(str(path)) or ".", exist_ok=True)
        self.file = open(path, "w", newline="", buffering=buffering)
        self.writer = csv.DictWriter(self.file, fieldnames=fieldnames, extrasaction="raise")
        self.writer.writeheader()

    def writerow(self, row: dict) -> None:
        self.writer.writerow(row)

    def writerows(self, rows: list[dict]) -> None:
        self.writer.writerows(rows)

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.flush()
        self.file.close()


def raw_requests_path(raw_dir: str, host: str, pid: int) -> str:
    return os.path.join(raw_dir, f"requests-{host}-{pid}.csv")


def read_settings(path: str | Path) -> dict:
    """A JSON file of settings the harness wrote for a producer (a sampler's spec)."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_load_settings(path: str | Path) -> LoadSettings:
    """The load's settings (load.json, written by harness.files.study_files.RunFiles)."""
    with open(path, encoding="utf-8") as f:
        return LoadSettings.from_json(f.read(), str(path))


def read_body(path: str | Path) -> bytes:
    """The request body every request of the run sends."""
    with open(path, "rb") as f:
        return f.read()


def write_phases(path: str | Path, phases: dict) -> None:
    """The phases reached so far (the harness polls the file while the load runs)."""
    write_atomic(Path(path), json.dumps(phases))


def arm_faults(path: str | Path, epoch_unix_s: float) -> None:
    """Tell the mock (which polls this file) when its fault schedule starts."""
    write_atomic(Path(path), json.dumps({"epoch_unix_s": epoch_unix_s}))


def write_inflight_at_stop(raw_dir: str, host: str, pid: int, inflight: int,
                           t_unix_s: float) -> None:
    """Requests this process still had open when it stopped (they never produce a row)."""
    write_atomic(Path(raw_dir) / f"inflight-{host}-{pid}.json",
                 json.dumps({"inflight_at_stop": inflight, "t_unix_s": t_unix_s}))


def write_pid(path: str | Path) -> None:
    """This process's pid, for whoever must sample or stop it."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(Path(path), f"{os.getpid()}\n")


def read_pid(path: str | Path) -> int | None:
    """The pid a process wrote (write_pid); None before it did."""
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


# The load generator's own record of the whole load, one row a second from the process that
# runs the shape (Locust's master): what the harness reports as progress, and the user count
# each request started under when several processes share the load.
USERS_FILE = "users.csv"
USERS_COLUMNS = ["t_unix_s", "users", "requests"]


def write_cpu_warnings(raw_dir: str, host: str, pid: int, record: dict) -> None:
    """Locust's high-CPU warnings in one process so far: count, highest CPU share, first time."""
    write_atomic(Path(raw_dir) / f"cpu-{host}-{pid}.json", json.dumps(record))
