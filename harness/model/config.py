"""Every setting of a study in one frozen, documented structure, validated before anything starts."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.model import affinity
from harness.model.errors import UserError
from harness.model.profiles import PROFILES
from harness.model.topology import load_processes, topology_of, topology_problems

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
                                         # .cache/builds/, built as its own gateway.toml's [build]
                                         # says); every other entry runs from this working tree
    system_env: tuple[str, ...] = ()     # "ENTRY:NAME=VALUE" items: extra environment of one
                                         # entry's process (e.g. "sluice:SLUICE_TEST_DELAY_MS=1"
                                         # slows the head build alone); no commas in VALUE
    runs_per_gateway: int = 3            # each system is run this many times, interleaved
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
    fault_scenario: str = ""             # provider-fault lane: a scenario of harness/model/faults.py
                                         # ("" = a healthy provider)
    fault_start_s: float = 10.0          # the fault window starts this long after the hold starts
    fault_duration_s: float = 0.0        # the window's length; 0 = the scenario's own
    fault_seed: int = -1                 # which requests get a fault; -1 = the study's seed
    fault_lead_s: float = 10.0           # a fault run's load starts this long after the mock (the
                                         # system's start, idle_s and the pre-check must fit), so
                                         # the mock's fault epoch is known when it starts
    resilience: str = "shipped"          # provider-fault lane: each system "shipped" (as installed)
                                         # or "recommended" (its declared resilience configuration)
    open_loop_rates_per_s: tuple[float, ...] = ()  # open-loop lane: offered req/s, one step each,
                                         # ascending; () = closed loop (users, ramp, think time)
    open_loop_step_s: float = 20.0       # seconds each open-loop step lasts (its measured window)
    feature: str = ""                    # feature-cost lane: each system is called as its
                                         # [features.NAME] says ("" = [request] as declared)
    request_bytes: int = 0               # request body size: 0 = a small chat; N = an agent-style
                                         # conversation of N bytes (harness/run/bodies.py)
    wire_capture_s: float = 20.0         # seconds of the hold captured with tcpdump (wire-timed
                                         # in-gateway time); 0 = no capture
    wire_capture_offset_s: float = 2.0   # the capture starts this many seconds into the hold
    wire_snaplen_bytes: int = 512        # bytes kept per packet: each request's id must be in them
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
        return _repo_path(self.out_dir) / self.study_id

    @property
    def systems_dir(self) -> Path:
        return _repo_path(self.gateways_dir)

    @property
    def topology_path(self) -> str:
        """The topology file, absolute ("" = everything on this machine)."""
        return str(_repo_path(self.topology)) if self.topology else ""

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["gateways"] = list(self.gateways)
        d["aa_pair"] = list(self.aa_pair)
        d["builds"] = list(self.builds)
        d["system_env"] = list(self.system_env)
        return d

    def per_call_s(self) -> float:
        """The shortest time one request can take: the mock's hold plus its stream."""
        stream_s = self.stream_chunks * self.chunk_delay_ms / 1000.0 if self.stream else 0.0
        return self.mock_latency_ms / 1000.0 + stream_s

    def planned_rows(self) -> int:
        """Upper estimate of raw rows: every user at its fastest possible pace for the whole load
        (open loop: exactly the schedule's slots)."""
        if self.open_loop_rates_per_s:
            slots = (self.open_loop_rates_per_s[0] * self.warmup_s
                     + sum(self.open_loop_rates_per_s) * self.open_loop_step_s)
            return int(slots * self.runs_per_gateway * len(self.gateways))
        call_s = max(self.think_time_s + self.per_call_s(), 1e-3)
        rate_cap = PLANNED_MAX_RATE_PER_PROCESS * self.locust_processes
        rate = min(self.users / call_s, rate_cap)
        load_s = self.warmup_s + self.ramp_s + self.max_hold_s
        return int(rate * load_s * self.runs_per_gateway * len(self.gateways))


def _repo_path(path: str) -> Path:
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
        raise ConfigError([f"{name}: unknown parameter" for name in unknown])
    return StudyConfig(profile=profile, **values)


