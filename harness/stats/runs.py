"""Per-run figures: the measured window, latency percentiles, throughput, CPU and memory, and whether a run shows capacity or behaviour."""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
import pandas as pd

from harness.model.manifests import RunManifest
from harness.model.roles import Roles
from harness.stats import gateway_time
from harness.stats.loading import (
    Study,
    _load_avg_before,
    _locust_processes,
    _mock_workers,
    _num,
    _phase,
    cpu_count,
    mock_latency_ms,
)
from harness.stats.metrics import (
    DEFAULT_BIN_USERS,
    ERROR_KINDS,
    LOCUST_CPU_LIMIT_PERCENT,
    MOCK_CPU_LIMIT_FRACTION,
    MOCK_HOLD_TOLERANCE_MS,
    OFFERED_SHARE,
    OTHER_CPU_LIMIT_PERCENT,
    PERCENTILES,
)
from harness.stats.outcomes import Label


def _pct(values: np.ndarray | pd.Series, q: float) -> float:
    a = np.asarray(values, dtype="float64")
    a = a[~np.isnan(a)]
    return float(np.percentile(a, q)) if a.size else math.nan


def _interp(t: np.ndarray, v: np.ndarray, at: float) -> float:
    if t.size == 0 or math.isnan(at):
        return math.nan
    if at < t[0] or at > t[-1]:
        # outside the sampled span: only the nearest sample within 1.5 s is trusted
        nearest = t[0] if at < t[0] else t[-1]
        if abs(at - nearest) > 1.5:
            return math.nan
    return float(np.interp(at, t, v))


