"""The in-flight lane, decided before anything starts: how many requests each step holds open,
how long, what the load generator and the mock must be to hold the highest step, and whether the
machine lets that many connections exist (open files, the loopback's ephemeral ports).

The load is closed loop with no think time: N users keep N requests open, each held by the mock
for ``inflight_hold_s`` (a stream sends a frame every ``chunk_delay_ms`` for the whole hold).
Each step lasts ``inflight_step_s``: the users of the step are spawned, the open requests settle,
and the last two holds of the step are its measured window.
"""
from __future__ import annotations

import math
import resource
from pathlib import Path

from harness.model.config import StudyConfig
from harness.model.topology import load_processes

# Users Locust spawns per second per process when a step begins (Locust warns above 100 per
# process for heavy users; ours only open one request each).
SPAWN_RATE_PER_PROCESS = 100.0
# Open requests one Locust process holds, and SSE frames it reads a second, before it is itself
# the limit: estimates for 2 shared cores; direct at each step is the proof of the instruments.
OPEN_PER_LOCUST_PROCESS = 2500
FRAMES_PER_LOCUST_PROCESS_S = 10_000
# SSE frames one mock worker writes a second before it is the limit (estimate, proved by direct).
FRAMES_PER_MOCK_WORKER_S = 20_000
# Holds of each step that are measured; and the seconds after the spawn before they start.
MEASURED_HOLDS = 2
SETTLE_S = 5.0
# Descriptors a process needs beyond one per open request.
FD_MARGIN = 1024
# The loopback's ephemeral port range: every open connection to one address and port takes one.
PORT_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
TW_REUSE_FILE = Path("/proc/sys/net/ipv4/tcp_tw_reuse")

# The hold must be long next to a gateway's own time, and a stream must carry frames.
MIN_HOLD_S = 1.0
MIN_FRAME_MS = 10.0


def mock_hold(config: StudyConfig) -> tuple[float, int]:
    """(the mock's latency before the head in ms, content frames) that hold a request open for
    inflight_hold_s: unary, the whole hold before the head; streamed, a frame every
    chunk_delay_ms from the first after one gap until the hold ends."""
    hold_ms = config.inflight_hold_s * 1000.0
    if not config.stream:
        return hold_ms, config.stream_chunks
    frames = max(1, int(round(hold_ms / config.chunk_delay_ms)) - 1)
    return config.chunk_delay_ms, frames


def spawn_rate_per_s(processes: int) -> float:
    """Users spawned a second when a step begins, over all Locust processes."""
    return SPAWN_RATE_PER_PROCESS * processes


def needed_step_s(config: StudyConfig, index: int, processes: int) -> float:
    """A step must spawn the users it adds (index 0: from none), settle, then hold
    MEASURED_HOLDS whole holds."""
    before = config.inflight_steps[index - 1] if index else 0
    spawn_s = (config.inflight_steps[index] - before) / spawn_rate_per_s(processes)
    return spawn_s + SETTLE_S + MEASURED_HOLDS * config.inflight_hold_s


def read_port_range(path: Path = PORT_RANGE_FILE) -> tuple[int, int] | None:
    """The kernel's ephemeral port range (low, high); None where it cannot be read."""
    try:
        low, high = (int(v) for v in path.read_text().split())
    except (OSError, ValueError):
        return None
    return low, high


