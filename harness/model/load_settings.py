"""What the harness hands the load generator: one frozen LoadSettings, written by harness.run.load
as the run's load.json and read back by the locustfile (in Locust's processes). Standard library
only: the locustfile imports it. The file carries its format version; the reader refuses a
version or a key it does not know, naming the file."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

VERSION = 1


class LoadSettingsError(ValueError):
    """A load.json this locustfile cannot run."""


@dataclass(frozen=True)
class LoadSettings:
    # the requests: where, what, and how their answers are judged
    chat_path: str
    model: str
    headers: dict
    dialect: str                     # the client's dialect (harness.model.dialects)
    content_frame: str               # a stream frame that carries text (a regular expression)
    done_frame: str                  # the frame that ends a stream
    unary_marker: str                # what a whole unary answer carries
    stream: bool
    max_tokens: int
    body_file: str                   # the bytes every request sends (request-body.json)
    rid_slot: str                    # where in those bytes each request's id goes
    run_id: str
    self_overhead_header: str        # lower case; "" when the system reports none
    self_overhead_scale_ms: float
    request_timeout_s: float
    # the closed-loop shape: warm-up, ramp, hold
    users: int
    warmup_users: int
    warmup_s: float
    ramp_s: float
    hold_s: float
    min_hold_requests: int
    max_hold_s: float
    think_time_s: float
    # the open-loop schedule (no rates: closed loop)
    open_loop_rates_per_s: tuple
    open_loop_step_s: float
    open_loop_spawn_rate_per_s: float
    # the in-flight steps (none: not the in-flight lane)
    inflight_steps: tuple
    inflight_steps_run: int          # how many of them fit the machine's limits
    inflight_step_s: float
    inflight_hold_s: float
    inflight_drain_margin_s: float
    # where the load generator writes, and the seed of its draws
    raw_dir: str
    phases_file: str
    fault_arm_file: str              # "" without provider faults
    seed: int

    def to_json(self) -> str:
        return json.dumps({"schema_version": VERSION, **dataclasses.asdict(self)}, indent=2)

    @classmethod
    def from_json(cls, text: str, source: str = "load.json") -> "LoadSettings":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise LoadSettingsError(f"{source}: not JSON ({exc})") from None
        if not isinstance(data, dict) or data.get("schema_version") != VERSION:
            found = data.get("schema_version") if isinstance(data, dict) else None
            raise LoadSettingsError(f"{source}: load settings version {found!r}; this locustfile "
                                    f"reads version {VERSION}")
        names = {f.name for f in dataclasses.fields(cls)}
        given = set(data) - {"schema_version"}
        if given != names:
            raise LoadSettingsError(f"{source}: unknown keys {sorted(given - names)}, missing "
                                    f"{sorted(names - given)}")
        data.pop("schema_version")
        for name in ("open_loop_rates_per_s", "inflight_steps"):
            data[name] = tuple(data[name])
        return cls(**data)
