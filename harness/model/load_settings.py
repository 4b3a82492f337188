"""What the harness hands the load generator: one frozen LoadSettings, written by harness.run.load
as the run's load.json and read back by the locustfile (in Locust's processes): the run spec's
load part as it is (harness.model.run_parts.LoadShape), with where the requests go and how their
answers are judged. Standard library only: the locustfile imports it. The file carries its
format version; the reader refuses a version or a key it does not know, naming the file."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from harness.model.run_parts import LoadShape

# 2: the load part nested as the run spec holds it (1 spelled its fields out again)
VERSION = 2


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
    body_file: str                   # the bytes every request sends (request-body.json)
    rid_slot: str                    # where in those bytes each request's id goes
    run_id: str
    self_overhead_header: str        # lower case; "" when the system reports none
    self_overhead_scale_ms: float
    # the load: its shape as the run spec holds it, and what this machine decides of it
    load: LoadShape
    open_loop_spawn_rate_per_s: float
    inflight_steps_run: int          # how many of the in-flight steps fit the machine's limits
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
        data.pop("schema_version")
        _check_keys(cls, data, source)
        load = data["load"]
        if not isinstance(load, dict):
            raise LoadSettingsError(f"{source}: load: expected an object, got {load!r}")
        _check_keys(LoadShape, load, f"{source}: load")
        for name in ("open_loop_rates_per_s", "inflight_steps"):
            load[name] = tuple(load[name])
        return cls(**{**data, "load": LoadShape(**load)})


def _check_keys(cls, data: dict, source: str) -> None:
    names = {f.name for f in dataclasses.fields(cls)}
    if set(data) != names:
        raise LoadSettingsError(f"{source}: unknown keys {sorted(set(data) - names)}, missing "
                                f"{sorted(names - set(data))}")
