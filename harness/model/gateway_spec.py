"""Reads a system's declarative gateway.toml and renders its {{placeholders}}.

The harness knows systems only through this structure; it never branches on a name.
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path

from harness.model import toml_schema as T
from harness.model.config import GATEWAYS_DIR, REPO_DIR
from harness.model.dialects import DIALECTS
from harness.model.errors import UserError

# The gateway.toml format (gateways/README.md). Version 1: the standby placeholders may stand
# anywhere and, without a standby, name the mock; version 2: only inside {{#standby}} sections,
# left out without one. A version-1 folder (a gate base built from an older commit) still runs.
GATEWAY_TOML_VERSION = 2
GATEWAY_TOML_READS = (1, 2)
# What a system is: control (measured for the others to be compared with, not as a product: the
# floor and the hop), in-house (Sluice) or competitor.
KINDS = ("control", "in-house", "competitor")
# What a system is for the analysis. floor: the load sent straight to the mock, the latency every
# overhead is measured from; hop: the cost of one plain HTTP proxy hop, the usual reference;
# system: any other system under test.
ROLES = ("floor", "hop", "system")
PLACEHOLDERS = ("port", "listen_host", "upstream_url", "upstream_host", "upstream_port",
                "standby_url", "standby_host", "standby_port", "run_dir", "gateway_dir",
                "cache_dir", "repo_dir", "python", "workers")
# The study settings that pick a declared configuration variant: setting (its gateway.toml table)
# -> the value that asks for it (the variant's table in there). Any other value ("shipped") runs
# the system as the rest of its gateway.toml says.
VARIANTS = {"resilience": "recommended", "scale": "sized"}
DIALECT_PATHS = {name: d.chat_path for name, d in DIALECTS.items()}
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
# {{#standby}}...{{/standby}}: text kept only when the run has a standby provider, so no
# configuration names a second provider that is really the failing one. {{#counted}}: text kept
# only when the system runs to be counted (under Valgrind and strace).
SECTIONS = ("standby", "counted")
_SECTION = re.compile(r"\{\{#(\w+)\}\}(.*?)\{\{/\1\}\}", re.S)
_STANDBY_PLACEHOLDERS = ("standby_url", "standby_host", "standby_port")
# [ready] counted_timeout_s: a start under Valgrind may take minutes (an interpreter importing
# its packages runs ~50x slower there), but a deadline of hours would hide a hung start.
COUNTED_TIMEOUT_BOUNDS_S = (10.0, 7200.0)
_HEADERS = T.Table(each=T.STR)
_FILES = T.Tables(T.Table({"template": T.STR, "output": T.STR}, required=("template", "output")))
_VARIANT = T.Table({"files": _FILES, "headers": _HEADERS, "env": T.Table(each=T.STR),
                    "model": T.STR})
# The format of gateway.toml (documented in gateways/README.md).
SCHEMA = T.Table(required=("schema_version", "name", "kind"), keys={
    "schema_version": T.INT, "name": T.STR, "kind": T.STR, "role": T.STR, "language": T.STR,
    "description": T.STR, "runnable": T.BOOL, "not_runnable_reason": T.STR,
    "not_runnable_command": T.STR,
    "version": T.Table({"command": T.STRINGS, "pattern": T.STR}),
    "install": T.Table({"check": T.STRINGS, "command": T.STRINGS, "timeout_s": T.NUMBER}),
    "build": T.Table({"command": T.STRINGS, "timeout_s": T.NUMBER}),
    "start": T.Table({"command": T.STRINGS, "env": T.Table(each=T.STR),
                      "files": _FILES,
                      "stop_signal": T.STR, "stop_timeout_s": T.NUMBER,
                      "connections_per_worker": T.BOOL}),
    "ready": T.Table({"path": T.STR, "status": T.INT, "timeout_s": T.NUMBER,
                      "counted_timeout_s": T.NUMBER, "warmup_requests": T.INT}),
    "request": T.Table({"base_url": T.STR, "chat_path": T.STR, "model": T.STR, "headers": _HEADERS,
                        "self_overhead_header": T.STR, "self_overhead_scale_ms": T.NUMBER}),
    "metrics": T.Table({"path": T.STR, "inflight_gauge": T.STR}),
    "features": T.Table(each=T.Table({"dialect": T.STR, "chat_path": T.STR, "model": T.STR,
                                      "headers": _HEADERS})),
    "resilience": T.Table({"unconfigurable": T.STR, "recommended": _VARIANT}),
    "scale": T.Table({"unconfigurable": T.STR, "sized": _VARIANT}),
    "limits": T.Table({"logs": T.STRINGS, "patterns": T.STRINGS}, required=("patterns",)),
    "key": T.Table({"files": T.STRINGS}, required=("files",)),
})
# A file of the folder a text names: {{gateway_dir}}/<path> (an install script, a server script).
_NAMED_FILE = re.compile(r"\{\{\s*gateway_dir\s*\}\}/([^\s'\"]+)")


class GatewaySpecError(UserError, ValueError):
    """A gateway.toml that cannot be used, with the file and the key at fault."""


@dataclass(frozen=True)
class TemplateFile:
    template: str            # relative to the gateway folder
    output: str              # relative to the run directory


@dataclass(frozen=True)
class Feature:
    """How the load generator calls a system to exercise one feature (the feature-cost lane).
    Unset fields fall back to [request]; an Anthropic client calls the dialect's own path."""
    name: str
    dialect: str = "openai"
    chat_path: str | None = None
    model: str | None = None
    headers: dict | None = None


