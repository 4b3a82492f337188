"""Execute one RunSpec: mock, system, checks, load, samples, artifacts. Produces a RunRecord.

A failure anywhere fails this run only: its processes are stopped, the rows and samples
written so far are kept, and the reason is in its manifest.
"""
from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

import mocks
from harness.files import limit_logs
from harness.files.pcap import SYN_PCAP
from harness.files.store import stored_frame
from harness.files.study_files import RunFiles, StudyFiles
from harness.host.processes import ProcessError, free_port, most_fds_in_tree
from harness.host.sampling import Sampler, run_queue_wait_ns, scrape_gauge
from harness.model import fault_scenarios, inflight
from harness.model.gateway_spec import GatewaySpec
from harness.model.manifests import (
    HostSnapshot,
    LocustSummary,
    MockSummary,
    Phases,
    PreRequestCheck,
    RequestInfo,
    RunChecks,
    RunHost,
    RunManifest,
    StepsFit,
    WireCheck,
    from_plain,
)
from harness.model.plan import Instruments, RunSpec
from harness.model.schema import PROBES, SAMPLES
from harness.remote import hosts
from harness.remote.machine import host_snapshot
from harness.run import consolidate, limits, wire_window
from harness.run import load as load_stage
from harness.run.capture import LINK_HEADERS_BYTES, Capture, CaptureError, syn_filter
from harness.run.health_probe import HealthProbe
from harness.run.systems import start_mock, start_system
from harness.run.verify import pre_request, warm_up
from mocks.request_log import read_request_log
from mocks.stats import diff_stats, read_stats

# With provider faults the mock answers requests with errors the client counts as failures (and
# a gateway may retry), so its count cannot equal the successful rows.
FAULTED_COUNT_NOTE = "not compared: the provider injected faults"
# A sampler on another host stops by itself this long after the run should have ended.
SAMPLER_MARGIN_S = 300.0


class Interrupted(BaseException):
    """The study was told to stop (SIGINT/SIGTERM). BaseException: no handler swallows it."""


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    system: str
    run_index: int
    status: str               # completed | failed | interrupted
    reason: str
    run_dir: Path
    comparison_key: str
    started_t_unix_s: float
    ended_t_unix_s: float


@dataclass
class _Running:
    """What a run has started and learned so far: each stage reads and extends it, and the
    teardown and the manifest's last write read what is there (None: never started)."""
    manifest: RunManifest
    wire_check: WireCheck
    mock: object = None
    standby: object = None
    system: object = None
    locust: object = None
    workers: list = field(default_factory=list)
    wire_window: object = None
    mock_stats_before: dict | None = None
    mock_wait_ms: float | None = None


def measure_run(spec: RunSpec, gateway: GatewaySpec, version: str, study_dir: Path,
                progress: Callable[[str], None] = print, keep_capture: bool = False) -> RunRecord:
    """One run of one system: its providers, the system, the samplers and the capture, the
    pre-request, the load; every process stopped whatever happens (an ExitStack: the observers
    first, then the processes, newest first), then the run's artifacts and manifest written.
    ``keep_capture``: its wire.pcap stays once read (else its figures are the one copy)."""
    run_dir = StudyFiles(study_dir).run(spec.system, spec.run_index).fresh().dir
    gateway, notes = gateway.configured(spec.resilience, spec.scale)
    r = _Running(_run_manifest(spec, gateway, version, notes),
                 WireCheck(captured=False, reason=wire_window.capture_not_possible(spec)
                           or "not captured: the run ended before its load"))
    write_manifest(run_dir, r.manifest)
    status, reason = "completed", ""
    limits.raise_for(spec.open_files_limit)
    try:
        with ExitStack() as processes, ExitStack() as observers:
            _start_providers(r, spec, run_dir, processes)
            _start_system(r, spec, gateway, run_dir, processes)
            r.manifest = replace(r.manifest, limits=limits.observed(spec.open_files_limit, {
                "mock": r.mock.process, "system": r.system.process}))
            _start_observers(r, spec, gateway, run_dir, observers, processes)
            _verify(r, spec, gateway, progress)
            _fit_steps(r, spec, gateway, progress)
            _drive_load(r, spec, run_dir, progress)
    except Interrupted:
        status, reason = "interrupted", "the study was interrupted"
        raise
    except Exception as exc:  # a failed run must not fail the study
        status, reason = "failed", f"{type(exc).__name__}: {exc}"
        r.manifest = replace(r.manifest, failed_t_unix_s=time.time())
        progress(f"FAILED: {reason.splitlines()[0]}")
    finally:
        after = hosts.read_all(spec.topology)
        r.manifest = replace(r.manifest, limit_lines=_limit_lines(gateway, run_dir),
                             host_after=snapshot_of(host_snapshot()),
                             hosts={name: replace(h, after=after.get(name, {}))
                                    for name, h in r.manifest.hosts.items()})
        r.manifest = _finish(r.manifest, spec, run_dir, r.mock, r.standby, r.mock_stats_before,
                             status, reason, r.wire_check,
                             _port_of(r.system.target.base_url) if r.system else None,
                             r.mock_wait_ms, keep_capture)
    m = r.manifest
    return RunRecord(spec.run_id, spec.system, spec.run_index, m.status, m.reason, run_dir,
                     spec.comparison_key, m.started_t_unix_s, m.ended_t_unix_s)


