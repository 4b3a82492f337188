"""Whether a study's settings can run, decided before anything starts: problems() names every
bad parameter, one line each. Pure: what it needs of this machine arrives as HostFacts
(harness/host/probes.py reads them), the topology as read once by the study's preflight
(harness/run/preflight.py, the one entry point)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from harness.model import affinity, builds, fault_scenarios, inflight
from harness.model.config import (
    MAX_REQUEST_BYTES,
    MAX_SPAWN_RATE_PER_PROCESS,
    OPEN_LOOP_MAX_RATE_PER_PROCESS,
    OPEN_LOOP_USER_HEADROOM,
    RESILIENCE,
    SCALE,
    StudyConfig,
    known_gateways,
)
from harness.model.gateway_spec import folder_of
from harness.model.topology import Topology, load_processes


@dataclass(frozen=True)
class HostFacts:
    """What the checks need to know of this machine."""
    cpus: frozenset[int]                # the CPUs this process may run on
    root: bool                          # may lower niceness
    has_taskset: bool                   # on PATH
    has_nice: bool                      # on PATH
    port_range: tuple[int, int] | None  # the ephemeral port range; None: unreadable
    hard_files_limit: int               # the hard RLIMIT_NOFILE; -1: unlimited


def problems(config: StudyConfig, topology: Topology | None, host: HostFacts) -> list[str]:
    """Every bad parameter, one line each naming it. topology: the study's (None when its file
    could not be read; those problems are the reader's)."""
    found = [*_system_problems(config), *_range_problems(config),
             *_load_problems(config, topology)]
    if config.open_loop_rates_per_s:
        found.extend(_open_loop_problems(config))
    if config.inflight_steps:
        found.extend(inflight.problems(config, load_processes(topology, config.locust_processes),
                                       host.port_range, host.hard_files_limit))
    if topology is not None and topology.source:
        found.extend(_topology_problems(config, topology))
    if config.fault_scenario:
        found.extend(_fault_problems(config))
    found.extend(_affinity_problems(config, topology, host))
    found.extend(affinity.nice_problems(
        {role: getattr(config, name) for role, name in affinity.NICE_FIELDS.items()},
        host.root, host.has_nice))
    if config.resilience not in RESILIENCE:
        found.append(f"resilience: one of {list(RESILIENCE)}, got {config.resilience!r}")
    if config.scale not in SCALE:
        found.append(f"scale: one of {list(SCALE)}, got {config.scale!r}")
    if not config.out_dir:
        found.append("out_dir: must not be empty")
    return found


def _unless(ok: bool, message: str) -> list[str]:
    return [] if ok else [message]


def _system_problems(config: StudyConfig) -> list[str]:
    """The systems: known folders, none twice, the A/A pair and gate base among them, builds."""
    problems = [
        *_unless(len(config.gateways) > 0, "gateways: at least one system is needed"),
        *_unless(not config.aa_pair or (len(config.aa_pair) == 2
                                        and set(config.aa_pair) <= set(config.gateways)),
                 f"aa_pair: must be two of the study's systems, got {list(config.aa_pair)}"),
        *_unless(len(set(config.gateways)) == len(config.gateways),
                 "gateways: a system is listed twice"),
        *_unless(not config.gate_base_system or config.gate_base_system in config.gateways,
                 f"gate_base_system: must be one of the study's systems, got "
                 f"{config.gate_base_system!r}"),
        *builds.problems(config.builds, config.system_env, config.gateways)]
    gateways_dir = config.systems_dir
    for name in config.gateways:
        # 'nginx~aa': the same system under a second name; 'sluice@alias': called as its feature says
        folder = folder_of(name)
        problems += _unless((gateways_dir / folder / "gateway.toml").is_file(),
                            f"gateways: unknown gateway {name!r} (no "
                            f"{gateways_dir / folder / 'gateway.toml'}); known: "
                            f"{known_gateways(gateways_dir)}")
    return problems


def _range_problems(config: StudyConfig) -> list[str]:
    """Every number within its documented range."""
    problems = []
    problems += _unless(config.runs_unconfigured >= 0, f"runs_unconfigured: must be 0 (as "
                        f"runs_per_gateway) or more, got {config.runs_unconfigured}")
    for name in ("runs_per_gateway", "users", "warmup_users", "locust_processes", "mock_workers",
                 "gateway_workers", "mock_response_tokens", "stream_chunks"):
        problems += _unless(getattr(config, name) >= 1,
                            f"{name}: must be at least 1, got {getattr(config, name)}")
    problems += [
        *_unless(0 <= config.request_bytes <= MAX_REQUEST_BYTES,
                 f"request_bytes: must be 0 (small chat) to {MAX_REQUEST_BYTES}, got "
                 f"{config.request_bytes}"),
        *_unless(config.wire_capture_s >= 0,
                 f"wire_capture_s: must be >= 0 (0 = off), got {config.wire_capture_s}"),
        *_unless(config.wire_capture_offset_s >= 0,
                 f"wire_capture_offset_s: must be >= 0, got {config.wire_capture_offset_s}"),
        *_unless(128 <= config.wire_snaplen_bytes <= 65535,
                 f"wire_snaplen_bytes: must be 128..65535, got {config.wire_snaplen_bytes}"),
        *_unless(config.open_files_limit == 0 or config.open_files_limit >= 1024,
                 f"open_files_limit: must be 0 (the hard limit) or at least 1024, got "
                 f"{config.open_files_limit}"),
        *_unless(config.base_port == 0 or 1024 <= config.base_port <= 65534,
                 f"base_port: must be 0 (any free port) or 1024..65534, got {config.base_port}")]
    for name in ("ramp_s", "hold_s", "warmup_s", "idle_s", "cooldown_s", "think_time_s",
                 "mock_latency_ms", "min_hold_requests", "chunk_delay_ms"):
        problems += _unless(getattr(config, name) >= 0,
                            f"{name}: must not be negative, got {getattr(config, name)}")
    for name in ("request_timeout_s", "ready_timeout_s", "max_hold_s", "inflight_step_s",
                 "inflight_hold_s"):
        problems += _unless(getattr(config, name) > 0,
                            f"{name}: must be positive, got {getattr(config, name)}")
    return problems


