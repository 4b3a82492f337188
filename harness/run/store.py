"""Artifacts on disk: JSON manifests, Parquet tables with a schema version, file hashes."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA_VERSION = 1

REQUEST_SCHEMA = pa.schema([
    ("run_id", pa.string()), ("system", pa.string()), ("start_t_unix_s", pa.float64()),
    ("latency_ms", pa.float64()), ("status_code", pa.int32()), ("response_bytes", pa.int64()),
    ("error_kind", pa.string()), ("error", pa.string()), ("users", pa.int32()),
    ("phase", pa.string()), ("worker_pid", pa.int32()), ("worker_host", pa.string()),
    ("mock_request_id", pa.string()), ("self_overhead_ms", pa.float64()),
    # streaming lane (NaN / 0 / empty / false for unary requests)
    ("ttfb_ms", pa.float64()), ("ttft_ms", pa.float64()), ("chunks", pa.int32()),
    ("chunk_gaps_ms", pa.list_(pa.float64())), ("stream_done", pa.bool_()),
    # open-loop lane (NaN / NaN / 0 / false in closed loop)
    ("intended_start_t_unix_s", pa.float64()), ("offered_rate_per_s", pa.float64()),
    ("step_index", pa.int32()), ("waited_for_user", pa.bool_()),
])

SAMPLE_SCHEMA = pa.schema([
    ("run_id", pa.string()), ("system", pa.string()), ("t_unix_s", pa.float64()),
    ("role", pa.string()), ("pid_count", pa.int32()), ("rss_bytes", pa.int64()),
    ("cpu_percent", pa.float64()), ("cpu_seconds_total", pa.float64()), ("num_fds", pa.int32()),
    ("load_avg_1m", pa.float64()), ("inflight_requests", pa.float64()),
    ("host", pa.string()),    # the topology's name of the host the sample was taken on
])


def write_json(path: Path, data: dict) -> None:
    """Atomic: a reader never sees half a manifest."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump({"schema_version": SCHEMA_VERSION, **data}, f, indent=2, sort_keys=False,
                  default=str)
        f.write("\n")
    os.replace(tmp, path)


def read_json(path: Path) -> dict:
    with open(path) as f:
        return json.load(f)


def write_parquet(path: Path, frame, schema: pa.Schema) -> None:
    table = pa.Table.from_pandas(frame, schema=schema, preserve_index=False)
    table = table.replace_schema_metadata({b"schema_version": str(SCHEMA_VERSION).encode()})
    pq.write_table(table, path)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def hash_run_files(run_dir: Path) -> dict[str, str]:
    """SHA-256 of every artifact in a run directory except its manifest (which holds them)."""
    run_dir = Path(run_dir)
    return {str(p.relative_to(run_dir)): sha256_file(p)
            for p in sorted(run_dir.rglob("*"))
            if p.is_file() and p.name != "manifest.json" and not p.name.endswith(".tmp")}