@dataclass(frozen=True)
class Variant:
    """A declared configuration variant ([resilience.recommended], [scale.sized]): how the system
    runs when a study asks for it. Each file replaces the [[start.files]] entry with its output;
    headers and env are merged over [request]'s and [start]'s; a model replaces [request]'s."""
    files: tuple[TemplateFile, ...] = ()
    headers: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    model: str | None = None

    def sets(self) -> set[str]:
        """Everything it replaces, by name: two variants of one run must not share any."""
        return ({f"output {f.output!r}" for f in self.files} | {f"env {k}" for k in self.env}
                | {f"header {k}" for k in self.headers}
                | ({"model"} if self.model is not None else set()))

    def applied_to(self, spec: "GatewaySpec") -> "GatewaySpec":
        replaced = {f.output: f for f in self.files}
        return dataclasses.replace(
            spec, start_files=tuple(replaced.get(f.output, f) for f in spec.start_files),
            start_env={**spec.start_env, **self.env}, headers={**spec.headers, **self.headers},
            model=spec.model if self.model is None else self.model)


@dataclass(frozen=True)
class RequestPlan:
    """What one run's requests look like: resolved from [request] and, if any, a feature."""
    chat_path: str
    model: str
    headers: dict
    dialect: str


@dataclass(frozen=True)
class GatewaySpec:
    name: str
    kind: str
    language: str
    role: str
    description: str
    directory: Path
    toml_sha256: str                         # identity of the declaration, part of comparison keys
    format_version: int = GATEWAY_TOML_VERSION
    runnable: bool = True
    not_runnable_reason: str = ""
    not_runnable_command: str = ""
    version_command: tuple[str, ...] = ()
    version_pattern: str = ""
    install_check: tuple[str, ...] = ()
    install_command: tuple[str, ...] = ()
    install_timeout_s: float = 900.0
    build_command: tuple[str, ...] = ()      # compiles the folder's own sources (idempotent);
    build_timeout_s: float = 600.0           # run before each study, in this tree or a base's
    start_command: tuple[str, ...] = ()      # empty: the client calls the upstream itself
    start_env: dict = field(default_factory=dict)
    start_files: tuple[TemplateFile, ...] = ()
    stop_signal: str = "SIGTERM"
    stop_timeout_s: float = 10.0
    connections_per_worker: bool = False     # its connections spread over {{workers}} processes
                                             # (False: one process holds them all)
    ready_path: str = "/health"
    ready_status: int = 200
    ready_timeout_s: float = 30.0
    counted_ready_timeout_s: float | None = None  # [ready] counted_timeout_s: its start under
                                             # Valgrind (None: the counting lane's own default)
    warmup_requests: int = 0
    base_url: str = "http://{{listen_host}}:{{port}}"
    chat_path: str = DIALECTS["openai"].chat_path
    model: str = "mock-model"
    headers: dict = field(default_factory=dict)
    self_overhead_header: str = ""
    self_overhead_scale_ms: float = 1.0
    metrics_path: str = ""                   # Prometheus text endpoint on base_url, "" = none
    inflight_gauge: str = ""                 # its gauge of requests in flight (sampled each second)
    features: dict = field(default_factory=dict)  # name -> Feature ([features.NAME] tables)
    variants: dict = field(default_factory=dict)  # setting -> its Variant
                                             # ([resilience.recommended], [scale.sized])
    unconfigurable: dict = field(default_factory=dict)  # setting -> why it has none ([TABLE]
                                             # unconfigurable)
    limit_logs: tuple[str, ...] = ()         # [limits] logs: files in the run directory, besides
                                             # system.log, where it names its limits
    limit_patterns: tuple[str, ...] = ()     # [limits] patterns: regular expressions of those lines
    key_files: tuple[str, ...] = ()          # [key] files: glob patterns of the folder's files that
                                             # decide what runs but that nothing here names (pins,
                                             # lock files, sources)

    @property
    def has_process(self) -> bool:
        return bool(self.start_command)

    def declared_files(self) -> tuple[str, ...]:
        """Every file of the folder the declaration names, relative to it, sorted: gateway.toml,
        every template (its variants' too), each file a command or an env value names as
        {{gateway_dir}}/<path>, and what [key] files matches. What decides what runs, and so
        what the comparison key hashes."""
        return self._named_files(tuple(self.variants.values()))

    def read_files(self, resilience: str = "shipped", scale: str = "shipped") -> tuple[str, ...]:
        """The declared files a run with these settings reads: as declared_files, but of the
        variants only those the settings ask for (their templates in place of the ones they
        replace)."""
        spec, _ = self.configured(resilience, scale)
        return spec._named_files(())

    def _named_files(self, variants: tuple["Variant", ...]) -> tuple[str, ...]:
        texts = [*self.version_command, *self.install_check, *self.install_command,
                 *self.build_command, *self.start_command, *self.start_env.values()]
        texts += [value for v in variants for value in v.env.values()]
        named = {m.group(1) for text in texts for m in _NAMED_FILE.finditer(text)}
        templates = {tf.template for tf in self.start_files}
        templates |= {tf.template for v in variants for tf in v.files}
        matched = {p.relative_to(self.directory).as_posix()
                   for pattern in self.key_files for p in self.directory.glob(pattern) if p.is_file()}
        return tuple(sorted({"gateway.toml", *templates, *matched}
                            | {n for n in named if (self.directory / n).is_file()}))

    def files_sha256(self) -> dict[str, str]:
        """SHA-256 of each declared file (declared_files), by its path in the folder."""
        return {name: hashlib.sha256((self.directory / name).read_bytes()).hexdigest()
                for name in self.declared_files()}

    def template(self, tf: TemplateFile) -> str:
        """The text of one of the system's declared templates (in its folder)."""
        return (self.directory / tf.template).read_text()

    def configured(self, resilience: str = "shipped",
                   scale: str = "shipped") -> tuple["GatewaySpec", dict[str, str]]:
        """The spec a run with these settings starts (each one's variant applied when the setting
        asks for it: VARIANTS), and a note per setting: "" when it runs as asked, else why it
        runs as shipped although its variant was asked for. Two variants asked together that
        replace the same thing (an output file, an env or header name, the model) are a bad
        declaration: GatewaySpecError naming the gateway.toml."""
        notes, chosen = {}, {}
        for setting, value in (("resilience", resilience), ("scale", scale)):
            notes[setting] = ""
            if value != VARIANTS[setting]:
                continue
            if setting in self.variants:
                chosen[setting] = self.variants[setting]
            else:
                notes[setting] = (self.unconfigurable.get(setting)
                                  or f"no {value} configuration declared")
        if len(chosen) == 2:
            both = set.intersection(*(v.sets() for v in chosen.values()))
            if both:
                tables = " and ".join(f"[{s}.{VARIANTS[s]}]" for s in chosen)
                raise GatewaySpecError(f"{self.directory / 'gateway.toml'}: {tables} both replace "
                                       f"{', '.join(sorted(both))}: a run asking for both cannot "
                                       "have both")
        spec = self
        for variant in chosen.values():
            spec = variant.applied_to(spec)
        return spec, notes

    def request_plan(self, feature: str = "") -> RequestPlan:
        """The requests of a run with `feature` ("" = [request] as declared)."""
        if not feature:
            return RequestPlan(self.chat_path, self.model, dict(self.headers), "openai")
        if feature not in self.features:
            raise GatewaySpecError(f"{self.name} declares no feature {feature!r} "
                                   f"(it has: {', '.join(sorted(self.features)) or 'none'})")
        f = self.features[feature]
        default_path = self.chat_path if f.dialect == "openai" else DIALECT_PATHS[f.dialect]
        return RequestPlan(chat_path=f.chat_path or default_path,
                           model=self.model if f.model is None else f.model,
                           headers=dict(self.headers if f.headers is None else f.headers),
                           dialect=f.dialect)

    @property
    def cache_dir(self) -> Path:
        """Where its installs go: .cache/gateways/<folder> of the git checkout its folder is in
        (this repository's for a folder outside any), so that a build of another commit (a
        worktree under .cache/builds/) installs from its own sources into its own place."""
        tree = self.directory.parent.parent
        return (tree if (tree / ".git").exists() else REPO_DIR) / ".cache" / "gateways" / self.directory.name


