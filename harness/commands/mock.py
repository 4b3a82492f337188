"""Is the mock still an exact instrument at many connections? Starts the mock, holds
``--connections`` keep-alive connections open from one asyncio (uvloop) client, each sending a
request with an id, reading the answer and waiting ``--think-s`` (the study's closed loop), then
stops the mock and prints, as JSON, the mock's own added time and its holds from its per-request
log (harness.stats.mock_time), the mock's CPU time and memory, what its garbage collector did
after the ramp (``gc``: passes, pauses), and how much of the time some task on the machine
waited for a CPU (Linux PSI, ``/proc/pressure/cpu``): on a shared machine the holds' tail is
mostly that wait.

    python -m harness mock --connections 1000 --workers 1 --latency-ms 60 --duration-s 20
    python -m harness mock --connections 1000 --gc default      # the mock's GC control off

Load goes to 127.0.0.1 only. Exit 1 when the mock does not start.
"""
from __future__ import annotations

import argparse

HELP = "is the mock still exact at many connections: its own time, CPU, memory and GC"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from mocks.gc_control import GC_MODES
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--latency-ms", type=float, default=60.0)
    parser.add_argument("--duration-s", type=float, default=20.0, help="measured part, after the ramp")
    parser.add_argument("--ramp-s", type=float, default=5.0)
    parser.add_argument("--think-s", type=float, default=1.0)
    parser.add_argument("--gc", choices=GC_MODES, default="lean",
                        help="the mock's garbage-collector mode (mocks.server --gc)")


def run(args: argparse.Namespace) -> int:
    import json
    import sys

    from harness.model.config import ConfigError
    from harness.run.mock_load import measure_mock
    from harness.stats.mock_time import mock_self_time
    bad = [f"{name}: must be positive, got {getattr(args, name)}"
           for name in ("connections", "workers", "duration_s") if getattr(args, name) <= 0]
    bad += [f"{name}: must not be negative, got {getattr(args, name)}"
            for name in ("latency_ms", "ramp_s", "think_s") if getattr(args, name) < 0]
    if bad:
        raise ConfigError(bad)
    try:
        out = measure_mock(args.connections, args.workers, args.latency_ms, args.duration_s,
                           args.ramp_s, args.think_s, args.gc)
    except RuntimeError as exc:
        print(f"mock check failed: {exc}", file=sys.stderr)
        return 1
    log = out.pop("log")
    print(json.dumps({**out, "self_time_ms": mock_self_time(log)}, indent=1))
    return 0
