"""Loading a study directory: manifests, rows and samples, checked against their recorded hashes; what each manifest says about its run."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import pandas as pd

from harness.run.store import sha256_file
from harness.stats.metrics import REQUEST_COLUMNS, SAMPLE_COLUMNS


class ArtifactError(RuntimeError):
    """A study directory that cannot be analysed as it is."""


class IntegrityError(ArtifactError):
    """A run's file no longer matches the SHA-256 its run manifest recorded."""


# --- loading -------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Study:
    """One study directory, loaded. ``requests`` and ``samples`` hold every run's rows, with an
    extra ``run_status`` column (the run manifest's status) so incomplete runs stay visible."""

    path: Path
    manifest: dict
    runs: list[dict]                      # run manifests, in plan order
    requests: pd.DataFrame
    samples: pd.DataFrame
    mock_stats: dict[str, dict] = field(default_factory=dict)   # run_id -> mock_stats.json
    run_dirs: dict[str, Path] = field(default_factory=dict)     # run_id -> run directory

    def run(self, run_id: str) -> dict:
        for r in self.runs:
            if r.get("run_id") == run_id:
                return r
        raise KeyError(f"no run {run_id!r} in study {self.path}")

    @property
    def systems(self) -> list[str]:
        return system_order(self)

    @property
    def completed_run_ids(self) -> list[str]:
        return [r["run_id"] for r in self.runs if r.get("status") == "completed"]


def verify_run_files(run_dir: Path, run_manifest: Mapping) -> None:
    """Raise IntegrityError naming the first file whose SHA-256 differs from the manifest's."""
    files = run_manifest.get("files") or {}
    for name, expected in sorted(files.items()):
        path = Path(run_dir) / name
        if not path.is_file():
            raise IntegrityError(f"{path}: listed in the run manifest's files but missing; "
                                 f"refusing to analyse run {run_manifest.get('run_id')!r}")
        actual = sha256_file(path)
        if actual != str(expected).lower():
            raise IntegrityError(
                f"{path}: SHA-256 {actual} does not match {expected} recorded in "
                f"{Path(run_dir) / 'manifest.json'}; the artifact changed after run "
                f"{run_manifest.get('run_id')!r} ended, refusing to analyse it")


