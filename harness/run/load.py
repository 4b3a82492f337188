"""Drive Locust as a subprocess (its rows become requests.parquet in harness.run.consolidate)."""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.files.study_files import RunFiles
from harness.host.processes import ManagedProcess, ProcessError, log_tail
from harness.model import inflight
from harness.model.affinity import pinned
from harness.model.config import MAX_SPAWN_RATE_PER_PROCESS, REPO_DIR
from harness.model.dialects import DIALECTS
from harness.model.load_settings import LoadSettings
from harness.model.plan import RunSpec
from harness.model.run_parts import MockSettings
from harness.remote.hosts import start_on
from harness.run.bodies import RID_SLOT, chat_body

LOCUSTFILE = Path(__file__).with_name("loadgen") / "locustfile.py"
# The load generator (harness.run.loadgen) is imported from this repository, on every host.
LOCUSTFILE_PATH = {"PYTHONPATH": str(REPO_DIR)}
WORKERS_WAIT_S = 60                     # the master gives up if its workers have not all connected
PHASE_ORDER = ("warmup_start_t_unix_s", "ramp_start_t_unix_s", "hold_start_t_unix_s",
               "hold_end_t_unix_s")


@dataclass(frozen=True)
class Target:
    """How requests reach the system under test."""
    base_url: str
    chat_path: str
    model: str
    headers: dict
    self_overhead_header: str
    self_overhead_scale_ms: float
    dialect: str = "openai"          # the client's dialect: which body and which SSE frames


@dataclass(frozen=True)
class LoadResult:
    exit_code: int
    phases: dict
    inflight_at_stop: int
    cpu_warnings: list
    started_t_unix_s: float
    ended_t_unix_s: float


def _schedule_s(spec: RunSpec) -> float:
    """Seconds of the open-loop or in-flight steps (0 in closed loop)."""
    load = spec.load
    steps_s = (inflight.load_s(len(load.inflight_steps), load.inflight_step_s, load.inflight_hold_s)
               if load.inflight_steps else 0.0)
    return max(len(load.open_loop_rates_per_s) * load.open_loop_step_s, steps_s)


def planned_load_s(spec: RunSpec) -> float:
    """The longest the load may last (its hold at max_hold_s)."""
    return spec.load.warmup_s + max(spec.load.ramp_s + spec.load.max_hold_s, _schedule_s(spec))


def expected_load_s(spec: RunSpec) -> float:
    """How long the load is planned to last (its hold at hold_s)."""
    return spec.load.warmup_s + max(spec.load.ramp_s + spec.load.hold_s, _schedule_s(spec))


def write_body(spec: RunSpec, target: Target, run_dir: Path) -> Path:
    """Every request of the run sends these bytes (built from the recorded seed)."""
    return RunFiles(run_dir).write_body(chat_body(
        target.dialect, target.model, spec.mock.mock_response_tokens, spec.load.stream,
        spec.load.request_bytes, spec.seed, rid_slot=True))


def start_locust(spec: RunSpec, target: Target, run_dir: Path, master_port: int = 0,
                 steps_run: int | None = None) -> ManagedProcess:
    """Locust on the topology's master host; with locust_workers it is Locust's own master,
    listening on master_port for the workers start_workers() starts. ``steps_run``: the
    in-flight steps that fit the machine's limits (None: all)."""
    run = RunFiles(run_dir)
    settings = LoadSettings(
        chat_path=target.chat_path, model=target.model, headers=target.headers,
        self_overhead_header=target.self_overhead_header.lower(),
        self_overhead_scale_ms=target.self_overhead_scale_ms,
        body_file=str(write_body(spec, target, run_dir)),
        content_frame=DIALECTS[target.dialect].content_frame,
        done_frame=DIALECTS[target.dialect].done_frame,
        unary_marker=DIALECTS[target.dialect].unary_marker,
        dialect=target.dialect, load=spec.load,
        open_loop_spawn_rate_per_s=MAX_SPAWN_RATE_PER_PROCESS,
        inflight_steps_run=len(spec.load.inflight_steps) if steps_run is None else steps_run,
        inflight_drain_margin_s=inflight.DRAIN_MARGIN_S,
        raw_dir=str(run.raw_dir),
        run_id=spec.run_id, rid_slot=RID_SLOT, seed=spec.seed,
        phases_file=str(run.phases_path),
        fault_arm_file=str(run.fault_arm_path) if spec.mock.faults else "")
    run.raw_dir.mkdir(parents=True, exist_ok=True)
    settings_path = run.write_load_settings(settings)
    argv = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless",
            "--host", target.base_url, "--csv", str(run.locust_csv_prefix),
            "--logfile", str(run.log("locust")), "--loglevel", "INFO",
            "--exit-code-on-error", "0",
            # Users finish the request they are in when the load stops, so the mock's count
            # and the rows can match exactly; whatever is still unanswered after this is killed.
            "--stop-timeout", f"{int(spec.load.request_timeout_s) + 5}s"]
    topology = spec.topology
    master = topology.host(topology.locust_master)
    if topology.locust_workers:
        argv += ["--master", "--master-bind-host", master.address,
                 "--master-bind-port", str(master_port),
                 "--expect-workers", str(topology.worker_count),
                 "--expect-workers-max-wait", str(WORKERS_WAIT_S)]
    elif spec.load.locust_processes > 1:
        argv += ["--processes", str(spec.load.locust_processes)]
    env = {"SLUICE_LOAD_FILE": str(settings_path), "PYTHONUNBUFFERED": "1",
           "SLUICE_WORKER_HOST": master.name, **LOCUSTFILE_PATH}
    # Normally Locust has exited by itself before stop(); on an interrupt it gets 5 s to flush.
    # --processes children are forked: they inherit the CPUs the master starts on
    return start_on(master, "locust", pinned(spec.affinity.load, argv, spec.nice.load),
                    run.log("locust-stdout"), run.pid_file("locust-master"), cwd=run_dir, env=env,
                    stop_signal="SIGTERM", stop_timeout_s=5)


