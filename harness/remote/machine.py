"""Facts about the machine and the software, recorded in every manifest (as pyperf does).

`python -m harness.remote.machine --facts|--snapshot` is not a user command: the harness runs it
on other hosts through their prefix and reads the JSON it prints (harness/remote/hosts.py).
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys
import time

import psutil

from harness.model.config import REPO_DIR

PACKAGES = ("locust", "pandas", "pyarrow", "psutil", "aiohttp", "uvloop", "httptools", "orjson",
            "papermill", "scipy", "matplotlib")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def tcp_states() -> dict[str, int]:
    counts: dict[str, int] = {}
    try:
        for conn in psutil.net_connections("tcp"):
            counts[conn.status] = counts.get(conn.status, 0) + 1
    except (psutil.Error, OSError):
        return {"unavailable": 1}
    return counts


def host_snapshot() -> dict:
    """What can change between runs: load, sockets, memory."""
    load1, load5, load15 = os.getloadavg()
    return {"t_unix_s": time.time(), "load_avg_1m": load1, "load_avg_5m": load5,
            "load_avg_15m": load15, "tcp_states": tcp_states(),
            "memory_available_bytes": psutil.virtual_memory().available}


def this_machine() -> dict:
    return {
        "hostname": socket.gethostname(),
        "kernel": platform.release(),
        "os": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        **{k: v for k, v in host_snapshot().items() if k != "tcp_states"},
    }


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def git_commit() -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_DIR, capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO_DIR, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (commit or "unknown") + ("-dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    """JSON on stdout: this machine's facts (default) or a snapshot of its load."""
    parser = argparse.ArgumentParser(prog="python -m harness.remote.machine", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--facts", action="store_true", help="kernel, CPU, memory, ... (default)")
    what.add_argument("--snapshot", action="store_true", help="load averages and memory now")
    args = parser.parse_args(argv)
    print(json.dumps(host_snapshot() if args.snapshot else this_machine()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
