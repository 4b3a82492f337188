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
from harness.model.errors import UserError
from harness.model.gateway_spec import GatewaySpec, feature_of
from harness.model.run_parts import LoadShape, MockSettings, WireSettings, part
from harness.model.topology import Topology, load_processes, local_topology, topology_of


@dataclass(frozen=True)
class Instruments:
    """The versions of the instruments every run is measured with, part of every key."""
    mock_version: str = ""      # the mock provider's (mocks.__version__)
    locust_version: str = ""    # the load generator's, as pinned and installed


@dataclass(frozen=True)
class RunSpec:
    """One run of one system: everything needed to execute it, and what its comparison key
    must know besides (its system's files, the instruments' versions), and nothing else."""
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
    mock_port: int = 0        # 0: any free port (ports do not change what runs: NOT_IN_RUN_KEY)
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
                               # (0: a run from before it was set)
    scale: str = "shipped"    # shipped | sized: the configuration the system is asked to run
                              # with for many open connections (the study's setting)
    files_sha256: dict[str, str] = field(default_factory=dict)  # every file the system's folder
                              # declares (GatewaySpec.files_sha256); {}: a run recorded before
                              # key recipe 3
    instruments: Instruments = field(default_factory=Instruments)  # "": likewise

    def to_dict(self) -> dict:
        """Its plain form (its manifest's and its key's): every field, but a setting of
        LEFT_OUT_WHILE_UNSET while unset."""
        data = dataclasses.asdict(self)
        for name in LEFT_OUT_WHILE_UNSET:
            if data["load"][name] == UNSET_LOAD[name]:
                del data["load"][name]
        return data


# Lane-only settings added since recipe 3's keys were recorded: left out of a run's plain form
# (its manifest and its key) and of a cell's key while unset, as they are outside their lane
# (lane_load), so a run or cell they do not touch keeps the form and key it was recorded with.
LEFT_OUT_WHILE_UNSET = ("inflight_abandon_share",)
UNSET_LOAD = {f.name: f.default for f in dataclasses.fields(LoadShape)
              if f.name in LEFT_OUT_WHILE_UNSET}


def cell_settings_left_out(config: StudyConfig) -> tuple[str, ...]:
    """The settings of LEFT_OUT_WHILE_UNSET a cell's key leaves out: those its runs hold unset
    (outside their lane, or unset in the config)."""
    unset = lane_load(config)
    return tuple(name for name in LEFT_OUT_WHILE_UNSET
                 if unset.get(name, getattr(config, name)) == UNSET_LOAD[name])


# A comparison key is "<KEY_VERSION>:<SHA-256>" of one recipe, with nothing left out to keep an
# earlier key: a key of an older recipe (a bare SHA-256 is version 1) is matched by recomputing
# that recipe (harness.model.migrate), and a version this harness does not know is refused. A
# suite cell's key has its own recipe (harness.model.suite.CELL_KEY_VERSION).
KEY_VERSION = 3
KEY_VERSIONS = (1, 2, 3)
# Left out of a run's key: which run of the system it is (repeated runs share a key), the seed
# (it orders the rounds; a fault schedule's seed is in the mock's settings) and the ports (any
# free ones). Its topology enters as its placement (Topology.placement).
NOT_IN_RUN_KEY = ("run_id", "run_index", "round", "position", "seed", "comparison_key",
                  "mock_port", "system_port", "standby_port", "topology")


class KeyVersionError(UserError, ValueError):
    """A recorded comparison key of a recipe this harness does not know."""


def key_version(key: str, versions: tuple[int, ...] = KEY_VERSIONS) -> int:
    """The recipe a recorded key was made with: "<version>:<SHA-256>", or a bare SHA-256 for
    version 1; KeyVersionError for a version not in ``versions``."""
    version, colon, _ = key.partition(":")
    if not colon:
        return 1
    if not version.isdigit() or int(version) not in versions:
        raise KeyVersionError(f"comparison key {key[:16]}...: recipe version {version!r} is not "
                              f"one this harness knows ({', '.join(map(str, versions))}); "
                              "was it recorded by a newer harness?")
    return int(version)


