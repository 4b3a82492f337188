"""Writing artifacts, and the low-level reads under harness.files.readers: JSON files and typed
tables (raw CSV in, Parquet out with its format version in the metadata), file hashes. Column
types come from harness.model.schema, format versions from harness.model.formats."""
from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path
from typing import Iterable

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from harness.files.atomic import write_atomic
from harness.model.formats import TABLE_FORMATS, Format
from harness.model.schema import NUMERIC, REQUESTS, SAMPLES, Table

_ARROW = {"string": pa.string(), "float64": pa.float64(), "int32": pa.int32(),
          "int64": pa.int64(), "bool": pa.bool_(), "list<float64>": pa.list_(pa.float64())}
VERSION_KEY = b"schema_version"


def arrow_schema(table: Table) -> pa.Schema:
    return pa.schema([(c.name, _ARROW[c.type]) for c in table.stored])


REQUEST_SCHEMA = arrow_schema(REQUESTS)
SAMPLE_SCHEMA = arrow_schema(SAMPLES)


def dump_json(data: dict) -> str:
    return json.dumps(data, indent=2, sort_keys=False, default=str) + "\n"


def write_json(path: Path, data: dict, fmt: Format) -> None:
    """A harness JSON artifact, stamped with its format's current version."""
    write_atomic(path, dump_json({"schema_version": fmt.version, **data}))


def read_json(path: Path, fmt: Format) -> tuple[dict, int]:
    """A harness JSON artifact and its version (checked: UnknownVersionError when this harness
    does not read it). The kind's reader in harness.files.readers migrates it."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    found = data.get("schema_version") if isinstance(data, dict) else None
    return data, fmt.check(found, str(path))


def write_table(path: Path, frame: pd.DataFrame, table: Table) -> None:
    arrow = pa.Table.from_pandas(frame[table.names], schema=arrow_schema(table),
                                 preserve_index=False)
    version = TABLE_FORMATS[table.name].version
    arrow = arrow.replace_schema_metadata({VERSION_KEY: str(version).encode()})
    pq.write_table(arrow, path)


def write_frame(path: Path, frame: pd.DataFrame, fmt: Format) -> None:
    """A Parquet table whose columns are its own (a publication's tables), typed as pandas
    holds them, its format's version in the metadata; values Parquet cannot hold (enums, lists)
    as their text."""
    frame = frame.reset_index(drop=True).copy()
    for c in frame.columns:
        if frame[c].dtype == object:
            frame[c] = frame[c].map(lambda v: v if v is None or isinstance(v, str) else
                                    (v.value if hasattr(v, "value") else str(v)))
    arrow = pa.Table.from_pandas(frame, preserve_index=False)
    pq.write_table(arrow.replace_schema_metadata(
        {**(arrow.schema.metadata or {}), VERSION_KEY: str(fmt.version).encode()}), path)


def write_text(path: Path, text: str) -> None:
    """A page or document written whole (a publication's page, the README with its Results
    block), atomically."""
    write_atomic(path, text)


def read_text(path: Path) -> str:
    """A document read whole (the README whose Results block is rewritten)."""
    return Path(path).read_text(encoding="utf-8")


def copy_file(source: Path, target: Path) -> None:
    """A file copied as it is (a manifest into a publication), its folder made."""
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def parquet_version(path: Path) -> int | None:
    """The schema version in a Parquet file's metadata (None: not recorded)."""
    value = (pq.read_schema(path).metadata or {}).get(VERSION_KEY)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def parquet_rows(path: Path) -> int:
    """The number of rows a Parquet file holds (from its footer: nothing else is read)."""
    return pq.ParquetFile(path).metadata.num_rows


def tree_bytes(directory: Path) -> int:
    """The size of every file under ``directory``."""
    return sum(p.stat().st_size for p in Path(directory).rglob("*") if p.is_file())


def read_raw_csv(paths: Iterable[Path], table: Table) -> pd.DataFrame:
    """Producers' raw CSVs, concatenated, every raw column cast to its type. A file cut short
    before its header (a process killed early) holds no rows."""
    columns = table.raw
    frames = []
    for path in paths:
        try:
            frames.append(pd.read_csv(
                path, keep_default_na=False,
                dtype={c.name: str for c in columns if c.type not in NUMERIC},
                na_values={c.name: ["", "nan"] for c in columns if c.type in NUMERIC}))
        except (OSError, pd.errors.EmptyDataError, pd.errors.ParserError):
            continue
    raw = (pd.concat(frames, ignore_index=True) if frames
           else pd.DataFrame({c.name: pd.Series(dtype=str) for c in columns}))
    for c in columns:  # a producer from before the column existed: missing, never invented
        if c.name not in raw:
            raw[c.name] = "" if c.type not in NUMERIC else math.nan
    return pd.DataFrame({c.name: _cast(raw[c.name], c.type) for c in columns}, index=raw.index)


def _cast(values: pd.Series, type_: str) -> pd.Series:
    if type_ == "float64":
        return pd.to_numeric(values, errors="coerce").astype("float64")
    if type_ in ("int32", "int64"):
        return pd.to_numeric(values, errors="coerce").fillna(0).astype(type_)
    if type_ == "bool":
        return values.astype(str) == "True"
    if type_ == "list<float64>":
        # object dtype even when empty: a run that failed before its load still gets its table
        return pd.Series([[float(g) for g in str(v).split()] for v in values], index=values.index,
                         dtype=object)
    return values.astype(str)


def stored_frame(table: Table, raw: pd.DataFrame, **derived) -> pd.DataFrame:
    """The Parquet file's columns in order: raw ones from ``raw``, the others from ``derived``."""
    needed = {c.name for c in table.stored if not c.raw}
    if set(derived) != needed:
        raise ValueError(f"{table.name}: derived columns {sorted(derived)} given, "
                         f"{sorted(needed)} needed")
    out = {}
    for c in table.stored:
        out[c.name] = derived[c.name] if c.name in derived else raw[c.name].to_numpy()
    return pd.DataFrame(out, index=range(len(raw)))


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
