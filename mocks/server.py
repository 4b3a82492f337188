"""Sluice's mock LLM provider: OpenAI and Anthropic dialects, fixed latency, self-measured.

    python -m mocks.server --host 127.0.0.1 --port N --latency-ms 60 --workers 1 \\
        --stats-dir DIR --response-tokens 16 --stream-chunks 20 --chunk-delay-ms 20 \\
        [--faults SCHEDULE.json --fault-seed 0 [--fault-epoch-unix-s T | --fault-arm-file PATH]]
        [--gc lean|freeze|default]

This module is the entry point: it reads the arguments and runs one worker here
(``--workers 1``) or a supervisor of K worker processes.  The mock's modules, one job each:

    server          the command line; a worker here, or a supervisor
    supervisor      ``--workers K`` (K > 1): K worker processes sharing the port, started,
                    watched and stopped together
    worker          one worker process: socket, app, stats file writer, ``down`` windows,
                    garbage-collector control, shutdown
    app             the request handler: endpoints, holds, unary answers and streams, each
                    request's stats and request-log line (endpoints and timing: its docstring)
    fault_replies   the answers of a generation request that gets a fault
    protocol        header names, limits and request checks (body shape, ``x-mock-*`` headers),
                    the load generator's id, the 400 bodies
    connection      listening socket, the listener ``down`` faults close, the per-connection
                    handler, byte counts
    bodies          pre-rendered response bodies of both dialects
    faults          the fault schedule, its validation, which request gets which fault, the
                    providers' error bodies
    gc_control      ``--gc``: when Python's cyclic collector runs, and every pass's pause
    timer           the timerfd that times holds and stream gaps (never early)
    worker_stats    one worker's counters and its stats file
    stats           the workers' stats files merged (the ``mock_stats.json`` shape) and diffed
    request_log     the per-request log (one CSV per worker) and its reader

Faults (see ``mocks.faults`` for the schedule's format and what each does on the wire):
``--faults JSON_OR_FILE`` (a list of fault specs, each with a share and a window),
``--fault-seed N`` (which requests get them; recorded in the stats' config) and
``--fault-epoch-unix-s T`` (the windows' zero; default the mock's start, shared by all
workers) or ``--fault-arm-file PATH`` (no fault until that file appears; its ``epoch_unix_s``
is then the zero: the harness's load generator writes it when the load really starts).  A request header ``x-mock-fault: ...`` forces a fault on one request
(``mocks.fault_replies``); a ``down`` window closes every worker's listener and connections
(``mocks.worker``).  Without a schedule the cost per request is one header lookup and one
``is None`` test.

Garbage collection: ``--gc`` (``mocks.gc_control``).  With ``--workers K`` (K > 1) this
process is a supervisor (``mocks.supervisor``); with K = 1 everything is served in this
process.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import uvloop

from mocks.faults import FaultError, load_schedule
from mocks.gc_control import GC_MODES
from mocks.protocol import MAX_CHUNKS, MAX_MS, MAX_TOKENS
from mocks.supervisor import supervise
from mocks.worker import die_with_parent, serve
from mocks.worker_stats import clear_worker_files


def _parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m mocks.server", description="Sluice's mock LLM provider")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--latency-ms", type=float, default=60.0, help="hold before the response head (default 60)")
    ap.add_argument("--workers", type=int, default=1, help="worker processes sharing the port (default 1)")
    ap.add_argument("--stats-dir", default=None, help="where workers write their stats (default: a new temp dir)")
    ap.add_argument("--response-tokens", type=int, default=16, help="words of content per response (default 16)")
    ap.add_argument("--stream-chunks", type=int, default=20, help="content frames per stream (default 20)")
    ap.add_argument("--chunk-delay-ms", type=float, default=20.0, help="gap between content frames (default 20)")
    ap.add_argument("--models", default="mock-model", help="comma-separated ids for /v1/models")
    ap.add_argument("--shutdown-grace-s", type=float, default=1.0,
                    help="on SIGTERM, how long in-flight requests may finish (default 1)")
    ap.add_argument("--backlog", type=int, default=4096)
    ap.add_argument("--timer", choices=("timerfd", "loop"), default="timerfd",
                    help="how holds and chunk gaps are timed: a timerfd (sub-ms, Linux; default) or the "
                         "event loop's millisecond timers")
    ap.add_argument("--max-body-bytes", type=int, default=64 * 1024 * 1024)
    ap.add_argument("--gc", choices=GC_MODES, default="lean",
                    help="Python's cyclic garbage collector: lean (default: startup heap frozen, "
                         "collected on the mock's timer, not inside requests), freeze (startup heap "
                         "frozen, Python's thresholds: the mock before 1.2), default (as Python sets it)")
    ap.add_argument("--faults", default=None, metavar="JSON_OR_FILE",
                    help="fault schedule: a JSON list (inline, or the path of a file); see mocks.faults")
    ap.add_argument("--fault-seed", type=int, default=0, help="which requests get a fault (default 0)")
    ap.add_argument("--fault-epoch-unix-s", type=float, default=None,
                    help="the faults' start_s counts from this wall-clock time (default: the mock's start)")
    ap.add_argument("--fault-arm-file", default=None, metavar="PATH",
                    help='no fault until this file appears; its {"epoch_unix_s": T} is then the epoch '
                         "(the load generator writes it when the load really starts)")
    ap.add_argument("--worker-of", type=int, default=None, help=argparse.SUPPRESS)
    cfg = ap.parse_args(argv)
    if cfg.workers < 1:
        ap.error("--workers must be at least 1")
    if not (0 <= cfg.latency_ms <= MAX_MS) or not (0 <= cfg.chunk_delay_ms <= MAX_MS):
        ap.error("--latency-ms and --chunk-delay-ms must be between 0 and 3600000")
    if not (1 <= cfg.stream_chunks <= MAX_CHUNKS):
        ap.error(f"--stream-chunks must be between 1 and {MAX_CHUNKS}")
    if not (0 <= cfg.response_tokens <= MAX_TOKENS):
        ap.error(f"--response-tokens must be between 0 and {MAX_TOKENS}")
    if not (0 < cfg.port < 65536):
        ap.error("--port must be between 1 and 65535")
    cfg.models = [m for m in cfg.models.split(",") if m] or ["mock-model"]
    try:
        cfg.fault_schedule = load_schedule(cfg.faults) if cfg.faults else []
    except FaultError as exc:
        ap.error(f"--faults: {exc}")
    if cfg.fault_arm_file and cfg.fault_epoch_unix_s is not None:
        ap.error("--fault-arm-file and --fault-epoch-unix-s: give one (the arm file carries the epoch)")
    if cfg.fault_arm_file:
        cfg.fault_arm_file = os.path.abspath(cfg.fault_arm_file)
    elif cfg.fault_epoch_unix_s is None:
        cfg.fault_epoch_unix_s = time.time()  # a supervisor passes its own to every worker
    return cfg


def main(argv=None) -> int:
    cfg = _parse_args(argv)
    if cfg.worker_of is not None:  # a worker started by a supervisor
        die_with_parent(cfg.worker_of)
        return uvloop.run(serve(cfg, reuseport=True, announce=False))
    if cfg.stats_dir is None:
        cfg.stats_dir = tempfile.mkdtemp(prefix="sluice-mock-stats-")
    cfg.stats_dir = os.path.abspath(cfg.stats_dir)
    os.makedirs(cfg.stats_dir, exist_ok=True)
    clear_worker_files(cfg.stats_dir)  # figures of an earlier mock must not be merged in
    if cfg.workers == 1:
        return uvloop.run(serve(cfg, reuseport=False, announce=True))
    return supervise(cfg)


if __name__ == "__main__":
    sys.exit(main())
