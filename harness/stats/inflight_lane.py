"""The in-flight lane, per run and step: how many requests were really held open (at the client
and at the mock), what they cost the system (RSS, descriptors, CPU), the upstream connections it
opened and reused (from the mock's log), the time it added beyond the hold, and its errors by
cause. Where each system stops, the instruments' label and the sizing at a planned concurrency:
harness.stats.inflight_limits.

A step's measured window is its last ``MEASURED_HOLDS`` holds (harness/model/inflight.py): the
step's users are spawned and settled before it. A step the load stopped before (the step below
failed) was not run.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.model.failures import FAILURE_CLASS_MEANINGS, FAILURE_CLASSES
from harness.model.inflight import MEASURED_HOLDS, abandon_phase_s
from harness.model.manifests import RunManifest
from harness.stats.inflight_abandon import wave_figures
from harness.stats.loading import Study
from harness.stats.rows import percentile, successful

MIB = float(2**20)
# A step is held when the time added beyond the hold stays under this at p99, nothing failed
# and the client kept at least this share of the step's requests open.
HELD_ADDED_P99_MS = 100.0
HELD_OPEN_SHARE = 0.95
# The floor (direct: the load generator and the mock alone) holds a step when its own added p99
# stays under this share of the hold: on 2 shared cores the load generator's own tail is 100-700
# ms at 1,000-10,000 open (its processes stall while a step's new users connect), so it is the
# instruments' floor every other system's p99 is judged from, not a figure to hold to 100 ms.
INSTRUMENTS_ADDED_SHARE = 0.1
# The client's and the mock's open counts agree within this share of the step.
AGREE_SHARE = 0.05
# A step ending this long after the load stopped was not run.
STOP_TOLERANCE_S = 1.0
# Open requests are counted this often: closed-loop users spawned together answer in bursts, so a
# coarse grid lands on the gaps between them.
COUNT_EVERY_S = 0.1
# Each failure's class at the client (the requests' error_class).
ERROR_CAUSES = FAILURE_CLASSES
# Rows from before error_class (requests table version 3 and older): their cause guessed from the
# error text, first rule first.
TIMEOUT_WORDS = "timed out|timeout"
RESET_WORDS = "reset|broken pipe|eof|disconnected|stream broken"

INFLIGHT_DEFINITIONS: dict[str, str] = {
    "open at the client": f"requests sent and not yet answered, counted every "
                          f"{COUNT_EVERY_S * 1000:g} ms of the step's measured window (its last "
                          f"hold), mean",
    "open at the mock": "requests whose body the mock has read and whose last byte it has not "
                        "yet written, counted the same way: the two must agree",
    "open by the system's count": "the system's own in-flight gauge (its [metrics] "
                                  "inflight_gauge, sampled each second), mean; none for a "
                                  "system without one",
    "MiB per 1,000 open": "the slope of the system's tree RSS (mean over each step's window) "
                          "against the requests open at the client, least squares over every "
                          "run's steps whose requests were all held open (none failed, 95% of "
                          "the step open), however slow, with its R²",
    "upstream connections": "distinct (mock worker, peer port) pairs among the requests the mock "
                            "received in the window (a lower bound if a port was reused); reuse = "
                            "requests per connection",
    "added": "a successful request's latency minus the mock's hold",
    "held": f"no failed request, at least {HELD_OPEN_SHARE:.0%} of the step open at the "
            f"client in every run, and an added p99 (mean over runs) under {HELD_ADDED_P99_MS:g} "
            f"ms beyond direct's at the same step (direct's own, the instruments' floor, under "
            f"{INSTRUMENTS_ADDED_SHARE:.0%} of the hold in every run; a study without direct: "
            f"under {HELD_ADDED_P99_MS:g} ms)",
    "errors by cause": "failed requests per run by the class the load generator gave each from "
                       "the transport's own error: "
                       + "; ".join(f"{c}: {m}" for c, m in FAILURE_CLASS_MEANINGS.items())
                       + ". Requests recorded before the class existed are classed by their "
                         "error text (a timeout as read_timeout, a reset by whether a head "
                         "arrived)",
}


def open_counts(starts_s: np.ndarray, ends_s: np.ndarray, times_s: np.ndarray) -> np.ndarray:
    """How many [start, end) intervals contain each of ``times_s``."""
    starts, ends = np.sort(np.asarray(starts_s, float)), np.sort(np.asarray(ends_s, float))
    t = np.asarray(times_s, float)
    return (np.searchsorted(starts, t, side="right") - np.searchsorted(ends, t, side="right")).astype(float)


def step_windows(hold_start: float, hold_end: float, steps: tuple[int, ...], step_s: float,
                 hold_s: float, phase_s: float = 0.0) -> list[dict]:
    """Each step's target, its measured window [start, end) (before its abandon phase of
    ``phase_s``), when the step ends, and whether the load reached its end."""
    out = []
    for index, target in enumerate(steps, 1):
        step_end = hold_start + index * step_s
        end = step_end - phase_s
        ran = not math.isnan(hold_end) and step_end <= hold_end + STOP_TOLERANCE_S
        out.append({"step_index": index, "target_open": int(target), "ran": ran,
                    "window_start_t_unix_s": end - MEASURED_HOLDS * hold_s,
                    "window_end_t_unix_s": end, "step_end_t_unix_s": step_end})
    return out


def error_causes(rows: pd.DataFrame) -> dict[str, int]:
    """Failed requests by cause (ERROR_CAUSES): each row's ``error_class``; a failed row without
    one (an artifact from before the column) by its error text (``text_causes``)."""
    failed = rows[rows["error_kind"].fillna("") != ""]
    classes = (failed["error_class"].fillna("").astype(str).to_numpy(object)
               if "error_class" in failed else np.full(len(failed), "", dtype=object))
    unclassed = classes == ""
    classes = np.where(np.isin(classes, ERROR_CAUSES) | unclassed, classes, "other")
    classes[unclassed] = text_causes(failed[unclassed])
    counts = pd.Series(classes, dtype=object).value_counts()
    return {cause: int(counts.get(cause, 0)) for cause in ERROR_CAUSES}


def text_causes(failed: pd.DataFrame) -> np.ndarray:
    """The cause of each failed row from its error text and status, the first rule that matches:
    a timeout (taken as the answer's: the text does not say), refused, a 5xx or 4xx answer, a
    reset or a stream cut short (after the head when a status arrived), else other."""
    text = failed["error"].fillna("").astype(str).str.lower()
    status = failed["status_code"].fillna(0).astype(int)
    reset = text.str.contains(RESET_WORDS, regex=True)
    rules = [(failed["error_kind"] == "timeout") | text.str.contains(TIMEOUT_WORDS, regex=True),
             text.str.contains("refused", regex=False), status >= 500, status >= 400,
             reset & (status > 0), reset]
    causes = ["read_timeout", "connect_refused", "http_5xx", "http_4xx", "reset_during_body",
              "reset_before_head"]
    return np.select([r.to_numpy(bool) for r in rules], causes, default="other")


def upstream_connections(mock_rows: pd.DataFrame) -> tuple[int, float]:
    """(distinct connections, requests per connection) of the mock's rows."""
    if not len(mock_rows):
        return 0, math.nan
    connections = int(mock_rows[["worker_pid", "peer_port"]].drop_duplicates().shape[0])
    return connections, len(mock_rows) / connections


def _role_window(samples: pd.DataFrame, role: str, start: float, end: float) -> pd.DataFrame:
    s = samples[(samples["role"] == role) & (samples["t_unix_s"] >= start)
                & (samples["t_unix_s"] < end)]
    return s.sort_values("t_unix_s")


def _cpu_s(samples: pd.DataFrame, start: float, end: float) -> float:
    """The system tree's CPU seconds over [start, end), interpolated at the edges."""
    s = samples[samples["role"] == "system"].sort_values("t_unix_s")
    if len(s) < 2 or s["t_unix_s"].iloc[0] > start or s["t_unix_s"].iloc[-1] < end:
        return math.nan
    t, c = s["t_unix_s"].to_numpy(float), s["cpu_seconds_total"].to_numpy(float)
    return float(np.interp(end, t, c) - np.interp(start, t, c))


def step_figures(rows: pd.DataFrame, mock_rows: pd.DataFrame, samples: pd.DataFrame,
                 window: dict, hold_ms: float, stream: bool,
                 wave: tuple[pd.DataFrame, float] | None = None) -> dict:
    """One step of one run: the figures of the module docstring over its measured window.
    ``rows`` and ``mock_rows`` are the run's (any time); ``samples`` the run's 1-s samples;
    ``wave``: (the health probe's rows, the system's descriptors at idle) in a run that leaves
    streams, whose abandon figures (harness.stats.inflight_abandon) are added."""
    start, end = window["window_start_t_unix_s"], window["window_end_t_unix_s"]
    grid = np.arange(start, end, COUNT_EVERY_S)
    row_start = rows["start_t_unix_s"].to_numpy(float)
    row_end = row_start + rows["latency_ms"].to_numpy(float) / 1e3  # an abandoned one: its close
    client_open = open_counts(row_start, row_end, grid)
    m_start = mock_rows["body_end_t_unix_ns"].to_numpy(float) / 1e9
    m_end = mock_rows["last_frame_written_t_unix_ns"].to_numpy(float) / 1e9
    mock_open = open_counts(m_start, m_end, grid)
    left = (rows["abandoned_t_unix_s"].notna().to_numpy() if "abandoned_t_unix_s" in rows
            else np.zeros(len(rows), bool))
    # a stream its client left is neither a success nor a failure: its time is the client's
    in_window = rows[(row_start >= start) & (row_start < end) & ~left]
    ok = successful(in_window)
    done = successful(rows[(row_end >= start) & (row_end < end)])
    received = mock_rows[(m_start >= start) & (m_start < end)]
    connections, per_connection = upstream_connections(received)
    system = _role_window(samples, "system", start, end)
    cpu_s = _cpu_s(samples, start, end)
    frames = float(pd.to_numeric(done["chunks"], errors="coerce").sum()) if stream else math.nan
    added = ok["latency_ms"].to_numpy(float) - hold_ms
    errors = error_causes(in_window)
    figures = {
        **window, "client_open_mean": _mean(client_open), "client_open_max": _max(client_open),
        "mock_open_mean": _mean(mock_open), "mock_open_max": _max(mock_open),
        "system_open_mean": _mean(system["inflight_requests"].to_numpy(float)),
        "rss_mib": _mean(system["rss_bytes"].to_numpy(float) / MIB),
        "open_fds": _mean(system["num_fds"].to_numpy(float)),
        "system_processes": _max(system["pid_count"].to_numpy(float)),
        "system_cpu_percent": _mean(system["cpu_percent"].to_numpy(float)),
        "upstream_connections": connections, "requests_per_connection": per_connection,
        "added_p50_ms": percentile(added, 50), "added_p99_ms": percentile(added, 99),
        "requests": int(len(in_window)), "failed": int(sum(errors.values())),
        **{f"errors_{cause}": n for cause, n in errors.items()},
        "cpu_ms_per_request": cpu_s * 1e3 / len(done) if len(done) else math.nan,
        "cpu_ms_per_frame": cpu_s * 1e3 / frames if stream and frames else math.nan}
    failed_text = in_window.loc[in_window["error_kind"].fillna("") != "", "error"].fillna("")
    figures["error_example"] = str(failed_text.mode().iloc[0]) if len(failed_text) else ""
    figures["open_agree"] = bool(abs(figures["client_open_mean"] - figures["mock_open_mean"])
                                 <= AGREE_SHARE * window["target_open"])
    figures["held"] = is_held(figures)
    if wave is not None and "step_end_t_unix_s" in window:
        figures.update(wave_figures(rows, mock_rows, samples, wave[0], window,
                                    window["step_end_t_unix_s"], wave[1], figures["open_fds"],
                                    figures["client_open_mean"], figures["rss_mib"]))
    return figures


def is_held(figures: dict) -> bool:
    """The step was held: see INFLIGHT_DEFINITIONS["held"]."""
    p99 = figures["added_p99_ms"]
    return bool(figures.get("ran", True) and figures["failed"] == 0 and not math.isnan(p99)
                and p99 < HELD_ADDED_P99_MS
                and figures["client_open_mean"] >= HELD_OPEN_SHARE * figures["target_open"])


def _mean(a) -> float:
    a = np.asarray(a, float)
    a = a[~np.isnan(a)]
    return float(a.mean()) if a.size else math.nan


def _max(a) -> float:
    a = np.asarray(a, float)
    return float(a.max()) if a.size else math.nan


def is_inflight(run: RunManifest) -> bool:
    return run.spec is not None and bool(run.spec.load.inflight_steps)


def run_steps(run: RunManifest, rows: pd.DataFrame, mock_rows: pd.DataFrame,
              samples: pd.DataFrame, probes: pd.DataFrame | None = None) -> list[dict]:
    """Every step of one in-flight run; a step the load did not reach has only its target. A run
    that failed during its steps (the system exited, the load broke) ran every step that ended
    before it failed; the step it failed in is measured up to then and carries the reason."""
    load = run.spec.load
    hold_ms = load.inflight_hold_s * 1e3
    stop, failed_at = run.phases.t("hold_end"), math.nan
    if math.isnan(stop) and run.status == "failed" and run.failed_t_unix_s is not None:
        stop = failed_at = float(run.failed_t_unix_s)
    head = {"run_id": run.run_id, "system": run.system, "run_index": run.run_index,
            "status": run.status, "stream": bool(load.stream),
            "open_files_limit": _files_limit(run), "run_failed": "", "unfit": ""}
    fit = run.steps_fit
    phase_s = abandon_phase_s(load)
    wave = (probes if probes is not None else pd.DataFrame(),
            idle_fds(samples, run.phases.t("warmup_start"))) if phase_s else None
    out = []
    for window in step_windows(run.phases.t("hold_start"), stop, load.inflight_steps,
                               load.inflight_step_s, load.inflight_hold_s, phase_s):
        step_start = window["window_end_t_unix_s"] - load.inflight_step_s
        if fit is not None and window["step_index"] > fit.steps_run:
            # never run: its descriptors would not fit the machine's limits (checked before)
            out.append({**head, **window, "ran": False, "held": False, "unfit": fit.reason})
        elif not window["ran"] and step_start <= failed_at < window["window_end_t_unix_s"]:
            partial = {**window, "ran": True, "window_start_t_unix_s": step_start,
                       "window_end_t_unix_s": failed_at}
            figures = step_figures(rows, mock_rows, samples, partial, hold_ms, load.stream)
            out.append({**head, **figures, "held": False, "run_failed": run.reason or "failed"})
        elif not window["ran"]:
            out.append({**head, **window, "held": False})
        else:
            out.append({**head, **step_figures(rows, mock_rows, samples, window, hold_ms,
                                               load.stream, wave)})
    return out


def idle_fds(samples: pd.DataFrame, load_start: float) -> float:
    """The system's descriptors before the load began (mean of its samples then)."""
    s = samples[(samples["role"] == "system") & (samples["t_unix_s"] < load_start)]
    return float(s["num_fds"].mean()) if len(s) else math.nan


def _files_limit(run: RunManifest) -> float:
    limit = run.limits.open_files_by_role.get("system") if run.limits is not None else None
    return math.nan if limit is None else float(limit)


def inflight_steps(study: Study) -> pd.DataFrame:
    """One row per in-flight run and step of the study (empty when it has none)."""
    out = []
    for run in study.runs:
        if not is_inflight(run) or math.isnan(run.phases.t("hold_start")):
            continue
        rows = study.requests[study.requests["run_id"] == run.run_id]
        samples = study.samples[study.samples["run_id"] == run.run_id]
        out += run_steps(run, rows, study.mock_requests(run.run_id), samples,
                         study.probes(run.run_id))
    return pd.DataFrame(out)
