"""Run a whole study its preflight cleared (harness/run/preflight.py): install, execute every
run of its plan, seal the study manifest.

    run_study(preflight(config))

The study notebook calls run_study() with the preflight its command handed on, a suite with each
cell's; `python -m harness study` does the same without Jupyter.
"""
from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from harness.files.study_files import StudyFiles
from harness.host.processes import stop_all
from harness.model.config import StudyConfig
from harness.model.count_cases import LANE_SIZES
from harness.model.manifests import (
    Attempt,
    PlanEntry,
    RunEntry,
    StudyHost,
    StudyManifest,
    SystemInfo,
)
from harness.model.quantities import quantity
from harness.model.topology import Topology
from harness.remote import hosts
from harness.remote.machine import git_commit, package_versions, this_machine
from harness.run import builds
from harness.run.count_lane import run_count_lane
from harness.run.preflight import Cleared
from harness.run.run import Interrupted, RunRecord, completed_record, measure_run
from harness.run.systems import InstallResult, install, missing_binary, read_version


@dataclass(frozen=True)
class StudyResult:
    study_dir: Path
    status: str
    records: tuple[RunRecord, ...]
    skipped: dict            # system -> why it was not run


def _handle_signal(signum, frame):
    # Only the first signal interrupts; later ones must not break the clean-up it started.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Interrupted(f"signal {signal.Signals(signum).name}")


def _study_manifest(config: StudyConfig, plan: list, topology: Topology,
                    files: StudyFiles) -> StudyManifest:
    """The study manifest as the study starts; a resumed study keeps its earlier attempts."""
    manifest = StudyManifest(
        study_id=config.study_id, status="running", config=config,
        plan=tuple(PlanEntry(run_id=r.run_id, system=r.system, run_index=r.run_index,
                             round=r.round, position=r.position, comparison_key=r.comparison_key)
                   for r in plan),
        machine=this_machine(), hosts=_hosts_facts(topology), versions=package_versions(),
        git_commit=git_commit(), started_t_unix_s=time.time())
    if not files.exists():
        return manifest
    earlier = files.read_manifest()
    return replace(manifest, attempts=(*earlier.attempts, Attempt(
        started_t_unix_s=earlier.started_t_unix_s, ended_t_unix_s=earlier.ended_t_unix_s,
        status=earlier.status, reason=earlier.reason, git_commit=earlier.git_commit)))