def _run_manifest(spec: RunSpec, gateway: GatewaySpec, version: str,
                    notes: dict[str, str]) -> RunManifest:
    before = hosts.read_all(spec.topology, hosts.facts)
    return RunManifest(
        run_id=spec.run_id, system=spec.system, run_index=spec.run_index, round=spec.round,
        position=spec.position, comparison_key=spec.comparison_key, spec=spec, status="running",
        kind=gateway.kind, resilience=spec.resilience, resilience_note=notes["resilience"],
        scale=spec.scale, scale_note=notes["scale"],
        version=version, mock_version=mocks.__version__,
        locust_version=_locust_version(), started_t_unix_s=time.time(),
        host_before=snapshot_of(host_snapshot()),
        hosts={name: RunHost(address=h["address"], prefix=tuple(h["prefix"]),
                             roles=tuple(h["roles"]), before=before.get(name, {}))
               for name, h in hosts.describe(spec.topology).items()})


def _limit_lines(gateway: GatewaySpec, run_dir: Path) -> tuple:
    """The system's own lines about its limits, from its logs (it has stopped: they are whole)."""
    try:
        return limit_logs.scan(run_dir, gateway.limit_logs, gateway.limit_patterns)
    except OSError:  # an unreadable log must not cost the run its other artifacts
        return ()


def _stop_later(stack: ExitStack, started):
    """``started`` (a process handle), stopped when ``stack`` closes."""
    stack.callback(started.stop)
    return started


def _start_providers(r: _Running, spec: RunSpec, run_dir: Path, processes: ExitStack) -> None:
    """The mock, and for a scenario that needs one a standby (the same provider, faulted only
    when the scenario faults it too). The faults wait for their arm file, which the load
    writes when it starts."""
    topology, m = spec.topology, spec.mock
    common = dict(stream_chunks=m.stream_chunks, chunk_delay_ms=m.chunk_delay_ms,
                  host=topology.host(topology.mock), cpus=spec.affinity.mock, nice=spec.nice.mock)
    faults = dict(faults=m.faults, fault_seed=m.fault_seed,
                  fault_arm_file=RunFiles(run_dir).fault_arm_path)
    r.mock = start_mock(run_dir, m.mock_latency_ms, m.mock_workers, m.mock_response_tokens,
                        **{**common, "port": spec.mock_port}, **faults)
    _stop_later(processes, r.mock.process)
    if fault_scenarios.needs_standby(m.fault_scenario):
        r.standby = start_mock(run_dir, m.mock_latency_ms, m.mock_workers, m.mock_response_tokens,
                               **{**common, "port": spec.standby_port}, name="mock-standby",
                               **(faults if fault_scenarios.faults_standby(m.fault_scenario) else {}))
        _stop_later(processes, r.standby.process)


