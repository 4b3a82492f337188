"""A synthetic study directory with known answers, laid out exactly as artifacts/README.md says.

Every figure the analysis computes is fixed by construction here and returned in ``expected``
(computed from the construction's formulas, not from harness.stats), so tests compare the
analysis with the truth:

* the hold window holds N = rate × hold_s requests, evenly spaced; the successful ones have
  latencies ``mock + overhead + linspace(0, span, M)`` (shuffled), so the linear-interpolation
  percentile q is exactly ``mock + overhead + span·q/100``;
* warm-up, ramp and tail rows have other latencies, so a window bug changes every percentile;
* the system's ``cpu_seconds_total`` grows linearly at ``cpu_cores`` during the load, so the
  window's CPU is ``cpu_cores × hold_s``;
* the system's RSS is ``idle`` before the load, ``steady`` in the hold with one ``peak`` sample,
  and ends at ``recovered``.

Usage::

    from synthetic import make_study
    s = make_study(tmp_path)          # s.path, s.expected[run_id][...], s.runs

The same construction serves more specific builders: synthetic_faults.py (a provider-fault
study), synthetic_manifests.py (lone manifests for tests that write their own rows, and suite
manifests) and synthetic_files.py (how every synthetic file is written).
"""
from __future__ import annotations

import atexit
import copy
import hashlib
import math
import random
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from synthetic_files import write_json, write_manifest, write_parquet

from harness.files.store import REQUEST_SCHEMA, SAMPLE_SCHEMA
from harness.model import formats as F
from harness.model.count_cases import LANE_SIZES
from harness.model.manifests import RunManifest, StudyManifest, from_plain
from harness.run.count_system import BuildCount, CaseCount, write_counts

BASE_T = 1_760_000_000.0
# Columns of the real schema that the synthetic unary, closed-loop runs leave at their defaults.
UNARY_DEFAULTS = {"ttfb_ms": math.nan, "ttft_ms": math.nan, "chunks": 0, "stream_done": False,
                  "intended_start_t_unix_s": math.nan, "offered_rate_per_s": math.nan,
                  "step_index": 0, "waited_for_user": False,
                  # identity and wire figures: not measured in synthetic runs
                  "request_id": "", "mock_service_ms": math.nan, "net_overhead_ms": math.nan,
                  "wire_request_path_us": math.nan, "wire_response_path_us": math.nan,
                  "wire_in_gateway_us": math.nan, "wire_mock_us": math.nan,
                  # error bodies: not judged in synthetic runs
                  "error_body_dialect": "",
                  # no client leaves a stream in a synthetic run
                  "abandoned_t_unix_s": math.nan,
                  # content: not assembled nor joined in synthetic runs (no truncation judged)
                  "content_chars": math.nan, "retry_after_s": math.nan,
                  "content_chars_sent": math.nan}


@dataclass(frozen=True)
class RunParams:
    """How one synthetic run behaves."""
    hold_rate: int = 180                 # requests per second sent in the hold (N = rate × hold_s)
    overhead_ms: float = 1.0             # added to the mock latency
    span_ms: float = 20.0                # successful hold latencies spread over [0, span]
    self_overhead_ms: float | None = None  # base of the self-reported overhead (None = no header)
    self_span_ms: float = 0.2
    errors_hold: dict = field(default_factory=dict)   # error kind -> count among hold rows
    errors_tail: dict = field(default_factory=dict)   # error kind -> count in the tail
    inflight_at_stop: int = 0
    cpu_cores: float | None = 0.5        # system CPU during the load (None = no system process)
    rss_idle: int = 20 * 2**20
    rss_steady: int = 40 * 2**20
    rss_peak: int = 48 * 2**20
    rss_recovered: int = 30 * 2**20
    locust_cpu: float = 40.0
    locust_cpu_warning: bool = False
    mock_cpu: float = 20.0
    mock_hold_p99_ms: float = 60.8
    load_avg_before: float = 0.3
    other_cpu: float = 5.0               # other processes on the machine during the load (% of a core)
    failed: bool = False                 # dies halfway through the ramp
    ramp_cap_rps: float = 1e9            # the system serves at most this along the ramp


