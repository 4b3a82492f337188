"""A suite: its file (a base configuration plus axes, expanded into cells), the comparison key
of a cell, and the suite manifest that records the cells. Expanding and running:
harness.run.suite_run; the figures across cells: report.suite_data.

    python -m harness suite notebooks/suites/streaming.toml --dry-run     # cells, exclusions, keys
    python -m harness suite notebooks/suites/streaming.toml [--out-dir artifacts/suites] [--suite-id ID]
    python -m harness suite --compare artifacts/suites/A artifacts/suites/B

A suite file is TOML::

    name = "streaming"                 # names the suite's directory
    profile = "streaming"              # the preset the base starts from (default: standard)
    [base]                             # settings every cell shares, by path (see below)
    gateways = ["nginx", "sluice"]     # ["all"]: every system under gateways/ (a new one joins
                                       # with no edit here); default: the profile's (a study's
                                       # rule); the floor (direct) is added to every cell
    load.users = 200
    [axes]                             # path = [values]; the cells are every combination
    request.stream = [false, true]
    mock.latency_ms = [60, 500]
    [[exclude]]                        # optional: combinations left out on purpose, and why
    where = { request.stream = false, mock.latency_ms = 500 }
    reason = "..."

A path is a StudyConfig field by its own name (``users``) or a dotted path ``section.name``
through StudyConfig's sections (``harness.model.config.SECTIONS``): ``name`` is a field of that
section, with or without the section's prefix (``mock.latency_ms`` is ``mock_latency_ms``,
``gateway.workers`` is ``gateway_workers``, ``load.users`` is ``users``). Each runnable cell is a
whole study in ``<out-dir>/<suite-id>/<cell-id>/``; the suite's ``manifest.json`` lists every
cell with its axis values, its comparison key and, for a cell left out, the reason (a declared
exclusion or the configuration's validation error). Two suites are compared cell by cell only
where the comparison keys are equal.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.model import config as config_mod
from harness.model import migrate
from harness.model import toml_schema as T
from harness.model.config import SECTIONS, ConfigError, StudyConfig, unknown_parameter
from harness.model.errors import UserError
from harness.model.formats import SUITE_MANIFEST
from harness.model.gateway_spec import load_gateway_spec
from harness.model.glossary import retired_parameter
from harness.model.manifests import dump, load
from harness.model.plan import Instruments, cell_settings_left_out, versioned_key

DEFAULT_OUT_DIR = "artifacts/suites"
# Set by the suite itself, never by a cell; and left out of the comparison key, with the ports,
# where the system folders are and whether a capture is kept, because they do not change what
# runs (where it is written, what it is called, which preset it came from, which file stays
# once read; the folders' files are in the key themselves).
SUITE_OWNED = ("out_dir", "study_id", "profile")
NOT_IN_KEY = SUITE_OWNED + ("base_port", "gateways_dir", "wire_keep_capture")
# A cell's key has its own recipe, as a run's has (harness.model.plan.KEY_VERSION): recipe 1 is
# recomputed by harness.model.migrate.cell_key_v1.
CELL_KEY_VERSION = 2
# The format of a suite file (this module's docstring); paths and values are checked after.
SCHEMA = T.Table({"name": T.STR, "description": T.STR, "profile": T.STR,
                  "base": T.Table(each=T.ANY), "axes": T.Table(each=T.ANY),
                  "exclude": T.Tables(T.Table({"where": T.Table(each=T.ANY), "reason": T.STR},
                                              required=("where", "reason")))})


class SuiteError(UserError, ValueError):
    """A suite file that cannot be expanded; raised before any process starts."""


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    profile: str
    base: dict            # field -> value
    axes: dict            # dotted path -> list of values, in file order
    exclude: tuple        # ({path: value}, reason) pairs
    path: Path
    text: str


def field_of(path: str) -> str:
    """The StudyConfig field a path names; SuiteError when it names none."""
    fields = {f.name for f in dataclasses.fields(StudyConfig)} - set(SUITE_OWNED)
    section, dot, name = path.partition(".")
    if not dot:
        if path in fields:
            return path
        if retired_parameter(path):
            raise SuiteError(unknown_parameter(path))
        raise SuiteError(f"{path}: not a setting; use a StudyConfig field or one of "
                         f"{sorted(SECTIONS)}.<name>")
    if section not in SECTIONS:
        raise SuiteError(f"{path}: unknown section {section!r}; sections: {sorted(SECTIONS)}")
    held = [setting for setting in SECTIONS[section] if setting in fields]
    for candidate in (name, f"{section}_{name}"):
        if candidate in held:
            return candidate
    shown = [setting.removeprefix(section + "_") for setting in held]
    raise SuiteError(f"{path}: {section} has no {name!r}; it has {shown}")


def _flatten(table: dict, prefix: str = "") -> dict:
    """TOML's dotted keys arrive nested ({load: {users: 1}}); paths are flat ('load.users')."""
    flat = {}
    for key, value in table.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, path + "."))
        else:
            flat[path] = value
    return flat


