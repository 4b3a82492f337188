"""A study becomes a plan: interleaved rounds of RunSpecs, each with its comparison key."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from dataclasses import dataclass, field

from harness.model import affinity, fault_scenarios, inflight
from harness.model.affinity import CpuAffinity, Niceness
from harness.model.builds import system_env
from harness.model.config import StudyConfig
from harness.model.gateway_spec import GatewaySpec, feature_of
from harness.model.topology import Topology, load_processes, local_topology, topology_of


@dataclass(frozen=True)
class LoadShape:
    users: int
    ramp_s: float
    hold_s: float
    min_hold_requests: int
    max_hold_s: float
    warmup_s: float
    warmup_users: int
    think_time_s: float
    locust_processes: int
    request_timeout_s: float
    max_tokens: int
    stream: bool = False
    open_loop_rates_per_s: tuple[float, ...] = ()   # () = closed loop
    open_loop_step_s: float = 0.0                   # 0 in closed loop: it changes nothing there
    feature: str = ""                               # "" = each system's [request] as declared
    request_bytes: int = 0                          # 0 = the small default chat body
    inflight_steps: tuple[int, ...] = ()            # the in-flight lane's open requests per step
    inflight_step_s: float = 0.0                    # 0 outside that lane
    inflight_hold_s: float = 0.0                    # the mock's hold there (0 outside it)
    spawn_rate_per_s: float = 0.0                   # the highest rate a step spawns users at (each
                                                    # step's new users over one hold)


INFLIGHT_LOAD_FIELDS = ("inflight_steps", "inflight_step_s", "inflight_hold_s", "spawn_rate_per_s")


@dataclass(frozen=True)
class MockSettings:
    latency_ms: float
    workers: int
    response_tokens: int
    stream_chunks: int = 20
    chunk_delay_ms: float = 20.0
    # provider faults (harness/model/fault_scenarios.py); all unset without a scenario
    fault_scenario: str = ""
    faults: str = ""                # the rendered schedule (JSON), times after the hold's start
    fault_seed: int = 0
    fault_start_s: float = 0.0      # the whole fault window, after the hold's start
    fault_duration_s: float = 0.0


FAULT_FIELDS = ("fault_scenario", "faults", "fault_seed", "fault_start_s", "fault_duration_s")


@dataclass(frozen=True)
class WireSettings:
    """The packet capture during the hold (0 s: none). Measuring apparatus, not load: left out
    of the comparison key (its CPU is sampled as the `capture` role)."""
    capture_s: float = 0.0
    offset_s: float = 2.0
    snaplen_bytes: int = 512


@dataclass(frozen=True)
class RunSpec:
    """One run of one system: everything needed to execute it, and nothing else."""
    run_id: str               # "<system>-<run_index>"
    system: str
    run_index: int            # 1-based count of this system's runs
    round: int                # 1-based round of the interleaved plan
    position: int             # 0-based place within the round
    load: LoadShape
    mock: MockSettings
    gateway_workers: int
    idle_s: float
    cooldown_s: float
    ready_timeout_s: float
    gateway_toml_sha256: str
    seed: int
    comparison_key: str
    mock_port: int = 0        # 0: any free port (ports do not change what runs: not in the key)
    system_port: int = 0
    standby_port: int = 0     # the standby provider's, when the fault scenario needs one
    topology: Topology = field(default_factory=local_topology)  # which host runs what
    wire: WireSettings = field(default_factory=WireSettings)
    resilience: str = "shipped"  # shipped | recommended: the configuration the system is asked
                                 # to run with (the study's setting)
    affinity: CpuAffinity = field(default_factory=CpuAffinity)  # CPUs per role ("" = any)
    source_commit: str = ""   # the commit the system's folder ran as; "" = the study's tree
    env: tuple[tuple[str, str], ...] = ()  # extra environment of the system's process
    nice: Niceness = field(default_factory=Niceness)  # niceness per role (0 = unchanged)
    open_files_limit: int = 0  # the soft open-file limit asked for every started process
                               # (apparatus, not in the key; 0: a run from before it was set)
    scale: str = "shipped"    # shipped | sized: the configuration the system is asked to run
                              # with for many open connections (the study's setting)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def comparison_key(system: str, load: LoadShape, mock: MockSettings, gateway_workers: int,
                   gateway_toml_sha256: str, topology: Topology | None = None,
                   resilience: str = "shipped", affinity: CpuAffinity | None = None,
                   source_commit: str = "", env: tuple[tuple[str, str], ...] = (),
                   nice: Niceness | None = None, scale: str = "shipped") -> str:
    """SHA-256 of the run's full configuration. Runs with equal keys ran the same thing; the
    run index, round and position are deliberately left out so repeated runs share a key."""
    mock_settings = dataclasses.asdict(mock)
    if not mock.fault_scenario:  # runs without faults keep their earlier keys
        mock_settings = {k: v for k, v in mock_settings.items() if k not in FAULT_FIELDS}
    load_settings = dataclasses.asdict(load)
    if not load.inflight_steps:  # runs outside the in-flight lane keep their earlier keys
        load_settings = {k: v for k, v in load_settings.items() if k not in INFLIGHT_LOAD_FIELDS}
    payload = {"system": system, "load": load_settings, "mock": mock_settings,
               "gateway_workers": gateway_workers, "gateway_toml_sha256": gateway_toml_sha256}
    if topology is not None and topology.source:  # runs on one machine keep their earlier keys
        payload["topology"] = topology.key()
    if resilience != "shipped":  # runs as shipped keep their earlier keys
        payload["resilience"] = resilience
    if affinity is not None and affinity.is_set():  # unpinned runs keep their earlier keys
        payload["affinity"] = dataclasses.asdict(affinity)
    if source_commit:  # runs of the study's own tree keep their earlier keys
        payload["source_commit"] = source_commit
    if env:  # runs without extra environment keep their earlier keys
        payload["env"] = [list(item) for item in env]
    if nice is not None and nice.is_set():  # runs at default priority keep their earlier keys
        payload["nice"] = dataclasses.asdict(nice)
    if scale != "shipped":  # runs as shipped keep their earlier keys
        payload["scale"] = scale
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def fault_settings(config: StudyConfig) -> dict:
    """MockSettings' fault fields for a study ({} without a scenario)."""
    faults = config.faults
    if not faults.fault_scenario:
        return {}
    duration = fault_scenarios.duration_of(faults.fault_scenario, faults.fault_duration_s)
    return dict(dataclasses.asdict(faults), fault_duration_s=duration,
                faults=fault_scenarios.schedule_json(faults.fault_scenario, faults.fault_start_s, duration),
                fault_seed=config.seed if faults.fault_seed < 0 else faults.fault_seed)