def _default_params() -> dict[str, list[RunParams]]:
    return {
        "direct": [RunParams(overhead_ms=o, span_ms=10.0, cpu_cores=None, hold_rate=180,
                             load_avg_before=lb)
                   for o, lb in ((0.20, 0.3), (0.25, 0.3), (0.30, 2.5))],
        "nginx": [RunParams(overhead_ms=o, span_ms=12.0, cpu_cores=c, hold_rate=r)
                  for o, c, r in ((0.78, 0.20, 179), (0.80, 0.21, 180), (0.82, 0.22, 181))],
        "sluice": [RunParams(overhead_ms=o, span_ms=14.0, cpu_cores=c, hold_rate=r,
                             self_overhead_ms=so, locust_cpu_warning=(i == 0),
                             rss_idle=12 * 2**20, rss_steady=30 * 2**20, rss_peak=36 * 2**20,
                             rss_recovered=16 * 2**20)
                   for i, (o, c, r, so) in enumerate(((0.45, 0.15, 178, 0.10),
                                                      (0.50, 0.16, 180, 0.15),
                                                      (0.55, 0.17, 182, 0.20)))],
        "litellm": [
            RunParams(overhead_ms=7.0, span_ms=40.0, cpu_cores=1.4, hold_rate=60,
                      self_overhead_ms=2.0, mock_hold_p99_ms=63.1, ramp_cap_rps=60,
                      rss_idle=180 * 2**20, rss_steady=260 * 2**20, rss_peak=300 * 2**20,
                      rss_recovered=250 * 2**20, locust_cpu=55.0),
            RunParams(failed=True, overhead_ms=9.0, span_ms=40.0, cpu_cores=1.5, hold_rate=60,
                      self_overhead_ms=2.5, ramp_cap_rps=60, rss_idle=180 * 2**20,
                      rss_steady=260 * 2**20, rss_peak=290 * 2**20, rss_recovered=250 * 2**20),
            RunParams(overhead_ms=9.0, span_ms=40.0, cpu_cores=1.5, hold_rate=62,
                      self_overhead_ms=2.4, ramp_cap_rps=60,
                      errors_hold={"http": 3, "timeout": 2}, errors_tail={"connection": 1},
                      inflight_at_stop=2, rss_idle=180 * 2**20, rss_steady=270 * 2**20,
                      rss_peak=310 * 2**20, rss_recovered=255 * 2**20),
        ],
    }


SYNTHETIC_MACHINE = {"hostname": "synthetic-host", "kernel": "Linux 6.1.0-synthetic",
                     "cpu_model": "Synthetic CPU @ 2.0GHz", "cpu_count": 2,
                     "memory_bytes": 8 * 2**30, "python": "3.11.2",
                     "load_avg_1m": 0.3, "load_avg_5m": 0.2, "load_avg_15m": 0.1}
KINDS = {"direct": "control", "nginx": "control", "sluice": "in-house", "litellm": "competitor"}
VERSIONS = {"direct": "-", "nginx": "1.22.1", "sluice": "0.1.0", "litellm": "1.74.0"}
ROLES = {"direct": "floor", "nginx": "hop"}   # as gateways/*/gateway.toml say


@dataclass
class SyntheticStudy:
    path: Path
    expected: dict[str, dict[str, Any]]      # run_id -> figure -> value
    runs: list[RunManifest]                  # run manifests as written
    manifest: StudyManifest


# timeline offsets of one run, seconds after its t0
IDLE_S, WARMUP_S, RAMP_S, HOLD_S, TAIL_S, COOLDOWN_S = 3.0, 4.0, 20.0, 10.0, 1.0, 5.0
# No think time: the users push as hard as the system lets them (as in the saturation profile),
# so a run can be labelled capacity; a paced load is labelled behaviour (see test_analysis).
USERS, WARMUP_USERS, MOCK_LATENCY_MS, THINK_S = 200, 5, 60.0, 0.0


