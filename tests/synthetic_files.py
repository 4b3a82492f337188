"""How the synthetic builders (synthetic.py, synthetic_faults.py) write a study's files:
Parquet tables and manifests in a chosen artifact version, and JSON as the harness writes it."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness.model.manifests import RunManifest, StudyManifest


def write_parquet(df: pd.DataFrame, schema: pa.Schema, path: Path,
                  version: int, without: tuple[str, ...] = ()) -> None:
    """``without``: columns an older artifact version did not have yet."""
    schema = pa.schema([f for f in schema if f.name not in without])
    table = pa.Table.from_pandas(df[schema.names], schema=schema, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[b"schema_version"] = str(version).encode()
    pq.write_table(table.replace_schema_metadata(meta), path)


def write_json(obj: Any, path: Path) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def write_manifest(manifest: RunManifest | StudyManifest, path: Path, version: int | None) -> None:
    """The current version as the harness writes it; version 1 as it was: phases not reached
    are absent."""
    data = json.loads(manifest.to_json())
    if version == 1:
        data["schema_version"] = 1
        if "phases" in data:
            data["phases"] = {k: v for k, v in data["phases"].items() if v is not None}
    write_json(data, path)