def folder_of(system: str) -> str:
    """'nginx~aa' names a second copy of the system in gateways/nginx (for A/A checks);
    'sluice@alias' is gateways/sluice called with one feature (the feature-cost lane)."""
    return system.split("@", 1)[0].split("~", 1)[0]


def feature_of(system: str) -> str:
    """'sluice@alias' is Sluice called as its [features.alias] says ('' when no '@')."""
    return system.split("@", 1)[1] if "@" in system else ""


def load_gateway_spec(system: str, gateways_dir: Path = GATEWAYS_DIR) -> GatewaySpec:
    spec = _load_folder(folder_of(system), gateways_dir)
    return dataclasses.replace(spec, name=system) if system != spec.name else spec


def _load_folder(name: str, gateways_dir: Path) -> GatewaySpec:
    path = gateways_dir / name / "gateway.toml"
    if not path.is_file():
        raise GatewaySpecError(f"unknown gateway {name!r}: {path} does not exist")
    try:
        data, raw_bytes = T.load(path, SCHEMA)
    except T.TomlSchemaError as exc:
        raise GatewaySpecError(str(exc)) from None
    _check_values(data, name, path)
    start = data.get("start", {})
    version = data.get("version", {})
    install = data.get("install", {})
    ready = data.get("ready", {})
    request = data.get("request", {})
    metrics = data.get("metrics", {})
    spec = GatewaySpec(
        name=name,
        kind=data["kind"],
        role=data.get("role", "system"),
        language=data.get("language", ""),
        description=data.get("description", ""),
        directory=(gateways_dir / name).resolve(),
        toml_sha256=hashlib.sha256(raw_bytes).hexdigest(),
        format_version=data["schema_version"],
        runnable=data.get("runnable", True),
        not_runnable_reason=data.get("not_runnable_reason", ""),
        not_runnable_command=data.get("not_runnable_command", ""),
        version_command=tuple(version.get("command", ())),
        version_pattern=version.get("pattern", ""),
        install_check=tuple(install.get("check", ())),
        install_command=tuple(install.get("command", ())),
        install_timeout_s=float(install.get("timeout_s", 900)),
        build_command=tuple(data.get("build", {}).get("command", ())),
        build_timeout_s=float(data.get("build", {}).get("timeout_s", 600)),
        start_command=tuple(start.get("command", ())),
        start_env=dict(start.get("env", {})),
        start_files=tuple(TemplateFile(f["template"], f["output"]) for f in start.get("files", [])),
        stop_signal=start.get("stop_signal", "SIGTERM"),
        stop_timeout_s=float(start.get("stop_timeout_s", 10)),
        connections_per_worker=start.get("connections_per_worker", False),
        ready_path=ready.get("path", "/health"),
        ready_status=ready.get("status", 200),
        ready_timeout_s=float(ready.get("timeout_s", 30)),
        counted_ready_timeout_s=(float(ready["counted_timeout_s"])
                                 if "counted_timeout_s" in ready else None),
        warmup_requests=ready.get("warmup_requests", 0),
        base_url=request.get("base_url", "http://{{listen_host}}:{{port}}"),
        chat_path=request.get("chat_path", DIALECTS["openai"].chat_path),
        model=request.get("model", "mock-model"),
        headers=dict(request.get("headers", {})),
        self_overhead_header=request.get("self_overhead_header", ""),
        self_overhead_scale_ms=float(request.get("self_overhead_scale_ms", 1.0)),
        metrics_path=metrics.get("path", ""),
        inflight_gauge=metrics.get("inflight_gauge", ""),
        features=_features(data.get("features", {}), path),
        **_variants(data, start, path),
        **_limits(data.get("limits"), path),
        key_files=_key_files(data.get("key"), (gateways_dir / name).resolve(), path),
    )
    _check_spec(spec, path)
    return spec