def _phases(t0: float) -> dict[str, float]:
    ws = t0 + IDLE_S
    rs = ws + WARMUP_S
    hs = rs + RAMP_S
    he = hs + HOLD_S
    return {"warmup_start_t_unix_s": ws, "ramp_start_t_unix_s": rs, "hold_start_t_unix_s": hs,
            "hold_end_t_unix_s": he, "load_end_t_unix_s": he + TAIL_S}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _version(fmt: F.Format, schema_version: int | None) -> int:
    """The version a synthetic file of this kind is written in: the current one, or the one
    asked for (1: every kind as the first artifact format wrote it)."""
    return fmt.version if schema_version is None else schema_version


def _run(system: str, n: int, p: RunParams, t0: float, rng: random.Random,
         direct_mean: dict[int, float] | None) -> tuple[pd.DataFrame, pd.DataFrame, dict, dict]:
    """Rows, samples, mock stats and expected figures of one run."""
    run_id = f"{system}-{n}"
    ph = _phases(t0)
    ws, rs, hs, he, le = (ph[k] for k in ("warmup_start_t_unix_s", "ramp_start_t_unix_s",
                                           "hold_start_t_unix_s", "hold_end_t_unix_s",
                                           "load_end_t_unix_s"))
    fail_t = rs + RAMP_S / 2 if p.failed else math.inf
    base = MOCK_LATENCY_MS + p.overhead_ms
    rows: list[dict] = []

    def add(t, lat, users, phase, kind="", self_ms=math.nan):
        status = {"": 200, "http": 500, "timeout": 0, "connection": 0, "other": 0}[kind]
        rows.append({"run_id": run_id, "system": system, "start_t_unix_s": t, "latency_ms": lat,
                     "status_code": status, "response_bytes": 310 if kind in ("", "http") else 0,
                     "error_kind": kind,
                     "error": "" if not kind else {"http": "HTTP 500", "timeout": "timed out",
                                                   "connection": "connection refused",
                                                   "other": "bad body"}[kind],
                     "error_class": {"": "", "http": "http_5xx", "timeout": "read_timeout",
                                     "connection": "connect_refused", "other": "bad_body"}[kind],
                     "users": int(users), "phase": phase, "worker_pid": 4242,
                     "worker_host": "synthetic", "self_overhead_ms": self_ms,
                     "mock_request_id": f"m-{run_id}-{len(rows)}" if kind in ("", "http") else ""})

    def selfv(x):
        return (p.self_overhead_ms + x) if p.self_overhead_ms is not None else math.nan

    # warm-up: 5 users, 4 req/s, slow-ish first requests
    for k in range(int(WARMUP_S * 4)):
        t = ws + (k + 0.5) / 4
        add(t, base + 150.0, WARMUP_USERS, "warmup", self_ms=selfv(1.0))
    # ramp: 1-second slices, rate min(0.9 users, cap); latency grows with users
    for j in range(int(RAMP_S)):
        users_mid = WARMUP_USERS + (USERS - WARMUP_USERS) * (j + 0.5) / RAMP_S
        r = int(round(min(0.9 * users_mid, p.ramp_cap_rps)))
        for k in range(r):
            t = rs + j + (k + 0.5) / r
            if t >= fail_t:
                break
            u = math.floor(WARMUP_USERS + (USERS - WARMUP_USERS) * (t - rs) / RAMP_S)
            add(t, base + 0.02 * u, min(u, USERS - 1), "ramp", self_ms=selfv(0.01 * u))
    expected: dict[str, Any] = {"run_id": run_id, "system": system, "run_index": n,
                                "status": "failed" if p.failed else "completed"}
    if not p.failed:
        n_hold = int(p.hold_rate * HOLD_S)
        kinds = [k for k, c in p.errors_hold.items() for _ in range(c)]
        m = n_hold - len(kinds)
        slots = list(range(n_hold))
        rng.shuffle(slots)
        err_slots = dict(zip(slots[:len(kinds)], kinds))
        grid = list(np.linspace(0.0, p.span_ms, m))
        sgrid = list(np.linspace(0.0, p.self_span_ms, m))
        rng.shuffle(grid)
        rng.shuffle(sgrid)
        gi = 0
        for k in range(n_hold):
            t = hs + (k + 0.5) * HOLD_S / n_hold
            if k in err_slots:
                kind = err_slots[k]
                add(t, 30000.0 if kind == "timeout" else 5.0, USERS, "hold", kind)
            else:
                add(t, base + grid[gi], USERS, "hold", self_ms=selfv(sgrid[gi]))
                gi += 1
        # tail: 1 s after the hold, fast, plus its errors
        tail_kinds = [k for k, c in p.errors_tail.items() for _ in range(c)]
        for k in range(20):
            t = he + (k + 0.5) * TAIL_S / 20
            kind = tail_kinds[k] if k < len(tail_kinds) else ""
            add(t, 3.0 if kind else base - 0.5, USERS, "tail", kind)
        errs = {k: p.errors_hold.get(k, 0) + p.errors_tail.get(k, 0)
                for k in ("http", "timeout", "connection", "other")}
        expected.update({
            "throughput_rps": m / HOLD_S, "requests_in_window": n_hold,
            **{f"latency_p{q}_ms": base + p.span_ms * q / 100 for q in (50, 95, 99)},
            **{f"overhead_vs_mock_p{q}_ms": p.overhead_ms + p.span_ms * q / 100
               for q in (50, 95, 99)},
            **{f"errors_{k}": v for k, v in errs.items()},
            "errors_total": sum(errs.values()), "inflight_at_stop": p.inflight_at_stop,
            "cpu_ms_per_request": (p.cpu_cores * HOLD_S * 1000 / n_hold
                                   if p.cpu_cores is not None else math.nan),
            "rss_idle_bytes": p.rss_idle if p.cpu_cores is not None else math.nan,
            "rss_peak_bytes": p.rss_peak if p.cpu_cores is not None else math.nan,
            "rss_steady_bytes": p.rss_steady if p.cpu_cores is not None else math.nan,
            "rss_recovered_bytes": p.rss_recovered if p.cpu_cores is not None else math.nan,
            "self_overhead_p50_ms": (p.self_overhead_ms + p.self_span_ms * 0.5
                                     if p.self_overhead_ms is not None else math.nan),
            "self_overhead_p95_ms": (p.self_overhead_ms + p.self_span_ms * 0.95
                                     if p.self_overhead_ms is not None else math.nan),
        })
        if direct_mean is not None:
            for q in (50, 95, 99):
                expected[f"overhead_vs_direct_p{q}_ms"] = (
                    expected[f"latency_p{q}_ms"] - direct_mean[q])
        reasons = []
        if p.locust_cpu >= 90:
            reasons.append("locust cpu")
        if p.locust_cpu_warning:
            reasons.append("locust warning")
        if p.mock_hold_p99_ms - MOCK_LATENCY_MS > 2:
            reasons.append("mock hold")
        if p.mock_cpu >= 90:
            reasons.append("mock cpu")
        if p.load_avg_before >= 2:
            reasons.append("load average")
        if p.other_cpu > 20:
            reasons.append("other cpu")
        if sum(errs.values()):
            reasons.append("failed requests")
        expected["label"] = "behaviour" if reasons else "capacity"
        expected["label_reasons"] = reasons
    else:
        expected["label"] = "failed"
    df = pd.DataFrame(rows)

    # samples: every second at +0.25 s, from t0 to the end of the cooldown (or the failure)
    end = min(le + COOLDOWN_S, fail_t)
    samples: list[dict] = []
    cpu_total = 0.0
    k = 0
    while True:
        t = t0 + k + 0.25
        if t > end:
            break
        in_load = ws <= t < le
        # the system's cumulative CPU: idle 0.01 cores outside the load, p.cpu_cores inside
        if p.cpu_cores is not None:
            cpu_total = _cpu_at(t, t0, ws, le, p.cpu_cores)
            if t < ws:
                rss = p.rss_idle
            elif t < hs:
                rss = int(p.rss_idle + (p.rss_steady - p.rss_idle) * (t - ws) / (hs - ws))
            elif t < he:
                rss = p.rss_peak if abs(t - (hs + 5.25)) < 1e-6 else p.rss_steady
            elif t < le + COOLDOWN_S - 1:
                rss = p.rss_steady - (p.rss_steady - p.rss_recovered) // 2
            else:
                rss = p.rss_recovered
            pct = 100.0 * (p.cpu_cores if in_load else 0.01)
            samples.append(sample_row(run_id, system, t, "system", 3, rss, pct, cpu_total,
                                      p.load_avg_before))
        lcpu = p.locust_cpu if in_load else 1.0
        samples.append(sample_row(run_id, system, t, "locust", 1, 90 * 2**20, lcpu,
                                  0.01 * lcpu * (t - t0), p.load_avg_before))
        mcpu = p.mock_cpu if in_load else 0.5
        samples.append(sample_row(run_id, system, t, "mock", 1, 25 * 2**20, mcpu,
                                  0.01 * mcpu * (t - t0), p.load_avg_before))
        machine = lcpu + mcpu + (p.other_cpu if in_load else 1.0)
        if p.cpu_cores is not None:
            machine += 100.0 * (p.cpu_cores if in_load else 0.01)
        samples.append(sample_row(run_id, system, t, "machine", 0, 3 * 2**30, machine, 0.0,
                                  p.load_avg_before))
        k += 1
    sdf = pd.DataFrame(samples)

    ok_count = int(((df["error_kind"] == "") & (df["phase"] != "warmup")).sum()) if len(df) else 0
    mock = {"count": ok_count + int(p.errors_hold.get("http", 0)),
            "by_path": {"/v1/chat/completions": ok_count}, "errors": 0,
            "hold_ms": {"p50": MOCK_LATENCY_MS + 0.1, "p90": MOCK_LATENCY_MS + 0.3,
                        "p99": p.mock_hold_p99_ms, "max": p.mock_hold_p99_ms + 1.0,
                        "mean": MOCK_LATENCY_MS + 0.12},
            "hold_histogram_us": {str(int(MOCK_LATENCY_MS * 1000)): ok_count},
            "latency_ms": MOCK_LATENCY_MS, "workers": 1}
    return df, sdf, mock, expected