def read_json(path: Path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _empty_frame(columns: Mapping[str, str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})


def _read_parquet(path: Path, columns: Mapping[str, str]) -> pd.DataFrame:
    if not path.is_file():
        return _empty_frame(columns)
    df = pd.read_parquet(path)
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ArtifactError(f"{path}: missing columns {missing} (artifacts/README.md)")
    return df


def _concat(frames: list[pd.DataFrame], columns: Mapping[str, str]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        df = _empty_frame(columns)
        df["run_status"] = pd.Series(dtype="str")
        return df
    return pd.concat(frames, ignore_index=True)


def load_study(study_dir: str | Path, verify: bool = True) -> Study:
    """Load a study directory. Runs that did not complete are kept (``status`` in their manifest,
    ``run_status`` in the rows); a run whose files no longer match their recorded SHA-256 is
    refused with IntegrityError naming the file (``verify=False`` skips the check)."""
    path = Path(study_dir)
    manifest_path = path / "manifest.json"
    if not manifest_path.is_file():
        raise ArtifactError(f"{manifest_path}: no study manifest; is {path} a study directory?")
    manifest = read_json(manifest_path)

    # Run directories: those the study manifest lists, then any other found on disk.
    entries: list[dict] = [dict(e) for e in manifest.get("runs") or []]
    listed = {e.get("run_id") for e in entries}
    for mpath in sorted((path / "runs").glob("*/*/manifest.json")):
        rm = read_json(mpath)
        if rm.get("run_id") not in listed:
            entries.append({"run_id": rm.get("run_id"), "system": rm.get("system"),
                            "run_index": rm.get("run_index"), "status": rm.get("status"),
                            "reason": rm.get("reason", ""),
                            "dir": str(mpath.parent.relative_to(path))})
            listed.add(rm.get("run_id"))
    plan_pos = {p.get("run_id"): i for i, p in enumerate(manifest.get("plan") or [])}
    entries.sort(key=lambda e: (plan_pos.get(e.get("run_id"), len(plan_pos)), str(e.get("run_id"))))

    runs: list[dict] = []
    reqs: list[pd.DataFrame] = []
    samps: list[pd.DataFrame] = []
    mock_stats: dict[str, dict] = {}
    run_dirs: dict[str, Path] = {}
    for entry in entries:
        run_id = entry.get("run_id")
        rel = entry.get("dir") or f"runs/{entry.get('system')}/{entry.get('run_index')}"
        run_dir = Path(rel) if Path(rel).is_absolute() else path / rel
        mpath = run_dir / "manifest.json"
        if mpath.is_file():
            rm = read_json(mpath)
        else:  # the run died before writing its manifest: keep it, marked
            rm = {"run_id": run_id, "system": entry.get("system"),
                  "run_index": entry.get("run_index"), "status": entry.get("status") or "failed",
                  "reason": entry.get("reason") or f"no run manifest at {mpath}",
                  "phases": {}, "files": {}}
        if rm.get("status") != "completed" and entry.get("status") and entry["status"] != "completed":
            rm.setdefault("reason", entry.get("reason", ""))
        if verify:
            verify_run_files(run_dir, rm)
        rm = dict(rm)
        status = rm.get("status") or "unknown"
        runs.append(rm)
        run_dirs[run_id] = run_dir
        r = _read_parquet(run_dir / "requests.parquet", REQUEST_COLUMNS)
        s = _read_parquet(run_dir / "samples.parquet", SAMPLE_COLUMNS)
        for df in (r, s):
            df["run_status"] = status
        reqs.append(r)
        samps.append(s)
        ms = run_dir / "mock_stats.json"
        mock_stats[run_id] = read_json(ms) if ms.is_file() else {}

    return Study(path=path, manifest=manifest, runs=runs,
                 requests=_concat(reqs, REQUEST_COLUMNS), samples=_concat(samps, SAMPLE_COLUMNS),
                 mock_stats=mock_stats, run_dirs=run_dirs)


# --- small helpers -------------------------------------------------------------------------------

def system_order(study: Study) -> list[str]:
    """Systems in the study's configured order, then any others in plan order."""
    order: list[str] = []
    cfg = study.manifest.get("config") or {}
    for name in list(cfg.get("gateways") or []) + list((study.manifest.get("systems") or {})):
        if name not in order:
            order.append(name)
    for r in study.runs:
        if r.get("system") not in order:
            order.append(r.get("system"))
    return order


def _find_key(obj: Any, keys: Iterable[str]) -> Any:
    """First value found for any of ``keys`` in a nested dict (breadth-first)."""
    keys = tuple(keys)
    queue = [obj]
    while queue:
        cur = queue.pop(0)
        if isinstance(cur, Mapping):
            for k in keys:
                if k in cur and cur[k] is not None and not isinstance(cur[k], Mapping):
                    return cur[k]
            queue.extend(v for v in cur.values() if isinstance(v, Mapping))
    return None


def _num(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def mock_latency_ms(study: Study, run: Mapping) -> float:
    """The mock's set latency for a run: from its spec, else the study config, else mock_stats."""
    spec = run.get("spec") or {}
    v = _find_key(spec, ("mock_latency_ms",))
    if v is None and isinstance(spec.get("mock"), Mapping):
        v = spec["mock"].get("latency_ms")
    if v is None:
        v = (study.manifest.get("config") or {}).get("mock_latency_ms")
    if v is None:
        v = study.mock_stats.get(run.get("run_id"), {}).get("latency_ms")
    return _num(v)


def _mock_workers(study: Study, run: Mapping) -> float:
    v = _find_key(run.get("spec") or {}, ("mock_workers",))
    if v is None and isinstance((run.get("spec") or {}).get("mock"), Mapping):
        v = run["spec"]["mock"].get("workers")
    if v is None:
        v = study.mock_stats.get(run.get("run_id"), {}).get("workers")
    if v is None:
        v = (study.manifest.get("config") or {}).get("mock_workers")
    n = _num(v)
    return n if n > 0 else 1.0


def _locust_processes(study: Study, run: Mapping) -> float:
    """Load-generating Locust processes (workers); the manifest may give a count or a list."""
    v = _find_key(run.get("spec") or {}, ("locust_processes",))
    if v is None:
        v = (study.manifest.get("config") or {}).get("locust_processes")
    if v is None:
        p = (run.get("locust") or {}).get("processes")
        v = len(p) if isinstance(p, (list, tuple)) else p
    n = _num(v)
    return n if n > 0 else 1.0


def _load_avg_before(run: Mapping, samples: pd.DataFrame) -> float:
    hb = run.get("host_before") or {}
    for key in ("load_avg_1m", "loadavg_1m", "load_1m"):
        if key in hb:
            return _num(hb[key])
    for key in ("load_avg", "loadavg", "load_averages"):
        v = hb.get(key)
        if isinstance(v, (list, tuple)) and v:
            return _num(v[0])
        if isinstance(v, Mapping):
            for k in ("1m", "load_avg_1m", "1"):
                if k in v:
                    return _num(v[k])
    if len(samples):
        first = samples.sort_values("t_unix_s").iloc[0]
        return _num(first["load_avg_1m"])
    return math.nan


def cpu_count(study: Study) -> float:
    machine = study.manifest.get("machine") or {}
    return _num(machine.get("cpu_count"))


def _phase(run: Mapping, name: str) -> float:
    return _num((run.get("phases") or {}).get(f"{name}_t_unix_s"))


