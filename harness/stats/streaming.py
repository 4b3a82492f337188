"""The streaming lane: time to first token, gaps between frames, and how each system relays."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.model.roles import Roles
from harness.model.truncation import TRUNCATED
from harness.stats.loading import Study, as_float
from harness.stats.rows import percentile, successful
from harness.stats.runs import window_rows

BUFFERED_GAP_SHARE = 0.25   # frames arriving this much closer together than the mock sent them
BUFFERED_FIRST_TOKEN_SHARE = 0.9  # ... and the first of them this late in the stream: buffered


def stream_summary(study: Study, floor: str | None = None) -> pd.DataFrame:
    """Per streamed run, over the window's successful streams: time to first byte and to first
    token, the gaps between content frames, whole-stream duration, frames received, streams
    that ended properly; overhead on time to first token and on the gaps against the floor
    (default: the study's floor system; mean of its completed runs); and whether the system
    buffered the stream."""
    floor = floor or Roles.of(study.manifest).floor
    out = []
    for run in study.runs:
        if run.spec is None or not run.spec.load.stream:
            continue
        mock = run.spec.mock
        rows = window_rows(study, run)
        ok = successful(rows)
        gaps = np.concatenate([np.asarray(g, dtype="float64") for g in ok["chunk_gaps_ms"]]
                              ) if len(ok) else np.array([])
        rec = {"run_id": run.run_id, "system": run.system,
               "status": run.status, "streams": int(len(ok)),
               "failed_streams": int(len(rows) - len(ok)),
               # of them, the 200s cut short without an error (harness.model.truncation)
               "silent_truncations": int((rows["error_kind"].astype("string").fillna("")
                                          == TRUNCATED).sum()),
               "ttfb_p50_ms": percentile(ok["ttfb_ms"], 50), "ttft_p50_ms": percentile(ok["ttft_ms"], 50),
               "ttft_p95_ms": percentile(ok["ttft_ms"], 95), "ttft_p99_ms": percentile(ok["ttft_ms"], 99),
               "gap_p50_ms": percentile(gaps, 50), "gap_p99_ms": percentile(gaps, 99),
               "gap_max_ms": float(gaps.max()) if gaps.size else math.nan,
               "duration_p50_ms": percentile(ok["latency_ms"], 50),
               "chunks_mean": float(ok["chunks"].mean()) if len(ok) else math.nan,
               "done_share": float(ok["stream_done"].mean()) if len(ok) else math.nan,
               "set_chunks": mock.stream_chunks, "set_gap_ms": mock.chunk_delay_ms}
        set_gap = as_float(rec["set_gap_ms"])
        # Frames closer together than sent: held back and released in a burst. A proxy that
        # buffers the whole stream releases its first token only at the end; one that falls
        # behind under load releases bunches along the way, with its first token early.
        held = (ok["ttft_ms"] / ok["latency_ms"]).to_numpy(dtype="float64") if len(ok) else np.array([])
        rec["first_token_at_share_p50"] = percentile(held[~np.isnan(held)], 50)
        close = bool(not math.isnan(rec["gap_p50_ms"]) and not math.isnan(set_gap)
                     and rec["gap_p50_ms"] < BUFFERED_GAP_SHARE * set_gap)
        late = bool(not math.isnan(rec["first_token_at_share_p50"])
                    and rec["first_token_at_share_p50"] >= BUFFERED_FIRST_TOKEN_SHARE)
        rec["buffered"] = close and late
        rec["bunched"] = close and not late
        out.append(rec)
    table = pd.DataFrame(out)
    if table.empty:
        return table
    base = table[(table.system == floor) & (table.status == "completed")]
    for col, name in (("ttft_p50_ms", "ttft_overhead_p50_ms"), ("gap_p99_ms", "gap_overhead_p99_ms")):
        table[name] = table[col] - base[col].mean() if len(base) else math.nan
    return table
