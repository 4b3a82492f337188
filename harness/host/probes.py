"""What a study's preflight asks of this machine before anything starts: the facts the pure checks
judge (harness/model/validation.py: HostFacts), and the probes that are checks of their own (the
output directory, the ports). The one entry point is harness/run/preflight.py."""
from __future__ import annotations

import os
import resource
import shutil
import tempfile
from pathlib import Path

from harness.host.processes import port_in_use
from harness.model import fault_scenarios
from harness.model.affinity import NICE, TASKSET
from harness.model.config import BYTES_PER_PLANNED_ROW, StudyConfig, repo_path
from harness.model.inflight import PORT_RANGE_FILE
from harness.model.validation import HostFacts

TW_REUSE_FILE = Path("/proc/sys/net/ipv4/tcp_tw_reuse")


def host_facts() -> HostFacts:
    return HostFacts(cpus=frozenset(os.sched_getaffinity(0)), root=os.geteuid() == 0,
                     has_taskset=shutil.which(TASKSET) is not None,
                     has_nice=shutil.which(NICE) is not None,
                     port_range=read_port_range(), hard_files_limit=hard_files_limit())


def read_port_range(path: Path = PORT_RANGE_FILE) -> tuple[int, int] | None:
    """The kernel's ephemeral port range (low, high); None where it cannot be read."""
    try:
        low, high = (int(v) for v in path.read_text().split())
    except (OSError, ValueError):
        return None
    return low, high


def read_tw_reuse(path: Path = TW_REUSE_FILE) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def hard_files_limit() -> int:
    """The highest soft open-file limit this process can give its children; -1 for unlimited."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return -1 if hard == resource.RLIM_INFINITY else hard


def out_dir_problems(config: StudyConfig) -> list[str]:
    """The output directory, or the nearest folder above it that exists, is writable (a probe
    file, removed) and has room for the planned rows. Creates nothing: a suite's cells are
    cleared before its directory is made, and a dry run makes none."""
    out = repo_path(config.out_dir)
    there = next(p for p in (out, *out.parents) if p.exists())
    try:
        with tempfile.NamedTemporaryFile(dir=there, prefix=".write-probe-"):
            pass
    except OSError as exc:
        return [f"out_dir: {out} is not writable ({exc.strerror or exc})"]
    needed = config.planned_rows() * BYTES_PER_PLANNED_ROW
    free = shutil.disk_usage(there).free
    if free < needed:
        return [f"out_dir: {free / 1e9:.2f} GB free at {out}, the planned rows may need "
                f"{needed / 1e9:.2f} GB"]
    return []


def port_problems(config: StudyConfig) -> list[str]:
    """With base_port set, the ports the study listens on must be free now."""
    if not config.base_port:
        return []
    ports = [(config.base_port, "the mock"), (config.base_port + 1, "the system under test")]
    if fault_scenarios.needs_standby(config.fault_scenario):
        ports.append((config.base_port + 2, "the standby provider"))
    return [f"base_port: port {port} (for {role}) is already in use on 127.0.0.1; stop what "
            f"listens there or choose another base_port (0 = any free port)"
            for port, role in ports if port_in_use(port)]
