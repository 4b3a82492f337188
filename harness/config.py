"""Every setting of a study in one frozen, documented structure, validated before anything starts."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
GATEWAYS_DIR = REPO_DIR / "gateways"

# Locust warns above this many users spawned per second per process; a ramp steeper than
# this is not something one load generator process can produce honestly.
MAX_SPAWN_RATE_PER_PROCESS = 100.0
# Bytes one raw request row costs across the raw CSV and the Parquet file, with margin.
BYTES_PER_PLANNED_ROW = 400


class ConfigError(ValueError):
    """Bad study parameters; raised before any process starts. One line per problem."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid study parameters:\n  - " + "\n  - ".join(problems))


@dataclass(frozen=True)
class StudyConfig:
    """A whole study. Field comments are the documentation of each setting."""

    gateways: tuple[str, ...] = ("direct", "nginx")  # systems, by folder name under gateways/
    profile: str = "standard"            # which preset the values came from (recorded)
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
    gateway_workers: int = field(default_factory=lambda: os.cpu_count() or 1)  # per system
    ready_timeout_s: float = 60.0        # a system not ready by then fails its run
    seed: int = 0                        # orders systems within each round of the plan
    gateways_dir: str = "gateways"       # where the system folders are (relative to the repo)
    base_port: int = 0                   # 0: any free ports; N: the mock on N, the system on N+1
    out_dir: str = "artifacts"           # the study directory is out_dir/study_id
    study_id: str = ""                   # "" = a UTC timestamp chosen when the study starts

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

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["gateways"] = list(self.gateways)
        return d

    def planned_rows(self) -> int:
        """Upper estimate of raw rows: every user at its fastest possible pace for the whole load."""
        stream_s = self.stream_chunks * self.chunk_delay_ms / 1000.0 if self.stream else 0.0
        per_call_s = max(self.think_time_s + self.mock_latency_ms / 1000.0 + stream_s, 1e-3)
        rate_cap = 20_000.0 * self.locust_processes  # no Locust process completes more than this
        rate = min(self.users / per_call_s, rate_cap)
        load_s = self.warmup_s + self.ramp_s + self.max_hold_s
        return int(rate * load_s * self.runs_per_gateway * len(self.gateways))


