"""Older artifact versions, brought up to the current one: the only place that knows them.

Version 1 → 2:

* manifests: the same keys, now each with one spelling and type (harness.model.manifests
  checks them); a version-1 system without a ``role`` gets the one its folder name implied
  then (direct the floor, nginx the hop);
* Parquet tables: version 1 gained columns without changing its number (the streaming and
  open-loop request columns; the samples' ``inflight_requests`` and ``host``), so a version-1
  file may lack some. They are added holding missing values (NaN, or None for other types:
  never a plausible measurement) and reported, so a reader can say "not measured in this
  artifact version". Version 2 files hold every column, except those ``schema.ADDED_IN_V2``
  names (added before version 2 was released), which are treated the same way. A column whose
  value before it existed is known (``schema.KNOWN_BEFORE``: mock_requests' ``provider`` was
  always ``primary``) is added holding that value instead, and not reported.
* mock_stats.json: unchanged.
"""
from __future__ import annotations

import pandas as pd

from harness.model.gateway_spec import folder_of
from harness.model.schema import ADDED_IN_V2, KNOWN_BEFORE, SCHEMA_VERSION, Table, missing_value


class TableFormatError(ValueError):
    """A Parquet table without the columns of its schema version."""


# Version 1 knew the floor and the hop by their folder names; version 2 reads each system's role.
V1_ROLES_BY_FOLDER = {"direct": "floor", "nginx": "hop"}


def study_manifest(data: dict, version: int) -> dict:
    """A study manifest's plain data in the current version (without its version stamp)."""
    data = {k: v for k, v in data.items() if k != "schema_version"}
    if version == 1:
        systems = {}
        for name, meta in (data.get("systems") or {}).items():
            systems[name] = {"role": V1_ROLES_BY_FOLDER.get(folder_of(name), "system"), **(meta or {})}
        data["systems"] = systems
    return data


def run_manifest(data: dict, version: int) -> dict:
    """A run manifest's plain data in the current version (without its version stamp)."""
    return {k: v for k, v in data.items() if k != "schema_version"}


def mock_stats(data: dict, version: int) -> dict:
    return {k: v for k, v in data.items() if k != "schema_version"}


def table(frame: pd.DataFrame, spec: Table, version: int,
          source: str) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """``frame`` with the current version's columns, in order, and the columns its version did
    not have (added as missing values)."""
    missing = tuple(c.name for c in spec.stored if c.name not in frame.columns)
    late = ADDED_IN_V2.get(spec.name, ())
    if version == SCHEMA_VERSION and any(name not in late for name in missing):
        raise TableFormatError(f"{source}: missing columns {list(missing)} of schema version "
                               f"{version} (artifacts/README.md)")
    for name in missing:
        value = KNOWN_BEFORE.get((spec.name, name), missing_value(spec.column(name)))
        frame[name] = pd.Series([value] * len(frame), index=frame.index,
                                dtype="float64" if spec.column(name).type == "float64" else object)
    return frame[spec.names], tuple(n for n in missing if (spec.name, n) not in KNOWN_BEFORE)
