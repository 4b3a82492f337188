"""A study's preflight, the one check before it starts: every problem of its settings, its
systems and this machine named at once (ConfigError, one line each naming the parameter), before
any process starts; then the plan. It runs once per study and its result, Cleared, is what
run_study takes: a command that runs the study in a notebook hands it on (harness/files/handoff.py)
rather than checking again. The pure checks are harness/model/validation.py's, the probes of
this machine harness/host/probes.py's; the topology file is read here, once, and handed to both
and to the plan. An entry built from another commit gets its worktree here (git only), its spec
read from there."""
from __future__ import annotations

from dataclasses import dataclass

from harness.host import probes
from harness.host.processes import ProcessError
from harness.model import validation
from harness.model.builds import build_refs
from harness.model.builds import problems as build_problems
from harness.model.config import ConfigError, StudyConfig
from harness.model.gateway_spec import GatewaySpec, GatewaySpecError, feature_of, folder_of, load_gateway_spec
from harness.model.plan import RunSpec, make_plan
from harness.model.topology import Topology, read_topology
from harness.remote import hosts
from harness.run import builds
from harness.run.run import instruments
from harness.run.systems import missing_binary


@dataclass(frozen=True)
class Cleared:
    """A study that passed its preflight: what running it needs, decided without starting
    anything."""
    config: StudyConfig               # with its study_id
    specs: dict[str, GatewaySpec]     # study entry -> its system's spec
    plan: list[RunSpec]
    topology: Topology


def preflight(config: StudyConfig) -> Cleared:
    """Every check a study makes before it starts; ConfigError lists every problem found."""
    topology, problems = read_topology(config.topology_path)
    problems += validation.problems(config, topology, probes.host_facts())
    if not problems:  # the disk estimate needs settings that are right
        problems += probes.out_dir_problems(config)
    specs, commits, system_problems = _systems(config)
    problems += system_problems
    if not any(p.startswith("base_port:") for p in problems):  # its ports exist
        problems += probes.port_problems(config)
    if topology is not None:
        problems += _unreachable_hosts(topology)
    if problems:
        raise ConfigError(problems)
    config = config.with_study_id()
    return Cleared(config, specs, make_plan(config, specs, instruments(), commits, topology), topology)


def _systems(config: StudyConfig) -> tuple[dict[str, GatewaySpec], dict[str, str], list[str]]:
    """(entry -> spec, entry -> the commit it is built from, problems): each entry's spec, the
    feature it is called with declared, its binary installed or installable. An unknown folder
    is named by the settings' check, and a bad builds setting too."""
    specs, commits, problems = {}, {}, []
    # builds items that are wrong are named by the settings' check: nothing is checked out
    refs = {} if build_problems(config.builds, (), config.gateways) else build_refs(config.builds)
    for name in config.gateways:
        gateways_dir = config.systems_dir
        if name in refs:
            try:
                tree = builds.checkout(refs[name])
            except builds.BuildError as exc:
                problems.append(f"builds: {name}: {exc}")
                continue
            gateways_dir, commits[name] = tree.gateways_dir, tree.commit
        elif not (gateways_dir / folder_of(name) / "gateway.toml").is_file():
            continue
        try:
            specs[name] = load_gateway_spec(name, gateways_dir)
        except GatewaySpecError as exc:
            problems.append(f"{'builds' if name in refs else 'gateways'}: {exc}")
            continue
        feature = feature_of(name) or config.feature
        if feature and specs[name].runnable and feature not in specs[name].features:
            problems.append(f"{'gateways' if feature_of(name) else 'feature'}: {name} declares no "
                            f"feature {feature!r} in its gateway.toml "
                            f"(it has: {', '.join(sorted(specs[name].features)) or 'none'})")
        if specs[name].runnable and not specs[name].install_command:
            missing = missing_binary(specs[name])
            if missing:
                problems.append(f"gateways: {name} needs {missing!r}, which is not installed "
                                f"(not on PATH and no [install] step); install it or leave {name} out")
    return specs, commits, problems


def _unreachable_hosts(topology: Topology) -> list[str]:
    """Each other host of the topology must run this repository's Python through its prefix."""
    problems = []
    for name in topology.roles():
        host = topology.host(name)
        if not host.local:
            try:
                hosts.snapshot(host)
            except ProcessError as exc:
                problems.append(f"topology: {exc}")
    return problems