def _start_system(r: _Running, spec: RunSpec, gateway: GatewaySpec, run_dir: Path,
                  processes: ExitStack) -> None:
    topology = spec.topology
    r.system = start_system(gateway, run_dir, r.mock.url, r.mock.port, spec.gateway_workers,
                            spec.ready_timeout_s, port=spec.system_port,
                            host=topology.host(topology.system), upstream_host=r.mock.address,
                            feature=spec.load.feature, standby=r.standby,
                            cpus=spec.affinity.system, nice=spec.nice.system,
                            extra_env=dict(spec.env))
    if r.system.process is not None:
        _stop_later(processes, r.system.process)
    target = r.system.target
    r.manifest = replace(r.manifest, ready_s=round(r.system.ready_s, 3), request=RequestInfo(
        feature=spec.load.feature, dialect=target.dialect, chat_path=target.chat_path,
        model=target.model, request_bytes=spec.load.request_bytes,
        self_overhead_header=target.self_overhead_header))


def _start_observers(r: _Running, spec: RunSpec, gateway: GatewaySpec, run_dir: Path,
                     observers: ExitStack, processes: ExitStack) -> None:
    """The samplers (this host's here, the others' there) and the wire capture's window.
    Processes here are sampled by this process; those on other hosts by a sampler there."""
    topology, target = spec.topology, r.system.target
    here = next((h.name for h in topology.hosts if h.local), "controller")
    sampler = Sampler(RunFiles(run_dir).raw_samples(), host=here)
    gauge = None
    if gateway.metrics_path and gateway.inflight_gauge:
        gauge = (target.base_url.rstrip("/") + gateway.metrics_path, gateway.inflight_gauge)
    system, mock, standby = r.system, r.mock, r.standby
    if system.process is not None and topology.host(topology.system).local:
        inflight = (lambda: scrape_gauge(*gauge)) if gauge else None  # noqa: E731
        sampler.watch("system", lambda: [system.process.pid], inflight)
    if topology.host(topology.mock).local:
        sampler.watch("mock", lambda: [mock.process.pid])
        if standby is not None:
            sampler.watch("standby", lambda: [standby.process.pid])
    if any(topology.host(h).local for h in (topology.locust_master,
                                             *(w.host for w in topology.locust_workers))):
        sampler.watch("locust", lambda: [p.pid for p in (r.locust, *r.workers) if p is not None
                                         and not isinstance(p, hosts.RemoteProcess)])
    # stopped after the capture: samples describe live processes, never ones being torn down
    observers.callback(sampler.stop)
    if not wire_window.capture_not_possible(spec):
        # the floor (direct) calls the mock itself: its port is the only one
        ports = {mock.port, _port_of(target.base_url) or mock.port}
        window = r.wire_window = wire_window.WireWindow(spec, run_dir, sorted(ports))
        sampler.watch("capture", lambda: window.pid)
        observers.callback(_finish_capture, r)   # when the run failed during its load
    sampler.start()
    for remote in hosts.start_samplers(
            topology, RunFiles(run_dir), _remote_roles(spec, system.process is not None),
            {"system": gauge} if gauge else {},
            max_s=load_stage.planned_load_s(spec) + spec.ready_timeout_s + spec.idle_s
            + spec.cooldown_s + SAMPLER_MARGIN_S):
        _stop_later(processes, remote)


def _finish_capture(r: _Running) -> None:
    if r.wire_window is not None:
        r.wire_check, r.wire_window = r.wire_window.finish(), None


def _syn_capture(spec: RunSpec, run_dir: Path, port: int, progress: Callable[[str], None]):
    """In a scenario whose provider refuses connections, tcpdump of the SYNs to its port for
    the load (harness.files.pcap.refused_syns counts the refused ones); None elsewhere, or when
    it cannot capture (then its amplification stays a lower bound, as the report says)."""
    if not fault_scenarios.counts_syns(spec.mock.fault_scenario) or spec.topology.source:
        return None
    try:
        return Capture(str(run_dir / SYN_PCAP), [port], filter_text=syn_filter(port),
                       snaplen_bytes=LINK_HEADERS_BYTES,
                       max_duration_s=load_stage.planned_load_s(spec) + SAMPLER_MARGIN_S).start()
    except CaptureError as exc:
        progress(f"SYNs not captured: {exc}".splitlines()[0])
        return None


def _stop_syn_capture(capture, progress: Callable[[str], None]) -> None:
    try:
        capture.stop()
    except CaptureError as exc:
        progress(f"SYN capture: {exc}".splitlines()[0])