def _repo_path(path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() else REPO_DIR / p


PROFILES: dict[str, dict] = {
    # Tiny: for tests and CI.
    "smoke": dict(users=4, ramp_s=2.0, hold_s=3.0, warmup_s=1.0, warmup_users=1, idle_s=1.0,
                  cooldown_s=1.0, think_time_s=0.1, runs_per_gateway=1, max_hold_s=10.0,
                  ready_timeout_s=30.0),
    # The default: offered load ~900 req/s at the top, within what one Locust process generates.
    "standard": dict(),
    # The same ramp without waiting: every system is pushed to its limit (or Locust's).
    "saturation": dict(think_time_s=0.0),
    # The HeimOS protocol: 0 -> 1,000 users over 5 min 30 s, 3 runs.
    # The measured window is the 30 s held at the top, as in every other profile.
    "published": dict(ramp_s=330.0, think_time_s=0.0),
    # The regression gate: fixed moderate load, short enough for CI, interleaved runs; a second
    # copy of nginx lets the gate check its own noise first (harness/gate_run.py).
    "gate": dict(gateways=("nginx", "nginx~aa", "sluice"), users=50, ramp_s=5.0, hold_s=20.0,
                 warmup_s=2.0, think_time_s=0.05, idle_s=1.0, cooldown_s=2.0, max_hold_s=40.0),
    # The study measuring itself: nginx as A and as A' must show no clear difference.
    "aa": dict(gateways=("nginx", "nginx~aa"), users=50, ramp_s=5.0, hold_s=20.0, warmup_s=2.0,
               think_time_s=0.05, idle_s=1.0, cooldown_s=2.0, max_hold_s=40.0),
    # The streaming lane: every response an SSE stream of 20 frames 20 ms apart after the head;
    # time to first token and each gap between frames are measured by the load generator.
    "streaming": dict(users=200, ramp_s=30.0, hold_s=30.0, stream=True),
    # Steady load on the in-house gateway, then a long cool-down: RSS, open files and in-flight
    # requests must stay flat and return to idle (python -m harness.soak STUDY_DIR).
    "soak": dict(gateways=("sluice",), users=100, ramp_s=5.0, hold_s=120.0, warmup_s=2.0,
                 think_time_s=0.05, cooldown_s=15.0, runs_per_gateway=1, max_hold_s=150.0),
    # Sluice's performance target (issue 3): closed loop, 300 users, no wait, beside nginx.
    "passthrough": dict(gateways=("direct", "nginx", "sluice"), users=300, ramp_s=10.0,
                        hold_s=30.0, think_time_s=0.0),
}


def from_profile(profile: str = "standard", **overrides) -> StudyConfig:
    """A config from a preset plus explicit overrides (None values are ignored)."""
    if profile not in PROFILES:
        raise ConfigError([f"profile: unknown profile {profile!r}; choose one of {sorted(PROFILES)}"])
    values = dict(PROFILES[profile])
    values.update({k: v for k, v in overrides.items() if v is not None})
    known = {f.name for f in dataclasses.fields(StudyConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError([f"{name}: unknown parameter" for name in unknown])
    if "gateways" in values:
        values["gateways"] = parse_gateways(values["gateways"],
                                            _repo_path(values.get("gateways_dir", "gateways")))
    return StudyConfig(profile=profile, **values)


def parse_overrides(items: list[str]) -> dict:
    """Command-line `--set NAME=VALUE` items; a value is read as JSON when it parses as JSON."""
    overrides = {}
    for item in items:
        name, _, value = item.partition("=")
        try:
            overrides[name] = json.loads(value)
        except ValueError:
            overrides[name] = value
    return overrides


def known_gateways(gateways_dir: Path) -> list[str]:
    if not gateways_dir.is_dir():
        return []
    return sorted(p.name for p in gateways_dir.iterdir() if (p / "gateway.toml").is_file())


def parse_gateways(value, gateways_dir: Path = GATEWAYS_DIR) -> tuple[str, ...]:
    """A list, a JSON list in a string (papermill -p passes strings), "a,b", or "all"."""
    if isinstance(value, str):
        text = value.strip()
        if text == "all":
            return tuple(known_gateways(gateways_dir))
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError:
                raise ConfigError([f"gateways: not a JSON list: {text!r}"]) from None
        else:
            value = [part.strip() for part in text.split(",") if part.strip()]
    return tuple(str(v) for v in value)


def validate(config: StudyConfig) -> None:
    """Raise ConfigError naming every bad parameter. Touches nothing but a probe file."""
    problems: list[str] = []
    gateways_dir = config.systems_dir

    def need(ok: bool, message: str) -> None:
        if not ok:
            problems.append(message)

    need(len(config.gateways) > 0, "gateways: at least one system is needed")
    need(len(set(config.gateways)) == len(config.gateways), "gateways: a system is listed twice")
    for name in config.gateways:
        folder = name.split("~", 1)[0]  # 'nginx~aa': the same system under a second name
        need((gateways_dir / folder / "gateway.toml").is_file(),
             f"gateways: unknown gateway {name!r} (no {gateways_dir / folder / 'gateway.toml'}); "
             f"known: {known_gateways(gateways_dir)}")
    for name in ("runs_per_gateway", "users", "warmup_users", "locust_processes", "mock_workers",
                 "gateway_workers", "mock_response_tokens", "stream_chunks"):
        need(getattr(config, name) >= 1, f"{name}: must be at least 1, got {getattr(config, name)}")
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
    if config.users >= 1 and config.locust_processes >= 1:
        steepest = config.users / max(config.ramp_s, 1e-9)
        limit = MAX_SPAWN_RATE_PER_PROCESS * config.locust_processes
        need(steepest <= limit,
             f"ramp_s: {config.users} users in {config.ramp_s} s needs {steepest:.0f} users/s, more than "
             f"{limit:.0f}/s that {config.locust_processes} Locust process(es) can spawn; use ramp_s >= "
             f"{config.users / limit:.1f}")
    need(config.mock_latency_ms / 1000.0 < config.request_timeout_s,
         "request_timeout_s: must exceed the mock latency")
    need(bool(config.out_dir), "out_dir: must not be empty")
    if config.out_dir and not problems:
        _check_out_dir(config, problems)
    if problems:
        raise ConfigError(problems)


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
