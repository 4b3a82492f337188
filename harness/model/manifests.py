"""The study and run manifests as frozen dataclasses: one spelling for every field, written and
read by the same code (artifacts/README.md documents each field).

``to_json`` stamps the current schema version; ``from_json`` refuses an unknown version, brings
an older one up to date through harness.model.migrate, and refuses keys it does not know. Only
host facts (``machine``, a host's ``facts``/``before``/``after``) stay free-form: they are
whatever the machine reported. Their readers take a key that may be missing: the core count
(CPU per request, the in-flight lane's cores), the CPU model and core count (whether two
studies ran on the same machine, the gate's history), and the methodology section.
"""
from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.model import migrate
from harness.model.config import StudyConfig
from harness.model.errors import UserError
from harness.model.formats import RUN_MANIFEST, STUDY_MANIFEST, Format
from harness.model.plan import RunSpec


class ManifestError(UserError, ValueError):
    """A manifest that does not have the shape of its schema version; names the file."""


# --- the run manifest ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Phases:
    """When each phase of the load began (Locust's shape writes them); None: not reached."""
    warmup_start_t_unix_s: float | None = None
    ramp_start_t_unix_s: float | None = None
    hold_start_t_unix_s: float | None = None
    hold_end_t_unix_s: float | None = None     # the measured window is [hold_start, hold_end)
    load_end_t_unix_s: float | None = None

    def t(self, name: str) -> float:
        """``t("hold_start")``: the time, NaN when that phase was not reached."""
        value = getattr(self, f"{name}_t_unix_s")
        return math.nan if value is None else float(value)


@dataclass(frozen=True)
class PreRequestCheck:
    status: int
    problem: str                  # "" when the reply was well-formed
    mock_request_id: str
    mock_saw_it: bool
    mock_count_delta: int


@dataclass(frozen=True)
class IdentityCheck:
    """The run's rows joined with the mock's request log by request id (harness.run.identity):
    every successful row should match exactly one mock row; what does not is counted and, up to
    a cap, listed."""
    client_rows: int
    client_ok: int                          # successful rows (no error)
    client_without_id: int
    mock_rows: int                          # mock log rows of the load window
    mock_without_id: int
    matched: int                            # successful rows the mock logged at least once
    matched_once: int
    client_without_mock: int                # successful rows the mock never logged
    mock_without_client: int                # mock rows whose id no row has
    ids_seen_more_than_once: int            # ids the mock logged more than once (retries)
    amplification: float | None             # mock rows per client id (1.0: no retries)
    match_rate: float | None                # matched_once / client_ok
    client_without_mock_ids: tuple[str, ...] = ()
    mock_without_client_ids: tuple[str, ...] = ()
    ids_seen_more_than_once_ids: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return (self.client_without_mock == 0 and self.mock_without_client == 0
                and self.ids_seen_more_than_once == 0 and self.client_without_id == 0)


@dataclass(frozen=True)
class RunChecks:
    pre_request: PreRequestCheck | None = None
    inflight_at_stop: int | None = None     # requests unanswered when the load stopped
    mock_count: int | None = None           # requests the mock answered during the load
    successful_rows: int | None = None      # rows with status 200 and no error
    count_match: bool | None = None         # a cross-check of identity: counts only
    count_difference: int | None = None     # mock_count - successful_rows
    identity: IdentityCheck | None = None   # the run's correctness check; None: not measured
    identity_missing_reason: str = ""       # why identity is None
    count_note: str = ""                    # why count_match was not judged ("" = it was)


@dataclass(frozen=True)
class WireCheck:
    """The run's packet capture during the hold (harness.run.capture, harness.run.wire).
    ``captured`` False: no wire figures, and ``reason`` says why."""
    captured: bool
    reason: str = ""
    interface: str = ""
    snaplen_bytes: int | None = None
    window_start_t_unix_s: float | None = None
    window_end_t_unix_s: float | None = None
    pcap_file: str = ""                     # relative to the run directory; "" when not kept
    pcap_bytes: int | None = None
    pcap_kept_reason: str = ""              # why the pcap was deleted, "" when kept
    packets_captured: int | None = None
    packets_dropped_by_kernel: int | None = None
    cpu_s: float | None = None              # tcpdump's user + system CPU
    client_requests: int | None = None      # requests seen on the client side of the capture
    client_requests_without_id: int | None = None
    upstream_requests: int | None = None
    upstream_requests_without_id: int | None = None  # no id in their captured bytes
    upstream_ids_seen_more_than_once: int | None = None
    joined: int | None = None
    join_rate: float | None = None          # joined / client requests with an id
    rows_with_wire_times: int | None = None  # requests.parquet rows given wire figures


