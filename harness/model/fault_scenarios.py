"""The provider-fault lane's named scenarios: what the mock does to the requests, and when.

A study names one scenario (``fault_scenario``); its fault window is placed inside the hold:
it starts ``fault_start_s`` seconds after the hold's planned start and lasts ``fault_duration_s``
seconds (0 = the scenario's own duration). The harness starts the mock with the rendered
schedule (``--faults``), the seed (``--fault-seed``) and an arm file (``--fault-arm-file``): no
fault happens until the load generator writes that file when its warm-up really starts, with
the hold's planned start as the epoch. However long the system took to start, the window is
then at the same place in every run's hold. After the load the harness writes the schedule,
the seed and that epoch to the run's ``faults.json`` (none when the load never started).

Scenarios (shares are of the generation requests whose body reached the mock in the window):

``error_burst``      20% of requests answered 500 (the dialect's real error body) for 30 s.
``rate_limited``     30% answered 429 with ``Retry-After: 1`` for 30 s.
``overloaded``       bursts of overload: 50% answered "overloaded" for 3 s in every 10 s, over
                     30 s, in the provider's dialect: 529 ``overloaded_error`` on
                     ``/v1/messages`` (Anthropic), 503 with the OpenAI error body on
                     ``/v1/chat/completions``.
``slow_tail``        10% of requests held 2 s before the response head, for 30 s.
``resets``           5% cut mid-response by a TCP RST (after half the body or half the
                     frames), for 30 s.
``stalled_streams``  5% of streams stop after half their frames and close after 10 s without
                     the rest, for 30 s; needs ``stream = true``.
``provider_down``    the mock closes its listener and connections: connects refused for 10 s.
                     The only scenario that captures anything itself: the SYNs to the
                     provider's port (tcpdump, ``syn.pcap``), so that each connection attempt
                     it refused counts as an attempt.
``failover``         two providers: the mock (the primary) answers every generation request
                     503 for 30 s (the dialect's error body: OpenAI's on
                     ``/v1/chat/completions``), while a standby (a second mock with the same
                     settings, never faulted) stays healthy; a system configured with the
                     standby can fail over to it.
``retry_after``      20% answered 429 with ``Retry-After: 2`` for 30 s (the dialect's rate-limit
                     body): whether a retry waits what it was told.
``all_rate_limited`` every deployment rate-limited: the primary and the standby (faulted too,
                     with the same schedule) answer every generation request 429 with
                     ``Retry-After: 3`` for 30 s; what the client is told when nothing is left.
``mid_stream_error`` 20% of streams, after 3 content frames, fail: half (a seeded exact half
                     per 100) with the dialect's error event and the body's end (OpenAI: an
                     ``{"error": ...}`` object in a ``data:`` event, which the official SDK
                     raises as ``APIError``; Anthropic: ``event: error``,
                     ``overloaded_error``), half with a TCP RST; for 30 s; needs ``stream = true``.
``stream_cut``       20% of streams end cleanly at the HTTP level (a whole chunked body) after
                     half their content frames, without ``[DONE]`` / ``message_stop``: a client
                     that trusts the transport sees a short answer as a success; for 30 s;
                     needs ``stream = true``.
``no_response``      20% of requests are read whole and never answered (no head, no byte) until
                     the client leaves, for 10 s: a request faulted at the window's end still
                     meets the lane's 30-s client timeout inside the hold (window from 10 s to
                     20 s + 30 s, of the 50-s step).
``non_retriable``    20% answered 400 with the dialect's context-length error (OpenAI
                     ``context_length_exceeded``; Anthropic ``invalid_request_error`` "prompt is
                     too long") for 30 s: a request no retry can save (one attempt is right).
``flapping``         the primary alternates 2 s healthy and 2 s answering every generation request
                     503 (bursts, starting failing), for 30 s, while a healthy standby runs.

A scenario that ``needs_standby`` runs with that second mock: the harness starts it beside the
primary (same host, its own port: ``base_port`` + 2 when ports are fixed), gives templates its
address (``{{standby_url}}``, ``{{standby_host}}``, ``{{standby_port}}``; without a standby they
are the primary's), samples it as the ``standby`` role and keeps its request log beside the
primary's (the ``provider`` column of mock_requests.parquet). The standby is healthy unless the
scenario ``faults_standby``: then it gets the primary's schedule, seed and arm file.

What each fault does on the wire, and how the mock's request log records it (its ``fault`` and
``ended`` columns): mocks.faults and mocks.request_log.

Importing this module starts nothing.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

# The faults are armed when the warm-up starts; the mock looks for the arm every 20 ms, so the
# first fault must start at least this long after that (warmup_s + ramp_s + fault_start_s).
ARM_LEAD_S = 0.5


@dataclass(frozen=True)
class Scenario:
    name: str
    specs: tuple[dict, ...]         # the mock's fault specs without their window
    duration_s: float               # the window's length when fault_duration_s is 0
    needs_stream: bool = False
    needs_standby: bool = False     # a second provider runs beside the faulted one ...
    faults_standby: bool = False    # ... healthy, unless this: then it gets the same schedule
    burst_s: float = 0.0            # > 0: each spec on for burst_s in every burst_period_s
    burst_period_s: float = 0.0
    counts_syns: bool = False       # the provider refuses connections: its SYNs are captured


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("error_burst", ({"kind": "status", "status": 500, "share": 0.2},), 30.0),
    Scenario("rate_limited", ({"kind": "status", "status": 429, "retry_after_s": 1,
                               "share": 0.3},), 30.0),
    Scenario("overloaded", ({"kind": "overloaded", "share": 0.5},), 30.0,
             burst_s=3.0, burst_period_s=10.0),
    Scenario("slow_tail", ({"kind": "slow", "hold_ms": 2000, "share": 0.1},), 30.0),
    Scenario("resets", ({"kind": "reset", "share": 0.05},), 30.0),
    Scenario("stalled_streams", ({"kind": "stall", "stall_s": 10, "share": 0.05},), 30.0,
             needs_stream=True),
    Scenario("provider_down", ({"kind": "down"},), 10.0, counts_syns=True),
    Scenario("failover", ({"kind": "status", "status": 503, "share": 1.0},), 30.0,
             needs_standby=True),
    Scenario("retry_after", ({"kind": "status", "status": 429, "retry_after_s": 2,
                              "share": 0.2},), 30.0),
    Scenario("all_rate_limited", ({"kind": "status", "status": 429, "retry_after_s": 3,
                                   "share": 1.0},), 30.0,
             needs_standby=True, faults_standby=True),
    Scenario("mid_stream_error", ({"kind": "mid_stream_error", "after_frames": 3, "mode": "split",
                                   "share": 0.2},), 30.0, needs_stream=True),
    Scenario("stream_cut", ({"kind": "stream_cut", "share": 0.2},), 30.0, needs_stream=True),
    Scenario("no_response", ({"kind": "no_response", "share": 0.2},), 10.0),
    Scenario("non_retriable", ({"kind": "non_retriable", "share": 0.2},), 30.0),
    Scenario("flapping", ({"kind": "status", "status": 503, "share": 1.0},), 30.0,
             needs_standby=True, burst_s=2.0, burst_period_s=4.0),
)}


def scenario(name: str) -> Scenario:
    """The named scenario; KeyError listing the known ones otherwise."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown fault scenario {name!r}; choose one of {sorted(SCENARIOS)}") from None