def _check_values(data: dict, name: str, path: Path) -> None:
    """What the schema's types cannot say: the version, the name, the kind, role and signal."""
    if data["schema_version"] not in GATEWAY_TOML_READS:
        raise GatewaySpecError(f"{path}: schema_version must be one of "
                               f"{', '.join(map(str, GATEWAY_TOML_READS))} (gateways/README.md)")
    if data["name"] != name:
        raise GatewaySpecError(f"{path}: name must equal the folder name {name!r}")
    if data["kind"] not in KINDS:
        raise GatewaySpecError(f"{path}: kind must be one of {KINDS}")
    if data.get("role", "system") not in ROLES:
        raise GatewaySpecError(f"{path}: role must be one of {ROLES}")
    counted = data.get("ready", {}).get("counted_timeout_s")
    low, high = COUNTED_TIMEOUT_BOUNDS_S
    if counted is not None and not low <= counted <= high:
        raise GatewaySpecError(f"{path}: [ready] counted_timeout_s: {counted!r} is not between "
                               f"{low:g} and {high:g} seconds")
    stop_signal = data.get("start", {}).get("stop_signal", "SIGTERM")
    if not isinstance(getattr(signal, stop_signal, None), signal.Signals):
        raise GatewaySpecError(f"{path}: [start] stop_signal: not a signal name: {stop_signal!r}")