@dataclass(frozen=True)
class MockSummary:
    """The mock's own hold time and collector pauses during the load (from mock_stats.json)."""
    count: int | None = None
    hold_ms_p50: float | None = None
    hold_ms_p90: float | None = None
    hold_ms_p99: float | None = None
    hold_ms_max: float | None = None
    hold_ms_mean: float | None = None
    # its garbage collector during the load (the instrument's own pauses); None: a mock from
    # before they were recorded
    gc_mode: str = ""                       # the mock's --gc mode
    gc_passes: int | None = None            # collections, every generation
    gc_pause_ms_total: float | None = None  # time the mock stood still in them
    gc_pause_ms_max: float | None = None
    # Time its processes were runnable but waiting for a CPU during the load (schedstat): on a
    # shared machine, where its own added time goes. None: not on this machine, no schedstat,
    # or a run from before it was recorded.
    run_queue_wait_ms: float | None = None


@dataclass(frozen=True)
class LocustSummary:
    exit_code: int | None = None
    cpu_warning: bool = False               # Locust's high-CPU event fired in a process
    warnings: tuple[str, ...] = ()          # which, how often, how high (earlier runs: its log lines)
    processes: int | None = None            # load-generating processes


@dataclass(frozen=True)
class RequestInfo:
    """How the run's requests were sent."""
    feature: str
    dialect: str
    chat_path: str
    model: str
    request_bytes: int
    self_overhead_header: str = ""   # the system's own overhead header, "" = none


@dataclass(frozen=True)
class HostSnapshot:
    """What can change between runs on one machine (harness.remote.machine.host_snapshot)."""
    t_unix_s: float | None = None
    load_avg_1m: float | None = None
    load_avg_5m: float | None = None
    load_avg_15m: float | None = None
    tcp_states: dict[str, int] = field(default_factory=dict)
    memory_available_bytes: int | None = None


@dataclass(frozen=True)
class RunHost:
    """One host with a role in the run; before/after are what it reported (facts, free-form)."""
    address: str
    prefix: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StepsFit:
    """The in-flight lane's descriptor check, made before the load: how many of the steps fit
    every role's open-file limit (the load runs those only), and why the next did not."""
    steps_run: int
    reason: str = ""                        # "" when every step fits


@dataclass(frozen=True)
class RunLimits:
    """What the machine let the run's processes hold open: the soft open-file limit asked for and
    the one each started role ran with (None: it was gone before it was read), and the loopback's
    ephemeral port range and TIME_WAIT reuse (net.ipv4.tcp_tw_reuse) during the run."""
    open_files_asked: int = 0
    open_files_by_role: dict[str, int | None] = field(default_factory=dict)
    port_range: str = ""                    # "low-high"; "" = not readable
    tcp_tw_reuse: int | None = None


@dataclass(frozen=True)
class LimitLine:
    """One pattern of the lines in which the system names one of its limits ([limits] in its
    gateway.toml), looked for in its logs after the run (harness/files/limit_logs.py): how many
    lines matched it and the first of them."""
    pattern: str
    count: int                              # matching lines, over every log read
    log: str = ""                           # the first one's file, relative to the run directory
                                            # ("" when none matched)
    line: str = ""                          # that line, trimmed around the match
    t_unix_s: float | None = None           # its time, when the line carries one that parses
    partial: bool = False                   # a log was longer than what is read of it: the count
                                            # is a lower bound


@dataclass(frozen=True)
class RunManifest:
    run_id: str
    system: str
    run_index: int
    round: int
    position: int                           # 0-based place in its round
    comparison_key: str
    spec: RunSpec | None                    # None only for a run that never wrote its manifest
    status: str                             # running | completed | failed | interrupted
    reason: str = ""
    kind: str = ""
    resilience: str = "shipped"             # the configuration asked for: shipped | recommended
    resilience_note: str = ""               # why it ran as shipped ("" when it ran as asked)
    scale: str = "shipped"                  # the configuration asked for: shipped | sized
    scale_note: str = ""                    # why it ran as shipped ("" when it ran as asked)
    version: str = ""                       # the system's version, read back from it
    mock_version: str = ""
    locust_version: str = ""
    started_t_unix_s: float | None = None
    ended_t_unix_s: float | None = None
    failed_t_unix_s: float | None = None
    ready_s: float | None = None
    phases: Phases = Phases()
    checks: RunChecks = RunChecks()
    mock: MockSummary = MockSummary()
    locust: LocustSummary = LocustSummary()
    request: RequestInfo | None = None
    wire: WireCheck | None = None           # None: a run from before wire capture existed
    host_before: HostSnapshot | None = None
    host_after: HostSnapshot | None = None
    hosts: dict[str, RunHost] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)    # relative path -> SHA-256
    limits: RunLimits | None = None         # None: a run from before they were recorded
    steps_fit: StepsFit | None = None       # in-flight runs only; None: not that lane, or a
                                            # run from before the check
    limit_lines: tuple[LimitLine, ...] = ()  # one per declared pattern; empty: none declared,
                                            # or a run from before they were looked for

    def to_json(self) -> str:
        return dump(self, RUN_MANIFEST)

    @classmethod
    def from_json(cls, text: str, source: str = "run manifest") -> "RunManifest":
        return load(cls, text, source, RUN_MANIFEST, migrate.run_manifest)