def _load_problems(config: StudyConfig, topology: Topology | None) -> list[str]:
    """The load's shape: the hold, the users, what Locust can spawn, the request timeout."""
    problems = [
        *_unless(config.max_hold_s >= config.hold_s,
                 f"max_hold_s: must be at least hold_s ({config.hold_s}), got {config.max_hold_s}"),
        *_unless(config.warmup_users <= config.users,
                 f"warmup_users: must not exceed users ({config.users}), got {config.warmup_users}")]
    if (config.users >= 1 and config.locust_processes >= 1 and not config.open_loop_rates_per_s
            and not config.inflight_steps):
        steepest = config.users / max(config.ramp_s, 1e-9)
        processes = load_processes(topology, config.locust_processes)
        limit = MAX_SPAWN_RATE_PER_PROCESS * processes
        problems += _unless(
            steepest <= limit,
            f"ramp_s: {config.users} users in {config.ramp_s} s needs {steepest:.0f} users/s, more "
            f"than {limit:.0f}/s that {processes} Locust process(es) can spawn; use ramp_s >= "
            f"{config.users / limit:.1f}")
    problems += _unless(config.mock_latency_ms / 1000.0 < config.request_timeout_s,
                        "request_timeout_s: must exceed the mock latency")
    return problems


def _topology_problems(config: StudyConfig, topology: Topology) -> list[str]:
    split = topology.worker_count > 0
    return [*_unless(not split or config.locust_processes == 1,
                     f"locust_processes: the topology's locust_workers set the load processes; "
                     f"leave locust_processes at 1, got {config.locust_processes}"),
            *_unless(not split or not config.open_loop_rates_per_s,
                     "open_loop_rates_per_s: the open-loop schedule lives in one Locust process; "
                     "use a topology without locust_workers")]


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
    if config.fault_scenario not in fault_scenarios.SCENARIOS:
        return [f"fault_scenario: unknown scenario {config.fault_scenario!r}; choose one of "
                f"{sorted(fault_scenarios.SCENARIOS)}"]
    problems = []
    if fault_scenarios.scenario(config.fault_scenario).needs_stream and not config.stream:
        problems.append(f"fault_scenario: {config.fault_scenario} needs streamed responses; "
                        "set stream=true")
    if fault_scenarios.needs_standby(config.fault_scenario) and config.base_port > 65533:
        problems.append(f"base_port: {config.fault_scenario} starts a standby provider on base_port "
                        f"+ 2; use at most 65533, got {config.base_port}")
    duration = fault_scenarios.duration_of(config.fault_scenario, config.fault_duration_s)
    if config.fault_start_s < 0 or config.fault_duration_s < 0:
        problems.append(f"fault_start_s: the window must not be negative, got start "
                        f"{config.fault_start_s}, duration {config.fault_duration_s}")
    elif config.fault_start_s >= config.hold_length_s():
        problems.append(f"fault_start_s: the fault window must start inside the "
                        f"{config.hold_length_s():g} s hold, got {config.fault_start_s:g}")
    elif config.fault_start_s + duration > config.hold_length_s():
        problems.append(f"fault_duration_s: the fault window {config.fault_start_s:g} s + "
                        f"{duration:g} s does not fit inside the {config.hold_length_s():g} s hold")
    lead_s = config.warmup_s + config.ramp_s + config.fault_start_s
    if lead_s < fault_scenarios.ARM_LEAD_S:
        problems.append(f"fault_start_s: the faults are armed when the warm-up starts, and the "
                        f"mock needs {fault_scenarios.ARM_LEAD_S:g} s to see it: warmup_s + ramp_s "
                        f"+ fault_start_s must be at least that, got {lead_s:g}")
    return problems


def _affinity_problems(config: StudyConfig, topology: Topology | None, host: HostFacts) -> list[str]:
    """CPU lists taskset accepts, of CPUs this process may use, for roles on this machine."""
    values = {role: getattr(config, name) for role, name in affinity.FIELDS.items()}
    if not any(values.values()):
        return []
    remote = {}
    if topology is not None:
        placed = {"mock": [topology.mock], "system": [topology.system],
                  "load": [topology.locust_master, *(w.host for w in topology.locust_workers)]}
        for role, names in placed.items():
            away = [n for n in names if not topology.host(n).local]
            if away:
                remote[role] = away[0]
    return affinity.problems(values, host.cpus, host.has_taskset, remote)
