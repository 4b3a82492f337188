"""Every setting of a study in one frozen, documented structure, validated before anything starts."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.model.errors import UserError
from harness.model.glossary import retired_parameter
from harness.model.profiles import PROFILES

REPO_DIR = Path(__file__).resolve().parents[2]
GATEWAYS_DIR = REPO_DIR / "gateways"

# Locust warns above this many users spawned per second per process; a ramp steeper than
# this is not something one load generator process can produce honestly.
MAX_SPAWN_RATE_PER_PROCESS = 100.0
# Largest request body the lane sends: below every system's body limit (nginx 16m, Sluice 16 MiB).
MAX_REQUEST_BYTES = 8 * 1024 * 1024
# Bytes one raw request row costs across the raw CSV and the Parquet file, with margin.
BYTES_PER_PLANNED_ROW = 400
# One Locust process generates at most about this many requests per second here (README:
# ~5,400 req/s with no think time); an open-loop step above it would measure Locust, not the system.
OPEN_LOOP_MAX_RATE_PER_PROCESS = 5000.0
# The disk estimate's ceiling on what one Locust process completes: twice the ~5,400 req/s
# measured here, so a faster machine is still covered without asking for disk no run could fill.
PLANNED_MAX_RATE_PER_PROCESS = 11_000.0
# Open loop: users >= this x rate x time per request (Little's law), so the schedule does not
# wait for a free user until latency has at least doubled.
OPEN_LOOP_USER_HEADROOM = 2.0
# How each system runs in a study: as shipped, or with its declared recommended resilience.
RESILIENCE = ("shipped", "recommended")
# How each system runs in a study: as shipped, or sized for many open connections as declared.
SCALE = ("shipped", "sized")


class ConfigError(UserError, ValueError):
    """Bad study parameters; raised before any process starts. One line per problem."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        if len(problems) == 1:
            super().__init__(f"invalid study parameter: {problems[0]}")
        else:
            super().__init__("invalid study parameters:\n  - " + "\n  - ".join(problems))

    def lines(self) -> list[str]:
        one_line = (" ".join(str(p).split()) for p in self.problems)   # a problem is one line
        return [f"invalid study parameter: {p}" for p in one_line if p] or super().lines()


# StudyConfig's sections: its flat fields grouped as a run uses them (the serialized form, `--set`
# and the notebook's parameters stay flat). Every field is in exactly one section
# (tests/test_config.py). A setting's path is `section.name`: its name with the section's prefix
# left off (`mock.latency_ms` is mock_latency_ms, `load.users` is users). The run spec's parts
# hold these settings under the same names (harness.model.run_parts): RunSpec.load = load +
# request + inflight, RunSpec.mock = mock + faults, RunSpec.wire = wire; RunSpec.topology,
# .affinity and .nice come from placement.
SECTIONS: dict[str, tuple[str, ...]] = {
    # the load generator's shape: closed loop (users, ramp, hold) or an open-loop schedule
    "load": ("users", "ramp_s", "hold_s", "min_hold_requests", "max_hold_s", "warmup_s",
             "warmup_users", "think_time_s", "locust_processes", "request_timeout_s",
             "open_loop_rates_per_s", "open_loop_step_s"),
    # what each request is: streamed or not, the feature it calls, its body's size
    "request": ("stream", "feature", "request_bytes"),
    # the in-flight lane's steps of requests held open
    "inflight": ("inflight_steps", "inflight_step_s", "inflight_hold_s", "inflight_abandon_share"),
    # the mock provider's answers
    "mock": ("mock_latency_ms", "mock_workers", "mock_response_tokens", "stream_chunks",
             "chunk_delay_ms"),
    # the provider-fault lane's window and scenario
    "faults": ("fault_scenario", "fault_start_s", "fault_duration_s", "fault_seed"),
    # the packet capture during the hold
    "wire": ("wire_capture_s", "wire_capture_offset_s", "wire_snaplen_bytes",
             "wire_keep_capture"),
    # where and how each role's processes run: hosts, ports, CPUs, priority, file limit
    "placement": ("topology", "base_port", "cpu_affinity_load", "cpu_affinity_mock",
                  "cpu_affinity_system", "nice_load", "nice_mock", "nice_system",
                  "open_files_limit"),
    # the systems measured and how each is started and configured
    "gateway": ("gateways", "gateways_dir", "gateway_workers", "ready_timeout_s", "resilience",
                "scale", "builds", "system_env"),
    # the study as a whole: its runs, their order, its checks, where it is written
    "study": ("profile", "runs_per_gateway", "runs_unconfigured", "seed", "idle_s", "cooldown_s",
              "count_lane", "reference_system", "aa_pair", "gate_system", "gate_base_system",
              "out_dir", "study_id"),
}


