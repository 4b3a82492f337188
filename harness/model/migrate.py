"""Older artifact versions, brought up to the current one: the only place that knows them.
Each kind's versions are in harness.model.formats; a recorded file of every older version is
under tests/fixtures/ and tests/data/ (tests/test_formats.py).

* study manifest 1 → 2: a system without a ``role`` gets the one its folder name implied then
  (direct the floor, nginx the hop).
* run manifest 1 → 2, mock stats 1 → 2: the same keys (each now with one spelling and type,
  which harness.model.manifests checks).
* Parquet tables: an older version may lack columns (``LACKED``); they are added holding
  missing values (NaN, or None for other types: never a plausible measurement) and reported,
  so a reader can say "not measured in this artifact version". A column whose value before it
  existed is known (``KNOWN_BEFORE``: mock_requests' ``provider`` was always ``primary``) is
  added holding that value instead, and not reported. The current version lacks nothing.
* requests table 3 → 4: ``error_class`` (each failure's cause at the client) is missing in a
  version-3 file, never guessed from its error text here (harness.stats.inflight falls back to
  that text only where it counts causes).
* gate record 1 → 2: harness.checks.history.migrate (its ratios kept as head_vs_reference).
* study manifest 2 → 3, run manifest 2 → 3, suite manifest 2 → 3: ``fault_lead_s`` (the fixed
  time from the mock's start to the load's, when the mock's fault epoch was set at its start)
  is gone from the config and the run spec's mock: the load arms the faults when it starts.
"""
from __future__ import annotations

import pandas as pd

from harness.model.errors import UserError
from harness.model.formats import TABLE_FORMATS
from harness.model.gateway_spec import folder_of
from harness.model.schema import Table, missing_value


class TableFormatError(UserError, ValueError):
    """A Parquet table without the columns of its version."""


# Version 1 knew the floor and the hop by their folder names; version 2 reads each system's role.
V1_ROLES_BY_FOLDER = {"direct": "floor", "nginx": "hop"}
ANY = None   # the version predates the column list: any column may be absent
# The columns the requests table gained with version 4: no older file has them.
REQUESTS_V4_COLUMNS = ("error_class",)
# table -> version -> the columns a file of that version may lack.
LACKED = {
    "requests": {1: ANY, 2: ("request_id", "mock_service_ms", "net_overhead_ms",
                             "wire_request_path_us", "wire_response_path_us",
                             "wire_in_gateway_us", "wire_mock_us", "error_body_dialect",
                             *REQUESTS_V4_COLUMNS),
                 3: REQUESTS_V4_COLUMNS},
    "samples": {1: ANY},
    "mock_requests": {2: ("provider",)},
}
# Columns whose value before they existed is known, not missing: (table, column) -> that value.
# Before the standby provider, every mock row came from the one mock.
KNOWN_BEFORE = {("mock_requests", "provider"): "primary"}


RETIRED_FAULT_KEY = "fault_lead_s"


def _without_lead(settings: dict | None) -> None:
    if isinstance(settings, dict):
        settings.pop(RETIRED_FAULT_KEY, None)


def study_manifest(data: dict, version: int) -> dict:
    """A study manifest's plain data in the current version (without its version stamp)."""
    data = {k: v for k, v in data.items() if k != "schema_version"}
    if version < 3:
        _without_lead(data.get("config"))
    if version == 1:
        systems = {}
        for name, meta in (data.get("systems") or {}).items():
            systems[name] = {"role": V1_ROLES_BY_FOLDER.get(folder_of(name), "system"), **(meta or {})}
        data["systems"] = systems
    return data


def run_manifest(data: dict, version: int) -> dict:
    """A run manifest's plain data in the current version (without its version stamp)."""
    data = unstamped(data, version)
    if version < 3 and isinstance(data.get("spec"), dict):
        _without_lead(data["spec"].get("mock"))
    return data


def suite_manifest(data: dict, version: int) -> dict:
    """A suite manifest's plain data in the current version (without its version stamp)."""
    data = unstamped(data, version)
    if version < 3:
        for cell in data.get("cells") or ():
            if isinstance(cell, dict):
                _without_lead(cell.get("config"))
    return data


def unstamped(data: dict, version: int) -> dict:
    """A JSON artifact whose versions share their keys: its data without the version stamp."""
    return {k: v for k, v in data.items() if k != "schema_version"}


def table(frame: pd.DataFrame, spec: Table, version: int,
          source: str) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """``frame`` with the current version's columns, in order, and the columns its version did
    not have (added as missing values)."""
    missing = tuple(c.name for c in spec.stored if c.name not in frame.columns)
    may_lack = (() if version == TABLE_FORMATS[spec.name].version
                else LACKED.get(spec.name, {}).get(version, ()))
    if may_lack is not ANY and any(name not in may_lack for name in missing):
        raise TableFormatError(f"{source}: missing columns {list(missing)} of {spec.name} "
                               f"version {version} (artifacts/README.md)")
    for name in missing:
        value = KNOWN_BEFORE.get((spec.name, name), missing_value(spec.column(name)))
        frame[name] = pd.Series([value] * len(frame), index=frame.index,
                                dtype="float64" if spec.column(name).type == "float64" else object)
    return frame[spec.names], tuple(n for n in missing if (spec.name, n) not in KNOWN_BEFORE)