def runs_of(config: StudyConfig, spec: GatewaySpec) -> int:
    """How many runs a system gets: runs_per_gateway, or runs_unconfigured (when set) for a system
    that has nothing to configure in a study asking for the recommended configuration."""
    unconfigured = (config.resilience == "recommended"
                    and spec.configured(resilience="recommended")[1]["resilience"] != "")
    if unconfigured and config.runs_unconfigured:
        return min(config.runs_unconfigured, config.runs_per_gateway)
    return config.runs_per_gateway


def make_plan(config: StudyConfig, specs: dict[str, GatewaySpec],
              commits: dict[str, str] | None = None, topology: Topology | None = None) -> list[RunSpec]:
    """Round r runs every system once, in an order shuffled by the seed, so slow drift of the
    machine (thermal, other tenants) spreads over all systems instead of landing on one.
    commits: the entries built from another commit (entry -> full commit); topology: the
    study's, as its check read it (None: read here). Each RunSpec section is built from the
    StudyConfig sections of the same names (harness/model/config.py: SECTIONS)."""
    commits = commits or {}
    topology = topology or topology_of(config.topology_path)
    envs = system_env(config.system_env)
    load = config.load
    base_load = LoadShape(
        **dataclasses.asdict(load) | dict(
            locust_processes=load_processes(topology, load.locust_processes),
            open_loop_step_s=load.open_loop_step_s if load.open_loop_rates_per_s else 0.0),
        max_tokens=config.mock.response_tokens, **dataclasses.asdict(config.request),
        **inflight_load(config))
    hold = (dict(zip(("latency_ms", "stream_chunks"), inflight.mock_hold(config)))
            if config.inflight_steps else {})
    mock = MockSettings(**dataclasses.asdict(config.mock) | hold, **fault_settings(config))
    wire = WireSettings(**dataclasses.asdict(config.wire))
    placement = config.placement
    pins = CpuAffinity(**{role: getattr(placement, name) for role, name in affinity.FIELDS.items()})
    nice = Niceness(**{role: getattr(placement, name) for role, name in affinity.NICE_FIELDS.items()})
    standby = fault_scenarios.needs_standby(config.fault_scenario)
    for spec in specs.values():  # variants that cannot be combined are refused before any run
        spec.configured(config.resilience, config.scale)
    rng = random.Random(config.seed)
    plan = []
    for round_index in range(1, config.runs_per_gateway + 1):
        order = list(config.gateways)
        rng.shuffle(order)
        for position, system in enumerate(order):
            spec = specs[system]
            if round_index > runs_of(config, spec):
                continue
            # the feature-cost lane: 'sluice@alias' runs with its own feature, in the same rounds
            load = dataclasses.replace(base_load, feature=feature_of(system) or config.feature)
            env = tuple(sorted(envs.get(system, {}).items()))
            source = commits.get(system, "")
            plan.append(RunSpec(
                run_id=f"{system}-{round_index}", system=system, run_index=round_index,
                round=round_index, position=position, load=load, mock=mock,
                gateway_workers=config.gateway_workers, idle_s=config.idle_s,
                cooldown_s=config.cooldown_s,
                ready_timeout_s=max(config.ready_timeout_s, spec.ready_timeout_s),
                gateway_toml_sha256=spec.toml_sha256, seed=config.seed,
                comparison_key=comparison_key(system, load, mock, config.gateway_workers,
                                              spec.toml_sha256, topology, config.resilience, pins,
                                              source, env, nice, config.scale),
                topology=topology, mock_port=config.base_port,
                system_port=config.base_port + 1 if config.base_port else 0,
                standby_port=config.base_port + 2 if config.base_port and standby else 0,
                wire=wire, resilience=config.resilience, affinity=pins, source_commit=source,
                env=env, nice=nice, open_files_limit=config.open_files_limit,
                scale=config.scale))
    return plan


def inflight_load(config: StudyConfig) -> dict:
    """LoadShape's in-flight fields ({} outside that lane)."""
    lane = config.inflight
    if not lane.inflight_steps:
        return {}
    return dict(dataclasses.asdict(lane), spawn_rate_per_s=inflight.top_spawn_rate_per_s(
        lane.inflight_steps, config.warmup_users, lane.inflight_hold_s))
