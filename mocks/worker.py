"""One worker process: its socket, app, stats file writer, ``down`` windows and garbage
collector control, from start to shutdown (:func:`serve`).

The worker writes its stats file (``mocks.worker_stats``) every ``STATS_INTERVAL_S`` when it
changed and at least every ``STATS_HEARTBEAT_S``, flushing its request log
(``mocks.request_log``) first; its first file is also the readiness signal for a
supervisor (``mocks.supervisor``).  The fault schedule takes effect at its epoch, or, with
``--fault-arm-file``, when that file appears (polled every ``ARM_POLL_S``; its epoch is then
recorded in the stats' config).  A ``down`` window closes the listener and every connection,
so connects are refused until it ends; the stats file records when the worker applied it
(``down_windows``).
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import signal
import sys
import time

from aiohttp.web_request import BaseRequest

from mocks import __version__
from mocks.app import MockApp
from mocks.connection import ConnectionServer, Listener, make_socket
from mocks.gc_control import gc_timer, start_gc_control
from mocks.request_log import RequestLog
from mocks.timer import PreciseTimer
from mocks.worker_stats import WorkerStats

STATS_INTERVAL_S = 0.25   # write the worker file this often when it changed ...
STATS_HEARTBEAT_S = 0.5   # ... and at least this often anyway (freshness for read_stats)
ARM_POLL_S = 0.02         # how often a worker whose faults wait for an arm file looks for it


def startup_line(cfg, pid: int, workers: int, port: int) -> str:
    return (f"sluice-mock {__version__} ready url=http://{cfg.host}:{port} port={port} pid={pid} "
            f"workers={workers} latency_ms={cfg.latency_ms:g} stats_dir={cfg.stats_dir}")


async def _stats_writer(stats: WorkerStats, stats_dir: str, log: RequestLog) -> None:
    last_version = stats.version
    last_write = time.monotonic()
    warned = False
    log_warned = False
    while True:
        await asyncio.sleep(STATS_INTERVAL_S)
        try:
            log.flush()
        except OSError as exc:
            if not log_warned:
                print(f"sluice-mock: cannot write the request log {log.path}: {exc}", file=sys.stderr, flush=True)
                log_warned = True
        if log.dropped != stats.log_dropped:
            stats.log_dropped = log.dropped
            stats.version += 1
        now = time.monotonic()
        if stats.version != last_version or now - last_write >= STATS_HEARTBEAT_S:
            last_version = stats.version
            try:
                stats.write(stats_dir)
            except OSError as exc:
                if not warned:
                    print(f"sluice-mock: cannot write stats to {stats_dir}: {exc}", file=sys.stderr, flush=True)
                    warned = True
            last_write = now


def _config_record(cfg) -> dict:
    record = {"latency_ms": cfg.latency_ms, "response_tokens": cfg.response_tokens,
              "stream_chunks": cfg.stream_chunks, "chunk_delay_ms": cfg.chunk_delay_ms,
              "workers": cfg.workers, "gc": cfg.gc, "mock_version": __version__}
    if cfg.fault_schedule:
        record.update(faults=[fault.record() for fault in cfg.fault_schedule], fault_seed=cfg.fault_seed,
                      fault_epoch_unix_s=cfg.fault_epoch_unix_s)  # None until armed
    return record


async def _arm_epoch(path: str) -> float:
    """The epoch in the arm file ``{"epoch_unix_s": T}``, once it exists (its writer replaces
    it whole, so a file seen is complete). A file without a number is reported once and waited
    past: the faults never start on a guess."""
    reported = False
    while True:
        try:
            with open(path, "rb") as f:
                epoch = json.loads(f.read())["epoch_unix_s"]
            if isinstance(epoch, (int, float)) and not isinstance(epoch, bool):
                return float(epoch)
            raise ValueError(f"epoch_unix_s is {epoch!r}, not a number")
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if not reported:
                print(f"sluice-mock: the arm file {path} is not usable ({exc}); the faults wait",
                      file=sys.stderr, flush=True)
                reported = True
        await asyncio.sleep(ARM_POLL_S)


async def _faults(cfg, app: MockApp, listener: Listener, stats: WorkerStats, stop: asyncio.Event) -> None:
    """Arm the schedule when its arm file appears, then run its ``down`` windows."""
    if cfg.fault_arm_file:
        cfg.fault_epoch_unix_s = await _arm_epoch(cfg.fault_arm_file)
        app.arm(cfg.fault_epoch_unix_s)
        stats.config["fault_epoch_unix_s"] = cfg.fault_epoch_unix_s
        stats.version += 1
    if any(fault.kind == "down" for fault in cfg.fault_schedule):
        await _down_windows(cfg, listener, stats, stop)


async def _down_windows(cfg, listener: Listener, stats: WorkerStats, stop: asyncio.Event) -> None:
    """Run the schedule's ``down`` faults: refuse connections from start to end."""
    downs = sorted((fault for fault in cfg.fault_schedule if fault.kind == "down"),
                   key=lambda fault: fault.start_s)
    for down in downs:
        start = cfg.fault_epoch_unix_s + down.start_s
        end = start + down.duration_s
        if end <= time.time():
            continue
        await asyncio.sleep(max(0.0, start - time.time()))
        listener.close()
        for conn in listener.server.connections:  # the provider is gone for everyone
            conn.force_close()
        t_down = time.time()
        await asyncio.sleep(max(0.0, end - time.time()))
        ok = await listener.reopen()
        stats.down_windows.append({"fault_index": down.index, "start_t_unix_s": t_down, "end_t_unix_s": time.time()})
        stats.version += 1
        if not ok:
            stats.config["listen_failed"] = True
            stop.set()
            return


