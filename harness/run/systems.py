"""Install, version and start a system from its GatewaySpec; start the mock provider."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.files.study_files import RunFiles
from harness.host.processes import ManagedProcess, free_port, wait_ready
from harness.model.affinity import pinned
from harness.model.config import REPO_DIR
from harness.model.gateway_spec import GatewaySpec, render
from harness.model.topology import Host
from harness.remote.hosts import start_on
from harness.run.load import Target

# No topology: every process on this machine, on the loopback address, as always.
LOCALHOST = Host("localhost", "127.0.0.1")


@dataclass(frozen=True)
class InstallResult:
    ok: bool
    installed_now: bool
    message: str


def _base_values(spec: GatewaySpec) -> dict:
    return {"gateway_dir": spec.directory, "cache_dir": spec.cache_dir, "repo_dir": REPO_DIR,
            "python": sys.executable}


def is_installed(spec: GatewaySpec) -> bool:
    """The declared check passes (a system with no check needs no install)."""
    if not spec.install_check:
        return not spec.install_command
    check = subprocess.run([render(a, _base_values(spec)) for a in spec.install_check],
                           cwd=REPO_DIR, env={**os.environ, "PYTHONPATH": str(REPO_DIR)},
                           capture_output=True, timeout=120)
    return check.returncode == 0


def run_declared(spec: GatewaySpec, argv, what: str, log_path: Path, timeout_s: float,
                 cwd: Path = REPO_DIR) -> str:
    """Run one of the spec's declared commands ([install], [build]) with its placeholders filled,
    output appended to ``log_path``; '' when it exited 0, else one line saying why, naming the
    command and the log."""
    command = [render(a, _base_values(spec)) for a in argv]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        try:
            done = subprocess.run(command, cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO_DIR)},
                                  stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return (f"{spec.name}: {what} timed out after {timeout_s:.0f} s: {' '.join(command)} "
                    f"(log: {log_path})")
        except OSError as exc:
            return f"{spec.name}: cannot run {what} {' '.join(command)}: {exc}"
    if done.returncode != 0:
        return (f"{spec.name}: {what} failed (exit {done.returncode}): {' '.join(command)} "
                f"(log: {log_path})")
    return ""


def install(spec: GatewaySpec, log_path: Path) -> InstallResult:
    """Idempotent: the check decides; the install runs only when the check fails."""
    if is_installed(spec):
        return InstallResult(True, False, "already installed")
    if not spec.install_command:
        return InstallResult(True, False, "nothing to install")
    spec.cache_dir.mkdir(parents=True, exist_ok=True)
    problem = run_declared(spec, spec.install_command, "install", log_path, spec.install_timeout_s)
    return InstallResult(not problem, True, problem or "installed")


def missing_binary(spec: GatewaySpec) -> str:
    """The start command's program if it cannot be found, else ''."""
    if not spec.start_command:
        return ""
    program = render(spec.start_command[0], _base_values(spec))
    if os.sep in program:
        return "" if os.access(program, os.X_OK) else program
    return "" if shutil.which(program) else program


def read_version(spec: GatewaySpec) -> str:
    """The version the installed software reports about itself; 'unknown (why)' otherwise."""
    if not spec.version_command:
        return "unknown (no version command declared)"
    command = [render(a, _base_values(spec)) for a in spec.version_command]
    try:
        done = subprocess.run(command, cwd=REPO_DIR, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO_DIR)})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    text = (done.stdout or "") + (done.stderr or "")
    match = re.search(spec.version_pattern or r"(\S+)", text)
    return match.group(1) if match else f"unknown (no match in {text.strip()[:100]!r})"


@dataclass(frozen=True)
class MockHandle:
    process: ManagedProcess
    url: str
    port: int
    stats_dir: Path
    address: str = "127.0.0.1"


def start_mock(run_dir: Path, latency_ms: float, workers: int, response_tokens: int,
               ready_timeout_s: float = 20.0, port: int = 0, stream_chunks: int = 20,
               chunk_delay_ms: float = 20.0, host: Host | None = None, faults: str = "",
               fault_seed: int = 0, fault_arm_file: Path | None = None,
               name: str = "mock", cpus: str = "", nice: int = 0) -> MockHandle:
    """host: where it runs (None: this machine at 127.0.0.1); it listens on the host's address.
    faults: a fault schedule (JSON list, "" = none), in effect once ``fault_arm_file`` appears,
    its times counted from the epoch in it (harness.run.load.record_fault_epoch then writes the
    run's faults.json). name: its stats directory
    (``<name>-stats``), log and pid file in the run directory (``mock-standby``: the standby).
    cpus: the CPUs it starts on (taskset's list; "" = any); nice: its niceness (0 = unchanged)."""
    host = host or LOCALHOST
    port = port or free_port()
    run = RunFiles(run_dir)
    stats_dir = run.stats_dir(name)
    stats_dir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "mocks.server", "--host", host.address, "--port", str(port),
            "--latency-ms", str(latency_ms), "--workers", str(workers),
            "--response-tokens", str(response_tokens), "--stats-dir", str(stats_dir),
            "--stream-chunks", str(stream_chunks), "--chunk-delay-ms", str(chunk_delay_ms)]
    if faults:
        if fault_arm_file is None:
            raise ValueError("start_mock: a fault schedule needs its arm file")
        argv += ["--faults", faults, "--fault-seed", str(fault_seed),
                 "--fault-arm-file", str(fault_arm_file)]
    proc = start_on(host, name, pinned(cpus, argv, nice), run.log(name), run.pid_file(name),
                    cwd=REPO_DIR, env={"PYTHONPATH": str(REPO_DIR)})
    url = f"http://{host.address}:{port}"
    try:
        wait_ready(proc, url + "/health", 200, ready_timeout_s, f"{name} provider")
    except Exception:
        proc.stop()
        raise
    return MockHandle(proc, url, port, stats_dir, host.address)


