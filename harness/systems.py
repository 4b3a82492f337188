"""Install, version and start a system from its GatewaySpec; start the mock provider."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.config import REPO_DIR
from harness.gateway_spec import GatewaySpec, render
from harness.processes import ManagedProcess, free_port, wait_ready
from harness.load import Target


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


def install(spec: GatewaySpec, log_path: Path) -> InstallResult:
    """Idempotent: the check decides; the install runs only when the check fails."""
    values = _base_values(spec)
    env = {**os.environ, "PYTHONPATH": str(REPO_DIR)}
    if is_installed(spec):
        return InstallResult(True, False, "already installed")
    if not spec.install_command:
        return InstallResult(True, False, "nothing to install")
    command = [render(a, values) for a in spec.install_command]
    spec.cache_dir.mkdir(parents=True, exist_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        try:
            done = subprocess.run(command, cwd=REPO_DIR, env=env, stdout=log,
                                  stderr=subprocess.STDOUT, timeout=spec.install_timeout_s)
        except subprocess.TimeoutExpired:
            return InstallResult(False, True, f"{spec.name}: install timed out after "
                                 f"{spec.install_timeout_s:.0f} s: {' '.join(command)} (log: {log_path})")
        except OSError as exc:
            return InstallResult(False, True, f"{spec.name}: cannot run install "
                                 f"{' '.join(command)}: {exc}")
    if done.returncode != 0:
        return InstallResult(False, True, f"{spec.name}: install failed (exit {done.returncode}): "
                             f"{' '.join(command)} (log: {log_path})")
    return InstallResult(True, True, "installed")


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


def start_mock(run_dir: Path, latency_ms: float, workers: int, response_tokens: int,
               ready_timeout_s: float = 20.0, port: int = 0, stream_chunks: int = 20,
               chunk_delay_ms: float = 20.0) -> MockHandle:
    port = port or free_port()
    stats_dir = run_dir / "mock-stats"
    stats_dir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "mocks.server", "--host", "127.0.0.1", "--port", str(port),
            "--latency-ms", str(latency_ms), "--workers", str(workers),
            "--response-tokens", str(response_tokens), "--stats-dir", str(stats_dir),
            "--stream-chunks", str(stream_chunks), "--chunk-delay-ms", str(chunk_delay_ms)]
    proc = ManagedProcess("mock", argv, run_dir / "mock.log", cwd=REPO_DIR,
                          env={**os.environ, "PYTHONPATH": str(REPO_DIR)})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url + "/health", 200, ready_timeout_s, "mock provider")
    except Exception:
        proc.stop()
        raise
    return MockHandle(proc, url, port, stats_dir)


@dataclass(frozen=True)
class StartedSystem:
    process: ManagedProcess | None      # None: the client calls the upstream itself
    target: Target
    ready_s: float


def start_system(spec: GatewaySpec, run_dir: Path, upstream_url: str, upstream_port: int,
                 workers: int, ready_timeout_s: float, port: int = 0) -> StartedSystem:
    port = port or free_port()
    values = {**_base_values(spec), "port": port, "upstream_url": upstream_url,
              "upstream_host": "127.0.0.1", "upstream_port": upstream_port,
              "run_dir": run_dir, "workers": workers}
    for tf in spec.start_files:
        out = run_dir / tf.output
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(render((spec.directory / tf.template).read_text(), values))
    target = Target(base_url=render(spec.base_url, values), chat_path=render(spec.chat_path, values),
                    model=spec.model, headers={k: render(v, values) for k, v in spec.headers.items()},
                    self_overhead_header=spec.self_overhead_header,
                    self_overhead_scale_ms=spec.self_overhead_scale_ms)
    proc = None
    if spec.has_process:
        env = {**os.environ, "PYTHONPATH": str(REPO_DIR),
               **{k: render(v, values) for k, v in spec.start_env.items()}}
        proc = ManagedProcess(spec.name, [render(a, values) for a in spec.start_command],
                              run_dir / "system.log", cwd=run_dir, env=env,
                              stop_signal=spec.stop_signal, stop_timeout_s=spec.stop_timeout_s)
    try:
        ready_s = wait_ready(proc, target.base_url.rstrip("/") + render(spec.ready_path, values),
                             spec.ready_status, ready_timeout_s, f"{spec.name}")
    except Exception:
        if proc is not None:
            proc.stop()
        raise
    return StartedSystem(proc, target, ready_s)