def _cpu_at(t: float, t0: float, ws: float, le: float, cores: float) -> float:
    idle = 0.01
    if t < ws:
        return idle * (t - t0)
    if t < le:
        return idle * (ws - t0) + cores * (t - ws)
    return idle * (ws - t0) + cores * (le - ws) + idle * (t - le)


def sample_row(run_id, system, t, role, pids, rss, pct, total, load):
    return {"run_id": run_id, "system": system, "t_unix_s": t, "role": role, "pid_count": pids,
            "rss_bytes": int(rss), "cpu_percent": float(pct), "cpu_seconds_total": float(total),
            "num_fds": 12 * max(pids, 1), "load_avg_1m": float(load)}


def _write_runs(runs_dir: Path, params: dict[str, list[RunParams]], seed: int,
                schema_version: int | None, without_columns: tuple[str, ...]) -> tuple:
    """Write every run of the study under ``runs_dir``: (plan, expected, run manifests, the
    study manifest's run entries)."""
    systems = list(params)
    runs_per = max(len(v) for v in params.values())
    rng = random.Random(seed)

    # the interleaved plan: each round runs every system once, in a seeded order
    plan = []
    for rnd in range(1, runs_per + 1):
        order = [s for s in systems if len(params[s]) >= rnd]
        rng.shuffle(order)
        for pos, s in enumerate(order):   # 0-based, as harness/model/plan.py writes it
            plan.append({"run_id": f"{s}-{rnd}", "system": s, "run_index": rnd, "round": rnd,
                         "position": pos, "comparison_key": hashlib.sha256(s.encode()).hexdigest()})

    # the floor's (direct's) mean window percentiles (the known answer for overhead vs direct)
    direct_mean = None
    if "direct" in params:
        done = [p for p in params["direct"] if not p.failed]
        if done:
            direct_mean = {q: float(np.mean([MOCK_LATENCY_MS + p.overhead_ms + p.span_ms * q / 100
                                             for p in done])) for q in (50, 95, 99)}

    expected: dict[str, dict] = {}
    manifests: list[dict] = []
    entries = []
    for i, item in enumerate(plan):
        s, n = item["system"], item["run_index"]
        p = params[s][n - 1]
        t0 = BASE_T + 60.0 * i
        rdf, sdf, mock, exp = _run(s, n, p, t0, rng, direct_mean)
        run_dir = runs_dir / s / str(n)        # as harness/run/run.py: run_dir_for names it
        (run_dir / "raw").mkdir(parents=True, exist_ok=True)
        rdf = rdf.assign(**UNARY_DEFAULTS, chunk_gaps_ms=[[] for _ in range(len(rdf))])
        sdf = sdf.assign(inflight_requests=math.nan, host="synthetic-host")
        write_parquet(rdf, REQUEST_SCHEMA, run_dir / "requests.parquet",
                      _version(F.REQUESTS_TABLE, schema_version),
                      without_columns)
        write_parquet(sdf, SAMPLE_SCHEMA, run_dir / "samples.parquet",
                      _version(F.SAMPLES_TABLE, schema_version),
                      without_columns)
        write_json({**mock, "schema_version": _version(F.MOCK_STATS, schema_version)},
                   run_dir / "mock_stats.json")
        rdf.to_csv(run_dir / "raw" / "requests-4242.csv", index=False)
        (run_dir / "locust_stats.csv").write_text(
            "Type,Name,Request Count,Failure Count\nPOST,/v1/chat/completions,"
            f"{len(rdf)},{int((rdf['error_kind'] != '').sum())}\n")
        (run_dir / "locust_stats_history.csv").write_text("Timestamp,User Count\n")
        (run_dir / "locust_failures.csv").write_text("Method,Name,Error,Occurrences\n")
        (run_dir / "locust_exceptions.csv").write_text("Count,Message,Traceback,Nodes\n")
        for log in ("locust.log", "system.log", "mock.log"):
            (run_dir / log).write_text(f"synthetic {log} of {item['run_id']}\n")
        ph = _phases(t0)
        if p.failed:
            ph = {k: v for k, v in ph.items()
                  if k in ("warmup_start_t_unix_s", "ramp_start_t_unix_s")}
        successful = int(((rdf["error_kind"] == "") & (rdf["phase"] != "warmup")).sum())
        rm = {
            "run_id": item["run_id"], "system": s,
            "run_index": n, "round": item["round"], "position": item["position"],
            "comparison_key": item["comparison_key"], "kind": KINDS.get(s, "competitor"),
            "started_t_unix_s": t0, "ended_t_unix_s": t0 + 45.0, "ready_s": 0.2,
            "spec": {"run_id": item["run_id"], "system": s, "run_index": n,
                     "round": item["round"], "position": item["position"],
                     "load": {"users": USERS, "ramp_s": RAMP_S, "hold_s": HOLD_S,
                              "min_hold_requests": 0, "max_hold_s": HOLD_S,
                              "warmup_s": WARMUP_S, "warmup_users": WARMUP_USERS,
                              "think_time_s": THINK_S, "locust_processes": 1,
                              "request_timeout_s": 30.0},
                     "mock": {"mock_latency_ms": MOCK_LATENCY_MS, "mock_workers": 1,
                              "mock_response_tokens": 16},
                     "gateway_workers": 2, "idle_s": IDLE_S, "cooldown_s": COOLDOWN_S,
                     "ready_timeout_s": 60.0, "gateway_toml_sha256": "0" * 64, "seed": seed,
                     "comparison_key": item["comparison_key"]},
            "status": "failed" if p.failed else "completed",
            "reason": "system exited with code 1 during the ramp" if p.failed else "",
            "phases": ph,
            "version": VERSIONS.get(s, "0"), "mock_version": "0.1.0", "locust_version": "2.47.0",
            "checks": {"pre_request": {"status": 200, "problem": "", "mock_request_id": "1-1",
                                       "mock_saw_it": True, "mock_count_delta": 1},
                       "mock_count": successful, "successful_rows": successful,
                       "count_match": True, "count_difference": 0,
                       "inflight_at_stop": p.inflight_at_stop},
            "mock": {"hold_ms_p50": MOCK_LATENCY_MS + 0.1, "hold_ms_p99": p.mock_hold_p99_ms,
                     "hold_ms_max": p.mock_hold_p99_ms + 1.0, "count": successful},
            "locust": {"cpu_warning": p.locust_cpu_warning,
                       "warnings": (["CPU usage above 90%! This may constrain your throughput"]
                                    if p.locust_cpu_warning else []), "processes": 1},
            "host_before": {"t_unix_s": t0, "load_avg_1m": p.load_avg_before,
                            "load_avg_5m": 0.2, "load_avg_15m": 0.1,
                            "tcp_states": {"ESTABLISHED": 4, "TIME_WAIT": 0},
                            "memory_available_bytes": 5 * 2**30},
            "host_after": {"t_unix_s": t0 + 45.0, "load_avg_1m": 1.1, "load_avg_5m": 0.4,
                           "load_avg_15m": 0.2, "tcp_states": {"ESTABLISHED": 4, "TIME_WAIT": 900},
                           "memory_available_bytes": 5 * 2**30},
        }
        if p.failed:
            rm["failed_t_unix_s"] = ph["ramp_start_t_unix_s"] + RAMP_S / 2
        rm["files"] = {f.relative_to(run_dir).as_posix(): _sha(f)
                       for f in sorted(run_dir.rglob("*")) if f.is_file() and f.name != "manifest.json"}
        rm = from_plain(RunManifest, rm, f"synthetic {item['run_id']}")
        write_manifest(rm, run_dir / "manifest.json", schema_version)
        manifests.append(rm)
        expected[item["run_id"]] = exp
        entries.append({"run_id": item["run_id"], "system": s, "run_index": n,
                        "status": rm.status, "reason": rm.reason,
                        "dir": f"runs/{s}/{n}"})
    return plan, expected, manifests, entries