def from_notebook(profile: str, overrides: dict | str, **named) -> StudyConfig:
    """The study notebook's parameters: the named ones that are set (not None) win over
    `overrides`, a dict of any other fields or its JSON text (as `papermill -p` passes it)."""
    table = overrides
    if isinstance(overrides, str):
        try:
            table = json.loads(overrides) if overrides.strip() else {}
        except ValueError:
            table = None
    if not isinstance(table, dict):
        raise ConfigError([f"overrides: expected a table of NAME: VALUE, got {overrides!r}"])
    return from_profile(profile, **{**table, **{k: v for k, v in named.items() if v is not None}})


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


def _numbers(value) -> tuple[float, ...]:
    what = 'a list of finite numbers ("100,200" or [100, 200])'
    try:
        return tuple(_number(v) for v in _items(value, what))
    except _Expected:
        raise _Expected(what) from None


# StudyConfig's field annotations (text, under `from __future__ import annotations`) -> converter.
_CONVERTERS = {"int": _whole, "float": _number, "bool": _flag, "str": _text,
               "tuple[str, ...]": _names, "tuple[float, ...]": _numbers}


def convert(name: str, value):
    """`value` as the type of StudyConfig's field `name`; ConfigError naming the field, the
    value and what was expected otherwise."""
    field_type = next(f.type for f in dataclasses.fields(StudyConfig) if f.name == name)
    try:
        return _CONVERTERS[field_type](value)
    except _Expected as exc:
        raise ConfigError([f"{name}: expected {exc}, got {value!r}"]) from None


