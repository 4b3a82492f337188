"""The 1-second sampler, run on another host beside the processes placed there.
Not a user command: the harness starts it there through the host's prefix (harness/run/run.py).

    python -m harness.remote.host_sampler SPEC.json

SPEC names the host, the CSV to write (in the shared run directory) and, per role, the pid
files of its processes (written by harness.remote.launch; read each second, so a process started
later is picked up). Runs until SIGTERM, or max_s at most should the harness be gone; the
harness consolidates the CSV into samples.parquet.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from harness.files.producers import read_pid, read_settings
from harness.host.sampling import Sampler, scrape_gauge


def read_pids(paths: list[str]) -> list[int]:
    """The pids written so far (one not started yet, or never, has nothing to sample)."""
    return [pid for pid in map(read_pid, paths) if pid is not None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.remote.host_sampler", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", type=Path, help="the sampler's JSON spec")
    spec = read_settings(parser.parse_args(argv).spec)
    sampler = Sampler(Path(spec["csv"]), host=spec["host"])
    for role, entry in spec["roles"].items():
        inflight = None
        if entry.get("metrics_url") and entry.get("gauge"):
            inflight = (lambda url=entry["metrics_url"], gauge=entry["gauge"]:  # noqa: E731
                        scrape_gauge(url, gauge))
        sampler.watch(role, lambda files=entry["pid_files"]: read_pids(files), inflight)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    sampler.start()
    done.wait(timeout=float(spec["max_s"]))
    sampler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
