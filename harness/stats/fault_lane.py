"""The provider-fault lane's figures: what a client saw before, during and after the provider
failed, and how many requests the system sent the provider for each one it was asked.

Per run, three windows of the hold, by the client's send time (``start_t_unix_s``):
before = [hold start, fault start), during = [fault start, fault end), after = [fault end,
hold end). The fault window is the mock's: its epoch (the run's ``faults.json``) plus the
run's ``fault_start_s`` and ``fault_duration_s``; the hold's ends are the run manifest's phases.

Per window: client-visible success share (no error), requests by status code, amplification
(mock rows whose body arrived in the window per client request sent in it: 1.0 without
retries, 4.0 when every request reached the provider four times; a window edge can shift a
retry into the next window), added latency p50/p99 (successful requests' latency minus the
mock's set latency), error bodies in the client's dialect (``client_dialect_share``: of the
error responses (status ≥ 400) whose body the load generator judged, those whose body had
the error shape of the client's dialect; NaN when there were none, or in an artifact
without ``error_body_dialect``), partial streams (streamed responses that did not end with the
dialect's done frame), and the system's peak RSS. Per run: time to recover (``recovery_s``:
from the fault's end to the start of the first 1-s bin whose p50 latency is within
``RECOVERY_SHARE`` or ``RECOVERY_MS`` of the before window's p50; NaN when no bin of the
hold's rest is), whether the system stayed up (the run completed), its peak RSS over the hold,
and its configuration (the run manifest's ``resilience`` asked and ``resilience_note``: why it
ran as shipped instead, "" when it ran as asked).

Functions over frames are pure; ``fault_summary`` reads a study's run directories.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from harness.files.pcap import SYN_PCAP, refused_syns
from harness.model.dialects import ERROR_BODY_CLASSES, GENERATION_PATHS
from harness.model.fault_scenarios import SCENARIOS
from harness.model.manifests import RunManifest
from harness.stats import fault_scenarios as FS
from harness.stats.across import describe
from harness.stats.fault_requests import provider_failure_shares, request_figures, request_outcomes, sent_in, tts_curve
from harness.stats.loading import Study, mock_latency_ms
from harness.stats.rows import is_success, percentile

WINDOWS = ("before", "during", "after")
RECOVERY_SHARE = 0.10     # a bin's p50 within 10% of the before window's p50 ...
RECOVERY_MS = 2.0         # ... or within 2 ms of it, whichever is wider
FAILBACK_SHARE = 0.90     # failed back: this share of a bin's provider requests on the primary
BIN_S = 1.0

WINDOW_COLUMNS = ("run_id", "system", "run_index", "run_status", "scenario", "resilience",
                  "resilience_note", "window", "start_t_unix_s", "end_t_unix_s", "requests", "ok",
                  "success_share", "status_counts", "mock_rows", "amplification", "added_p50_ms",
                  "added_p99_ms", "error_responses", "client_dialect_share", "streams",
                  "partial_streams", "rss_peak_bytes")
# Per run, the requests sent in the fault window counted per request (harness.stats.
# fault_requests): run column -> its figure there.
SENT_DURING = {"requests_sent_during": "requests", "requests_without_id": "requests_without_id",
               "success_sent_during": "success_share", "amplification_sent_during": "amplification",
               "first_attempt_failure_share": "first_attempt_failure_share",
               "floor_failure_share": "floor_failure_share",
               "excess_amplification": "excess_amplification", "tts_p50_ms": "tts_p50_ms",
               "tts_p99_ms": "tts_p99_ms", "time_weighted_success": "time_weighted_success",
               "attempts_after_window_share": "attempts_after_window_share",
               "attempts_seen": "attempts_seen"}
RUN_COLUMNS = ("run_id", "system", "run_index", "run_status", "scenario", "resilience",
               "resilience_note", "stayed_up", "fault_start_t_unix_s", "fault_end_t_unix_s",
               "hold_start_t_unix_s", "hold_end_t_unix_s", "before_p50_ms", "recovery_s",
               "recovered", "rss_peak_bytes", "failback_s", "failed_back", *SENT_DURING,
               "tts_curve", "refused_attempts", *FS.FIGURES)
# A system's figures over its runs in one study (``system_figures``): name -> (window, column)
# of a window figure, or (None, column) of a run figure.
SYSTEM_FIGURES = {
    "success_before": ("before", "success_share"),
    # during: the requests sent in the fault window, each with all its attempts
    "success_during": (None, "success_sent_during"),
    "success_after": ("after", "success_share"),
    "amplification_during": (None, "amplification_sent_during"),
    "added_p50_during_ms": ("during", "added_p50_ms"),
    "added_p99_during_ms": ("during", "added_p99_ms"),
    "client_dialect_during": ("during", "client_dialect_share"),
    "partial_streams_during": ("during", "partial_streams"),
    "recovery_s": (None, "recovery_s"),
    "failback_s": (None, "failback_s"),
    "rss_peak_bytes": (None, "rss_peak_bytes"),
    **{name: (None, name) for name in ("first_attempt_failure_share", "floor_failure_share",
                                        "excess_amplification",
                                        "tts_p50_ms", "tts_p99_ms",
                                        "time_weighted_success", "attempts_after_window_share")},
    # the scenarios' own questions (harness.stats.fault_scenarios), NaN where they do not apply
    **{name: (None, name) for name in FS.FIGURES if name != "client_statuses"},
}
SYSTEM_COLUMNS = ("system", "resilience", "resilience_note", "runs", "stayed_up", "recovered",
                  "failed_back", "tts_curve", "client_statuses",
                  *(f"{name}_{k}" for name in SYSTEM_FIGURES for k in ("n", "mean", "sd")))


@dataclass(frozen=True)
class FaultWindow:
    start_t_unix_s: float
    end_t_unix_s: float


def windows(hold_start: float, hold_end: float, fault: FaultWindow) -> dict[str, tuple[float, float]]:
    """The before/during/after windows, each clipped to the hold."""
    fs = min(max(fault.start_t_unix_s, hold_start), hold_end)
    fe = min(max(fault.end_t_unix_s, fs), hold_end)
    return {"before": (hold_start, fs), "during": (fs, fe), "after": (fe, hold_end)}


def generation_rows(mock: pd.DataFrame) -> pd.DataFrame:
    """The mock's generation requests (its log also holds /health and /models)."""
    return mock[mock["path"].isin(GENERATION_PATHS)]