async def serve(cfg, reuseport: bool, announce: bool) -> int:
    """Serve until SIGTERM or SIGINT, then shut down (in-flight requests get
    ``cfg.shutdown_grace_s``); the exit code (2: could not listen)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    stats = WorkerStats(cfg.latency_ms, _config_record(cfg))
    timer = PreciseTimer(loop, force_fallback=(cfg.timer == "loop"))
    stats.config["timer"] = timer.kind
    log = RequestLog(cfg.stats_dir)
    app = MockApp(cfg, stats, timer, log)
    if cfg.fault_schedule and not cfg.fault_arm_file:
        app.arm(cfg.fault_epoch_unix_s)
    max_body = cfg.max_body_bytes

    def request_factory(message, payload, protocol, writer, task):
        return BaseRequest(message, payload, protocol, writer, task, loop, client_max_size=max_body)

    server = ConnectionServer(app.handle, request_factory=request_factory, access_log=None)
    try:
        sock = make_socket(cfg.host, cfg.port, reuseport, cfg.backlog)
    except OSError as exc:
        print(f"sluice-mock: cannot listen on {cfg.host}:{cfg.port}: {exc}", file=sys.stderr, flush=True)
        return 2
    listener = Listener(loop, server, sock, cfg, reuseport)
    await listener.open()
    stats.write(cfg.stats_dir)  # also the readiness signal for a supervisor
    if announce:
        print(startup_line(cfg, os.getpid(), 1, listener.port), flush=True)
    stats_writer = asyncio.create_task(_stats_writer(stats, cfg.stats_dir, log))
    faults = asyncio.create_task(_faults(cfg, app, listener, stats, stop)) if cfg.fault_schedule else None
    watch = start_gc_control(cfg.gc, stats)
    collector = asyncio.create_task(gc_timer(watch)) if cfg.gc == "lean" else None

    await stop.wait()

    if collector is not None:
        collector.cancel()
    if faults is not None:
        faults.cancel()
    listener.close()  # stop accepting; then let in-flight requests finish (bounded)
    try:
        await server.shutdown(cfg.shutdown_grace_s)
    finally:
        stats_writer.cancel()
        try:
            log.close()
        except OSError as exc:
            print(f"sluice-mock: cannot write the request log {log.path}: {exc}", file=sys.stderr, flush=True)
        stats.log_dropped = log.dropped
        stats.final = True
        stats.write(cfg.stats_dir)
        timer.close()
    return 2 if stats.config.get("listen_failed") else 0


def die_with_parent(parent_pid: int) -> None:
    """A supervisor's worker: get SIGTERM when the supervisor dies (exit now if it already did)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:  # the supervisor died before prctl took effect
        sys.exit(1)