def needs_standby(name: str) -> bool:
    """Whether a run with this scenario ("" = none) starts the standby provider."""
    return bool(name) and scenario(name).needs_standby


def faults_standby(name: str) -> bool:
    """Whether the standby of a run with this scenario gets the primary's schedule."""
    return bool(name) and scenario(name).faults_standby


def counts_syns(name: str) -> bool:
    """Whether a run with this scenario ("" = none) captures the SYNs to its provider's port: a
    refused connection never reaches the provider's log."""
    return bool(name) and scenario(name).counts_syns


def duration_of(name: str, fault_duration_s: float) -> float:
    """The window's length: the configured one, or the scenario's own when it is 0."""
    return fault_duration_s if fault_duration_s > 0 else scenario(name).duration_s


def render(name: str, start_s: float, duration_s: float) -> list[dict]:
    """The mock's schedule (``--faults``) for a window of ``duration_s`` starting ``start_s``
    after the epoch."""
    sc = scenario(name)
    if sc.burst_s <= 0:
        return [{**spec, "start_s": start_s, "duration_s": duration_s} for spec in sc.specs]
    schedule = []
    offset = 0.0
    while offset < duration_s:
        length = min(sc.burst_s, duration_s - offset)
        schedule += [{**spec, "start_s": start_s + offset, "duration_s": length} for spec in sc.specs]
        offset += sc.burst_period_s
    return schedule


def schedule_json(name: str, start_s: float, duration_s: float) -> str:
    """The rendered schedule as canonical JSON text (what a RunSpec carries and its key hashes)."""
    return json.dumps(render(name, start_s, duration_s), sort_keys=True, separators=(",", ":"))