def worker_labels(spec: RunSpec) -> list[tuple[str, str]]:
    """(host name, pid-file label) of every worker process the topology places, in order."""
    labels = []
    for workers in spec.topology.locust_workers:
        for _ in range(workers.count):
            labels.append((workers.host, f"locust-worker-{len(labels) + 1}"))
    return labels


def start_workers(spec: RunSpec, run_dir: Path, master_port: int) -> list[ManagedProcess]:
    """Locust workers (`--worker`) on their hosts, connecting to the master; each writes its own
    raw rows, labelled with its host's name from the topology."""
    topology = spec.topology
    master = topology.host(topology.locust_master)
    run = RunFiles(run_dir)
    started: list[ManagedProcess] = []
    try:
        for name, label in worker_labels(spec):
            argv = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--worker",
                    "--master-host", master.address, "--master-port", str(master_port),
                    "--logfile", str(run.log(label)), "--loglevel", "INFO"]
            env = {"SLUICE_LOAD_FILE": str(run.load_settings_path), "PYTHONUNBUFFERED": "1",
                   "SLUICE_WORKER_HOST": name, **LOCUSTFILE_PATH}
            started.append(start_on(topology.host(name), "locust", pinned(spec.affinity.load, argv, spec.nice.load),
                                    run.log(f"{label}-stdout"), run.pid_file(label),
                                    cwd=run_dir, env=env, stop_signal="SIGTERM", stop_timeout_s=5))
    except Exception:
        for proc in started:
            proc.stop()
        raise
    return started


def wait_locust(proc: ManagedProcess, spec: RunSpec, run_dir: Path,
                progress: Callable[[str], None], system_alive: Callable[[], bool],
                progress_every_s: float = 5.0) -> None:
    """Wait for Locust to finish the shape; raise ProcessError if the system dies meanwhile or
    Locust outlives its bound."""
    start = time.monotonic()
    bound = planned_load_s(spec) + 90
    last_report = 0.0
    while proc.alive():
        elapsed = time.monotonic() - start
        if not system_alive():
            raise ProcessError(f"the system under test exited during the load at {elapsed:.0f} s")
        if elapsed > bound:
            raise ProcessError(f"Locust still running after {bound:.0f} s (its bound)")
        if elapsed - last_report >= progress_every_s:
            users, requests = RunFiles(run_dir).progress()
            progress(f"users {users:>5}  requests {requests:>8}  elapsed {elapsed:5.0f} s  "
                     f"remaining ~{max(0.0, expected_load_s(spec) - elapsed):4.0f} s")
            last_report = elapsed
        time.sleep(0.25)


def record_fault_epoch(run_dir: Path, mock: MockSettings) -> None:
    """faults.json, when the load armed the mock's faults (harness.files.study_files)."""
    if mock.faults:
        RunFiles(run_dir).record_fault_epoch(json.loads(mock.faults), mock.fault_seed)


def collect(proc: ManagedProcess, run_dir: Path, started_t_unix_s: float) -> LoadResult:
    run = RunFiles(run_dir)
    phases = run.phases()
    if proc.returncode not in (0, None) and not phases:
        raise ProcessError(f"Locust exited with code {proc.returncode} before the load began.\n"
                           f"--- log tail ---\n{log_tail(run.log('locust-stdout'))}\n"
                           f"{log_tail(run.log('locust'))}")
    return LoadResult(exit_code=proc.returncode if proc.returncode is not None else -1,
                      phases=phases, inflight_at_stop=run.inflight_at_stop(),
                      cpu_warnings=run.cpu_warnings(),
                      started_t_unix_s=started_t_unix_s, ended_t_unix_s=time.time())