def versioned_key(payload: dict, version: int = KEY_VERSION) -> str:
    """Recipe ``version``'s key of a payload: its canonical JSON hashed, the version before."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return f"{version}:{hashlib.sha256(canonical.encode()).hexdigest()}"


def comparison_key(spec: RunSpec) -> str:
    """The run's key: its whole RunSpec but NOT_IN_RUN_KEY, with its placement (the SHA-256 of
    every file its system's folder declares and the instruments' versions are in the spec).
    Runs with equal keys ran the same thing."""
    payload = {k: v for k, v in spec.to_dict().items() if k not in NOT_IN_RUN_KEY}
    payload.update(topology=spec.topology.placement())
    return versioned_key(payload)


def fault_settings(config: StudyConfig) -> dict:
    """MockSettings' fault fields for a study: the window resolved and its schedule rendered;
    without a scenario, every one unset (they change nothing there)."""
    if not config.fault_scenario:
        return dict(faults="", fault_seed=0, fault_start_s=0.0, fault_duration_s=0.0)
    duration = fault_scenarios.duration_of(config.fault_scenario, config.fault_duration_s)
    return dict(fault_duration_s=duration,
                faults=fault_scenarios.schedule_json(config.fault_scenario, config.fault_start_s,
                                                     duration),
                fault_seed=config.seed if config.fault_seed < 0 else config.fault_seed)


def runs_of(config: StudyConfig, spec: GatewaySpec) -> int:
    """How many runs a system gets: runs_per_gateway, or runs_unconfigured (when set) for a system
    that has nothing to configure in a study asking for the recommended configuration."""
    unconfigured = (config.resilience == "recommended"
                    and spec.configured(resilience="recommended")[1]["resilience"] != "")
    if unconfigured and config.runs_unconfigured:
        return min(config.runs_unconfigured, config.runs_per_gateway)
    return config.runs_per_gateway


def make_plan(config: StudyConfig, specs: dict[str, GatewaySpec], instruments: Instruments,
              commits: dict[str, str] | None = None, topology: Topology | None = None) -> list[RunSpec]:
    """Round r runs every system once, in an order shuffled by the seed, so slow drift of the
    machine (thermal, other tenants) spreads over all systems instead of landing on one.
    instruments: the mock's and Locust's versions (in every key); commits: the entries built
    from another commit (entry -> full commit); topology: the study's, as its check read it
    (None: read here). The load, mock and wire parts hold the settings of their names
    (harness.model.run_parts.part)."""
    commits = commits or {}
    topology = topology or topology_of(config.topology_path)
    envs = system_env(config.system_env)
    base_load = part(LoadShape, config, **lane_load(config),
                     locust_processes=load_processes(topology, config.locust_processes))
    hold = (dict(zip(("mock_latency_ms", "stream_chunks"), inflight.mock_hold(config)))
            if config.inflight_steps else {})
    mock = part(MockSettings, config, **hold, **fault_settings(config))
    wire = part(WireSettings, config)
    pins = CpuAffinity(**{role: getattr(config, name) for role, name in affinity.FIELDS.items()})
    nice = Niceness(**{role: getattr(config, name) for role, name in affinity.NICE_FIELDS.items()})
    standby = fault_scenarios.needs_standby(config.fault_scenario)
    for spec in specs.values():  # variants that cannot be combined are refused before any run
        spec.configured(config.resilience, config.scale)
    files = {name: spec.files_sha256() for name, spec in specs.items()}
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
            run = RunSpec(
                run_id=f"{system}-{round_index}", system=system, run_index=round_index,
                round=round_index, position=position, load=load, mock=mock,
                gateway_workers=config.gateway_workers, idle_s=config.idle_s,
                cooldown_s=config.cooldown_s,
                ready_timeout_s=max(config.ready_timeout_s, spec.ready_timeout_s),
                gateway_toml_sha256=spec.toml_sha256, seed=config.seed, comparison_key="",
                topology=topology, mock_port=config.base_port,
                system_port=config.base_port + 1 if config.base_port else 0,
                standby_port=config.base_port + 2 if config.base_port and standby else 0,
                wire=wire, resilience=config.resilience, affinity=pins, source_commit=source,
                env=env, nice=nice, open_files_limit=config.open_files_limit,
                scale=config.scale, files_sha256=files[system], instruments=instruments)
            plan.append(dataclasses.replace(run, comparison_key=comparison_key(run)))
    return plan


def lane_load(config: StudyConfig) -> dict:
    """LoadShape's settings of a lane the study is not in, unset: they change nothing there (the
    open-loop step outside the open loop, the in-flight step and hold outside that lane)."""
    unset: dict = {}
    if not config.open_loop_rates_per_s:
        unset.update(open_loop_step_s=0.0)
    if not config.inflight_steps:
        unset.update(inflight_step_s=0.0, inflight_hold_s=0.0)
    if not (config.inflight_steps and config.stream):  # only a stream is left mid-way
        unset.update(inflight_abandon_share=0.0)
    return unset