def validate(config: StudyConfig) -> None:
    """Raise ConfigError naming every bad parameter. Touches nothing but a probe file."""
    problems: list[str] = []
    gateways_dir = config.systems_dir

    def need(ok: bool, message: str) -> None:
        if not ok:
            problems.append(message)

    need(len(config.gateways) > 0, "gateways: at least one system is needed")
    need(not config.aa_pair or (len(config.aa_pair) == 2 and set(config.aa_pair) <= set(config.gateways)),
         f"aa_pair: must be two of the study's systems, got {list(config.aa_pair)}")
    need(len(set(config.gateways)) == len(config.gateways), "gateways: a system is listed twice")
    need(not config.gate_base_system or config.gate_base_system in config.gateways,
         f"gate_base_system: must be one of the study's systems, got {config.gate_base_system!r}")
    from harness.model import builds
    problems.extend(builds.problems(config.builds, config.system_env, config.gateways))
    from harness.model.gateway_spec import (
        folder_of,  # here: gateway_spec imports this module
    )
    for name in config.gateways:
        # 'nginx~aa': the same system under a second name; 'sluice@alias': called as its feature says
        folder = folder_of(name)
        need((gateways_dir / folder / "gateway.toml").is_file(),
             f"gateways: unknown gateway {name!r} (no {gateways_dir / folder / 'gateway.toml'}); "
             f"known: {known_gateways(gateways_dir)}")
    for name in ("runs_per_gateway", "users", "warmup_users", "locust_processes", "mock_workers",
                 "gateway_workers", "mock_response_tokens", "stream_chunks"):
        need(getattr(config, name) >= 1, f"{name}: must be at least 1, got {getattr(config, name)}")
    need(0 <= config.request_bytes <= MAX_REQUEST_BYTES,
         f"request_bytes: must be 0 (small chat) to {MAX_REQUEST_BYTES}, got {config.request_bytes}")
    need(config.wire_capture_s >= 0, f"wire_capture_s: must be >= 0 (0 = off), got {config.wire_capture_s}")
    need(config.wire_capture_offset_s >= 0,
         f"wire_capture_offset_s: must be >= 0, got {config.wire_capture_offset_s}")
    need(128 <= config.wire_snaplen_bytes <= 65535,
         f"wire_snaplen_bytes: must be 128..65535, got {config.wire_snaplen_bytes}")
    need(config.base_port == 0 or 1024 <= config.base_port <= 65534,
         f"base_port: must be 0 (any free port) or 1024..65534, got {config.base_port}")
    for name in ("ramp_s", "hold_s", "warmup_s", "idle_s", "cooldown_s", "think_time_s",
                 "mock_latency_ms", "min_hold_requests", "chunk_delay_ms"):
        need(getattr(config, name) >= 0, f"{name}: must not be negative, got {getattr(config, name)}")
    for name in ("request_timeout_s", "ready_timeout_s", "max_hold_s"):
        need(getattr(config, name) > 0, f"{name}: must be positive, got {getattr(config, name)}")
    need(config.max_hold_s >= config.hold_s,
         f"max_hold_s: must be at least hold_s ({config.hold_s}), got {config.max_hold_s}")
    need(config.warmup_users <= config.users,
         f"warmup_users: must not exceed users ({config.users}), got {config.warmup_users}")
    if config.users >= 1 and config.locust_processes >= 1 and not config.open_loop_rates_per_s:
        steepest = config.users / max(config.ramp_s, 1e-9)
        processes = load_processes(config.topology_path, config.locust_processes)
        limit = MAX_SPAWN_RATE_PER_PROCESS * processes
        need(steepest <= limit,
             f"ramp_s: {config.users} users in {config.ramp_s} s needs {steepest:.0f} users/s, more than "
             f"{limit:.0f}/s that {processes} Locust process(es) can spawn; use ramp_s >= "
             f"{config.users / limit:.1f}")
    need(config.mock_latency_ms / 1000.0 < config.request_timeout_s,
         "request_timeout_s: must exceed the mock latency")
    if config.open_loop_rates_per_s:
        problems.extend(_open_loop_problems(config))
    if config.topology:
        topology_lines = topology_problems(config.topology_path)
        problems.extend(topology_lines)
        split = not topology_lines and load_processes(config.topology_path, 0) > 0
        need(not split or config.locust_processes == 1,
             f"locust_processes: the topology's locust_workers set the load processes; leave "
             f"locust_processes at 1, got {config.locust_processes}")
        need(not split or not config.open_loop_rates_per_s,
             "open_loop_rates_per_s: the open-loop schedule lives in one Locust process; use a "
             "topology without locust_workers")
    if config.fault_scenario:
        problems.extend(_fault_problems(config))
    problems.extend(_affinity_problems(config))
    problems.extend(affinity.nice_problems(
        {role: getattr(config, name) for role, name in affinity.NICE_FIELDS.items()},
        os.geteuid() == 0, shutil.which(affinity.NICE) is not None))
    need(config.resilience in RESILIENCE,
         f"resilience: one of {list(RESILIENCE)}, got {config.resilience!r}")
    need(bool(config.out_dir), "out_dir: must not be empty")
    if config.out_dir and not problems:
        _check_out_dir(config, problems)
    if problems:
        raise ConfigError(problems)


def _open_loop_problems(config: StudyConfig) -> list[str]:
    """An arrival schedule this load generator can keep, or the reasons it cannot."""
    rates = config.open_loop_rates_per_s
    if any(r <= 0 for r in rates) or list(rates) != sorted(set(rates)):
        return [f"open_loop_rates_per_s: must be positive and strictly ascending, got {list(rates)}"]
    problems = []
    if config.open_loop_step_s < 1.0:
        problems.append(f"open_loop_step_s: must be at least 1 s, got {config.open_loop_step_s}")
    if config.locust_processes != 1:
        problems.append(f"locust_processes: the open-loop schedule lives in one Locust process, "
                        f"got {config.locust_processes}")
    if rates[-1] > OPEN_LOOP_MAX_RATE_PER_PROCESS:
        problems.append(f"open_loop_rates_per_s: {rates[-1]:g} req/s is more than one Locust process "
                        f"generates honestly here ({OPEN_LOOP_MAX_RATE_PER_PROCESS:g})")
    if config.think_time_s != 0:
        problems.append(f"think_time_s: the open-loop schedule paces the requests; set it to 0, "
                        f"got {config.think_time_s}")
    needed = math.ceil(rates[-1] * config.per_call_s() * OPEN_LOOP_USER_HEADROOM)
    if config.users < needed:
        problems.append(f"users: {rates[-1]:g} req/s x {config.per_call_s() * 1000:g} ms per request "
                        f"needs at least {needed} users (Little's law, x{OPEN_LOOP_USER_HEADROOM:g} "
                        f"headroom), got {config.users}")
    spawn_s = config.users / MAX_SPAWN_RATE_PER_PROCESS
    if config.warmup_s < spawn_s:
        problems.append(f"warmup_s: the open loop starts all {config.users} users in the warm-up at "
                        f"{MAX_SPAWN_RATE_PER_PROCESS:g}/s; use warmup_s >= {spawn_s:g}")
    return problems