def _check_spec(spec: GatewaySpec, path: Path) -> None:
    """The spec as a whole: a port to call, its templates there, its placeholders known."""
    if spec.runnable and not spec.has_process and "{{port}}" in spec.base_url:
        raise GatewaySpecError(f"{path}: request.base_url uses {{{{port}}}} but [start] starts nothing")
    declared = [("start.files", spec.start_files),
                *((f"{s}.{VARIANTS[s]}.files", v.files) for s, v in spec.variants.items())]
    for where, files in declared:
        for tf in files:
            if not (spec.directory / tf.template).is_file():
                raise GatewaySpecError(f"{path}: {where} template {tf.template!r} does not exist")
    _check_placeholders(spec, path)


def _features(table: dict, path: Path) -> dict:
    """[features.NAME] tables (their keys and types already checked against SCHEMA)."""
    features = {}
    for name, f in table.items():
        dialect = f.get("dialect", "openai")
        if dialect not in DIALECT_PATHS:
            raise GatewaySpecError(f"{path}: [features.{name}] dialect must be one of "
                                   f"{sorted(DIALECT_PATHS)}")
        features[name] = Feature(name=name, dialect=dialect, chat_path=f.get("chat_path"),
                                 model=f.get("model"), headers=f.get("headers"))
    return features


def _variants(data: dict, start: dict, path: Path) -> dict:
    """GatewaySpec's variants and unconfigurable fields from the [resilience] and [scale] tables
    (their keys and types already checked against SCHEMA)."""
    variants, unconfigurable = {}, {}
    outputs = [f["output"] for f in start.get("files", [])]
    for setting, key in VARIANTS.items():
        table = data.get(setting)
        if table is None:
            continue
        if ("unconfigurable" in table) == (key in table):
            raise GatewaySpecError(f"{path}: [{setting}] needs either unconfigurable (one "
                                   f"sentence: why) or [{setting}.{key}], not both or neither")
        if "unconfigurable" in table:
            if not table["unconfigurable"].strip():
                raise GatewaySpecError(f"{path}: [{setting}] unconfigurable: say why, in one "
                                       "sentence")
            unconfigurable[setting] = table["unconfigurable"]
            continue
        v = table[key]
        for f in v.get("files", []):
            if f["output"] not in outputs:
                raise GatewaySpecError(f"{path}: [{setting}.{key}] files: output {f['output']!r} "
                                       f"replaces no [[start.files]] output (they are: "
                                       f"{', '.join(outputs) or 'none'})")
        variants[setting] = Variant(
            files=tuple(TemplateFile(f["template"], f["output"]) for f in v.get("files", [])),
            headers=dict(v.get("headers", {})), env=dict(v.get("env", {})), model=v.get("model"))
    return {"variants": variants, "unconfigurable": unconfigurable}


