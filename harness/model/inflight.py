"""The in-flight lane, decided before anything starts: how many requests each step holds open,
how long, what the load generator and the mock must be to hold the highest step, and whether the
machine lets that many connections exist (open files, the loopback's ephemeral ports).

The load is closed loop with no think time: N users keep N requests open, each held by the mock
for ``inflight_hold_s`` (a stream sends a frame every ``chunk_delay_ms`` for the whole hold).
Each step lasts ``inflight_step_s``: the step's new users are spawned evenly over one hold, the
open requests settle, and the last hold of the step is its measured window. The steps share the
run's warm-up: a step adds only its new users to those already holding requests open. After the
last step run, the users hold one more hold, so its window's requests are answered before the
load stops.

Before the load starts, each step's descriptor need (the load generator's, the mock's and the
system's own, per process) is checked against the open-file limit each role runs with: the steps
from the first that cannot fit are not run, and are the instruments' limit for that system.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from harness.model.config import StudyConfig

# Each step's new users are spawned evenly over one hold: closed-loop users with a fixed hold keep
# the phase they started with, so users spawned in a burst answer in a burst every hold for the
# rest of the run (5,000 users spawned in 2.5 s added ~100 ms at p50 to direct itself), while
# users spread over one hold keep an even stream of requests, as real traffic is.
# Open requests one Locust process holds, and SSE frames it reads a second, before it is itself
# the limit: estimates for 2 shared cores; direct at each step is the proof of the instruments.
OPEN_PER_LOCUST_PROCESS = 2500
FRAMES_PER_LOCUST_PROCESS_S = 10_000
# SSE frames one mock worker writes a second before it is the limit (estimate, proved by direct).
FRAMES_PER_MOCK_WORKER_S = 20_000
# Holds of each step that are measured (each user sends one request in a hold); and the seconds
# after the spawn before they start (every user's request is open from its spawn on).
MEASURED_HOLDS = 1
SETTLE_S = 2.0
# After the last step run, the users keep their requests open one more hold and this long, so
# the requests started in its window are answered before the load stops.
DRAIN_MARGIN_S = 2.0
# Descriptors a process needs beyond one per open request.
FD_MARGIN = 1024
# Connections one open request costs each role: the load generator's to the system (or to the
# mock, for the floor), the mock's from the system, and the system's two (client and upstream).
CONNECTIONS_PER_OPEN = {"locust": 1, "mock": 1, "system": 2}
# The loopback's ephemeral port range: every open connection to one address and port takes one.
PORT_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")

# The abandon phase: the clients' closes at its start, then the seconds the system has to let go
# of what they held (its descriptors are read from 1 s after the closes to the phase's end).
ABANDON_PHASE_S = 3.0
# A run stops above a step whose added p99 (the load generator's running figure over the step's
# measured hold) is beyond this: well above the instruments' own 100-700 ms, so they never stop a
# run; whether a step was held is judged after the runs, against direct.
STOP_ADDED_P99_S = 1.0

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


def abandons(config) -> bool:
    """Whether the run leaves streams mid-way (``config``: a StudyConfig or a LoadShape)."""
    return bool(config.stream and config.inflight_abandon_share > 0)


def abandon_phase_s(config) -> float:
    """The abandon phase at each step's end (0 when the run leaves no stream)."""
    return ABANDON_PHASE_S if abandons(config) else 0.0


def added_p99_ms(before: dict, after: dict, hold_s: float) -> float | None:
    """The p99 beyond the hold of the answers counted between two of Locust's response-time
    histograms (rounded ms -> count); None when there were none."""
    counts = sorted((ms, n - before.get(ms, 0)) for ms, n in after.items() if n > before.get(ms, 0))
    total = sum(n for _, n in counts)
    if not total:
        return None
    seen = 0
    for ms, n in counts:
        seen += n
        if seen >= 0.99 * total:
            return ms - hold_s * 1000.0
    return counts[-1][0] - hold_s * 1000.0


def needed_step_s(config: StudyConfig) -> float:
    """A step spawns its new users over one hold, settles, holds MEASURED_HOLDS holds, then (a
    run that leaves streams) its abandon phase."""
    return (config.inflight_hold_s + SETTLE_S + MEASURED_HOLDS * config.inflight_hold_s
            + abandon_phase_s(config))


def load_s(steps: int, step_s: float, hold_s: float) -> float:
    """How long the steps last with the drain after the last."""
    return steps * step_s + hold_s + DRAIN_MARGIN_S


def problems(config: StudyConfig, processes: int, port_range: tuple[int, int] | None,
             hard_files_limit: int) -> list[str]:
    """Every reason this in-flight schedule cannot run here, one line each, naming the parameter.
    processes: the Locust processes that generate the load (a topology's workers count)."""
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
    if not 0 <= config.inflight_abandon_share < 1:
        out.append(f"inflight_abandon_share: a share of the open streams, from 0 up to (not "
                   f"including) 1, got {config.inflight_abandon_share:g}")
    if config.think_time_s != 0:
        out.append(f"think_time_s: each user keeps one request open; set it to 0, got {config.think_time_s:g}")
    if config.users < top:
        out.append(f"users: the highest step holds {top} requests open, got {config.users}")
    if config.request_timeout_s <= 2 * config.inflight_hold_s:
        out.append(f"request_timeout_s: must exceed twice the hold ({2 * config.inflight_hold_s:g} s), "
                   f"so queueing is measured, not cut off; got {config.request_timeout_s:g}")
    if processes >= 1 and config.chunk_delay_ms >= MIN_FRAME_MS:
        out += _instrument_problems(config, top, processes)
    if config.inflight_step_s < needed_step_s(config):
        out.append(f"inflight_step_s: a step needs at least {needed_step_s(config):.0f} s (its "
                   f"users spawned over one hold, {SETTLE_S:g} s to settle, {MEASURED_HOLDS} "
                   f"measured hold{', the abandon phase' if abandons(config) else ''}), got "
                   f"{config.inflight_step_s:g}")
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


@dataclass(frozen=True)
class RoleFiles:
    """What one role brings to a step's descriptor check: the processes its connections spread
    over, the descriptors each holds besides them (measured at idle, or FD_MARGIN where it could
    not be), and the open-file limit each runs with (None: unknown, not checked; -1: unlimited)."""
    role: str
    processes: int
    own_fds: int
    limit: int | None


def descriptors_needed(open_requests: int, role: RoleFiles) -> int:
    """Descriptors one process of ``role`` needs with ``open_requests`` open: its share of the
    connections (spread evenly) and its own."""
    per_open = CONNECTIONS_PER_OPEN.get(role.role, 1)
    return math.ceil(open_requests * per_open / max(1, role.processes)) + role.own_fds


def steps_that_fit(steps: tuple[int, ...], roles: list[RoleFiles]) -> tuple[int, str]:
    """(how many of ``steps``, from the lowest, fit every role's limit; why the next one does not,
    "" when all fit). A step that does not fit is never run: it would measure the machine."""
    for index, step in enumerate(steps):
        for role in roles:
            if role.limit is None or role.limit < 0:
                continue
            need = descriptors_needed(step, role)
            if need > role.limit:
                spread = (f"over {role.processes} processes" if role.processes > 1
                          else "in one process")
                return index, (f"{step:,} open requests need {need:,} descriptors per {role.role} "
                               f"process ({CONNECTIONS_PER_OPEN.get(role.role, 1)} a request "
                               f"{spread}, {role.own_fds:,} of its own); its open-file limit is "
                               f"{role.limit:,}")
    return len(steps), ""