def run_study(cleared: Cleared, progress=print) -> StudyResult:
    """Run the study ``cleared`` describes; nothing is checked again."""
    config, specs, plan = cleared.config, cleared.specs, cleared.plan
    study_dir = config.study_dir
    files = StudyFiles(study_dir)
    manifest = _study_manifest(config, plan, cleared.topology, files)
    files.write_manifest(manifest)
    previous = {}
    if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
        previous = {s: signal.signal(s, _handle_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    records: list[RunRecord] = []
    skipped: dict[str, str] = {}
    try:
        commits = {r.system: r.source_commit for r in plan if r.source_commit}
        versions, systems = _install_all(specs, commits, study_dir, skipped, progress)
        manifest = replace(manifest, systems=systems)
        files.write_manifest(manifest)
        runnable = [r for r in plan if r.system not in skipped]
        started = time.monotonic()
        executed = 0
        for index, spec in enumerate(runnable, 1):
            label = f"[{index}/{len(runnable)} {spec.system} run {spec.run_index}]"
            record = completed_record(spec, study_dir)
            if record is not None:
                progress(f"{label} kept: completed earlier with the same comparison key")
            else:
                progress(f"{label} starting ({_eta(started, executed, len(runnable) - index + 1)})")
                record = measure_run(spec, specs[spec.system], versions[spec.system], study_dir,
                                     progress=lambda message, label=label: progress(f"{label} {message}"),
                                     keep_capture=config.wire_keep_capture)
                executed += 1
            records.append(record)
            manifest = replace(manifest, runs=(*manifest.runs, _record_entry(record, study_dir)))
            files.write_manifest(manifest)
            progress(f"{label} {record.status}"
                     f" in {record.ended_t_unix_s - record.started_t_unix_s:.0f} s"
                     + (f": {record.reason.splitlines()[0]}" if record.reason else ""))
        if config.count_lane:
            progress("counting lane: each system once under Valgrind, then under strace")
            run_count_lane(specs, versions, skipped, manifest.git_commit or "", study_dir,
                           LANE_SIZES, progress)
        manifest = replace(manifest, status="completed")
    except (Interrupted, KeyboardInterrupt) as exc:
        manifest = replace(manifest, status="interrupted",
                           reason=f"interrupted ({exc or 'SIGINT'})")
        progress("interrupted: stopping every process; completed runs stay valid")
    except BaseException as exc:
        manifest = replace(manifest, status="failed", reason=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        stop_all()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        manifest = replace(manifest, ended_t_unix_s=time.time())
        files.write_manifest(manifest)
    progress(f"study {manifest.status}: {study_dir} ({quantity(files.size_bytes(), 'B')} on disk)")
    return StudyResult(study_dir, manifest.status, tuple(records), skipped)


def _install_all(specs, commits, study_dir, skipped, progress) -> tuple[dict[str, str], dict[str, SystemInfo]]:
    """(system -> version) of the runnable systems, and every system's entry in the manifest.
    Each is installed, then built (its [build], when it declares one); commits: the entries
    that run from another commit's worktree."""
    versions, systems = {}, {}
    for name, spec in specs.items():
        entry = SystemInfo(kind=spec.kind, role=spec.role, language=spec.language,
                           description=spec.description, runnable=spec.runnable,
                           not_runnable_reason=spec.not_runnable_reason,
                           not_runnable_command=spec.not_runnable_command,
                           gateway_toml_sha256=spec.toml_sha256,
                           source_commit=commits.get(name, ""))
        systems[name] = entry
        if not spec.runnable:
            skipped[name] = f"not runnable here: {spec.not_runnable_reason}"
            progress(f"{name}: {skipped[name]}")
            continue
        progress(f"{name}: checking install")
        result = install(spec, StudyFiles(study_dir).install_log(name))
        if result.ok and missing_binary(spec):
            result = InstallResult(False, result.installed_now, f"{name}: {missing_binary(spec)!r} "
                                   f"is still missing after its install step")
        if result.ok and spec.build_command:
            progress(f"{name}: building in {spec.directory}")
            try:
                progress(f"{name}: {builds.build(spec, StudyFiles(study_dir).install_log(name, 'build.log'))}")
            except builds.BuildError as exc:
                result = InstallResult(False, result.installed_now, str(exc))
        if not result.ok:
            skipped[name] = result.message
            systems[name] = replace(entry, runnable=False, not_runnable_reason=result.message)
            progress(f"{name}: SKIPPED, {result.message}")
            continue
        versions[name] = read_version(spec)
        systems[name] = replace(entry, version=versions[name])
        progress(f"{name}: {spec.kind} {versions[name]} ({result.message})")
    return versions, systems


def _hosts_facts(topology: Topology) -> dict[str, StudyHost]:
    """Which role runs where, and each host's kernel, CPU model, cores and load, read there."""
    facts = hosts.read_all(topology, hosts.facts)
    return {name: StudyHost(address=h["address"], prefix=tuple(h["prefix"]),
                            roles=tuple(h["roles"]), facts=facts.get(name, {}))
            for name, h in hosts.describe(topology).items()}


def _record_entry(record: RunRecord, study_dir: Path) -> RunEntry:
    return RunEntry(run_id=record.run_id, system=record.system, run_index=record.run_index,
                    status=record.status, reason=record.reason,
                    dir=str(record.run_dir.relative_to(study_dir)),
                    comparison_key=record.comparison_key)


def _eta(started: float, done: int, left: int) -> str:
    """left counts this run too."""
    elapsed = time.monotonic() - started
    if done == 0:
        return f"{left} runs to do"
    return f"elapsed {elapsed / 60:.1f} min, ~{elapsed / done * left / 60:.1f} min remaining"
