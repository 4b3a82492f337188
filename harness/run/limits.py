"""The machine's limits on open connections, for every run: the open-file limit raised before any
process starts (children inherit it) and read back from each started role, and the loopback's
ephemeral port range, recorded in the run manifest."""
from __future__ import annotations

import resource

from harness.host.probes import read_port_range, read_tw_reuse
from harness.host.processes import open_files_limit_of, raise_open_files_limit
from harness.model.manifests import RunLimits


def raise_for(asked: int) -> None:
    """Before a run starts its processes: they inherit this process's limit."""
    raise_open_files_limit(asked)


def own_limit() -> int:
    """The soft open-file limit this process runs with, and so every process it starts here
    (-1: unlimited)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return -1 if soft == resource.RLIM_INFINITY else soft


def observed(asked: int, started: dict) -> RunLimits:
    """The limits each started role (role -> its ManagedProcess, or None) ran with."""
    ports = read_port_range()
    return RunLimits(
        open_files_asked=asked,
        open_files_by_role={role: open_files_limit_of(p.pid) if p is not None else None
                            for role, p in started.items()},
        port_range=f"{ports[0]}-{ports[1]}" if ports else "", tcp_tw_reuse=read_tw_reuse())


def with_role(recorded: RunLimits | None, role: str, process) -> RunLimits | None:
    """``recorded`` with one more started role's limit (the load generator starts last)."""
    if recorded is None:
        return None
    by_role = {**recorded.open_files_by_role, role: open_files_limit_of(process.pid)}
    return RunLimits(recorded.open_files_asked, by_role, recorded.port_range, recorded.tcp_tw_reuse)
