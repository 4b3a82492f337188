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
  version-3 file, never guessed from its error text here (harness.stats.inflight_lane falls back to
  that text only where it counts causes).
* requests table 4 → 5: ``abandoned_t_unix_s`` (the in-flight lane's streams left by their
  client: none then), ``content_chars``, ``retry_after_s`` and ``content_chars_sent`` (what the
  client assembled and was told, what the provider sent) are missing in an older file, and its
  ``error_kind`` never says ``truncated``: a silent truncation there is not measured, never
  guessed.
* mock requests table 3 → 4: ``content_chars_sent``, ``frames_sent``,
  ``client_closed_t_unix_ns`` and ``ended`` (what the mock sent and how each response ended)
  are missing in an older file, never guessed from its status or bytes.
* gate record 1 → 2: harness.verdicts.history.migrate (its ratios kept as head_vs_reference).
* study manifest 2 → 3, run manifest 2 → 3, suite manifest 2 → 3: ``fault_lead_s`` (the fixed
  time from the mock's start to the load's, when the mock's fault epoch was set at its start)
  is gone from the config and the run spec's mock: the load arms the faults when it starts.
* comparison keys 1 → 2: a recorded key stays as it was recorded (a bare SHA-256 is version 1;
  harness.model.plan.key_version). A version-1 key is matched by recomputing recipe 1, frozen
  here, for the run or cell at hand: ``same_run`` (resuming a study), ``run_key_in`` and
  ``cell_key_in`` (comparing a study or suite recorded with recipe 1 with a newer one, whose
  record holds every input recipe 1 had). Recipe 1 hashed each system's gateway.toml only, and
  left a setting out while it was at the value every run had before it existed.
* run manifest 3 → 4 and run keys 2 → 3: the run spec's mock and wire parts hold their settings'
  names (``latency_ms`` is ``mock_latency_ms``, ``capture_s`` is ``wire_capture_s``: ``V2_MOCK_NAMES``,
  ``V2_WIRE_NAMES``), its load part no longer holds ``max_tokens`` (the mock's response tokens)
  or ``spawn_rate_per_s`` (derived from the in-flight steps), and the spec holds its system's
  files' SHA-256 and the instruments' versions, which recipe 2 hashed beside it. A recipe-2 key
  is matched by recomputing recipe 2, frozen here (``run_key_v2``), from a spec recorded since;
  a suite cell's key keeps recipe 2 (its payload did not change).
* study manifest 3 → 4, run manifest 3 → 4: the kind of the floor and the hop is ``control``
  (``V3_KINDS``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import pandas as pd

from harness.model.config import StudyConfig
from harness.model.errors import UserError
from harness.model.formats import TABLE_FORMATS
from harness.model.gateway_spec import folder_of
from harness.model.plan import KEY_VERSION, RunSpec, key_version, versioned_key
from harness.model.run_parts import LoadShape, MockSettings, WireSettings
from harness.model.schema import Table, missing_value


class TableFormatError(UserError, ValueError):
    """A Parquet table without the columns of its version."""


# Version 1 knew the floor and the hop by their folder names; version 2 reads each system's role.
V1_ROLES_BY_FOLDER = {"direct": "floor", "nginx": "hop"}
ANY = None   # the version predates the column list: any column may be absent
# The columns the requests table gained with version 4: no older file has them.
REQUESTS_V4_COLUMNS = ("error_class",)
# The columns it gained with version 5 (streams left by their client; what the client assembled,
# what the provider sent).
REQUESTS_V5_COLUMNS = ("abandoned_t_unix_s", "content_chars", "retry_after_s", "content_chars_sent")
# The columns the mock requests table gained with version 4 (what the mock sent, how it ended).
MOCK_REQUESTS_V4_COLUMNS = ("content_chars_sent", "frames_sent", "client_closed_t_unix_ns", "ended")
# table -> version -> the columns a file of that version may lack.
LACKED = {
    "requests": {1: ANY, 2: ("request_id", "mock_service_ms", "net_overhead_ms",
                             "wire_request_path_us", "wire_response_path_us",
                             "wire_in_gateway_us", "wire_mock_us", "error_body_dialect",
                             *REQUESTS_V4_COLUMNS, *REQUESTS_V5_COLUMNS),
                 3: (*REQUESTS_V4_COLUMNS, *REQUESTS_V5_COLUMNS), 4: REQUESTS_V5_COLUMNS},
    "samples": {1: ANY},
    "mock_requests": {2: ("provider", *MOCK_REQUESTS_V4_COLUMNS), 3: MOCK_REQUESTS_V4_COLUMNS},
}
# Columns whose value before they existed is known, not missing: (table, column) -> that value.
# Before the standby provider, every mock row came from the one mock.
KNOWN_BEFORE = {("mock_requests", "provider"): "primary"}


RETIRED_FAULT_KEY = "fault_lead_s"
# Version 4 of the study and run manifests calls the kind of the floor and the hop "control".
V3_KINDS = {"baseline": "control"}


def _without_lead(settings: dict | None) -> None:
    if isinstance(settings, dict):
        settings.pop(RETIRED_FAULT_KEY, None)


def _kind_v4(meta: dict | None) -> None:
    if isinstance(meta, dict) and meta.get("kind") in V3_KINDS:
        meta["kind"] = V3_KINDS[meta["kind"]]


def _spec_v4(spec: dict | None) -> None:
    """A recorded run spec's parts as recipe 3 names them (see V2_MOCK_NAMES)."""
    if not isinstance(spec, dict):
        return
    for part, names in (("mock", V2_MOCK_NAMES), ("wire", V2_WIRE_NAMES)):
        if isinstance(spec.get(part), dict):
            now = {old: new for new, old in names.items()}
            spec[part] = {now.get(k, k): v for k, v in spec[part].items()}
    if isinstance(spec.get("load"), dict):
        for name in V2_LOAD_ONLY:
            spec["load"].pop(name, None)


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
    if version < 4:
        for meta in (data.get("systems") or {}).values():
            _kind_v4(meta)
    return data


def run_manifest(data: dict, version: int) -> dict:
    """A run manifest's plain data in the current version (without its version stamp)."""
    data = unstamped(data, version)
    if version < 3 and isinstance(data.get("spec"), dict):
        _without_lead(data["spec"].get("mock"))
    if version < 4:
        _spec_v4(data.get("spec"))
        _kind_v4(data)
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


# --- comparison key recipe 1 (frozen: never change it, or recorded keys stop matching) -----------

# The fields each dataclass had when recipe 1 was retired. A field added since is not in recipe
# 1: a run or cell that sets it away from its default has no recipe-1 key (it cannot be one that
# was recorded then).
V1_RUN_FIELDS = ("run_id", "system", "run_index", "round", "position", "load", "mock",
                 "gateway_workers", "idle_s", "cooldown_s", "ready_timeout_s",
                 "gateway_toml_sha256", "seed", "comparison_key", "mock_port", "system_port",
                 "standby_port", "topology", "wire", "resilience", "affinity", "source_commit",
                 "env", "nice", "open_files_limit", "scale")
V1_LOAD_FIELDS = ("users", "ramp_s", "hold_s", "min_hold_requests", "max_hold_s", "warmup_s",
                  "warmup_users", "think_time_s", "locust_processes", "request_timeout_s",
                  "max_tokens", "stream", "open_loop_rates_per_s", "open_loop_step_s", "feature",
                  "request_bytes", "inflight_steps", "inflight_step_s", "inflight_hold_s",
                  "spawn_rate_per_s")
V1_MOCK_FIELDS = ("latency_ms", "workers", "response_tokens", "stream_chunks", "chunk_delay_ms",
                  "fault_scenario", "faults", "fault_seed", "fault_start_s", "fault_duration_s")
V1_CONFIG_FIELDS = ("gateways", "profile", "reference_system", "aa_pair", "gate_system",
                    "gate_base_system", "builds", "system_env", "count_lane", "runs_per_gateway",
                    "runs_unconfigured", "users", "ramp_s", "hold_s", "min_hold_requests",
                    "max_hold_s", "warmup_s", "warmup_users", "idle_s", "cooldown_s",
                    "think_time_s", "locust_processes", "request_timeout_s", "mock_latency_ms",
                    "mock_workers", "mock_response_tokens", "stream", "stream_chunks",
                    "chunk_delay_ms", "fault_scenario", "fault_start_s", "fault_duration_s",
                    "fault_seed", "resilience", "scale", "open_loop_rates_per_s",
                    "open_loop_step_s", "inflight_steps", "inflight_step_s", "inflight_hold_s",
                    "open_files_limit", "feature", "request_bytes", "wire_capture_s",
                    "wire_capture_offset_s", "wire_snaplen_bytes", "gateway_workers",
                    "ready_timeout_s", "seed", "gateways_dir", "base_port", "topology",
                    "cpu_affinity_load", "cpu_affinity_mock", "cpu_affinity_system", "nice_load",
                    "nice_mock", "nice_system", "out_dir", "study_id")
# A run's key left these out unless a fault scenario, or the in-flight lane, was set.
V1_FAULT_FIELDS = ("fault_scenario", "faults", "fault_seed", "fault_start_s", "fault_duration_s")
V1_INFLIGHT_LOAD_FIELDS = ("inflight_steps", "inflight_step_s", "inflight_hold_s",
                           "spawn_rate_per_s")
# A cell's key left out where it is written, what it is called, its preset, its ports and where
# the folders are; these while empty; these outside the in-flight lane; scale while shipped.
V1_NOT_IN_CELL_KEY = ("out_dir", "study_id", "profile", "base_port", "gateways_dir")
V1_IN_CELL_KEY_WHEN_SET = ("cpu_affinity_load", "cpu_affinity_mock", "cpu_affinity_system",
                           "nice_load", "nice_mock", "nice_system", "gate_base_system", "builds",
                           "system_env", "runs_unconfigured", "count_lane")
V1_IN_CELL_KEY_IN_INFLIGHT_LANE = ("inflight_steps", "inflight_step_s", "inflight_hold_s",
                                   "open_files_limit")
V1_IN_CELL_KEY_UNLESS = {"scale": "shipped"}


def _defaults(cls, names: dict[str, str] | None = None) -> dict[str, Any]:
    """Each field of dataclass ``cls`` that has a default, by its name in ``names`` (else its
    own), with that default as plain data."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            continue
        plain = dataclasses.asdict(default) if dataclasses.is_dataclass(default) else default
        out[(names or {}).get(f.name, f.name)] = plain
    return out


def _sets_later_field(data: dict, defaults: dict[str, Any], known: tuple[str, ...]) -> bool:
    """Whether plain data ``data`` sets a field a recipe never knew away from its default."""
    return any(name not in known and name in defaults and value != defaults[name]
               for name, value in data.items())


def _sha256_v1(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


def cell_key_v1(config: StudyConfig, toml_sha256: dict[str, str]) -> str | None:
    """Recipe 1 of a cell's key: its settings and the SHA-256 of each of its systems'
    gateway.toml (system -> digest); None when it sets something recipe 1 did not know."""
    if _sets_later_field(dataclasses.asdict(config), _defaults(StudyConfig), V1_CONFIG_FIELDS):
        return None
    settings = config.to_dict()
    settings = {k: settings[k] for k in V1_CONFIG_FIELDS
                if k not in V1_NOT_IN_CELL_KEY
                and (settings[k] or k not in V1_IN_CELL_KEY_WHEN_SET)
                and settings[k] != V1_IN_CELL_KEY_UNLESS.get(k, object())
                and (config.inflight_steps or k not in V1_IN_CELL_KEY_IN_INFLIGHT_LANE)}
    return _sha256_v1({"config": settings,
                       "gateway_toml_sha256": {name: toml_sha256[name] for name in config.gateways}})


# --- the run spec as recipes 1 and 2 knew it (frozen) ---------------------------------------------

# Recipe 3 gave the mock's and the wire's fields the names of their settings and dropped two
# load fields the spec held twice: max_tokens (the mock's response tokens) and spawn_rate_per_s
# (derived from the in-flight steps, the warm-up users and the hold, as below).
V2_MOCK_NAMES = {"mock_latency_ms": "latency_ms", "mock_workers": "workers",
                 "mock_response_tokens": "response_tokens"}
V2_WIRE_NAMES = {"wire_capture_s": "capture_s", "wire_capture_offset_s": "offset_s",
                 "wire_snaplen_bytes": "snaplen_bytes"}
# The load's fields recipe 3 dropped.
V2_LOAD_ONLY = ("max_tokens", "spawn_rate_per_s")
# Held beside the spec until recipe 3, not in it.
V2_BESIDE_SPEC = ("files_sha256", "instruments")
# No field was added while recipe 2 was current: it knew recipe 1's, with the same names.
V2_RUN_FIELDS, V2_LOAD_FIELDS, V2_MOCK_FIELDS = V1_RUN_FIELDS, V1_LOAD_FIELDS, V1_MOCK_FIELDS
V2_WIRE_FIELDS = tuple(V2_WIRE_NAMES.values())
V2_NOT_IN_RUN_KEY = ("run_id", "run_index", "round", "position", "seed", "comparison_key",
                     "mock_port", "system_port", "standby_port", "topology")


def _v2_spawn_rate_per_s(load: dict) -> float:
    """The highest rate an in-flight step spawned users at (each step's new users, the first's
    above the warm-up's, over one hold); 0 outside that lane."""
    steps = tuple(load["inflight_steps"])
    if not steps:
        return 0.0
    added = max(n - before for n, before in zip(steps, (load["warmup_users"], *steps[:-1])))
    return max(1.0, added / load["inflight_hold_s"])


def spec_v2(spec: RunSpec) -> dict:
    """``spec``'s plain data as recipes 1 and 2 knew a RunSpec."""
    data = {k: v for k, v in spec.to_dict().items() if k not in V2_BESIDE_SPEC}
    data["mock"] = {V2_MOCK_NAMES.get(k, k): v for k, v in data["mock"].items()}
    data["wire"] = {V2_WIRE_NAMES.get(k, k): v for k, v in data["wire"].items()}
    data["load"] = {**data["load"], "max_tokens": spec.mock.mock_response_tokens,
                    "spawn_rate_per_s": _v2_spawn_rate_per_s(data["load"])}
    return data


def _sets_later_v2_field(data: dict, known: tuple[tuple[str, ...], ...]) -> bool:
    """Whether ``data`` (spec_v2) sets a field the recipe never knew away from its default."""
    run, load, mock, wire = known
    return (_sets_later_field(data, _defaults(RunSpec), run)
            or _sets_later_field(data["load"], _defaults(LoadShape), load)
            or _sets_later_field(data["mock"], _defaults(MockSettings, V2_MOCK_NAMES), mock)
            or _sets_later_field(data["wire"], _defaults(WireSettings, V2_WIRE_NAMES), wire))


def run_key_v1(spec: RunSpec) -> str | None:
    """Recipe 1 of a run's key, from its RunSpec alone (its gateway.toml's SHA-256 is in it);
    None when the run sets something recipe 1 did not know."""
    data = spec_v2(spec)
    if _sets_later_v2_field(data, (V1_RUN_FIELDS, V1_LOAD_FIELDS, V1_MOCK_FIELDS,
                                   V2_WIRE_FIELDS)):
        return None
    load = {k: data["load"][k] for k in V1_LOAD_FIELDS
            if spec.load.inflight_steps or k not in V1_INFLIGHT_LOAD_FIELDS}
    mock = {k: data["mock"][k] for k in V1_MOCK_FIELDS
            if spec.mock.fault_scenario or k not in V1_FAULT_FIELDS}
    payload: dict[str, Any] = {"system": spec.system, "load": load, "mock": mock,
                               "gateway_workers": spec.gateway_workers,
                               "gateway_toml_sha256": spec.gateway_toml_sha256}
    t = spec.topology
    if t.source:
        payload["topology"] = {"hosts": {h.name: h.address for h in t.hosts}, "mock": t.mock,
                               "system": t.system, "locust_master": t.locust_master,
                               "locust_workers": [{"host": w.host, "count": w.count}
                                                  for w in t.locust_workers]}
    if spec.resilience != "shipped":
        payload["resilience"] = spec.resilience
    if spec.affinity.is_set():
        payload["affinity"] = {"load": spec.affinity.load, "mock": spec.affinity.mock,
                               "system": spec.affinity.system}
    if spec.source_commit:
        payload["source_commit"] = spec.source_commit
    if spec.env:
        payload["env"] = [list(item) for item in spec.env]
    if spec.nice.is_set():
        payload["nice"] = {"load": spec.nice.load, "mock": spec.nice.mock,
                           "system": spec.nice.system}
    if spec.scale != "shipped":
        payload["scale"] = spec.scale
    return _sha256_v1(payload)


def run_key_v2(spec: RunSpec) -> str | None:
    """Recipe 2 of a run's key: the spec as recipe 2 knew it but V2_NOT_IN_RUN_KEY, its
    placement, its system's files and the instruments; None for a spec recorded before recipe 3
    (its files are not in it) or one that sets something recipe 2 did not know."""
    if not spec.files_sha256:
        return None
    data = spec_v2(spec)
    if _sets_later_v2_field(data, (V2_RUN_FIELDS, V2_LOAD_FIELDS, V2_MOCK_FIELDS,
                                   V2_WIRE_FIELDS)):
        return None
    payload = {k: v for k, v in data.items() if k not in V2_NOT_IN_RUN_KEY}
    payload.update(topology=spec.topology.placement(), files_sha256=spec.files_sha256,
                   instruments=dataclasses.asdict(spec.instruments))
    return versioned_key(payload, version=2)


# A run's key in each recipe older than the current one, recomputed from its spec.
OLDER_RUN_KEYS = {1: run_key_v1, 2: run_key_v2}


def same_run(recorded: str, spec: RunSpec) -> bool:
    """Whether a run recorded with key ``recorded`` ran what ``spec`` (of the current plan)
    runs: the same key in the current recipe, or spec's key in the recorded one's recipe."""
    version = key_version(recorded)
    if version == KEY_VERSION:
        return recorded == spec.comparison_key
    return recorded == OLDER_RUN_KEYS[version](spec)


def oldest_recipe(keys) -> int:
    """The oldest recipe among recorded keys (empty ones aside): where two records meet, since a
    newer record can be re-keyed in an older recipe but not the other way round."""
    return min((key_version(k) for k in keys if k), default=KEY_VERSION)


def run_key_in(version: int, recorded: str, spec: RunSpec | None) -> str:
    """A recorded run key in recipe ``version``: recomputed from its recorded spec when it was
    recorded in a newer one; else itself (then it equals no other recipe's key)."""
    if key_version(recorded) <= version or spec is None:
        return recorded
    return OLDER_RUN_KEYS[version](spec) or recorded


def cell_key_in(version: int, recorded: str, config: StudyConfig | None,
                toml_sha256: dict[str, str]) -> str:
    """A recorded cell key in recipe ``version``, as run_key_in; toml_sha256: each system's
    gateway.toml SHA-256 as its study recorded it."""
    if (key_version(recorded) == version or version != 1 or config is None
            or not set(config.gateways) <= set(toml_sha256)):
        return recorded
    return cell_key_v1(config, toml_sha256) or recorded