def section_of(name: str) -> str:
    """The section a StudyConfig field is in."""
    return next(section for section, names in SECTIONS.items() if name in names)


def path_of(name: str) -> str:
    """A StudyConfig field's path: `section.name`, the section's prefix left off."""
    section = section_of(name)
    return f"{section}.{name.removeprefix(section + '_')}"


@dataclass(frozen=True)
class StudyConfig:
    """A whole study. Field comments are the documentation of each setting."""

    gateways: tuple[str, ...] = ("all",)  # systems, by folder name under gateways_dir; "all" = every
                                         # one there (a profile may name its own set)
    profile: str = "standard"            # which preset the values came from (recorded)
    reference_system: str = "nginx"      # verdicts compare every system with this one (when it ran)
    aa_pair: tuple[str, ...] = ()        # two copies of one system that must agree (A/A check);
                                         # () = no A/A check in this study
    gate_system: str = "sluice"          # the system the regression gate judges (the head build)
    gate_base_system: str = ""           # the gate judges gate_system against this entry, the same
                                         # system built from the base commit (see `builds`);
                                         # "" = no build comparison in this study
    builds: tuple[str, ...] = ()         # "ENTRY=REF" items: that study entry runs its system's
                                         # folder as committed at git REF (a worktree under
                                         # .cache/builds/, installed and built as its own
                                         # gateway.toml says, into its own .cache/); every other
                                         # entry runs from this working tree
    system_env: tuple[str, ...] = ()     # "ENTRY:NAME=VALUE" items: extra environment of one
                                         # entry's process (e.g. "sluice:SLUICE_TEST_DELAY_MS=1"
                                         # slows the head build alone); no commas in VALUE
    count_lane: bool = False             # counting lane: after the runs, each system counted
                                         # once under Valgrind and strace (instructions and
                                         # system calls per request, plain and streamed;
                                         # harness/run/count_lane.py): counts.json
    runs_per_gateway: int = 3            # each system is run this many times, interleaved
    runs_unconfigured: int = 0           # with resilience=recommended, the runs of a system with
                                         # nothing to configure (it runs as shipped in every
                                         # run); 0 = runs_per_gateway
    users: int = 1000                    # closed-loop users at the top of the ramp
    ramp_s: float = 120.0                # seconds from warm-up users to `users`, linear
    hold_s: float = 30.0                 # seconds held at `users`: the measured window
    min_hold_requests: int = 0           # the hold also lasts until this many requests completed
    max_hold_s: float = 120.0            # ...but never longer than this (bounded time)
    warmup_s: float = 5.0                # seconds at `warmup_users` before the ramp (not measured)
    warmup_users: int = 5
    idle_s: float = 3.0                  # sampling before the first request: idle memory
    cooldown_s: float = 5.0              # sampling after the load stops: recovered memory
    think_time_s: float = 1.0            # each user waits this long between calls (0 = no wait)
    locust_processes: int = 1            # load generator processes (1 = no master/worker split)
    request_timeout_s: float = 30.0      # a request slower than this is a timeout error
    mock_latency_ms: float = 60.0        # the mock's fixed hold before the response head
    mock_workers: int = 1                # mock processes on one port (SO_REUSEPORT)
    mock_response_tokens: int = 16       # words in each mock completion
    stream: bool = False                 # streaming lane: SSE responses, timed frame by frame
    stream_chunks: int = 20              # content frames per streamed response
    chunk_delay_ms: float = 20.0         # the mock's gap between content frames
    fault_scenario: str = ""             # provider-fault lane: a scenario of harness/model/fault_scenarios.py
                                         # ("" = a healthy provider)
    fault_start_s: float = 10.0          # the fault window starts this long after the hold starts
    fault_duration_s: float = 0.0        # the window's length; 0 = the scenario's own
    fault_seed: int = -1                 # which requests get a fault; -1 = the study's seed
    resilience: str = "shipped"          # provider-fault lane: each system "shipped" (as installed)
                                         # or "recommended" (its declared resilience configuration)
    scale: str = "shipped"               # in-flight lane: each system "shipped" (as installed) or
                                         # "sized" (its gateway.toml's [scale.sized]: sized for
                                         # many open connections as its vendor documents; a
                                         # system without one runs as shipped, its runs say why)
    open_loop_rates_per_s: tuple[float, ...] = ()  # open-loop lane: offered req/s, one step each,
                                         # ascending; () = closed loop (users, ramp, think time)
    open_loop_step_s: float = 20.0       # seconds each open-loop step lasts (its measured window)
    inflight_steps: tuple[int, ...] = ()  # in-flight lane: requests held open, one step each,
                                         # ascending (closed loop, no think time: N users keep N
                                         # requests open); () = not this lane
    inflight_step_s: float = 40.0        # seconds each in-flight step lasts; its last hold is
                                         # measured (harness/model/inflight.py)
    inflight_hold_s: float = 10.0        # in-flight lane: the mock holds each request this long
                                         # (a stream: one frame every chunk_delay_ms throughout);
                                         # replaces mock_latency_ms and stream_chunks there
    inflight_abandon_share: float = 0.0  # in-flight lane, streamed: the share of the open streams
                                         # the client closes mid-stream after each step's
                                         # measured hold (chosen by the run's seed); 0 = none
    open_files_limit: int = 0            # soft open-file limit (RLIMIT_NOFILE) every started
                                         # process gets (0 = the hard limit; never above it, never
                                         # lowered); recorded in each run manifest
    feature: str = ""                    # feature-cost lane: each system is called as its
                                         # [features.NAME] says ("" = [request] as declared)
    request_bytes: int = 0               # request body size: 0 = a small chat; N = an agent-style
                                         # conversation of N bytes (harness/run/bodies.py)
    wire_capture_s: float = 20.0         # seconds of the hold captured with tcpdump (wire-timed
                                         # in-gateway time); 0 = no capture
    wire_capture_offset_s: float = 2.0   # the capture starts this many seconds into the hold
    wire_snaplen_bytes: int = 2048       # bytes kept per packet: each request's id must be in
                                         # them (at 512 none of LiteLLM's were)
    wire_keep_capture: bool = False      # keep each run's wire.pcap once its wire times are in
                                         # requests.parquet (false: deleted, as the figures are
                                         # all in the table; true: kept as evidence)
    gateway_workers: int = field(default_factory=lambda: os.cpu_count() or 1)  # per system
    ready_timeout_s: float = 60.0        # a system not ready by then fails its run
    seed: int = 0                        # orders systems within each round of the plan
    gateways_dir: str = "gateways"       # where the system folders are (relative to the repo)
    base_port: int = 0                   # 0: any free ports; N: the mock on N, the system on N+1
                                         # (a fault scenario's standby provider on N+2)
    topology: str = ""                   # a topology file: which host runs what
                                         # (harness/model/topology.py); "" = all on this machine
    cpu_affinity_load: str = ""          # CPUs every Locust process starts on, in taskset's list
                                         # syntax ("0", "0-1", "0,2"); "" = any CPU (not pinned)
    cpu_affinity_mock: str = ""          # CPUs the mock (all its workers) starts on; "" = any
    cpu_affinity_system: str = ""        # CPUs the system under test and its children start on;
                                         # "" = any (gateway_workers is not changed by it)
    nice_load: int = 0                   # niceness of every Locust process (nice -n; -20 first ..
                                         # 19 last; 0 = unchanged; below 0 needs root)
    nice_mock: int = 0                   # niceness of the mock (all its workers)
    nice_system: int = 0                 # niceness of the system under test and its children
    out_dir: str = "artifacts"           # the study directory is out_dir/study_id
    study_id: str = ""                   # "" = a UTC timestamp chosen when the study starts

    def __post_init__(self) -> None:
        """Each field converted to its declared type (values arrive as text from --set, papermill
        and suite files); every value that cannot be is named in one ConfigError."""
        problems = []
        for f in dataclasses.fields(self):
            try:
                object.__setattr__(self, f.name, convert(f.name, getattr(self, f.name)))
            except ConfigError as exc:
                problems += exc.problems
        if problems:
            raise ConfigError(problems)
        if self.gateways == ("all",):
            object.__setattr__(self, "gateways", tuple(known_gateways(self.systems_dir)))

    def with_study_id(self) -> "StudyConfig":
        if self.study_id:
            return self
        return dataclasses.replace(self, study_id=time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))

    @property
    def study_dir(self) -> Path:
        return repo_path(self.out_dir) / self.study_id

    @property
    def systems_dir(self) -> Path:
        return repo_path(self.gateways_dir)

    @property
    def topology_path(self) -> str:
        """The topology file, absolute ("" = everything on this machine)."""
        return str(repo_path(self.topology)) if self.topology else ""

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["gateways"] = list(self.gateways)
        d["aa_pair"] = list(self.aa_pair)
        d["builds"] = list(self.builds)
        d["system_env"] = list(self.system_env)
        return d

    def hold_length_s(self) -> float:
        """The measured window's planned length: the hold, or in open loop the rate steps."""
        if self.inflight_steps:
            return len(self.inflight_steps) * self.inflight_step_s
        if self.open_loop_rates_per_s:
            return len(self.open_loop_rates_per_s) * self.open_loop_step_s
        return self.hold_s

    def per_call_s(self) -> float:
        """The shortest time one request can take: the mock's hold plus its stream."""
        if self.inflight_steps:
            return self.inflight_hold_s
        stream_s = self.stream_chunks * self.chunk_delay_ms / 1000.0 if self.stream else 0.0
        return self.mock_latency_ms / 1000.0 + stream_s

    def planned_rows(self) -> int:
        """Upper estimate of raw rows: every user at its fastest possible pace for the whole load
        (open loop: exactly the schedule's slots)."""
        if self.open_loop_rates_per_s:
            slots = (self.open_loop_rates_per_s[0] * self.warmup_s
                     + sum(self.open_loop_rates_per_s) * self.open_loop_step_s)
            return int(slots * self.runs_per_gateway * len(self.gateways))
        if self.inflight_steps:  # N open requests, each held inflight_hold_s, for every step
            per_run = sum(self.inflight_steps) * self.inflight_step_s / max(self.inflight_hold_s, 1e-3)
            return int(per_run * self.runs_per_gateway * len(self.gateways))
        call_s = max(self.think_time_s + self.per_call_s(), 1e-3)
        rate_cap = PLANNED_MAX_RATE_PER_PROCESS * self.locust_processes
        rate = min(self.users / call_s, rate_cap)
        load_s = self.warmup_s + self.ramp_s + self.max_hold_s
        return int(rate * load_s * self.runs_per_gateway * len(self.gateways))