def window_figures(client: pd.DataFrame, mock: pd.DataFrame, lo: float, hi: float,
                   set_latency_ms: float) -> dict:
    """One window's figures from a run's client rows and the mock's generation rows."""
    c = client[(client["start_t_unix_s"] >= lo) & (client["start_t_unix_s"] < hi)]
    t = mock["body_end_t_unix_ns"] / 1e9
    m = mock[(t >= lo) & (t < hi)]
    ok = is_success(c)
    lat = c.loc[ok, "latency_ms"]
    # error responses whose body was judged (an older artifact judged none); a connection error
    # or a stream cut short after its 200 had no error body
    dialect = (c["error_body_dialect"] if "error_body_dialect" in c
               else pd.Series(None, index=c.index, dtype=object))
    judged = (c["status_code"] >= 400) & dialect.isin(ERROR_BODY_CLASSES)
    n_judged, in_dialect = int(judged.sum()), int((judged & (dialect == "client")).sum())
    streamed = c["chunks"].fillna(0) > 0 if "chunks" in c else pd.Series(False, index=c.index)
    if "stream_done" in c:
        partial = int((streamed & ~c["stream_done"].fillna(False).astype(bool)).sum())
    else:
        partial = 0
    n = len(c)
    return {
        "requests": n, "ok": int(ok.sum()),
        "success_share": float(ok.mean()) if n else math.nan,
        "status_counts": {int(k): int(v) for k, v in
                          c["status_code"].value_counts().sort_index().items()},
        "mock_rows": len(m),
        "amplification": len(m) / n if n else math.nan,
        "added_p50_ms": percentile(lat, 50) - set_latency_ms,
        "added_p99_ms": percentile(lat, 99) - set_latency_ms,
        "error_responses": n_judged,
        "client_dialect_share": in_dialect / n_judged if n_judged else math.nan,
        "streams": int(streamed.sum()), "partial_streams": partial,
    }