def _verify(r: _Running, spec: RunSpec, gateway: GatewaySpec,
            progress: Callable[[str], None]) -> None:
    """After the idle time and the system's warm-up requests, one request must reach the mock."""
    target = r.system.target
    time.sleep(spec.idle_s)
    warm_up(target.base_url, target.chat_path, target.model, target.headers,
            gateway.warmup_requests, dialect=target.dialect,
            timeout_s=spec.load.request_timeout_s)
    first = pre_request(target.base_url, target.chat_path, target.model, target.headers,
                        r.mock.stats_dir, spec.load.request_timeout_s, dialect=target.dialect,
                        request_bytes=spec.load.request_bytes,
                        standby_stats_dir=r.standby.stats_dir if r.standby else None)
    r.mock_stats_before = first.pop("_snapshot")
    r.manifest = replace(r.manifest, checks=RunChecks(pre_request=PreRequestCheck(**first)))
    if first["problem"] or not first["mock_saw_it"]:
        raise ProcessError(f"pre-request failed: {first['problem'] or 'the mock never saw it'}")
    progress("verified: one request reached the mock; starting load")


def _fit_steps(r: _Running, spec: RunSpec, gateway: GatewaySpec,
               progress: Callable[[str], None]) -> None:
    """The in-flight lane: which steps fit every role's open-file limit, checked with the limits
    the started processes really have (and the system's own descriptors at idle) before the load
    starts; the load runs only those."""
    if not spec.load.inflight_steps:
        return
    roles = [inflight.RoleFiles("locust", spec.load.locust_processes, inflight.FD_MARGIN,
                                limits.own_limit() if _locust_local(spec) else None),
             inflight.RoleFiles("mock", spec.mock.mock_workers, inflight.FD_MARGIN,
                                r.manifest.limits.open_files_by_role.get("mock")
                                if r.manifest.limits else None)]
    if r.system.process is not None:
        own = most_fds_in_tree(r.system.process.pid)
        roles.append(inflight.RoleFiles(
            "system", spec.gateway_workers if gateway.connections_per_worker else 1,
            inflight.FD_MARGIN if own is None else own,
            r.manifest.limits.open_files_by_role.get("system") if r.manifest.limits else None))
    steps_run, reason = inflight.steps_that_fit(spec.load.inflight_steps, roles)
    r.manifest = replace(r.manifest, steps_fit=StepsFit(steps_run, reason))
    if reason:
        progress(f"steps from {spec.load.inflight_steps[steps_run]:,} not run: {reason}")


def _locust_local(spec: RunSpec) -> bool:
    topology = spec.topology
    return all(topology.host(h).local for h in (topology.locust_master,
                                                 *(w.host for w in topology.locust_workers)))


def _drive_load(r: _Running, spec: RunSpec, run_dir: Path,
                progress: Callable[[str], None]) -> None:
    """Locust (and its workers) for the planned load, the capture only while it runs, then
    the cool-down; ProcessError when the load was not the one planned."""
    topology = spec.topology
    load_started = time.time()
    mock_wait_at_start = _mock_wait_ns(r.mock, topology)
    if r.wire_window is not None:
        r.wire_window.start()
    syns = _syn_capture(spec, run_dir, r.mock.port, progress)
    master_port = free_port() if topology.locust_workers else 0
    fit = r.manifest.steps_fit
    r.locust = load_stage.start_locust(spec, r.system.target, run_dir, master_port,
                                       steps_run=fit.steps_run if fit else None)
    r.manifest = replace(r.manifest, limits=limits.with_role(r.manifest.limits, "locust", r.locust))
    system = r.system
    # the abandon phase's health probe: from the load's start, so each wave has seconds before it
    probe = (HealthProbe(system.ready_url, RunFiles(run_dir).raw_probes()).start()
             if inflight.abandons(spec.load) and system.ready_url else None)
    try:
        r.workers = load_stage.start_workers(spec, run_dir, master_port) if master_port else []
        load_stage.wait_locust(
            r.locust, spec, run_dir, progress,
            system_alive=lambda: system.process is None or system.process.alive())
    finally:
        r.locust.stop()  # the master first: it tells its workers to quit
        for worker in r.workers:
            worker.stop()
        _finish_capture(r)  # never past the load
        if probe is not None:
            probe.stop()
        if syns is not None:
            _stop_syn_capture(syns, progress)
    r.mock_wait_ms = _elapsed_ms(mock_wait_at_start, _mock_wait_ns(r.mock, topology))
    result = load_stage.collect(r.locust, run_dir, load_started)
    r.manifest = replace(
        r.manifest,
        phases=Phases(**result.phases, load_end_t_unix_s=result.ended_t_unix_s),
        checks=replace(r.manifest.checks, inflight_at_stop=result.inflight_at_stop),
        locust=LocustSummary(exit_code=result.exit_code, cpu_warning=bool(result.cpu_warnings),
                             warnings=tuple(result.cpu_warnings[:20]),
                             processes=spec.load.locust_processes))
    if "hold_end_t_unix_s" not in result.phases:
        raise ProcessError("the load ended before its hold phase completed "
                           f"(phases seen: {sorted(result.phases)})")
    lost = [f"{w.pid} (exit {w.returncode})" for w in r.workers if w.returncode not in (0, None)]
    if lost:  # the master carries on with the rest: the load was not the one planned
        raise ProcessError(f"Locust worker(s) failed during the load: {', '.join(lost)}")
    time.sleep(spec.cooldown_s)


