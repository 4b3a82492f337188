"""Reads a system's declarative gateway.toml and renders its {{placeholders}}.

The harness knows systems only through this structure; it never branches on a name.
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from harness.config import GATEWAYS_DIR, REPO_DIR

SCHEMA_VERSION = 1
KINDS = ("baseline", "in-house", "competitor")
PLACEHOLDERS = ("port", "upstream_url", "upstream_host", "upstream_port", "run_dir", "gateway_dir",
                "cache_dir", "repo_dir", "python", "workers")
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


class GatewaySpecError(ValueError):
    """A gateway.toml that cannot be used, with the file and the key at fault."""


@dataclass(frozen=True)
class TemplateFile:
    template: str            # relative to the gateway folder
    output: str              # relative to the run directory


@dataclass(frozen=True)
class GatewaySpec:
    name: str
    kind: str
    language: str
    description: str
    directory: Path
    toml_sha256: str                         # identity of the declaration, part of comparison keys
    runnable: bool = True
    not_runnable_reason: str = ""
    not_runnable_command: str = ""
    version_command: tuple[str, ...] = ()
    version_pattern: str = ""
    install_check: tuple[str, ...] = ()
    install_command: tuple[str, ...] = ()
    install_timeout_s: float = 900.0
    start_command: tuple[str, ...] = ()      # empty: the client calls the upstream itself
    start_env: dict = field(default_factory=dict)
    start_files: tuple[TemplateFile, ...] = ()
    stop_signal: str = "SIGTERM"
    stop_timeout_s: float = 10.0
    ready_path: str = "/health"
    ready_status: int = 200
    ready_timeout_s: float = 30.0
    warmup_requests: int = 0
    base_url: str = "http://127.0.0.1:{{port}}"
    chat_path: str = "/v1/chat/completions"
    model: str = "mock-model"
    headers: dict = field(default_factory=dict)
    self_overhead_header: str = ""
    self_overhead_scale_ms: float = 1.0
    metrics_path: str = ""                   # Prometheus text endpoint on base_url, "" = none
    inflight_gauge: str = ""                 # its gauge of requests in flight (sampled each second)

    @property
    def has_process(self) -> bool:
        return bool(self.start_command)

    @property
    def cache_dir(self) -> Path:
        return REPO_DIR / ".cache" / "gateways" / self.directory.name


def _strings(value, where: str, path: Path) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise GatewaySpecError(f"{path}: {where} must be a list of strings")
    return tuple(value)


def folder_of(system: str) -> str:
    """'nginx~aa' names a second copy of the system in gateways/nginx (for A/A checks)."""
    return system.split("~", 1)[0]


def load_gateway_spec(system: str, gateways_dir: Path = GATEWAYS_DIR) -> GatewaySpec:
    spec = _load_folder(folder_of(system), gateways_dir)
    return dataclasses.replace(spec, name=system) if system != spec.name else spec


def _load_folder(name: str, gateways_dir: Path) -> GatewaySpec:
    path = gateways_dir / name / "gateway.toml"
    try:
        raw_bytes = path.read_bytes()
    except FileNotFoundError:
        raise GatewaySpecError(f"unknown gateway {name!r}: {path} does not exist") from None
    try:
        data = tomllib.loads(raw_bytes.decode())
    except tomllib.TOMLDecodeError as exc:
        raise GatewaySpecError(f"{path}: not valid TOML: {exc}") from None
    if data.get("schema_version") != SCHEMA_VERSION:
        raise GatewaySpecError(f"{path}: schema_version must be {SCHEMA_VERSION}")
    if data.get("name") != name:
        raise GatewaySpecError(f"{path}: name must equal the folder name {name!r}")
    if data.get("kind") not in KINDS:
        raise GatewaySpecError(f"{path}: kind must be one of {KINDS}")
    version = data.get("version", {})
    install = data.get("install", {})
    start = data.get("start", {})
    ready = data.get("ready", {})
    request = data.get("request", {})
    metrics = data.get("metrics", {})
    spec = GatewaySpec(
        name=name,
        kind=data["kind"],
        language=data.get("language", ""),
        description=data.get("description", ""),
        directory=(gateways_dir / name).resolve(),
        toml_sha256=hashlib.sha256(raw_bytes).hexdigest(),
        runnable=bool(data.get("runnable", True)),
        not_runnable_reason=data.get("not_runnable_reason", ""),
        not_runnable_command=data.get("not_runnable_command", ""),
        version_command=_strings(version.get("command", []), "version.command", path),
        version_pattern=version.get("pattern", ""),
        install_check=_strings(install.get("check", []), "install.check", path),
        install_command=_strings(install.get("command", []), "install.command", path),
        install_timeout_s=float(install.get("timeout_s", 900)),
        start_command=_strings(start.get("command", []), "start.command", path),
        start_env={str(k): str(v) for k, v in start.get("env", {}).items()},
        start_files=tuple(TemplateFile(f["template"], f["output"]) for f in start.get("files", [])),
        stop_signal=start.get("stop_signal", "SIGTERM"),
        stop_timeout_s=float(start.get("stop_timeout_s", 10)),
        ready_path=ready.get("path", "/health"),
        ready_status=int(ready.get("status", 200)),
        ready_timeout_s=float(ready.get("timeout_s", 30)),
        warmup_requests=int(ready.get("warmup_requests", 0)),
        base_url=request.get("base_url", "http://127.0.0.1:{{port}}"),
        chat_path=request.get("chat_path", "/v1/chat/completions"),
        model=request.get("model", "mock-model"),
        headers={str(k): str(v) for k, v in request.get("headers", {}).items()},
        self_overhead_header=request.get("self_overhead_header", ""),
        self_overhead_scale_ms=float(request.get("self_overhead_scale_ms", 1.0)),
        metrics_path=metrics.get("path", ""),
        inflight_gauge=metrics.get("inflight_gauge", ""),
    )
    if spec.runnable and not spec.has_process and "{{port}}" in spec.base_url:
        raise GatewaySpecError(f"{path}: request.base_url uses {{{{port}}}} but [start] starts nothing")
    for tf in spec.start_files:
        if not (spec.directory / tf.template).is_file():
            raise GatewaySpecError(f"{path}: start.files template {tf.template!r} does not exist")
    _check_placeholders(spec, path)
    return spec


def _check_placeholders(spec: GatewaySpec, path: Path) -> None:
    texts = [*spec.install_check, *spec.install_command, *spec.start_command, *spec.version_command,
             *spec.start_env.values(), *spec.headers.values(), spec.base_url, spec.chat_path,
             spec.ready_path]
    texts += [(spec.directory / tf.template).read_text() for tf in spec.start_files]
    for text in texts:
        for match in _PLACEHOLDER.finditer(text):
            if match.group(1) not in PLACEHOLDERS:
                raise GatewaySpecError(f"{path}: unknown placeholder {match.group(0)!r}; "
                                       f"known: {', '.join(PLACEHOLDERS)}")


def render(text: str, values: dict) -> str:
    """Replace every {{name}}; a name without a value is an error, never left in place."""
    def substitute(match: re.Match) -> str:
        key = match.group(1)
        if key not in values:
            raise GatewaySpecError(f"placeholder {match.group(0)} has no value here")
        return str(values[key])
    return _PLACEHOLDER.sub(substitute, text)
