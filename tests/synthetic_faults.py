"""A synthetic provider-fault study with known answers, laid out as the harness lays one out
(the same construction as synthetic.py, for the fault lane's analysis and report).

Usage::

    from synthetic_faults import FaultRun, make_fault_study
    path = make_fault_study(tmp_path, "faults", {"sluice": [FaultRun(), FaultRun(attempts=2)]})
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from synthetic import BASE_T, KINDS, MOCK_LATENCY_MS, ROLES, UNARY_DEFAULTS, sample_row
from synthetic_files import write_json, write_manifest, write_parquet
from synthetic_manifests import small_run_manifest

from harness.files.store import REQUEST_SCHEMA, SAMPLE_SCHEMA, write_table
from harness.model import formats as F
from harness.model.manifests import StudyManifest, from_plain
from harness.model.schema import MOCK_REQUESTS

FAULT_HOLD_S, FAULT_FROM_S, FAULT_TO_S, FAULT_RATE = 30.0, 10.0, 20.0, 10


@dataclass(frozen=True)
class FaultRun:
    """How one synthetic fault run behaves: 10 requests a second over a 30 s hold, the provider
    failing from 10 s to 20 s. During the fault a ``fail_every``-th request fails with a 502
    whose body the load generator judged ``dialect``, and every request reaches the mock
    ``attempts`` times; outside it every request succeeds once. Latency: the mock's 60 ms plus
    ``added_ms`` (``slow_ms`` more during the fault and ``slow_after_s`` seconds after it)."""
    added_ms: float = 1.0
    fail_every: int = 5                  # 0: no request fails
    dialect: str = "client"              # error_body_dialect of the failed requests
    attempts: int = 1
    slow_ms: float = 0.0
    slow_after_s: float = 0.0
    stayed_up: bool = True
    resilience: str = "shipped"
    resilience_note: str = ""
    rss_peak: int = 40 * 2**20


def _fault_run_rows(run_id: str, system: str, p: FaultRun, hs: float):
    n = int(FAULT_HOLD_S * FAULT_RATE)
    t = hs + (np.arange(n) + 0.5) / FAULT_RATE
    during = (t >= hs + FAULT_FROM_S) & (t < hs + FAULT_TO_S)
    failed = during & ((np.arange(n) % p.fail_every == 0) if p.fail_every else False)
    slow = (t >= hs + FAULT_FROM_S) & (t < hs + FAULT_TO_S + p.slow_after_s)
    latency = MOCK_LATENCY_MS + p.added_ms + np.where(slow, p.slow_ms, 0.0)
    rows = pd.DataFrame({
        "run_id": run_id, "system": system, "start_t_unix_s": t,
        "latency_ms": np.where(failed, 5.0, latency), "status_code": np.where(failed, 502, 200),
        "response_bytes": 300, "error_kind": np.where(failed, "http", ""),
        "error": np.where(failed, "HTTP 502", ""), "users": 50, "phase": "hold",
        "worker_pid": 4242, "worker_host": "synthetic", "mock_request_id": "m",
        "self_overhead_ms": math.nan, **UNARY_DEFAULTS,
        "chunk_gaps_ms": [[] for _ in range(n)],
        "request_id": [f"{run_id}-{i}" for i in range(n)],
        "error_body_dialect": np.where(failed, p.dialect, ""),
        "error_class": np.where(failed, "http_5xx", "")})
    copies = np.where(during, p.attempts, 1)
    mock_t = np.concatenate([t[i] + 0.001 * (1 + np.arange(c)) for i, c in enumerate(copies)])
    body_end = (mock_t * 1e9).astype("int64")
    hold_ns = int(MOCK_LATENCY_MS * 1e6)
    mock = pd.DataFrame({
        "run_id": run_id, "system": system, "provider": "primary",
        "request_id": np.repeat(rows["request_id"], copies),
        "mock_seq": [f"1-{i}" for i in range(len(mock_t))], "path": "/v1/chat/completions",
        "worker_pid": 1, "status_code": 200, "fault": "", "body_end_t_unix_ns": body_end,
        "hold_set_ns": hold_ns, "hold_applied_ns": hold_ns, "head_written_t_unix_ns": body_end + hold_ns,
        "last_frame_written_t_unix_ns": body_end + hold_ns, "bytes_in": 400, "bytes_out": 300,
        "arrival_lag_ns": 0, "write_ns": 0, "peer_port": 40000, "content_chars_sent": 90,
        "frames_sent": 0, "client_closed_t_unix_ns": 0, "ended": "complete"})
    st = np.arange(hs - 5.0, hs + FAULT_HOLD_S + 5.0, 1.0) + 0.25
    samples = pd.DataFrame([sample_row(run_id, system, x, "system", 3,
                                       p.rss_peak if abs(x - (hs + 15.25)) < 1e-6 else 30 * 2**20,
                                       20.0, 0.2 * (x - st[0]), 0.3) for x in st])
    return rows, samples, mock


def make_fault_study(root: str | Path, study_id: str, runs: dict[str, list[FaultRun]],
                     scenario: str = "error_burst", resilience: str = "shipped",
                     not_runnable: dict[str, str] | None = None,
                     without_columns: tuple[str, ...] = ()) -> Path:
    """A fault study on disk (``runs``: system -> its runs; ``not_runnable``: system -> why it
    could not run; ``without_columns``: request columns an older artifact lacks), as the
    harness lays it out."""
    path = Path(root) / study_id
    not_runnable = not_runnable or {}
    plan, entries = [], []
    ordered = [(system, n, p) for system, ps in runs.items() for n, p in enumerate(ps, 1)]
    for i, (system, n, p) in enumerate(ordered):
        run_id, run_dir = f"{system}-{n}", path / "runs" / system / str(n)
        run_dir.mkdir(parents=True)
        hs = BASE_T + 100.0 * i
        rows, samples, mock = _fault_run_rows(run_id, system, p, hs)
        # the older artifact: version 2, which may lack the error-body and later columns
        write_parquet(rows, REQUEST_SCHEMA, run_dir / "requests.parquet",
                      2 if without_columns else F.REQUESTS_TABLE.version, without=without_columns)
        write_parquet(samples.assign(inflight_requests=math.nan, host="synthetic-host"),
                      SAMPLE_SCHEMA, run_dir / "samples.parquet", F.SAMPLES_TABLE.version)
        write_table(run_dir / "mock_requests.parquet", mock.assign(provider="primary"),
                    MOCK_REQUESTS)
        write_json({"schema_version": F.FAULT_SCHEDULE.version, "schedule": [], "seed": 0,
                    "epoch_unix_s": hs}, run_dir / "faults.json")
        phases = {"warmup_start_t_unix_s": hs - 4.0, "ramp_start_t_unix_s": hs - 2.0,
                  "hold_start_t_unix_s": hs, "hold_end_t_unix_s": hs + FAULT_HOLD_S,
                  "load_end_t_unix_s": hs + FAULT_HOLD_S + 1.0}
        rm = json.loads(small_run_manifest(run_id, system, n, phases, hold_s=FAULT_HOLD_S,
                                           max_hold_s=FAULT_HOLD_S).to_json())
        rm["spec"]["mock"].update(fault_scenario=scenario, fault_start_s=FAULT_FROM_S,
                                  fault_duration_s=FAULT_TO_S - FAULT_FROM_S)
        rm.update(status="completed" if p.stayed_up else "failed",
                  reason="" if p.stayed_up else "system exited with code 1 during the hold",
                  resilience=p.resilience, resilience_note=p.resilience_note,
                  kind=KINDS.get(system, "competitor"))
        write_json(rm, run_dir / "manifest.json")
        plan.append({"run_id": run_id, "system": system, "run_index": n, "round": n,
                     "position": 0, "comparison_key": system})
        entries.append({"run_id": run_id, "system": system, "run_index": n,
                        "status": rm["status"], "reason": rm["reason"],
                        "dir": f"runs/{system}/{n}"})
    systems = [*runs, *not_runnable]
    manifest = from_plain(StudyManifest, {
        "study_id": study_id, "status": "completed",
        "config": {"gateways": systems, "profile": "faults", "fault_scenario": scenario,
                   "resilience": resilience, "hold_s": FAULT_HOLD_S,
                   "fault_start_s": FAULT_FROM_S, "mock_latency_ms": MOCK_LATENCY_MS},
        "plan": plan, "runs": entries,
        "systems": {s: {"kind": KINDS.get(s, "competitor"),
                        "role": ROLES.get(s, "system"), "runnable": s not in not_runnable,
                        "not_runnable_reason": not_runnable.get(s, "")} for s in systems}},
        f"synthetic {study_id}")
    write_manifest(manifest, path / "manifest.json", None)
    return path
