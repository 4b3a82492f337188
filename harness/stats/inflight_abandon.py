"""The in-flight lane's abandon phase, per run and step of a streamed run that leaves streams:
what the system did when its clients closed a share of their open streams mid-way, from the
client's rows (each abandoned stream's close time) joined by request id with the mock's (when
the system's close reached the provider, and the frames it wrote), the system's samples and the
health probe (harness.run.health_probe).

The phase is [the measured window's end, the step's end): the wave's closes at its start, then
the system's descriptors and RSS from SETTLED_AFTER_S after the first close to the phase's end.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.stats.rows import percentile

MIB = float(2**20)
# The system has this long after the clients' closes to let go of what they held.
SETTLED_AFTER_S = 1.0

ABANDON_FIGURES = ("abandoned", "abandon_unmatched", "close_to_provider_p50_ms",
                   "close_to_provider_p99_ms", "never_closed_share",
                   "frames_after_leave_per_1000", "fds_after_wave", "fds_expected_after_wave",
                   "fds_kept_after_wave", "rss_change_after_wave_mib", "probe_p99_before_ms",
                   "probe_p99_wave_ms")

ABANDON_DEFINITIONS: dict[str, str] = {
    "abandoned": "streams the client closed mid-stream at the step's abandon phase (the share "
                 "of its open streams the run's seed chose), per run",
    "client close → provider close": "from the client's close of a stream to the system's "
                                     "close of its stream to the mock reaching the mock (the "
                                     "mock notices it between frames), p50 and p99 over the "
                                     "abandoned streams the mock saw closed",
    "never closed": "the share of abandoned streams whose provider stream ran to its natural "
                    "end: the system kept the provider generating for nobody",
    "frames after the client left": "content frames the mock wrote after the client had left "
                                    "(the mock's frames sent − the client's frames received), "
                                    "per 1,000 abandoned streams: the cost leak",
    "descriptors kept": f"the system's descriptors from {SETTLED_AFTER_S:g} s after the closes "
                        "to the phase's end, less its idle count and its descriptors per open "
                        "stream (from the measured window) × the streams still open",
    "RSS after the wave": "the system's RSS after the closes less during the measured window "
                          "(reported only: an allocator may keep freed memory)",
    "health probe p99": "its health check (gateway.toml's [ready] path) every 100 ms: p99 during "
                        "the phase against the same length of time before it (a loop blocked "
                        "by the cleanup answers late)",
}


def wave_figures(rows: pd.DataFrame, mock_rows: pd.DataFrame, samples: pd.DataFrame,
                 probes: pd.DataFrame, window: dict, phase_end: float, idle_fds: float,
                 window_fds: float, window_open: float, window_rss_mib: float) -> dict:
    """One step's abandon figures (ABANDON_FIGURES). ``window``: the step's measured window;
    the phase runs from its end to ``phase_end``; ``idle_fds``: the system's descriptors before
    the load; ``window_*``: its descriptors, the client's open streams and its RSS over the
    measured window."""
    start = window["window_end_t_unix_s"]
    closed_t = rows["abandoned_t_unix_s"].to_numpy(float) if "abandoned_t_unix_s" in rows \
        else np.full(len(rows), math.nan)
    wave = rows[(closed_t >= start) & (closed_t < phase_end)]
    out: dict = {name: math.nan for name in ABANDON_FIGURES}
    out["abandoned"] = int(len(wave))
    if not len(wave):
        return out
    first = float(wave["abandoned_t_unix_s"].min())
    out.update(provider_closes(wave, mock_rows))
    settled = first + SETTLED_AFTER_S
    system = samples[(samples["role"] == "system") & (samples["t_unix_s"] >= settled)
                     & (samples["t_unix_s"] < phase_end)]
    if len(system):
        starts = rows["start_t_unix_s"].to_numpy(float)
        ends = np.where(np.isnan(closed_t), starts + rows["latency_ms"].to_numpy(float) / 1e3,
                        closed_t)
        t = system["t_unix_s"].to_numpy(float)
        still_open = ((starts[None, :] <= t[:, None]) & (ends[None, :] > t[:, None])).sum(axis=1)
        per_open = (window_fds - idle_fds) / window_open if window_open > 0 else math.nan
        out["fds_after_wave"] = float(system["num_fds"].mean())
        out["fds_expected_after_wave"] = float(idle_fds + per_open * still_open.mean())
        out["fds_kept_after_wave"] = out["fds_after_wave"] - out["fds_expected_after_wave"]
        out["rss_change_after_wave_mib"] = float(system["rss_bytes"].mean() / MIB - window_rss_mib)
    if len(probes):
        t = probes["t_unix_s"].to_numpy(float)
        length = phase_end - first
        latency = probes["latency_ms"].to_numpy(float)
        out["probe_p99_wave_ms"] = percentile(latency[(t >= first) & (t < phase_end)], 99)
        out["probe_p99_before_ms"] = percentile(latency[(t >= first - length) & (t < first)], 99)
    return out


def provider_closes(wave: pd.DataFrame, mock_rows: pd.DataFrame) -> dict:
    """The abandoned streams joined by request id with the mock's rows: the time from each
    client close to the provider side's, the share never closed before the stream's natural end,
    and the frames the mock wrote after the client left, per 1,000 abandoned."""
    mock = mock_rows[mock_rows["request_id"].astype(str) != ""]
    mock = mock.drop_duplicates("request_id", keep="last").set_index("request_id")
    ids = wave["request_id"].astype(str)
    matched = ids.isin(mock.index).to_numpy()
    joined = mock.loc[ids[matched]]
    closed_ns = joined["client_closed_t_unix_ns"].to_numpy(float)
    left_s = wave["abandoned_t_unix_s"].to_numpy(float)[matched]
    was_closed = closed_ns > 0
    delay_ms = (closed_ns[was_closed] / 1e9 - left_s[was_closed]) * 1e3
    received = pd.to_numeric(wave["chunks"], errors="coerce").fillna(0).to_numpy(float)[matched]
    after = np.maximum(joined["frames_sent"].to_numpy(float) - received, 0.0)
    n = int(matched.sum())
    return {"abandon_unmatched": int(len(wave) - n),
            "close_to_provider_p50_ms": percentile(delay_ms, 50),
            "close_to_provider_p99_ms": percentile(delay_ms, 99),
            "never_closed_share": float((~was_closed).mean()) if n else math.nan,
            "frames_after_leave_per_1000": float(after.sum() * 1000.0 / n) if n else math.nan}
