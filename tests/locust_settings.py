"""A whole LoadSettings for the tests that drive the locustfile outside a study: defaults that
start nothing by themselves, overridden per test."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.model.load_settings import LoadSettings
from harness.model.run_parts import LoadShape


def load_settings(tmp_path: Path, **overrides) -> LoadSettings:
    """Overrides of the load part's fields go into it; the others replace LoadSettings' own."""
    body = tmp_path / "body.json"
    body.write_text('{"messages": [{"role": "user", "content": "RID"}]}')
    load_fields = {f.name for f in dataclasses.fields(LoadShape)}
    load = LoadShape(users=1, ramp_s=0.0, hold_s=0.0, min_hold_requests=0, max_hold_s=0.0,
                     warmup_s=0.0, warmup_users=1, think_time_s=0.0, locust_processes=1,
                     request_timeout_s=10.0)
    base = LoadSettings(
        chat_path="/v1/chat/completions", model="mock-model", headers={}, dialect="openai",
        content_frame='"content"', done_frame=r"\[DONE\]", unary_marker="chat.completion",
        body_file=str(body), rid_slot="RID", run_id="t-1",
        self_overhead_header="", self_overhead_scale_ms=1.0,
        load=dataclasses.replace(load, **{k: v for k, v in overrides.items() if k in load_fields}),
        open_loop_spawn_rate_per_s=100.0, inflight_steps_run=0, inflight_drain_margin_s=0.0,
        raw_dir=str(tmp_path / "raw"), phases_file=str(tmp_path / "phases.json"),
        fault_arm_file="", seed=0)
    return dataclasses.replace(base, **{k: v for k, v in overrides.items() if k not in load_fields})