@dataclass(frozen=True)
class StartedSystem:
    process: ManagedProcess | None      # None: the client calls the upstream itself
    target: Target
    ready_s: float
    ready_url: str = ""                 # its health check (gateway.toml's [ready] path)


def run_values(spec: GatewaySpec, run_dir: Path, port: int, listen_host: str, upstream_url: str,
               upstream_host: str, upstream_port: int, workers: int,
               standby: MockHandle | None = None, counted: bool = False) -> dict:
    """Every placeholder's value for one run, and whether its {{#standby}} sections are kept:
    only when the run has a standby provider (the {{standby_*}} placeholders live inside them);
    {{#counted}} sections are kept when the system runs under Valgrind or strace to be counted."""
    values = {**_base_values(spec), "port": port, "listen_host": listen_host,
              "upstream_url": upstream_url, "upstream_host": upstream_host,
              "upstream_port": upstream_port, "run_dir": run_dir, "workers": workers,
              "standby": standby is not None, "counted": counted}
    if standby is not None:
        values.update(standby_url=standby.url, standby_host=standby.address,
                      standby_port=standby.port)
    elif spec.format_version == 1:   # what version 1 meant: without a standby, the mock
        values.update(standby_url=upstream_url, standby_host=upstream_host,
                      standby_port=upstream_port)
    return values


def start_system(spec: GatewaySpec, run_dir: Path, upstream_url: str, upstream_port: int,
                 workers: int, ready_timeout_s: float, port: int = 0, host: Host | None = None,
                 upstream_host: str = "127.0.0.1", feature: str = "",
                 standby: MockHandle | None = None, cpus: str = "",
                 extra_env: dict[str, str] | None = None, nice: int = 0,
                 prefix: tuple[str, ...] = (), environment: dict[str, str] | None = None,
                 counted: bool = False) -> StartedSystem:
    """host: where it runs and listens (None: this machine at 127.0.0.1). standby: the second
    provider of a fault scenario that has one. cpus: the CPUs it and its children start on
    (taskset's list; "" = any). extra_env: the study's system_env for it, over its own.
    prefix: a command it runs under (Valgrind, strace). environment: its whole environment
    instead of this process's (its own [start].env and extra_env still over it). counted: it runs
    to be counted (its templates' {{#counted}} sections are kept)."""
    host = host or LOCALHOST
    port = port or free_port()
    values = run_values(spec, run_dir, port, host.address, upstream_url, upstream_host,
                        upstream_port, workers, standby, counted)
    run = RunFiles(run_dir)
    for tf in spec.start_files:
        run.write_rendered(tf.output, render(spec.template(tf), values))
    requests = spec.request_plan(feature)
    target = Target(base_url=render(spec.base_url, values), chat_path=render(requests.chat_path, values),
                    model=requests.model, headers={k: render(v, values) for k, v in requests.headers.items()},
                    self_overhead_header=spec.self_overhead_header,
                    self_overhead_scale_ms=spec.self_overhead_scale_ms, dialect=requests.dialect)
    proc = None
    if spec.has_process:
        env = {"PYTHONPATH": str(REPO_DIR), **{k: render(v, values) for k, v in spec.start_env.items()},
               **(extra_env or {})}
        argv = [*prefix, *pinned(cpus, [render(a, values) for a in spec.start_command], nice)]
        if environment is None:
            proc = start_on(host, "system", argv, run.log("system"), run.pid_file("system"),
                            cwd=run_dir, env=env, stop_signal=spec.stop_signal,
                            stop_timeout_s=spec.stop_timeout_s)
        else:
            proc = ManagedProcess("system", argv, run.log("system"), cwd=run_dir,
                                  env={**environment, **env}, stop_signal=spec.stop_signal,
                                  stop_timeout_s=spec.stop_timeout_s)
    ready_url = target.base_url.rstrip("/") + render(spec.ready_path, values)
    try:
        ready_s = wait_ready(proc, ready_url, spec.ready_status, ready_timeout_s, f"{spec.name}")
    except Exception:
        if proc is not None:
            proc.stop()
        raise
    return StartedSystem(proc, target, ready_s, ready_url)