def snapshot_of(snapshot: dict) -> HostSnapshot:
    return from_plain(HostSnapshot, snapshot, "host snapshot")


def write_manifest(run_dir: Path, manifest: RunManifest) -> None:
    RunFiles(run_dir).write_manifest(manifest)


def _mock_wait_ns(mock, topology) -> int | None:
    """The mock's run-queue wait so far (its whole process tree), when it runs here."""
    if mock is None or not topology.host(topology.mock).local:
        return None
    return run_queue_wait_ns([p.pid for p in mock.process.tree()])


def _elapsed_ms(start_ns: int | None, end_ns: int | None) -> float | None:
    return None if start_ns is None or end_ns is None else (end_ns - start_ns) / 1e6


def _finish(manifest: RunManifest, spec: RunSpec, run_dir: Path, mock, standby, mock_stats_before,
            status: str, reason: str, wire_check: WireCheck, gateway_port: int | None,
            mock_wait_ms: float | None = None, keep_capture: bool = False) -> RunManifest:
    """Whatever happened, turn what was written into artifacts and seal the manifest. Each fact
    is kept once: the providers' raw request logs go once mock_requests.parquet holds them, the
    capture once its wire times are read (unless ``keep_capture``)."""
    run = RunFiles(run_dir)
    if manifest.phases == Phases():  # the load did not end normally: keep what the shape recorded
        manifest = replace(manifest, phases=Phases(**run.phases()))
    mock_rows, identity_reason = None, "the mock did not start"
    if mock is not None:
        providers = {"primary": mock, **({"standby": standby} if standby is not None else {})}
        try:
            mock_rows = consolidate.mock_requests(
                {name: read_request_log(p.stats_dir) for name, p in providers.items()}, spec,
                manifest.phases.t("warmup_start"))
            run.write_mock_requests(mock_rows)
            run.drop_request_logs([p.stats_dir for p in providers.values()], len(mock_rows))
        except Exception as exc:  # the rows stay; the identity figures are missing, with why
            identity_reason = (f"the mock's request log could not be stored: "
                               f"{type(exc).__name__}: {exc}")
            mock_rows = None
    mock_port = mock.port if mock else 0
    capture = consolidate.WireSource(wire_check, mock_port,
                                     None if gateway_port == mock_port else gateway_port,
                                     keep=keep_capture)
    identity_check = None
    try:
        done = consolidate.consolidate(run_dir, spec.run_id, spec.system,
                                       _phase_dict(manifest.phases), mock_rows, capture,
                                       stream=spec.load.stream)
        rows, identity_check, wire_check = done.rows, done.identity, done.wire
        _write_samples(run_dir, spec)
    except Exception as exc:  # keep the raw files; say why the tables are missing
        rows = None
        status = "failed"
        reason = (reason + "; " if reason else "") + f"artifacts not written: {exc}"
    manifest = replace(manifest, wire=wire_check, checks=replace(
        manifest.checks, identity=identity_check,
        identity_missing_reason="" if identity_check is not None else identity_reason))
    if rows is not None and mock is not None and mock_stats_before is not None:
        final = read_stats(mock.stats_dir, timeout_s=3.0)
        during = diff_stats(final, mock_stats_before)
        run.write_mock_stats({k: v for k, v in during.items() if k != "schema_version"})
        ok = int(((rows["status_code"] == 200) & (rows["error_kind"] == "")).sum())
        manifest = replace(
            manifest,
            mock=MockSummary(count=during["count"],
                             **{f"hold_ms_{k}": v for k, v in during["hold_ms"].items()},
                             **_gc_summary(during), run_queue_wait_ms=mock_wait_ms),
            checks=replace(manifest.checks, mock_count=during["count"], successful_rows=ok,
                           count_match=None if spec.mock.faults else during["count"] == ok,
                           count_note=FAULTED_COUNT_NOTE if spec.mock.faults else "",
                           count_difference=during["count"] - ok))
    manifest = replace(manifest, status=status, reason=reason, ended_t_unix_s=time.time())
    run.drop_phases()
    load_stage.record_fault_epoch(run_dir, spec.mock)
    manifest = replace(manifest, files=run.hash_files())
    run.write_manifest(manifest)
    return manifest