# Each distinct set of runs is written once a process and copied from then on: building one
# (rows, samples, Parquet, CSV, hashes) is most of the unit tests' time, and many tests ask for
# the same. The study's own manifest, which names its folder, is written for each.
_RUNS: dict[str, tuple[Path, tuple]] = {}
_cache_dir: Path | None = None


def _runs_written_once(params: dict[str, list[RunParams]], seed: int,
                       schema_version: int | None, without_columns: tuple[str, ...]
                       ) -> tuple[Path, tuple]:
    global _cache_dir
    key = repr((params, seed, schema_version, without_columns))
    if key not in _RUNS:
        if _cache_dir is None:
            _cache_dir = Path(tempfile.mkdtemp(prefix="synthetic-runs-"))
            atexit.register(shutil.rmtree, _cache_dir, True)
        runs_dir = _cache_dir / str(len(_RUNS))
        _RUNS[key] = (runs_dir, _write_runs(runs_dir, params, seed, schema_version,
                                            without_columns))
    return _RUNS[key]


def make_study(root: str | Path, study_id: str = "synthetic-study",
               params: dict[str, list[RunParams]] | None = None, seed: int = 7,
               status: str = "completed", schema_version: int | None = None,
               without_columns: tuple[str, ...] = (),
               machine: dict[str, Any] | None = None) -> SyntheticStudy:
    """Write ``root/study_id`` and return its path with the expected figures per run;
    ``machine`` replaces the manifest's machine facts (default: a 2-core synthetic host)."""
    params = params if params is not None else _default_params()
    systems = list(params)
    runs_per = max(len(v) for v in params.values())
    path = Path(root) / study_id
    runs_dir, written = _runs_written_once(params, seed, schema_version, without_columns)
    shutil.copytree(runs_dir, path / "runs", dirs_exist_ok=True)
    plan, expected, manifests, entries = copy.deepcopy(written)
    manifest = {
        "study_id": study_id, "status": status,
        "reason": "" if status == "completed" else "interrupted by the test",
        "config": {"gateways": systems, "profile": "synthetic", "runs_per_gateway": runs_per,
                   "reference_system": "nginx", "gate_system": "sluice", "aa_pair": [],
                   "users": USERS, "ramp_s": RAMP_S, "hold_s": HOLD_S, "warmup_s": WARMUP_S,
                   "warmup_users": WARMUP_USERS, "idle_s": IDLE_S, "cooldown_s": COOLDOWN_S,
                   "think_time_s": THINK_S, "locust_processes": 1, "request_timeout_s": 30.0,
                   "mock_latency_ms": MOCK_LATENCY_MS, "mock_workers": 1,
                   "mock_response_tokens": 16, "gateway_workers": 2, "seed": seed,
                   "out_dir": str(Path(root)), "study_id": study_id},
        "plan": plan, "runs": entries,
        "machine": dict(machine if machine is not None else SYNTHETIC_MACHINE),
        "versions": {"locust": "2.47.0", "pandas": pd.__version__, "pyarrow": pa.__version__,
                     "numpy": np.__version__},
        "git_commit": "0123456789abcdef0123456789abcdef01234567-dirty",
        "started_t_unix_s": BASE_T, "ended_t_unix_s": BASE_T + 60.0 * len(plan),
        "systems": {s: {"kind": KINDS.get(s, "competitor"), "version": VERSIONS.get(s, "0"),
                        "role": ROLES.get(s.split("@")[0].split("~")[0], "system"),
                        "runnable": True, "not_runnable_reason": ""} for s in systems},
    }
    manifest = from_plain(StudyManifest, manifest, "synthetic study")
    write_manifest(manifest, path / "manifest.json", schema_version)
    return SyntheticStudy(path=path, expected=expected, runs=manifests, manifest=manifest)