def _fault_problems(config: StudyConfig) -> list[str]:
    """A fault window this lane can place, or the reasons it cannot."""
    from harness.model import faults
    if config.fault_scenario not in faults.SCENARIOS:
        return [f"fault_scenario: unknown scenario {config.fault_scenario!r}; choose one of "
                f"{sorted(faults.SCENARIOS)}"]
    problems = []
    if faults.scenario(config.fault_scenario).needs_stream and not config.stream:
        problems.append(f"fault_scenario: {config.fault_scenario} needs streamed responses; "
                        "set stream=true")
    if config.open_loop_rates_per_s:
        problems.append("fault_scenario: the fault window is placed in the closed loop's hold; "
                        "the open-loop lane has none")
    if faults.needs_standby(config.fault_scenario) and config.base_port > 65533:
        problems.append(f"base_port: {config.fault_scenario} starts a standby provider on base_port "
                        f"+ 2; use at most 65533, got {config.base_port}")
    duration = faults.duration_of(config.fault_scenario, config.fault_duration_s)
    if config.fault_start_s < 0 or config.fault_duration_s < 0:
        problems.append(f"fault_start_s: the window must not be negative, got start "
                        f"{config.fault_start_s}, duration {config.fault_duration_s}")
    elif config.fault_start_s >= config.hold_s:
        problems.append(f"fault_start_s: the fault window must start inside the "
                        f"{config.hold_s:g} s hold, got {config.fault_start_s:g}")
    elif config.fault_start_s + duration > config.hold_s:
        problems.append(f"fault_duration_s: the fault window {config.fault_start_s:g} s + "
                        f"{duration:g} s does not fit inside the {config.hold_s:g} s hold")
    if config.fault_lead_s <= config.idle_s:
        problems.append(f"fault_lead_s: must exceed idle_s ({config.idle_s:g}): the system's "
                        f"start, the idle sampling and the pre-check fit in it, got {config.fault_lead_s}")
    return problems


def _affinity_problems(config: StudyConfig) -> list[str]:
    """CPU lists taskset accepts, of CPUs this process may use, for roles on this machine."""
    values = {role: getattr(config, name) for role, name in affinity.FIELDS.items()}
    if not any(values.values()):
        return []
    remote = {}
    if config.topology and not topology_problems(config.topology_path):
        topo = topology_of(config.topology_path)
        placed = {"mock": [topo.mock], "system": [topo.system],
                  "load": [topo.locust_master, *(w.host for w in topo.locust_workers)]}
        for role, names in placed.items():
            away = [n for n in names if not topo.host(n).local]
            if away:
                remote[role] = away[0]
    return affinity.problems(values, os.sched_getaffinity(0), shutil.which(affinity.TASKSET) is not None,
                             remote)


def _check_out_dir(config: StudyConfig, problems: list[str]) -> None:
    out = _repo_path(config.out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-probe-"):
            pass
    except OSError as exc:
        problems.append(f"out_dir: {out} is not writable ({exc.strerror or exc})")
        return
    needed = config.planned_rows() * BYTES_PER_PLANNED_ROW
    free = shutil.disk_usage(out).free
    if free < needed:
        problems.append(f"out_dir: {free / 1e9:.2f} GB free at {out}, the planned rows may need "
                        f"{needed / 1e9:.2f} GB")