def recovery_s(client: pd.DataFrame, fault_end: float, hold_end: float,
               before_p50_ms: float) -> float:
    """Seconds from the fault's end to the start of the first 1-s bin whose successful
    requests' p50 latency is back near the before window's; NaN when none is."""
    if math.isnan(before_p50_ms) or not hold_end > fault_end:
        return math.nan
    limit = before_p50_ms + max(RECOVERY_SHARE * before_p50_ms, RECOVERY_MS)
    ok = client[is_success(client)]
    t = ok["start_t_unix_s"].to_numpy(dtype="float64")
    lat = ok["latency_ms"].to_numpy(dtype="float64")
    for k in range(int(math.ceil((hold_end - fault_end) / BIN_S))):
        lo = fault_end + k * BIN_S
        sel = (t >= lo) & (t < min(lo + BIN_S, hold_end))
        if sel.any() and percentile(lat[sel], 50) <= limit:
            return k * BIN_S
    return math.nan


def timeline(client: pd.DataFrame, mock: pd.DataFrame, t0: float, t1: float,
             bin_s: float = BIN_S) -> pd.DataFrame:
    """Per bin from t0: client requests, success share, amplification and the share of the
    provider requests that went to the primary."""
    edges = np.arange(t0, t1 + bin_s, bin_s)
    if len(edges) < 2:
        return pd.DataFrame(columns=["t_s", "requests", "success_share", "amplification",
                                     "primary_share"])
    ct = client["start_t_unix_s"].to_numpy(dtype="float64")
    ok = is_success(client).to_numpy()
    mt = mock["body_end_t_unix_ns"].to_numpy(dtype="float64") / 1e9
    n, _ = np.histogram(ct, edges)
    n_ok, _ = np.histogram(ct[ok], edges)
    n_mock, _ = np.histogram(mt, edges)
    primary = (mock["provider"] == "primary").to_numpy() if "provider" in mock else np.ones(len(mt), bool)
    n_primary, _ = np.histogram(mt[primary], edges)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(n > 0, n_ok / np.maximum(n, 1), np.nan)
        amp = np.where(n > 0, n_mock / np.maximum(n, 1), np.nan)
        on_primary = np.where(n_mock > 0, n_primary / np.maximum(n_mock, 1), np.nan)
    return pd.DataFrame({"t_s": edges[:-1] - t0, "requests": n, "success_share": share,
                         "amplification": amp, "primary_share": on_primary})


def _rss_peak(samples: pd.DataFrame, lo: float, hi: float) -> float:
    s = samples[(samples["role"] == "system") & (samples["t_unix_s"] >= lo) & (samples["t_unix_s"] < hi)]
    return float(s["rss_bytes"].max()) if len(s) else math.nan


def fault_window_of(run: RunManifest, armed_t_unix_s: float | None) -> FaultWindow | None:
    """The run's fault window in wall-clock time, from when its load armed the faults; None
    for a run without faults (or whose load never armed them)."""
    if run.spec is None or not run.spec.mock.fault_scenario or armed_t_unix_s is None:
        return None
    start = armed_t_unix_s + run.spec.mock.fault_start_s
    return FaultWindow(start, start + run.spec.mock.fault_duration_s)


def run_fault_figures(run: RunManifest, client: pd.DataFrame, mock: pd.DataFrame,
                      samples: pd.DataFrame, fault: FaultWindow, set_latency_ms: float,
                      refused_ns: list[int] | None = None) -> tuple[list[dict], dict]:
    """(one record per window, the run's record) for one run; ``refused_ns``: the connection
    attempts its provider refused (refused_syns_of), None when none were captured."""
    hs, he = run.phases.t("hold_start"), run.phases.t("hold_end")
    base = {"run_id": run.run_id, "system": run.system, "run_index": run.run_index,
            "run_status": run.status, "scenario": run.spec.mock.fault_scenario if run.spec else "",
            "resilience": run.resilience, "resilience_note": run.resilience_note}
    gen = generation_rows(mock)
    recs = []
    if not (math.isnan(hs) or math.isnan(he)):
        for name, (lo, hi) in windows(hs, he, fault).items():
            recs.append({**base, "window": name, "start_t_unix_s": lo, "end_t_unix_s": hi,
                         **window_figures(client, gen, lo, hi, set_latency_ms),
                         "rss_peak_bytes": _rss_peak(samples, lo, hi)})
    before = next((r for r in recs if r["window"] == "before"), None)
    before_p50 = before["added_p50_ms"] + set_latency_ms if before else math.nan
    rec_s = recovery_s(client, fault.end_t_unix_s, he, before_p50) if recs else math.nan
    summary = {**base, "stayed_up": run.status == "completed",
               "fault_start_t_unix_s": fault.start_t_unix_s, "fault_end_t_unix_s": fault.end_t_unix_s,
               "hold_start_t_unix_s": hs, "hold_end_t_unix_s": he, "before_p50_ms": before_p50,
               "recovery_s": rec_s, "recovered": not math.isnan(rec_s),
               "rss_peak_bytes": _rss_peak(samples, hs, he) if recs else math.nan,
               **_failback(gen, fault.end_t_unix_s, he),
               **_sent_during(client, gen, recs, base["scenario"], refused_ns)}
    return recs, summary