def _gc_summary(during: dict) -> dict:
    """MockSummary's gc fields from a mock_stats difference ({} from a mock without them)."""
    gc = during.get("gc")
    if gc is None:
        return {}
    return {"gc_mode": during["config"].get("gc", ""), "gc_passes": sum(gc["collections"].values()),
            "gc_pause_ms_total": gc["pause_total_ms"], "gc_pause_ms_max": gc["pause_ms"]["max"]}


def _port_of(url: str) -> int | None:
    return urlparse(url).port


def _phase_dict(phases: Phases) -> dict:
    """The phases reached, as consolidate.phase_of reads them."""
    return {k: v for k, v in vars(phases).items() if v is not None}


def _remote_roles(spec: RunSpec, has_system: bool) -> dict[str, dict[str, list[str]]]:
    """host -> role -> pid-file labels of the processes a sampler on that host must watch."""
    topology = spec.topology
    roles: dict[str, dict[str, list[str]]] = {h.name: {} for h in topology.hosts if not h.local}
    placed = [(topology.mock, "mock", "mock"), (topology.locust_master, "locust", "locust-master"),
              *((host, "locust", label) for host, label in load_stage.worker_labels(spec))]
    if fault_scenarios.needs_standby(spec.mock.fault_scenario):
        placed.append((topology.mock, "standby", "mock-standby"))
    if has_system:
        placed.append((topology.system, "system", "system"))
    for host, role, label in placed:
        if host in roles:
            roles[host].setdefault(role, []).append(label)
    return roles


def _write_samples(run_dir: Path, spec: RunSpec) -> None:
    # This machine's samples, then those of each other host (raw/samples-<host>.csv).
    run = RunFiles(run_dir)
    run.write_samples(stored_frame(SAMPLES, run.read_raw_samples(), run_id=spec.run_id,
                                   system=spec.system))
    if run.raw_probes().is_file():
        run.write_probes(stored_frame(PROBES, run.read_raw_probes(), run_id=spec.run_id,
                                      system=spec.system))


def _locust_version() -> str:
    import importlib.metadata
    return importlib.metadata.version("locust")


def instruments() -> Instruments:
    """The mock's and Locust's versions here: every comparison key holds them."""
    return Instruments(mock_version=mocks.__version__, locust_version=_locust_version())


def completed_record(spec: RunSpec, study_dir: Path) -> RunRecord | None:
    """A run finished earlier in this study directory that ran what spec runs (its recorded key
    is spec's, in the recipe it was recorded with) with files that still match their recorded
    SHA-256; None means it must be (re)done. It keeps the key it was recorded with."""
    run = StudyFiles(study_dir).run(spec.system, spec.run_index)
    manifest = run.completed(spec)
    if manifest is None:
        return None
    return RunRecord(spec.run_id, spec.system, spec.run_index, "completed", "", run.dir,
                     manifest.comparison_key, manifest.started_t_unix_s, manifest.ended_t_unix_s)
