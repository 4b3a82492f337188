"""Processes, facts and samplers on the hosts of a topology.

On this machine a process starts as before. On any other host it starts as
`prefix + env K=V... python -m harness.remote.launch --pid-file F -- COMMAND`, and is stopped by the
same module run through the same prefix, so a remote process is stopped there, not only its
local client (ssh).
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from harness.host.processes import ManagedProcess, ProcessError
from harness.model.config import REPO_DIR
from harness.model.topology import Host, Topology
from harness.remote.machine import host_snapshot, this_machine

if TYPE_CHECKING:  # the type only: a host running the launcher needs no pandas
    from harness.files.study_files import RunFiles

REMOTE_CALL_TIMEOUT_S = 30.0


def command_on(host: Host, argv: list[str], env: dict | None = None) -> list[str]:
    """argv as it must be run to execute on host (with env set there)."""
    if host.local:
        return list(argv)
    inner = ["env", f"PYTHONPATH={REPO_DIR}", *(f"{k}={v}" for k, v in (env or {}).items()), *argv]
    return [*host.prefix, shlex.join(inner)] if host.quote else [*host.prefix, *inner]


class RemoteProcess(ManagedProcess):
    """A process on another host; its pid file (on the shared run directory) names it there."""

    def __init__(self, host: Host, role: str, argv: list[str], log_path: Path, pid_file: Path,
                 cwd: Path | None = None, env: dict | None = None, stop_signal: str = "SIGTERM",
                 stop_timeout_s: float = 10.0):
        self.host = host
        self.pid_file = Path(pid_file)
        self.pid_file.unlink(missing_ok=True)
        launcher = [sys.executable, "-m", "harness.remote.launch", "--pid-file", str(self.pid_file),
                    "--cwd", str(cwd or REPO_DIR), "--", *argv]
        super().__init__(role, command_on(host, launcher, env), log_path, cwd=REPO_DIR,
                         env={**os.environ, "PYTHONPATH": str(REPO_DIR)}, stop_signal=stop_signal,
                         stop_timeout_s=stop_timeout_s)

    def stop(self) -> None:
        """Stop it on its host first (bounded), then whatever runs locally (the prefix's client)."""
        stopper = [sys.executable, "-m", "harness.remote.launch", "--stop", str(self.pid_file),
                   "--signal", self.stop_signal.name, "--timeout-s", str(self.stop_timeout_s)]
        try:
            subprocess.run(command_on(self.host, stopper), cwd=REPO_DIR, capture_output=True,
                           timeout=self.stop_timeout_s + REMOTE_CALL_TIMEOUT_S,
                           env={**os.environ, "PYTHONPATH": str(REPO_DIR)})
        except (OSError, subprocess.TimeoutExpired):
            pass  # the local stop below still runs; the run's manifest keeps the host's facts
        super().stop()


def start_on(host: Host, role: str, argv: list[str], log_path: Path, pid_file: Path,
             cwd: Path | None = None, env: dict | None = None, stop_signal: str = "SIGTERM",
             stop_timeout_s: float = 10.0) -> ManagedProcess:
    """env: only what the process needs beyond the host's own environment."""
    if host.local:
        return ManagedProcess(role, argv, log_path, cwd=cwd, env={**os.environ, **(env or {})},
                              stop_signal=stop_signal, stop_timeout_s=stop_timeout_s)
    return RemoteProcess(host, role, argv, log_path, pid_file, cwd=cwd, env=env,
                         stop_signal=stop_signal, stop_timeout_s=stop_timeout_s)


def _call(host: Host, what: str) -> dict:
    argv = command_on(host, [sys.executable, "-m", "harness.remote.machine", what])
    try:
        done = subprocess.run(argv, cwd=REPO_DIR, capture_output=True, text=True,
                              timeout=REMOTE_CALL_TIMEOUT_S,
                              env={**os.environ, "PYTHONPATH": str(REPO_DIR)})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProcessError(f"host {host.name}: {shlex.join(argv)} failed: {exc}") from None
    if done.returncode != 0:
        raise ProcessError(f"host {host.name}: {shlex.join(argv)} exited with {done.returncode}: "
                           f"{(done.stderr or done.stdout).strip()[-300:]}")
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise ProcessError(f"host {host.name}: {shlex.join(argv)} printed no JSON: "
                           f"{done.stdout.strip()[:200]!r}") from None


def facts(host: Host) -> dict:
    """Kernel, CPU model, cores, memory and load averages, read on the host itself."""
    return this_machine() if host.local else _call(host, "--facts")


def snapshot(host: Host) -> dict:
    return host_snapshot() if host.local else _call(host, "--snapshot")


def describe(topology: Topology) -> dict:
    """host name -> address, prefix and roles: which role runs where (for the manifests)."""
    roles = topology.roles()
    return {h.name: {"address": h.address, "prefix": list(h.prefix), "roles": roles[h.name]}
            for h in topology.hosts if h.name in roles}


def read_all(topology: Topology, read=snapshot) -> dict:
    """host name -> read(host) (facts or snapshot) for every host with a role; a host that
    cannot answer says why instead of failing the run."""
    out = {}
    for name in topology.roles():
        try:
            out[name] = read(topology.host(name))
        except ProcessError as exc:
            out[name] = {"error": str(exc)}
    return out


def start_samplers(topology: Topology, run: RunFiles, roles: dict[str, dict[str, list[str]]],
                   inflight: dict[str, tuple[str, str]], max_s: float) -> list[ManagedProcess]:
    """One sampler on each remote host in roles (host -> role -> pid-file labels), writing
    raw/samples-<host>.csv with the same columns as the local sampler."""
    started = []
    try:
        for name, placed in roles.items():
            host = topology.host(name)
            if host.local or not placed:
                continue
            watched = {role: {"pid_files": [str(run.pid_file(label)) for label in labels],
                              "metrics_url": inflight.get(role, ("", ""))[0],
                              "gauge": inflight.get(role, ("", ""))[1]}
                       for role, labels in placed.items()}
            spec_path = run.write_sampler_spec(name, {
                "host": name, "csv": str(run.raw_samples(name)), "max_s": max_s, "roles": watched})
            started.append(start_on(host, f"sampler@{name}",
                                    [sys.executable, "-m", "harness.remote.host_sampler", str(spec_path)],
                                    run.log(f"sampler-{name}"),
                                    run.pid_file(f"sampler-{name}"), cwd=REPO_DIR,
                                    stop_timeout_s=5))
    except Exception:
        for proc in started:
            proc.stop()
        raise
    return started
