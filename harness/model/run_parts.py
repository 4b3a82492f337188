"""The run spec's load, mock and wire parts: each field a study setting of the same name
(harness.model.config documents them), so one function, ``part``, fills every part from the
study's settings, given only what the plan decides for the run (a lane's settings outside that
lane, the load processes a topology places, the mock's hold in the in-flight lane, the rendered
fault schedule).

Standard library only: the locustfile reads the load part back from load.json
(harness.model.load_settings).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

Part = TypeVar("Part")


@dataclass(frozen=True)
class LoadShape:
    """What the load generator sends (config sections load, request and inflight)."""
    users: int
    ramp_s: float
    hold_s: float
    min_hold_requests: int
    max_hold_s: float
    warmup_s: float
    warmup_users: int
    think_time_s: float
    locust_processes: int
    request_timeout_s: float
    stream: bool = False
    open_loop_rates_per_s: tuple[float, ...] = ()   # () = closed loop
    open_loop_step_s: float = 0.0                   # 0 in closed loop: it changes nothing there
    feature: str = ""                               # "" = each system's [request] as declared
    request_bytes: int = 0                          # 0 = the small default chat body
    inflight_steps: tuple[int, ...] = ()            # the in-flight lane's open requests per step
    inflight_step_s: float = 0.0                    # 0 outside that lane
    inflight_hold_s: float = 0.0                    # the mock's hold there (0 outside it)
    inflight_abandon_share: float = 0.0             # streams the client leaves each step (0: none)


@dataclass(frozen=True)
class MockSettings:
    """How the mock provider answers (config sections mock and faults)."""
    mock_latency_ms: float
    mock_workers: int
    mock_response_tokens: int                       # also each request's max_tokens
    stream_chunks: int = 20
    chunk_delay_ms: float = 20.0
    # provider faults (harness/model/fault_scenarios.py); all unset without a scenario
    fault_scenario: str = ""
    faults: str = ""                # the rendered schedule (JSON), times after the hold's start
    fault_seed: int = 0
    fault_start_s: float = 0.0      # the whole fault window, after the hold's start
    fault_duration_s: float = 0.0


@dataclass(frozen=True)
class WireSettings:
    """The packet capture during the hold (0 s: none; config section wire). Measuring apparatus,
    not load (its CPU is sampled as the `capture` role); in the comparison key, as every setting
    is, since it shares the machine with what it measures."""
    wire_capture_s: float = 0.0
    wire_capture_offset_s: float = 2.0
    wire_snaplen_bytes: int = 512


def part(cls: type[Part], settings: Any, **decided: Any) -> Part:
    """The part ``cls`` of a run: each field the setting of its own name in ``settings`` (a
    StudyConfig), but those the plan ``decided`` for the run."""
    names = {f.name for f in dataclasses.fields(cls)}
    stray = sorted(set(decided) - names)
    if stray:
        raise TypeError(f"{cls.__name__} has no {stray}")
    return cls(**{name: decided[name] if name in decided else getattr(settings, name)
                  for name in names})
