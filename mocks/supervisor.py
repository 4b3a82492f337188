"""The supervisor of ``--workers K`` (K > 1) worker processes.

It starts K worker processes (``python -m mocks.server`` again, each binding the port with
SO_REUSEPORT), forwards SIGTERM/SIGINT to them, waits for them and exits; if a worker dies
on its own, it stops the others and exits 1.  Workers stay in the supervisor's process
group and also get SIGTERM if the supervisor dies (``mocks.worker.die_with_parent``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from mocks.connection import make_socket
from mocks.worker import startup_line
from mocks.worker_stats import worker_file

READY_TIMEOUT_S = 60.0


def _worker_argv(cfg) -> list[str]:
    return [sys.executable, "-m", "mocks.server",
            "--host", cfg.host, "--port", str(cfg.port), "--workers", str(cfg.workers),
            "--latency-ms", repr(cfg.latency_ms), "--stats-dir", cfg.stats_dir,
            "--response-tokens", str(cfg.response_tokens), "--stream-chunks", str(cfg.stream_chunks),
            "--chunk-delay-ms", repr(cfg.chunk_delay_ms), "--models", ",".join(cfg.models),
            "--shutdown-grace-s", repr(cfg.shutdown_grace_s), "--backlog", str(cfg.backlog),
            "--max-body-bytes", str(cfg.max_body_bytes), "--timer", cfg.timer, "--gc", cfg.gc,
            "--worker-of", str(os.getpid()),
            *(("--faults", cfg.faults, "--fault-seed", str(cfg.fault_seed),
               *(("--fault-arm-file", cfg.fault_arm_file) if cfg.fault_arm_file else
                 ("--fault-epoch-unix-s", repr(cfg.fault_epoch_unix_s)))) if cfg.faults else ())]


def _stop_children(children, sig=signal.SIGTERM) -> None:
    for child in children:
        if child.poll() is None:
            try:
                child.send_signal(sig)
            except OSError:
                pass


def _reap(children, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(child.poll() is None for child in children):
        time.sleep(0.02)
    for child in children:
        if child.poll() is None:
            child.kill()
            child.wait()


def _start_workers(cfg, children: list, requested: list) -> None:
    """Start the workers into ``children`` (none more once a stop was ``requested``)."""
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    argv = _worker_argv(cfg)
    for _ in range(cfg.workers):
        if requested:
            break
        children.append(subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL))


def _wait_ready(cfg, children: list, requested: list) -> str | None:
    """Wait until every worker wrote its stats file; what failed, if one did."""
    failed = None
    pending = list(children)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while pending and not requested and failed is None:
        pending = [child for child in pending if not os.path.exists(worker_file(cfg.stats_dir, child.pid))]
        for child in children:
            if child.poll() is not None:
                failed = f"worker {child.pid} exited during startup with code {child.returncode}"
        if time.monotonic() > deadline:
            failed = f"workers {[child.pid for child in pending]} not ready after {READY_TIMEOUT_S:g} s"
        time.sleep(0.01)
    return failed


def _wait_for_exit(children: list, requested: list) -> str | None:
    """Until a stop is requested or a worker exits on its own (then: which one, how)."""
    while not requested:
        for child in children:
            if child.poll() is not None:
                return f"worker {child.pid} exited unexpectedly with code {child.returncode}"
        time.sleep(0.1)
    return None


def supervise(cfg) -> int:
    """Run ``cfg.workers`` workers until SIGTERM/SIGINT; the exit code (1: a worker failed,
    2: the port is taken)."""
    # A plain (non-SO_REUSEPORT) bind fails if anything listens on the port already,
    # including another SO_REUSEPORT listener we would otherwise silently share it with.
    try:
        make_socket(cfg.host, cfg.port, False, 1).close()
    except OSError as exc:
        print(f"sluice-mock: cannot listen on {cfg.host}:{cfg.port}: {exc}", file=sys.stderr, flush=True)
        return 2

    children: list[subprocess.Popen] = []
    requested: list[int] = []

    def on_signal(signum, _frame):
        requested.append(signum)
        for child in children:  # no Popen.poll() here: it may be running in the main code
            if child.returncode is None:
                try:
                    os.kill(child.pid, signum)
                except OSError:
                    pass

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    _start_workers(cfg, children, requested)
    grace = cfg.shutdown_grace_s + 10.0
    failed = _wait_ready(cfg, children, requested)
    if failed is None and not requested:
        print(startup_line(cfg, os.getpid(), cfg.workers, cfg.port), flush=True)
        failed = _wait_for_exit(children, requested)

    if failed is not None:
        print(f"sluice-mock: {failed}; stopping the other workers", file=sys.stderr, flush=True)
        _stop_children(children)
        _reap(children, grace)
        return 1

    _stop_children(children, requested[0])  # again: covers a child started during the signal
    _reap(children, grace)
    ok_codes = {0, -signal.SIGTERM, -signal.SIGINT}
    bad = [(child.pid, child.returncode) for child in children if child.returncode not in ok_codes]
    if bad:
        print(f"sluice-mock: workers exited with errors: {bad}", file=sys.stderr, flush=True)
        return 1
    return 0
