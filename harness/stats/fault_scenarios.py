"""The figures each fault scenario asks its own question with (harness.model.fault_scenarios
describes the scenarios), over one run's requests sent in the fault window joined by request id
with every attempt the providers logged. Pure functions over frames; each figure is NaN where
its scenario's event never happened in the run.

* Retry-After honoured (``retry_after``, and every scenario with a 429): of the attempts that
  followed a 429 carrying a Retry-After to the *same provider* for the same request id, the
  share that reached it before the Retry-After had elapsed (``early_retry_share``; the gap runs
  from the 429's last byte to the retry's body end, measured at the mock), and their median gap
  (``retry_gap_p50_ms``).
* What the client was told (``all_rate_limited``): the statuses it got (``client_statuses``,
  "429:12 200:3") and, of its 429 and 503 answers, the share carrying a ``Retry-After`` of at
  least the provider's (``retry_after_passed_share``).
* A stream broken after it started (``mid_stream_error``, ``stream_cut``): each request whose
  attempts included such a fault, classed by what its client got (``STREAM_OUTCOMES``), and the
  time from the fault (the mock's last byte of the faulted attempt) to the client's end
  (``fault_to_end_p50_ms``, ``_p99_ms``; a client that ended before the fault has none).
* A provider that never answers (``no_response``): of the requests whose attempt was never
  answered, the share whose client got an answer (any) before its own timeout
  (``answered_share``) and the median time to it (``time_to_answer_p50_ms``); the rest timed out.
* A request no retry saves (``non_retriable``): attempts per such request
  (``attempts_per_faulted_request``: 1.0 is right).
* A standby beside the faulted provider (``flapping``, ``failover``): of the attempts that were
  answered without an error, the share the standby answered (``standby_share``).
* Everywhere: silent truncations among the window's requests (``silent_truncations``, a count).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.model.truncation import TRUNCATED
from harness.stats.rows import percentile

# What a client got from a stream its provider broke after it had started, in the order a
# reader asks: a clean error in its dialect, a transport error it sees, nothing wrong (a short
# answer as a success), no end before its timeout, content twice (a retried stream relayed
# again), a whole answer (the system recovered before relaying), anything else.
STREAM_OUTCOMES = ("clean_error", "broken_transport", "silent_truncation", "hang",
                   "duplicated", "recovered", "other_error")
BROKEN_CLASSES = ("reset_before_head", "closed_without_answer", "reset_during_body",
                  "closed_during_body")
TIMEOUT_CLASSES = ("read_timeout", "connect_timeout")
STREAM_FAULTS = ("mid_stream_error", "stream_cut")
FIGURES = ("silent_truncations", "early_retry_share", "retry_gap_p50_ms", "retries_after_429",
           "client_statuses", "retry_after_passed_share", "broken_streams",
           *(f"{o}_share" for o in STREAM_OUTCOMES), "fault_to_end_p50_ms",
           "fault_to_end_p99_ms", "never_answered_requests", "answered_share",
           "time_to_answer_p50_ms", "attempts_per_faulted_request", "standby_share")


def _ids(frame: pd.DataFrame) -> pd.Series:
    return frame["request_id"].astype("string").fillna("")


def _fault_kind(mock: pd.DataFrame) -> pd.Series:
    return mock["fault"].fillna("").astype(str).str.split(":").str[0]


def retry_gaps(generation: pd.DataFrame, retry_after_s: float) -> pd.DataFrame:
    """One row per attempt that followed a 429 to the same provider for the same request id:
    ``gap_ms`` from the 429's last byte to the retry's body end, ``early`` when shorter than
    ``retry_after_s``."""
    m = generation[_ids(generation) != ""]
    provider = m["provider"] if "provider" in m else pd.Series("primary", index=m.index)
    m = m.assign(provider=provider).sort_values("body_end_t_unix_ns", kind="stable")
    prev = m.groupby(["request_id", "provider"], sort=False).shift(1)
    after_429 = (prev["status_code"] == 429).to_numpy()
    gap_ms = ((m["body_end_t_unix_ns"].to_numpy(dtype="float64")
               - prev["last_frame_written_t_unix_ns"].to_numpy(dtype="float64")) / 1e6)
    out = pd.DataFrame({"gap_ms": gap_ms[after_429]})
    out["early"] = out["gap_ms"] < retry_after_s * 1000.0
    return out


def stream_outcome(row, sent_chars: float) -> str:
    """What one client got from a stream its provider broke (STREAM_OUTCOMES)."""
    kind, cls = row.error_kind, row.error_class
    if kind == TRUNCATED:
        return "silent_truncation"
    if cls == "error_event" or (kind and row.error_body_dialect == "client"):
        return "clean_error"
    if kind == "timeout" or cls in TIMEOUT_CLASSES:
        return "hang"
    if cls in BROKEN_CLASSES or kind == "connection":
        return "broken_transport"
    if kind:
        return "other_error"
    if not math.isnan(sent_chars) and row.content_chars > sent_chars:
        return "duplicated"
    return "recovered"


def _end_t(client: pd.DataFrame) -> np.ndarray:
    return (client["start_t_unix_s"].to_numpy(dtype="float64")
            + client["latency_ms"].to_numpy(dtype="float64") / 1000.0)


def _streams(client: pd.DataFrame, generation: pd.DataFrame) -> dict:
    faulted = generation[_fault_kind(generation).isin(STREAM_FAULTS) & (_ids(generation) != "")]
    fault_t = faulted.groupby("request_id")["last_frame_written_t_unix_ns"].min() / 1e9
    c = client[_ids(client).isin(set(fault_t.index))]
    c = c.assign(**{k: c[k].astype("string").fillna("") if k in c else ""
                    for k in ("error_kind", "error_class", "error_body_dialect")})
    out = {"broken_streams": len(c)}
    if not len(c):
        return {**out, **{f"{o}_share": math.nan for o in STREAM_OUTCOMES},
                "fault_to_end_p50_ms": math.nan, "fault_to_end_p99_ms": math.nan}
    sent = (c["content_chars_sent"].to_numpy(dtype="float64") if "content_chars_sent" in c
            else np.full(len(c), np.nan))
    outcomes = [stream_outcome(r, s) for r, s in zip(c.itertuples(index=False), sent)]
    counts = pd.Series(outcomes).value_counts()
    delay_ms = (_end_t(c) - fault_t.reindex(_ids(c).to_numpy()).to_numpy()) * 1000.0
    # a client answered before the fault (the system gave up on the stream first) was told
    # nothing by it: no time from the fault is its
    delay_ms = delay_ms[delay_ms >= 0]
    return {**out, **{f"{o}_share": float(counts.get(o, 0)) / len(c) for o in STREAM_OUTCOMES},
            "fault_to_end_p50_ms": percentile(delay_ms, 50),
            "fault_to_end_p99_ms": percentile(delay_ms, 99)}


def _never_answered(client: pd.DataFrame, generation: pd.DataFrame) -> dict:
    ended = (generation["ended"].astype("string").fillna("") if "ended" in generation
             else pd.Series("", index=generation.index))
    ids = set(_ids(generation)[(ended == "never_answered") | (_fault_kind(generation) == "no_response")])
    ids.discard("")
    c = client[_ids(client).isin(ids)]
    if not len(c):
        return {"never_answered_requests": 0, "answered_share": math.nan,
                "time_to_answer_p50_ms": math.nan}
    timed_out = ((c["error_kind"].astype("string").fillna("") == "timeout")
                 | c["error_class"].astype("string").fillna("").isin(TIMEOUT_CLASSES)).to_numpy()
    answered = ~timed_out
    return {"never_answered_requests": len(c), "answered_share": float(answered.mean()),
            "time_to_answer_p50_ms": percentile(c["latency_ms"].to_numpy()[answered], 50)}


def scenario_figures(client: pd.DataFrame, generation: pd.DataFrame, retry_after_s: float
                     ) -> dict:
    """FIGURES of one run: ``client``, its rows sent in the fault window; ``generation``, every
    attempt the providers logged for them (any time); ``retry_after_s``, the Retry-After the
    faulted provider gave (NaN when it gave none)."""
    ids = set(_ids(client)) - {""}
    gen = generation[_ids(generation).isin(ids)]
    kind = client["error_kind"].astype("string").fillna("")
    out: dict = {"silent_truncations": int((kind == TRUNCATED).sum())}
    gaps = retry_gaps(gen, retry_after_s) if not math.isnan(retry_after_s) else pd.DataFrame()
    out.update(retries_after_429=len(gaps),
               early_retry_share=float(gaps["early"].mean()) if len(gaps) else math.nan,
               retry_gap_p50_ms=percentile(gaps["gap_ms"], 50) if len(gaps) else math.nan)
    statuses = client["status_code"].astype("int64").value_counts().sort_index()
    out["client_statuses"] = " ".join(f"{s}:{n}" for s, n in statuses.items())
    limited = client[client["status_code"].isin((429, 503))]
    told = (pd.to_numeric(limited["retry_after_s"], errors="coerce") if "retry_after_s" in limited
            else pd.Series(np.nan, index=limited.index))
    out["retry_after_passed_share"] = (float((told >= retry_after_s - 0.5).mean())
                                       if len(limited) and not math.isnan(retry_after_s)
                                       else math.nan)
    out.update(_streams(client, gen))
    out.update(_never_answered(client, gen))
    faulted = set(_ids(gen)[_fault_kind(gen) == "non_retriable"]) - {""}
    per_id = gen[_ids(gen).isin(faulted)].groupby("request_id").size()
    out["attempts_per_faulted_request"] = float(per_id.mean()) if len(per_id) else math.nan
    answered = gen[gen["status_code"] < 400]
    out["standby_share"] = (float((answered["provider"] == "standby").mean())
                            if "provider" in gen and (gen["provider"] == "standby").any()
                            and len(answered) else math.nan)
    return out