def repo_path(path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() else REPO_DIR / p


def from_profile(profile: str = "standard", /, **overrides) -> StudyConfig:
    """A config from a preset plus explicit overrides (None values are ignored)."""
    if profile not in PROFILES:
        raise ConfigError([f"profile: unknown profile {profile!r}; choose one of {sorted(PROFILES)}"])
    if overrides.get("profile") is not None:
        raise ConfigError([f"profile: name the preset itself (--profile {overrides['profile']}), "
                           "not as an override"])
    values = dict(PROFILES[profile])
    values.update({k: v for k, v in overrides.items() if v is not None})
    known = {f.name for f in dataclasses.fields(StudyConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError([unknown_parameter(name) for name in unknown])
    return StudyConfig(profile=profile, **values)


def unknown_parameter(name: str) -> str:
    """The problem with a parameter StudyConfig does not have: a retired one names its
    replacement (harness.model.glossary)."""
    use = retired_parameter(name)
    return (f"{name}: retired; use {use}" if use else f"{name}: unknown parameter")


def parse_overrides(items: list[str]) -> dict:
    """Command-line `--set NAME=VALUE` items. A value is read as JSON when it parses as JSON,
    except for a text field, which keeps what was typed unless it is a quoted JSON string
    (`--set study_id=2024` names the study "2024")."""
    overrides, problems = {}, []
    types = {f.name: f.type for f in dataclasses.fields(StudyConfig)}
    for item in items:
        name, eq, text = item.partition("=")
        name = name.strip()
        if not eq or not name:
            problems.append(f"--set {item!r}: expected NAME=VALUE")
            continue
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        if types.get(name) == "str" and not isinstance(value, str):
            value = text
        overrides[name] = value
    if problems:
        raise ConfigError(problems)
    return overrides


def known_gateways(gateways_dir: Path) -> list[str]:
    if not gateways_dir.is_dir():
        return []
    return sorted(p.name for p in gateways_dir.iterdir() if (p / "gateway.toml").is_file())


class _Expected(ValueError):
    """A value that is not of a field's type; the message says what was expected."""


def _whole(value) -> int:
    if isinstance(value, str):
        try:
            value = json.loads(value.strip())
        except ValueError:
            raise _Expected("a whole number") from None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Expected("a whole number")
    return value


def _number(value) -> float:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise _Expected("a finite number") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Expected("a finite number")
    return float(value)


def _flag(value) -> bool:
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise _Expected("true or false")
    return value


def _text(value) -> str:
    if not isinstance(value, str):
        raise _Expected("text")
    return value


def _items(value, what: str) -> list:
    """A list, a JSON list in a string (papermill -p passes strings), or "a,b"."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError:
                raise _Expected(what) from None
        else:
            value = [part.strip() for part in text.split(",") if part.strip()]
    if not isinstance(value, (list, tuple)):
        raise _Expected(what)
    return list(value)


def _names(value) -> tuple[str, ...]:
    what = 'a list of system names ("a,b" or ["a", "b"])'
    names = _items(value, what)
    if not all(isinstance(v, str) and v for v in names):
        raise _Expected(what)
    return tuple(names)


def _wholes(value) -> tuple[int, ...]:
    what = 'a list of whole numbers ("1000,2500" or [1000, 2500])'
    try:
        return tuple(_whole(v) for v in _items(value, what))
    except _Expected:
        raise _Expected(what) from None


def _numbers(value) -> tuple[float, ...]:
    what = 'a list of finite numbers ("100,200" or [100, 200])'
    try:
        return tuple(_number(v) for v in _items(value, what))
    except _Expected:
        raise _Expected(what) from None


# StudyConfig's field annotations (text, under `from __future__ import annotations`) -> converter.
_CONVERTERS = {"int": _whole, "float": _number, "bool": _flag, "str": _text,
               "tuple[str, ...]": _names, "tuple[float, ...]": _numbers,
               "tuple[int, ...]": _wholes}


def convert(name: str, value):
    """`value` as the type of StudyConfig's field `name`; ConfigError naming the field, the
    value and what was expected otherwise."""
    field_type = next(f.type for f in dataclasses.fields(StudyConfig) if f.name == name)
    try:
        return _CONVERTERS[field_type](value)
    except _Expected as exc:
        raise ConfigError([f"{name}: expected {exc}, got {value!r}"]) from None
