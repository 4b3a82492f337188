"""Lone manifests with the synthetic defaults (synthetic.py), for tests that write their own rows
or lay out their own suites."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from synthetic import COOLDOWN_S, HOLD_S, IDLE_S, MOCK_LATENCY_MS, RAMP_S, THINK_S, USERS, WARMUP_S, WARMUP_USERS

from harness.model.manifests import RunManifest, StudyManifest, from_plain


def small_run_manifest(run_id: str, system: str, run_index: int, phases: dict,
                       **load: Any) -> RunManifest:
    """A completed run's manifest with the synthetic defaults, for tests that write their own rows
    (``load`` overrides fields of the spec's load shape)."""
    spec = {"run_id": run_id, "system": system, "run_index": run_index, "round": run_index,
            "position": 0, "load": {"users": USERS, "ramp_s": RAMP_S, "hold_s": HOLD_S,
                                    "min_hold_requests": 0, "max_hold_s": HOLD_S,
                                    "warmup_s": WARMUP_S, "warmup_users": WARMUP_USERS,
                                    "think_time_s": THINK_S, "locust_processes": 1,
                                    "request_timeout_s": 30.0, **load},
            "mock": {"mock_latency_ms": MOCK_LATENCY_MS, "mock_workers": 1,
                     "mock_response_tokens": 16},
            "gateway_workers": 2, "idle_s": IDLE_S, "cooldown_s": COOLDOWN_S,
            "ready_timeout_s": 60.0, "gateway_toml_sha256": "0" * 64, "seed": 0,
            "comparison_key": system}
    return from_plain(RunManifest, {
        "run_id": run_id, "system": system, "run_index": run_index, "round": run_index,
        "position": 0, "comparison_key": system, "spec": spec, "status": "completed",
        "phases": phases}, f"synthetic {run_id}")


def small_study_manifest(study_id: str, gateways: list[str], runs: list[dict],
                         roles: dict[str, str] | None = None) -> StudyManifest:
    """A study manifest with only what the statistics read; ``roles`` as gateway.toml gives them."""
    systems = {name: {"kind": "control", "runnable": True, "role": role}
               for name, role in (roles or {}).items()}
    return from_plain(StudyManifest, {"study_id": study_id, "status": "completed",
                                      "config": {"gateways": gateways}, "runs": runs,
                                      "systems": systems},
                      f"synthetic {study_id}")


def write_suite_manifest(suite_dir: Path, cells: list[dict], **fields: Any) -> Path:
    """A suite manifest as the harness writes it; the fields not given take placeholders."""
    from harness.files.atomic import write_atomic
    from harness.model.suite import SuiteManifest
    data = {"suite_id": Path(suite_dir).name, "name": Path(suite_dir).name, "description": "",
            "suite_file": "s.toml", "suite_file_sha256": "0" * 64, "suite_text": "",
            "profile": "synthetic", "axes": {}, "status": "completed", "started_t_unix_s": 0.0,
            **fields, "cells": cells}
    Path(suite_dir).mkdir(parents=True, exist_ok=True)
    write_atomic(Path(suite_dir) / "manifest.json",
                 from_plain(SuiteManifest, data, "synthetic suite").to_json())
    return Path(suite_dir)