def users_bin(users: pd.Series | np.ndarray, bin_users: int = DEFAULT_BIN_USERS) -> np.ndarray:
    """The lower edge of each user count's bin: floor(users / bin_users) * bin_users."""
    u = np.asarray(users, dtype="int64")
    return (u // int(bin_users)) * int(bin_users)


def window_rows(study: Study, run: RunManifest) -> pd.DataFrame:
    """The rows of a run sent inside its measured window [hold_start, hold_end)."""
    lo, hi = _phase(run, "hold_start"), _phase(run, "hold_end")
    rows = study.requests[study.requests["run_id"] == run.run_id]
    if math.isnan(lo) or math.isnan(hi):
        return rows.iloc[0:0]
    t = rows["start_t_unix_s"]
    return rows[(t >= lo) & (t < hi)]


def _ok(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[rows["error_kind"].fillna("") == ""]


def _floor_bins(study: Study, floor: str | None, bin_users: int) -> pd.DataFrame | None:
    """Per users-bin, the floor's window percentiles, averaged over its completed runs."""
    per_run = []
    for run in study.runs:
        if floor is None or run.system != floor or run.status != "completed":
            continue
        ok = _ok(window_rows(study, run))
        if not len(ok):
            continue
        b = users_bin(ok["users"], bin_users)
        for edge, grp in ok.groupby(b):
            per_run.append({"bin": int(edge), "run_id": run.run_id,
                            **{f"p{q}": _pct(grp["latency_ms"], q) for q in PERCENTILES}})
    if not per_run:
        return None
    return pd.DataFrame(per_run).groupby("bin")[[f"p{q}" for q in PERCENTILES]].mean()


# --- capacity or behaviour -----------------------------------------------------------------------

def classify(row: Mapping) -> tuple[Label, list[str]]:
    """(the run's Label, the reasons) for one run_summary row (or a dict with the
    same keys). Capacity needs positive evidence for every criterion; missing data is a reason."""
    if row.get("status") != "completed":
        status = row.get("status")
        if status == "running":
            return Label.FAILED, ["run still running (not finished when the study was read)"]
        return Label.FAILED, [f"run {status}: {row.get('reason') or 'no reason recorded'}"]
    reasons: list[str] = []
    peak = _num(row.get("locust_cpu_peak_percent"))
    procs = _num(row.get("locust_processes"))
    procs = procs if procs > 0 else 1.0   # NaN compares False
    limit = LOCUST_CPU_LIMIT_PERCENT * procs
    if math.isnan(peak):
        reasons.append("Locust CPU was not sampled")
    elif peak >= limit:
        reasons.append(f"Locust CPU peaked at {peak:.0f}% (limit {limit:.0f}% for "
                       f"{procs:.0f} process{'es' if procs != 1 else ''}): the load generator "
                       "limited the load")
    if bool(row.get("locust_cpu_warning")):
        reasons.append("Locust printed its high-CPU warning")
    hold99, set_ms = _num(row.get("mock_hold_p99_ms")), _num(row.get("mock_latency_ms"))
    if math.isnan(hold99) or math.isnan(set_ms):
        reasons.append("the mock's hold-time p99 is unknown")
    elif hold99 - set_ms > MOCK_HOLD_TOLERANCE_MS:
        reasons.append(f"the mock's hold-time p99 was {hold99:.2f} ms for a set {set_ms:g} ms "
                       f"(+{hold99 - set_ms:.2f} ms > {MOCK_HOLD_TOLERANCE_MS:g} ms): the mock "
                       "was slowed")
    mpeak, mlimit = _num(row.get("mock_cpu_peak_percent")), _num(row.get("mock_cpu_limit_percent"))
    if math.isnan(mpeak):
        reasons.append("the mock's CPU was not sampled")
    elif not math.isnan(mlimit) and mpeak >= mlimit:
        reasons.append(f"the mock's CPU peaked at {mpeak:.0f}% (limit {mlimit:.0f}%)")
    load, cores = _num(row.get("load_avg_before")), _num(row.get("cpu_count"))
    if math.isnan(load) or math.isnan(cores):
        reasons.append("the load average before the run is unknown")
    elif load >= cores:
        reasons.append(f"the load average before the run was {load:.2f} on {cores:.0f} cores: "
                       "the machine was already busy")
    other = _num(row.get("other_cpu_mean_percent"))
    if not math.isnan(other) and other > OTHER_CPU_LIMIT_PERCENT:
        reasons.append(f"other processes on the machine used {other:.0f}% CPU on average during "
                       f"the window (> {OTHER_CPU_LIMIT_PERCENT:.0f}%)")
    failures = sum(int(_num(row.get(f"errors_{k}")) or 0) for k in ERROR_KINDS
                   if not math.isnan(_num(row.get(f"errors_{k}"))))
    if failures:
        parts = [f"{int(row.get(f'errors_{k}'))} {k}" for k in ERROR_KINDS
                 if _num(row.get(f"errors_{k}")) > 0]
        reasons.append(f"{failures} failed request{'s' if failures != 1 else ''} "
                       f"({', '.join(parts)})")
    # identity is the correctness check; the count match is its cross-check (and the only
    # check of runs from before identity existed)
    ident = row.get("identity_problem")
    if ident:
        reasons.append(ident)
    cm = row.get("count_match")
    if cm is not None and not (isinstance(cm, float) and math.isnan(cm)) and not bool(cm):
        reasons.append("the mock's count does not match the successful rows")
    offered, tput = _num(row.get("offered_rps")), _num(row.get("throughput_rps"))
    if not math.isnan(offered) and not math.isnan(tput) and tput >= OFFERED_SHARE * offered:
        reasons.append(f"the users' think time capped the load at ~{offered:.0f} req/s and the "
                       f"system served {tput:.0f} req/s: the offered load, not the system, set "
                       "the throughput")
    return (Label.BEHAVIOUR if reasons else Label.CAPACITY), reasons


def _identity_problem(run: RunManifest) -> str:
    """What the identity join found wrong, "" when every successful row matched one mock row.
    Under provider faults an id the mock saw more than once is a retry, the system's answer to
    the fault: the lane reports it as amplification, not as a problem."""
    i = run.checks.identity
    if i is None or i.ok:
        return ""
    faulted = run.spec is not None and bool(run.spec.mock.fault_scenario)
    parts = [f"{n} {what}" for n, what in (
        (i.client_without_mock, "successful row(s) the mock never saw"),
        (i.mock_without_client, "mock row(s) no client sent"),
        (0 if faulted else i.ids_seen_more_than_once, "id(s) the mock saw more than once"),
        (i.client_without_id, "row(s) without an id")) if n]
    return "identity: " + ", ".join(parts) if parts else ""


# --- per run -------------------------------------------------------------------------------------

def other_cpu(run: RunManifest, samples: pd.DataFrame, start: float, end: float) -> tuple[float, float]:
    """(machine CPU, CPU of processes not ours) as window means, % of one core. With several
    hosts, hosts that report the same hostname are one machine (network namespaces share it):
    a machine's own figure comes from any of its hosts, ours is summed over all of them; the
    busiest machine is reported."""
    w = samples[(samples["t_unix_s"] >= start) & (samples["t_unix_s"] < end)]
    machine_of = {h: (run.hosts[h].before.get("hostname") if h in run.hosts else None) or h
                  for h in pd.unique(w["host"])}
    worst = (math.nan, math.nan)
    for name in sorted(set(machine_of.values()), key=str):
        hosts = [h for h, m in machine_of.items() if m == name]
        here = w[w["host"].isin(hosts)]

        def mean_of(rows: pd.DataFrame) -> float:
            v = rows["cpu_percent"].to_numpy(dtype="float64")
            v = v[~np.isnan(v)]
            return float(v.mean()) if v.size else math.nan
        machine = mean_of(here[here["role"] == "machine"])
        if math.isnan(machine):
            continue
        # isin, not ==: samples of an artifact version without hosts hold None, which == misses
        ours = [mean_of(here[(here["role"] == role) & here["host"].isin([h])])
                for role in ("system", "mock", "standby", "locust", "capture") for h in hosts]
        other = machine - sum(v for v in ours if not math.isnan(v))
        if math.isnan(worst[1]) or other > worst[1]:
            worst = (machine, other)
    return worst


def run_summary(study: Study, bin_users: int = DEFAULT_BIN_USERS,
                floor: str | None = None) -> pd.DataFrame:
    """One row per run (plan order) with every per-run figure; see the package docstring. The
    overheads vs baseline are against ``floor`` (default: the study's floor system)."""
    floor = floor or Roles.of(study.manifest).floor
    floor_bins = _floor_bins(study, floor, bin_users)
    has_floor_run = any(r.system == floor for r in study.runs)
    out = []
    for run in study.runs:
        rid = run.run_id
        status = run.status or "unknown"
        rows = study.requests[study.requests["run_id"] == rid]
        samples = study.samples[study.samples["run_id"] == rid]
        w = window_rows(study, run)
        ok = _ok(w)
        hs, he = _phase(run, "hold_start"), _phase(run, "hold_end")
        ws = _phase(run, "warmup_start")
        rs = _phase(run, "ramp_start")
        le = _phase(run, "load_end")
        load_start = ws if not math.isnan(ws) else rs
        window_s = he - hs
        rec: dict[str, Any] = {
            "run_id": rid, "system": run.system, "run_index": run.run_index,
            "round": run.round, "position": run.position, "status": status,
            "reason": run.reason, "comparison_key": run.comparison_key,
            "window_start_t_unix_s": hs, "window_end_t_unix_s": he, "window_s": window_s,
            "requests_total": int(len(rows)), "requests_in_window": int(len(w)),
            "successful_in_window": int(len(ok)),
        }
        rec["throughput_rps"] = (len(ok) / window_s) if window_s and window_s > 0 else math.nan
        lat = ok["latency_ms"].to_numpy(dtype="float64")
        for q in PERCENTILES:
            rec[f"latency_p{q}_ms"] = _pct(lat, q)
        mlat = mock_latency_ms(study, run)
        rec["mock_latency_ms"] = mlat
        for q in PERCENTILES:
            rec[f"overhead_vs_mock_p{q}_ms"] = rec[f"latency_p{q}_ms"] - mlat

        # overhead vs the floor, same percentile, same users bin
        reason = ""
        if floor is None:
            reason = "no floor system (gateway.toml role \"floor\") in this study"
            vals = {q: math.nan for q in PERCENTILES}
        elif floor_bins is None:
            reason = (f"no completed {floor!r} run in this study" if not has_floor_run
                      else f"no completed {floor!r} run with requests in its window")
            vals = {q: math.nan for q in PERCENTILES}
        elif not len(ok):
            reason = "no successful requests in this run's window"
            vals = {q: math.nan for q in PERCENTILES}
        else:
            b = users_bin(ok["users"], bin_users)
            acc = {q: 0.0 for q in PERCENTILES}
            weight = 0
            for edge, grp in ok.groupby(b):
                if int(edge) not in floor_bins.index:
                    continue
                for q in PERCENTILES:
                    acc[q] += len(grp) * (_pct(grp["latency_ms"], q) - floor_bins.loc[int(edge), f"p{q}"])
                weight += len(grp)
            if weight:
                vals = {q: acc[q] / weight for q in PERCENTILES}
            else:
                vals = {q: math.nan for q in PERCENTILES}
                reason = f"no {floor!r} window data at this run's user counts"
        for q in PERCENTILES:
            rec[f"overhead_vs_direct_p{q}_ms"] = vals[q]
        rec["overhead_vs_direct_reason"] = reason

        # errors over the whole run
        kinds = rows["error_kind"].fillna("")
        known = kinds.isin(["", *ERROR_KINDS])
        for k in ERROR_KINDS:
            rec[f"errors_{k}"] = int((kinds == k).sum()) + (int((~known).sum()) if k == "other" else 0)
        rec["errors_total"] = int(sum(rec[f"errors_{k}"] for k in ERROR_KINDS))
        rec["errors_in_window"] = int(len(w) - len(ok))
        infl = run.checks.inflight_at_stop
        rec["inflight_at_stop"] = float(infl) if infl is not None else math.nan
        rec["count_match"] = run.checks.count_match
        rec["identity_problem"] = _identity_problem(run)

        # CPU per request and memory, from the system role
        sysm = samples[samples["role"] == "system"].sort_values("t_unix_s")
        t = sysm["t_unix_s"].to_numpy(dtype="float64")
        cpu_reason = ""
        if not len(sysm):
            cpu = math.nan
            cpu_reason = "no samples of a system process (a system the client calls directly?)"
        else:
            c = sysm["cpu_seconds_total"].to_numpy(dtype="float64")
            cpu = _interp(t, c, he) - _interp(t, c, hs)
            if math.isnan(cpu):
                cpu_reason = "the samples do not cover the measured window"
        rec["cpu_seconds_in_window"] = cpu
        rec["cpu_ms_per_request"] = (cpu * 1000.0 / len(w)) if len(w) and not math.isnan(cpu) else math.nan
        if not len(w) and not cpu_reason:
            cpu_reason = "no requests in the window"
        rec["cpu_reason"] = cpu_reason
        rss = sysm["rss_bytes"].to_numpy(dtype="float64")
        def _median(mask):
            return float(np.median(rss[mask])) if mask.any() else math.nan
        rec["rss_idle_bytes"] = _median(t < load_start) if not math.isnan(load_start) else math.nan
        rec["rss_peak_bytes"] = float(rss.max()) if rss.size else math.nan
        rec["rss_steady_bytes"] = _median((t >= hs) & (t < he)) if not math.isnan(hs) else math.nan
        after = t >= le if not math.isnan(le) else np.zeros(t.shape, bool)
        rec["rss_recovered_bytes"] = float(rss[after][-1]) if after.any() else math.nan

        # self-reported overhead
        so = ok["self_overhead_ms"].to_numpy(dtype="float64")
        so = so[~np.isnan(so)]
        rec["self_overhead_rows"] = int(so.size)
        rec["self_overhead_p50_ms"] = _pct(so, 50)
        rec["self_overhead_p95_ms"] = _pct(so, 95)

        # time inside the system: net of the mock per request, and on the wire
        mock_log = gateway_time.stored_mock_requests(study.run_dirs.get(rid))
        rec.update(gateway_time.figures(run, ok, mock_log))

        # what else might have limited the result
        def _peak(role):
            s = samples[samples["role"] == role]
            if not math.isnan(load_start) and not math.isnan(le):
                s = s[(s["t_unix_s"] >= load_start) & (s["t_unix_s"] <= le)]
            v = s["cpu_percent"].to_numpy(dtype="float64")
            v = v[~np.isnan(v)]
            return float(v.max()) if v.size else math.nan
        rec["locust_cpu_peak_percent"] = _peak("locust")
        rec["locust_processes"] = _locust_processes(study, run)
        rec["locust_cpu_warning"] = run.locust.cpu_warning
        hold99 = run.mock.hold_ms_p99
        if hold99 is None:
            hold99 = (study.mock_stats.get(rid, {}).get("hold_ms") or {}).get("p99")
        rec["mock_hold_p99_ms"] = _num(hold99)
        hold50 = run.mock.hold_ms_p50
        if hold50 is None:
            hold50 = (study.mock_stats.get(rid, {}).get("hold_ms") or {}).get("p50")
        rec["mock_hold_p50_ms"] = _num(hold50)
        # where the mock's own time goes on shared cores: waiting for a CPU, per request it saw
        wait, seen = run.mock.run_queue_wait_ms, run.mock.count
        rec["mock_cpu_wait_per_request_ms"] = (wait / seen if wait is not None and seen
                                               else math.nan)
        rec["mock_cpu_peak_percent"] = _peak("mock")
        rec["mock_cpu_limit_percent"] = 100.0 * _mock_workers(study, run) * MOCK_CPU_LIMIT_FRACTION
        rec["load_avg_before"] = _load_avg_before(run, samples)
        machine, other = other_cpu(run, samples, hs, he)
        rec["machine_cpu_mean_percent"] = machine
        rec["other_cpu_mean_percent"] = other
        rec["cpu_count"] = cpu_count(study)
        # Closed-loop users that wait between calls offer at most users / (think + the fastest
        # possible call: the mock's hold plus its stream). Not the measured latency: by Little's
        # law a closed loop's throughput always equals users / (think + latency), so a slow
        # system would look as if the think time, not it, had set its throughput.
        if run.spec is None:
            think = users = floor_s = math.nan
        else:
            load_spec, mock_spec = run.spec.load, run.spec.mock
            think, users = _num(load_spec.think_time_s), _num(load_spec.users)
            floor_s = (_num(mock_spec.latency_ms) + (
                _num(mock_spec.stream_chunks) * _num(mock_spec.chunk_delay_ms)
                if load_spec.stream else 0.0)) / 1000.0
        rec["offered_rps"] = (users / (think + floor_s) if think > 0 and not math.isnan(floor_s)
                              else math.nan)
        label, reasons = classify(rec)
        rec["label"] = label
        rec["label_reasons"] = "; ".join(reasons)
        out.append(rec)
    df = pd.DataFrame(out)
    if not len(df):
        return pd.DataFrame(columns=["run_id", "system", "run_index", "status", "label"])
    return df