def load_suite(path: str | Path) -> Suite:
    path = resolve_path(path)
    try:
        data, raw = T.load(path, SCHEMA)
    except T.TomlSchemaError as exc:
        raise SuiteError(str(exc)) from None
    name = data.get("name") or path.stem
    if not name.replace("-", "").replace("_", "").isalnum():
        raise SuiteError(f"{path}: name {name!r} must be letters, digits, '-' or '_'")
    profile = data.get("profile", "standard")
    if profile not in config_mod.PROFILES:
        raise SuiteError(f"{path}: unknown profile {profile!r}; choose one of {sorted(config_mod.PROFILES)}")
    base = {_setting(path, "base", p, [value]): value
            for p, value in _flatten(data.get("base", {})).items()}
    axes = _flatten(data.get("axes", {}))
    if not axes:
        raise SuiteError(f"{path}: [axes] is empty; a suite needs at least one axis")
    seen: dict[str, str] = {}
    for axis, values in axes.items():
        if not isinstance(values, list) or not values:
            raise SuiteError(f"{path}: [axes] {axis}: expected a non-empty list of values, got {values!r}")
        target = _setting(path, "axes", axis, values)
        if target in seen:
            raise SuiteError(f"{path}: [axes] {axis}: sets {target}, as {seen[target]!r} does")
        seen[target] = axis
    exclude = []
    for i, rule in enumerate(data.get("exclude", [])):
        where = _flatten(rule["where"])
        if not where:
            raise SuiteError(f"{path}: [exclude[{i}]] where: names no axis")
        stray = sorted(set(where) - set(axes))
        if stray:
            raise SuiteError(f"{path}: [exclude[{i}]] where: names {stray}, which are not axes")
        exclude.append((where, rule["reason"]))
    return Suite(name=name, description=data.get("description", ""), profile=profile,
                 base=base, axes=axes, exclude=tuple(exclude), path=path, text=raw.decode())


def with_runs_per_gateway(suite: Suite, runs) -> Suite:
    """``suite`` with ``runs`` runs per configured system overriding its own (``make faults
    RUNS=N``, ``--runs-per-gateway``, the suite notebook's ``runs_per_gateway``); ``runs`` None or 0: its own. A value
    that is not a whole number ≥ 1 is a SuiteError naming the parameter, before anything runs."""
    if runs is None or (isinstance(runs, int) and not isinstance(runs, bool) and runs == 0):
        return suite
    if isinstance(runs, str) and runs.strip().isdigit():
        runs = int(runs)
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise SuiteError(f"runs_per_gateway (RUNS=, --runs-per-gateway): the runs per configured system must be a whole "
                         f"number ≥ 1, got {runs!r}")
    return dataclasses.replace(suite, base={**suite.base, "runs_per_gateway": runs})


def _setting(path: Path, table: str, setting: str, values: list) -> str:
    """The field a setting of the file names, once each of its values fits that field's type;
    otherwise SuiteError naming the file, the table, the setting and (for a value) what was
    expected."""
    try:
        name = field_of(setting)
        for value in values:
            config_mod.convert(name, value)
    except SuiteError as exc:
        raise SuiteError(f"{path}: [{table}] {exc}") from None
    except ConfigError as exc:
        raise SuiteError(f"{path}: [{table}] {setting}: {exc.problems[0].partition(': ')[2]}") from None
    return name


def resolve_path(path: str | Path) -> Path:
    """As given when it exists (relative to here), else relative to the repository; absolute
    either way: the suite notebook runs in notebooks/ and reads the file again there."""
    p = Path(path)
    return (p if p.is_absolute() or p.exists() else config_mod.REPO_DIR / p).absolute()


def cell_key(config: StudyConfig, instruments: Instruments) -> str:
    """The cell's comparison key: every setting but NOT_IN_KEY and a lane-only one its runs hold
    unset (harness.model.plan.LEFT_OUT_WHILE_UNSET), the SHA-256 of every file each of its
    systems' folders declares (GatewaySpec.files_sha256) and the instruments' versions."""
    left_out = NOT_IN_KEY + cell_settings_left_out(config)
    settings = {k: v for k, v in config.to_dict().items() if k not in left_out}
    files = {name: load_gateway_spec(name, config.systems_dir).files_sha256()
             for name in config.gateways}
    return versioned_key({"config": settings, "files_sha256": files,
                          "instruments": dataclasses.asdict(instruments)}, CELL_KEY_VERSION)


def axis_text(value: Any) -> str:
    """An axis value as a suite file writes it (lists and booleans as JSON)."""
    return json.dumps(value) if isinstance(value, (list, tuple, bool)) else str(value)


# --- the suite manifest (manifest.json of a suite directory; format: SUITE_MANIFEST) -------------

@dataclass(frozen=True)
class CellEntry:
    """A cell as the suite manifest records it; ``dir`` (relative to the suite directory) is ""
    until its study starts, ``config`` None for a cell that could not be built."""
    cell_id: str
    values: dict[str, Any]
    comparison_key: str
    excluded: str
    status: str                       # excluded | pending | the study's status
    dir: str = ""
    config: dict[str, Any] | None = None
    skipped: dict[str, str] = field(default_factory=dict)   # system -> why it did not run

    @property
    def scenario(self) -> str:
        """The cell's fault scenario ("" for a healthy provider)."""
        return (self.config or {}).get("fault_scenario") or self.values.get("fault_scenario", "")


@dataclass(frozen=True)
class SuiteManifest:
    suite_id: str
    name: str
    description: str
    suite_file: str
    suite_file_sha256: str
    suite_text: str
    profile: str
    axes: dict[str, Any]
    status: str                       # running | completed | interrupted | failed
    started_t_unix_s: float
    cells: tuple[CellEntry, ...]
    ended_t_unix_s: float | None = None
    reason: str = ""

    def to_json(self) -> str:
        return dump(self, SUITE_MANIFEST)

    @classmethod
    def from_json(cls, text: str, source: str = "suite manifest") -> "SuiteManifest":
        return load(cls, text, source, SUITE_MANIFEST, migrate.suite_manifest)