# --- the study manifest --------------------------------------------------------------------------

@dataclass(frozen=True)
class PlanEntry:
    run_id: str
    system: str
    run_index: int
    round: int
    position: int
    comparison_key: str


@dataclass(frozen=True)
class RunEntry:
    """A run as it ended; ``dir`` is relative to the study directory."""
    run_id: str
    system: str
    run_index: int
    status: str
    reason: str
    dir: str
    comparison_key: str = ""


@dataclass(frozen=True)
class SystemInfo:
    kind: str
    runnable: bool
    role: str = ""
    language: str = ""
    description: str = ""
    not_runnable_reason: str = ""
    not_runnable_command: str = ""
    version: str = ""
    gateway_toml_sha256: str = ""
    source_commit: str = ""       # the commit it ran as (its `builds` ref); "" = the study's tree


@dataclass(frozen=True)
class StudyHost:
    address: str
    prefix: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Attempt:
    """An earlier attempt of a resumed study."""
    started_t_unix_s: float | None = None
    ended_t_unix_s: float | None = None
    status: str | None = None
    reason: str | None = None
    git_commit: str | None = None


@dataclass(frozen=True)
class StudyManifest:
    study_id: str
    status: str                             # running | completed | interrupted | failed
    config: StudyConfig
    reason: str = ""
    plan: tuple[PlanEntry, ...] = ()
    runs: tuple[RunEntry, ...] = ()
    machine: dict[str, Any] = field(default_factory=dict)   # facts, as the machine reported them
    hosts: dict[str, StudyHost] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)  # harness packages
    git_commit: str = ""
    started_t_unix_s: float | None = None
    ended_t_unix_s: float | None = None
    systems: dict[str, SystemInfo] = field(default_factory=dict)
    attempts: tuple[Attempt, ...] = ()

    def to_json(self) -> str:
        return dump(self, STUDY_MANIFEST)

    @classmethod
    def from_json(cls, text: str, source: str = "study manifest") -> "StudyManifest":
        return load(cls, text, source, STUDY_MANIFEST, migrate.study_manifest)


# --- plain JSON <-> dataclasses ------------------------------------------------------------------

def dump(obj, fmt: Format) -> str:
    """A manifest as JSON, stamped with its format's version."""
    body = {"schema_version": fmt.version, **to_plain(obj)}
    return json.dumps(body, indent=2, default=str) + "\n"


def load(cls, text: str, source: str, fmt: Format, migration: Callable[[dict, int], dict]):
    """A manifest of dataclass ``cls`` from its JSON: the version checked against ``fmt``, an
    older one brought up by ``migration`` (harness.model.migrate), every key and type checked."""
    data = parse_object(text, source)
    version = fmt.check(data.get("schema_version"), source)
    return from_plain(cls, migration(data, version), source)


def parse_object(text: str, source: str) -> dict:
    """A manifest's JSON object; ManifestError naming the source when it is not one."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ManifestError(f"{source}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ManifestError(f"{source}: not a JSON object")
    return data


def to_plain(obj) -> dict:
    """A dataclass as JSON-ready data (tuples become lists when dumped); a field that has its
    own plain form (RunSpec.to_dict, which leaves out a setting while unset) in that form."""
    data = dataclasses.asdict(obj)
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value) and hasattr(value, "to_dict"):
            data[f.name] = value.to_dict()
    return data


def from_plain(cls, data: Any, source: str, where: str = ""):
    """Build dataclass ``cls`` from plain JSON data, checking every key and type against its
    annotations; ManifestError names the file and the field."""
    return _convert(cls, data, source, where)


def _fail(source: str, where: str, message: str) -> ManifestError:
    return ManifestError(f"{source}: {where or 'top level'}: {message}")


def _convert(tp, value, source: str, where: str):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        (inner,) = [t for t in options if t is not type(None)]
        return _convert(inner, value, source, where)
    if dataclasses.is_dataclass(tp):
        return _dataclass(tp, value, source, where)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise _fail(source, where, f"expected a list, found {value!r}")
        inner = typing.get_args(tp)[0]
        return tuple(_convert(inner, v, source, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise _fail(source, where, f"expected an object, found {value!r}")
        inner = typing.get_args(tp)[1]
        return {str(k): _convert(inner, v, source, f"{where}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp in (int, str, bool) and isinstance(value, tp) and not (tp is int and isinstance(value, bool)):
        return value
    raise _fail(source, where, f"expected {getattr(tp, '__name__', tp)}, found {value!r}")


def _dataclass(cls, value, source: str, where: str):
    if not isinstance(value, dict):
        raise _fail(source, where, f"expected an object for {cls.__name__}, found {value!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise _fail(source, where, f"unknown key(s) {unknown} for {cls.__name__}")
    args = {}
    for name, f in fields.items():
        if name in value:
            args[name] = _convert(hints[name], value[name], source, f"{where}.{name}".lstrip("."))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise _fail(source, where, f"missing key {name!r} of {cls.__name__}")
    return cls(**args)