def failback_s(generation: pd.DataFrame, fault_end: float, hold_end: float,
               bin_s: float = BIN_S) -> float:
    """Seconds from the fault's end to the start of the first 1-s bin in which at least
    FAILBACK_SHARE of the provider requests went to the primary again; NaN when none is before
    the hold's end (the system did not fail back)."""
    if "provider" not in generation or not hold_end > fault_end:
        return math.nan
    t = generation["body_end_t_unix_ns"].to_numpy(dtype="float64") / 1e9
    on_primary = (generation["provider"] == "primary").to_numpy()
    for k in range(int(math.ceil((hold_end - fault_end) / bin_s))):
        lo = fault_end + k * bin_s
        sel = (t >= lo) & (t < min(lo + bin_s, hold_end))
        if sel.any() and on_primary[sel].mean() >= FAILBACK_SHARE:
            return k * bin_s
    return math.nan


def _failback(generation: pd.DataFrame, fault_end: float, hold_end: float) -> dict:
    """Failback, for a run with a standby provider (NaN and not applicable without one)."""
    if "provider" not in generation or not (generation["provider"] == "standby").any():
        return {"failback_s": math.nan, "failed_back": math.nan}
    seconds = failback_s(generation, fault_end, hold_end)
    return {"failback_s": seconds, "failed_back": float(not math.isnan(seconds))}


def _sent_during(client: pd.DataFrame, generation: pd.DataFrame, recs: list[dict],
                 scenario: str, refused_ns: list[int] | None = None) -> dict:
    """The fault window's requests counted per request (SENT_DURING; NaN without a window),
    with the scenario's own figures (harness.stats.fault_scenarios)."""
    during = next((r for r in recs if r["window"] == "during"), None)
    if during is None:
        return {**{name: math.nan for name in SENT_DURING}, "tts_curve": [],
                "refused_attempts": math.nan,
                **{name: math.nan for name in FS.FIGURES}, "client_statuses": ""}
    lo, hi = during["start_t_unix_s"], during["end_t_unix_s"]
    outcomes = request_outcomes(client, generation, lo, hi)
    figures = request_figures(outcomes, lo, hi, provider_failure_shares(client, generation, lo, hi))
    refused = math.nan
    if refused_ns is not None:
        # a refused connection reaches no provider log: counted from the capture, it makes the
        # amplification whole (every refusal of a provider_down run falls in its down window)
        refused = len(refused_ns)
        if figures["requests"]:
            figures["amplification"] = (figures["attempts_seen"] + refused) / figures["requests"]
    return {**{name: figures[figure] for name, figure in SENT_DURING.items()},
            "refused_attempts": refused,
            "tts_curve": tts_curve(outcomes),
            **FS.scenario_figures(sent_in(client, lo, hi), generation, retry_after_of(scenario))}


def retry_after_of(scenario: str) -> float:
    """The Retry-After (s) the scenario's provider gives with its 429s; NaN when it gives none."""
    sc = SCENARIOS.get(scenario)
    given = [spec["retry_after_s"] for spec in (sc.specs if sc else ()) if "retry_after_s" in spec]
    return float(max(given)) if given else math.nan


def refused_syns_of(run_dir) -> list[int] | None:
    """The SYNs the run's provider refused (harness.files.pcap.refused_syns of its syn.pcap);
    None when the run captured none (a scenario that does not refuse connections, or no
    tcpdump): then its amplification counts only what reached the provider."""
    path = Path(run_dir) / SYN_PCAP if run_dir is not None else None
    if path is None or not path.is_file():
        return None
    try:
        return refused_syns(str(path))
    except (OSError, ValueError):
        return None