def hard_files_limit() -> int:
    """The highest soft open-file limit this process can give its children; -1 for unlimited."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return -1 if hard == resource.RLIM_INFINITY else hard


def read_tw_reuse(path: Path = TW_REUSE_FILE) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def problems(config: StudyConfig, port_range: tuple[int, int] | None,
             hard_files_limit: int) -> list[str]:
    """Every reason this in-flight schedule cannot run here, one line each, naming the parameter."""
    steps = config.inflight_steps
    if any(n < 1 for n in steps) or list(steps) != sorted(set(steps)):
        return [f"inflight_steps: must be positive and strictly ascending, got {list(steps)}"]
    top, out = steps[-1], []
    if config.inflight_hold_s < MIN_HOLD_S:
        out.append(f"inflight_hold_s: must be at least {MIN_HOLD_S:g} s, got {config.inflight_hold_s:g}")
    if config.stream and config.chunk_delay_ms < MIN_FRAME_MS:
        out.append(f"chunk_delay_ms: a stream's frames must be at least {MIN_FRAME_MS:g} ms apart, "
                   f"got {config.chunk_delay_ms:g}")
    if config.open_loop_rates_per_s:
        out.append("open_loop_rates_per_s: the in-flight lane is closed loop; leave it empty")
    if config.think_time_s != 0:
        out.append(f"think_time_s: each user keeps one request open; set it to 0, got {config.think_time_s:g}")
    if config.users < top:
        out.append(f"users: the highest step holds {top} requests open, got {config.users}")
    if config.request_timeout_s <= 2 * config.inflight_hold_s:
        out.append(f"request_timeout_s: must exceed twice the hold ({2 * config.inflight_hold_s:g} s), "
                   f"so queueing is measured, not cut off; got {config.request_timeout_s:g}")
    processes = load_processes(config.topology_path, config.locust_processes)
    if processes >= 1 and config.chunk_delay_ms >= MIN_FRAME_MS:
        out += _instrument_problems(config, top, processes)
        worst = max(range(len(steps)), key=lambda i: needed_step_s(config, i, processes))
        if config.inflight_step_s < needed_step_s(config, worst, processes):
            out.append(f"inflight_step_s: step {steps[worst]} needs at least "
                       f"{needed_step_s(config, worst, processes):.0f} s (spawn, {SETTLE_S:g} s "
                       f"to settle, {MEASURED_HOLDS} holds), got {config.inflight_step_s:g}")
    return out + _machine_problems(config, top, port_range, hard_files_limit)


def _instrument_problems(config: StudyConfig, top: int, processes: int) -> list[str]:
    """The load generator and the mock must hold the highest step without being the limit."""
    out = []
    frames_s = top * 1000.0 / config.chunk_delay_ms if config.stream else 0.0
    needed = max(math.ceil(top / OPEN_PER_LOCUST_PROCESS),
                 math.ceil(frames_s / FRAMES_PER_LOCUST_PROCESS_S))
    if processes < needed:
        out.append(f"locust_processes: {top} open requests{' streamed' if config.stream else ''} "
                   f"need at least {needed} Locust processes (or a topology's workers), got "
                   f"{processes}")
    workers = math.ceil(frames_s / FRAMES_PER_MOCK_WORKER_S)
    if config.mock_workers < workers:
        out.append(f"mock_workers: {frames_s:.0f} frames/s need at least {workers} mock workers, "
                   f"got {config.mock_workers}")
    return out


def _machine_problems(config: StudyConfig, top: int, port_range: tuple[int, int] | None,
                      hard_files_limit: int) -> list[str]:
    out = []
    # Each open request is one descriptor of a Locust process, a mock worker or a one-process
    # gateway on each side; a system that needs more than the limit is labelled so by the stats.
    needed_fds = top + FD_MARGIN
    limit = hard_files_limit if config.open_files_limit == 0 else config.open_files_limit
    if 0 <= hard_files_limit < config.open_files_limit:
        out.append(f"open_files_limit: above this process's hard limit {hard_files_limit} (ulimit -Hn, "
                   f"limits.conf), got {config.open_files_limit}")
    elif 0 <= limit < needed_fds:
        out.append(f"open_files_limit: {top} open requests need at least {needed_fds} descriptors "
                   f"per process, the limit here is {limit}")
    if port_range is None:
        out.append(f"inflight_steps: cannot read the ephemeral port range ({PORT_RANGE_FILE})")
    elif port_range[1] - port_range[0] + 1 < top + FD_MARGIN:
        out.append(f"inflight_steps: {top} open connections to one address need more ephemeral "
                   f"ports than {port_range[0]}-{port_range[1]} gives (sysctl net.ipv4."
                   f"ip_local_port_range)")
    return out