def default_params() -> dict[str, list[RunParams]]:
    """The default systems and runs (a fresh copy, to modify with dataclasses.replace)."""
    return _default_params()


__all__ = ["RunParams", "SyntheticStudy", "make_study", "default_params", "replace"]


if __name__ == "__main__":   # python tests/synthetic.py DIR: write a study to look at
    import sys
    out = make_study(sys.argv[1] if len(sys.argv) > 1 else "artifacts")
    print(out.path)


# Instructions per request of the plain case, per system, in write_lane_counts (others: 100,000).
PLAIN_INSTRUCTIONS = {"direct": 1_000.0, "nginx": 21_000.0, "sluice": 54_000.0}


def write_lane_counts(study: Path, systems, not_counted: dict[str, str]) -> None:
    """A study's counts.json, through the counting lane's own writer: each system counted
    (plain and stream), or its reason in ``not_counted``."""
    builds = [BuildCount(s, s, "", "", (), LANE_SIZES, failed=not_counted[s]) if s in not_counted
              else BuildCount(s, s, "1", "", tuple(
                  CaseCount(c, PLAIN_INSTRUCTIONS.get(s, 1e5) * k, 10.0,
                            {"read": 2.0, "write": 2.0}, 2**24, {"200": 100})
                  for c, k in (("plain", 1), ("stream", 2))), LANE_SIZES)
              for s in systems]
    write_counts(study / F.COUNTS.file, builds, {"cpu_model": "Synthetic CPU"}, "lane")