def _limits(table: dict | None, path: Path) -> dict:
    """GatewaySpec's limit_logs and limit_patterns from [limits]: every pattern a regular
    expression, every log a file inside the run directory."""
    if table is None:
        return {}
    if not table["patterns"]:
        raise GatewaySpecError(f"{path}: [limits] patterns: at least one, or no [limits] table")
    for i, pattern in enumerate(table["patterns"]):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise GatewaySpecError(f"{path}: [limits] patterns[{i}]: not a regular expression "
                                   f"({exc}): {pattern!r}") from None
    for log in table.get("logs", []):
        if not log or Path(log).is_absolute() or ".." in Path(log).parts:
            raise GatewaySpecError(f"{path}: [limits] logs: {log!r} is not a file inside the run "
                                   "directory (a relative path, without ..)")
    return {"limit_logs": tuple(table.get("logs", [])), "limit_patterns": tuple(table["patterns"])}


def _key_files(table: dict | None, directory: Path, path: Path) -> tuple[str, ...]:
    """[key] files: each a glob pattern inside the folder that matches at least one file (a
    pattern matching nothing would leave out of the key what it was written to put in)."""
    if table is None:
        return ()
    for pattern in table["files"]:
        if not pattern or Path(pattern).is_absolute() or ".." in Path(pattern).parts:
            raise GatewaySpecError(f"{path}: [key] files: {pattern!r} is not a pattern inside the "
                                   "folder (a relative path, without ..)")
        if not any(p.is_file() for p in directory.glob(pattern)):
            raise GatewaySpecError(f"{path}: [key] files: {pattern!r} matches no file in {directory}")
    return tuple(table["files"])


def _check_placeholders(spec: GatewaySpec, path: Path) -> None:
    texts = [*spec.install_check, *spec.install_command, *spec.build_command, *spec.start_command,
             *spec.version_command,
             *spec.start_env.values(), *spec.headers.values(), spec.base_url, spec.chat_path,
             spec.ready_path]
    for f in spec.features.values():
        texts += [f.chat_path or "", *(f.headers or {}).values()]
    files = spec.start_files
    for v in spec.variants.values():
        texts += [*v.headers.values(), *v.env.values()]
        files += v.files
    texts += [spec.template(tf) for tf in files]
    for text in texts:
        for match in _SECTION.finditer(text):
            if match.group(1) not in SECTIONS:
                raise GatewaySpecError(f"{path}: unknown section {{{{#{match.group(1)}}}}}; "
                                       f"known: {', '.join(SECTIONS)}")
        outside = _SECTION.sub("", text)
        for match in _PLACEHOLDER.finditer(text):
            if match.group(1) not in PLACEHOLDERS:
                raise GatewaySpecError(f"{path}: unknown placeholder {match.group(0)!r}; "
                                       f"known: {', '.join(PLACEHOLDERS)}")
        for match in _PLACEHOLDER.finditer(outside if spec.format_version >= 2 else ""):
            if match.group(1) in _STANDBY_PLACEHOLDERS:
                raise GatewaySpecError(f"{path}: {match.group(0)} outside a "
                                       "{{#standby}}...{{/standby}} section: without a standby "
                                       "it would name the failing provider twice")


def render(text: str, values: dict) -> str:
    """Keep each {{#section}}...{{/section}} whose value is true (drop the others), then replace
    every {{name}}; a name without a value is an error, never left in place."""
    text = _SECTION.sub(lambda m: m.group(2) if values.get(m.group(1)) else "", text)
    def substitute(match: re.Match) -> str:
        key = match.group(1)
        if key not in values:
            raise GatewaySpecError(f"placeholder {match.group(0)} has no value here")
        return str(values[key])
    return _PLACEHOLDER.sub(substitute, text)