def fault_summary(study: Study) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per window: WINDOW_COLUMNS, per run: RUN_COLUMNS) over the study's fault runs; both
    empty in a study without faults."""
    win, per_run = [], []
    for run in study.runs:
        fault = fault_window_of(run, study.fault_epochs.get(run.run_id))
        if fault is None:
            continue
        client = study.requests[study.requests["run_id"] == run.run_id]
        samples = study.samples[study.samples["run_id"] == run.run_id]
        recs, summary = run_fault_figures(run, client, study.mock_requests(run.run_id), samples, fault,
                                          mock_latency_ms(study, run),
                                          refused_syns_of(study.run_dirs.get(run.run_id)))
        win += recs
        per_run.append(summary)
    return (pd.DataFrame(win, columns=list(WINDOW_COLUMNS)),
            pd.DataFrame(per_run, columns=list(RUN_COLUMNS)))


def fault_timelines(study: Study, per_run: pd.DataFrame) -> pd.DataFrame:
    """Per fault run, ``timeline`` over its hold, with t_s from the hold's start and the run's
    system, run index and fault window (seconds after the hold's start)."""
    frames = []
    for r in per_run.itertuples(index=False):
        if math.isnan(r.hold_start_t_unix_s) or math.isnan(r.hold_end_t_unix_s):
            continue
        client = study.requests[study.requests["run_id"] == r.run_id]
        tl = timeline(client, generation_rows(study.mock_requests(r.run_id)),
                      r.hold_start_t_unix_s, r.hold_end_t_unix_s)
        frames.append(tl.assign(run_id=r.run_id, system=r.system, run_index=r.run_index,
                                run_status=r.run_status, resilience=r.resilience,
                                resilience_note=r.resilience_note,
                                fault_from_s=r.fault_start_t_unix_s - r.hold_start_t_unix_s,
                                fault_to_s=r.fault_end_t_unix_s - r.hold_start_t_unix_s))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _mean_curve(curves: pd.Series) -> list[float]:
    """The runs' time-to-success curves averaged point by point ([] when none was measured)."""
    measured = [c for c in curves if isinstance(c, list) and c]
    if not measured:
        return []
    with np.errstate(invalid="ignore"):
        return [float(x) for x in np.nanmean(np.array(measured, dtype="float64"), axis=0)]


def system_figures(per_window: pd.DataFrame, per_run: pd.DataFrame) -> pd.DataFrame:
    """One row per system of a study's fault runs: its configuration (the runs' resilience and
    notes), ``runs`` (runs that reached the hold), ``stayed_up`` and ``recovered`` (how many of
    them), and n, mean and sd over those runs (``{name}_n``, ``_mean``, ``_sd``) of each
    SYSTEM_FIGURES figure. A run that did not stay up counts: what its clients saw is the
    finding."""
    rows = []
    for system, runs in per_run.groupby("system", sort=False):
        runs = runs[runs["run_id"].isin(set(per_window["run_id"]))]
        if runs.empty:
            continue
        row = {"system": system,
               "resilience": "/".join(dict.fromkeys(runs["resilience"])),
               "resilience_note": "; ".join(n for n in dict.fromkeys(runs["resilience_note"]) if n),
               "runs": len(runs), "stayed_up": int(runs["stayed_up"].sum()),
               "recovered": int(runs["recovered"].sum()),
               # NaN without a standby provider: failback does not apply
               "failed_back": runs["failed_back"].astype("float64").sum(min_count=1),
               "tts_curve": _mean_curve(runs["tts_curve"]),
               "client_statuses": " | ".join(str(x) for x in runs["client_statuses"])}
        for name, (window, column) in SYSTEM_FIGURES.items():
            if window is None:
                values = runs[column]
            else:
                w = per_window[(per_window["system"] == system) & (per_window["window"] == window)]
                values = w[w["run_id"].isin(set(runs["run_id"]))][column]
            d = describe(values.astype("float64"))
            row.update({f"{name}_{k}": d[k] for k in ("n", "mean", "sd")})
        rows.append(row)
    return pd.DataFrame(rows, columns=list(SYSTEM_COLUMNS))
