"""The provider-fault lane counted per request: every client request *sent* in the fault window,
joined by its id with all its attempts at every provider (primary, standby), whenever they
reached the mock. Counting attempts by when they landed would drop a retry that lands after the
window (when the provider is healthy again) out of "during", and flatter slow retriers.

In open loop a request is placed by its intended start (its slot in the arrival schedule, the
same for every system), else by when it was sent. Per request: ``attempts`` (its generation rows in the mock logs), ``first_attempt_failed`` (its
earliest attempt was answered with a status ≥ 400 or ended without a whole answer: reset,
closed, cut without its terminal event, ended by an error event, never answered; the mock's
``ended`` column), ``attempts_after_window`` (of them, those whose body reached a mock at or after
the window's end), ``ok`` (the client saw a success) and ``time_to_success_ms`` (its latency
when it succeeded, infinite when it failed: a failure is never a success, however fast).

Per run (``request_figures``), over the window's requests with an id:

* ``success_share`` s; ``amplification`` A = attempts / requests;
* ``first_attempt_failure_share``; ``floor_failure_share`` p̂, the failure share of the cheapest
  route the system had: the least of its first attempts' failure share and each provider's own
  (of each request's first attempt at that provider), so a healthy standby the system reached
  makes p̂ ≈ 0 however often it first tried the failed primary (from the first attempts alone,
  always trying a dead primary first gives p̂ ≈ 1 and a floor in the thousands). A request that
  stops at its first success, sent by the cheapest route, costs on average s / (1 − p̂)
  attempts, so ``excess_amplification`` = A − s / (1 − p̂) is the waste beyond what the success
  bought (hedging, retries of requests that then fail, attempts at a provider known to fail
  while a healthy one stood by; NaN when p̂ = 1: the floor is infinite);
* ``tts_p50_ms``, ``tts_p99_ms``: percentiles of the time to success with failures infinite, by
  the inverted CDF (a percentile is a request's value, never an interpolation with infinity):
  the p99 is infinite ("not reached") when more than 1% of the requests failed;
* ``time_weighted_success``: the mean over the window's 1-s bins (by send time) of each bin's
  success share, so a burst weighs by its duration, not by how many requests it held;
* ``attempts_after_window_share``: the share of the attempts that landed after the window.

A provider that refuses connections (``provider_down``) logs no attempt: the mock cannot count
what never reached it, so its amplification is a lower bound and says so (``attempts_seen``).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.model.truncation import FAILED_ENDINGS
from harness.stats.rows import is_success

# In a mock log without ``ended`` (before version 4): the injected faults that did the same (a
# malformed body ends complete, and fails in every version).
FAILING_FAULTS = ("reset", "stall", "malformed")
TTS_PERCENTILES = (50, 99)
BIN_S = 1.0
# Excess amplification above this is waste the report names: 2 attempts per 100 requests.
WASTE_EXCESS = 0.02

# The time-to-success curve's points: the share of requests answered successfully within each.
TTS_GRID_MS = tuple(float(x) for x in np.round(np.logspace(1, 4.5, 36), 1))

OUTCOME_COLUMNS = ("request_id", "start_t_unix_s", "ok", "time_to_success_ms", "attempts",
                   "first_attempt_failed", "attempts_after_window")
FIGURES = ("requests", "requests_without_id", "success_share", "amplification",
           "first_attempt_failure_share", "floor_failure_share", "excess_amplification",
           *(f"tts_p{q}_ms" for q in TTS_PERCENTILES), "time_weighted_success",
           "attempts_after_window_share", "attempts_seen")


def frontier(rows: list[dict]) -> list[dict]:
    """The rows no other row beats on all three of success (higher), excess amplification and
    p99 time to success (lower); a row missing a figure is on no frontier. Each row holds
    ``success``, ``excess`` and ``tts_p99``."""
    def beats(a, b):
        better = (a["success"] >= b["success"] and a["excess"] <= b["excess"]
                  and a["tts_p99"] <= b["tts_p99"])
        strictly = (a["success"] > b["success"] or a["excess"] < b["excess"]
                    or a["tts_p99"] < b["tts_p99"])
        return better and strictly
    known = [r for r in rows if not any(math.isnan(r[k]) for k in ("success", "excess", "tts_p99"))]
    return [r for r in known if not any(beats(o, r) for o in known if o is not r)]


def attempt_failed(mock: pd.DataFrame) -> pd.Series:
    """True where a provider's answer to an attempt was a failure: an error status, or an
    answer that ended without being whole (``ended``; in an older log, its injected fault)."""
    kind = mock["fault"].fillna("").astype(str).str.split(":").str[0].to_numpy()
    failed = kind == "malformed"   # a whole body, which no client can read
    ended = (mock["ended"].astype("string").fillna("").to_numpy() if "ended" in mock
             else np.full(len(mock), ""))
    known = ended != ""
    failed |= np.where(known, np.isin(ended, FAILED_ENDINGS), np.isin(kind, FAILING_FAULTS))
    return pd.Series((mock["status_code"].to_numpy() >= 400) | failed, index=mock.index)


def _attempts(generation: pd.DataFrame, hi: float) -> pd.DataFrame:
    """The generation rows with a request id, each marked ``failed`` and ``after`` (its body
    reached the mock at or after ``hi``)."""
    attempts = generation[generation["request_id"].astype("string").fillna("") != ""]
    return attempts.assign(failed=attempt_failed(attempts).to_numpy(),
                           after=(attempts["body_end_t_unix_ns"] >= hi * 1e9).to_numpy())


def provider_failure_shares(client: pd.DataFrame, generation: pd.DataFrame, lo: float,
                            hi: float) -> dict[str, float]:
    """Per provider the system reached (the mock log's ``provider``; one unnamed provider in a
    log without it), the failure share of the first attempt each request sent in [lo, hi) made
    there (a retry or a hedge at the same provider would dilute it)."""
    ids = set(sent_in(client, lo, hi)["request_id"].astype("string").fillna("")) - {""}
    attempts = _attempts(generation, hi)
    attempts = attempts[attempts["request_id"].astype("string").isin(ids)]
    attempts = attempts.assign(
        provider=(attempts["provider"].astype("string").fillna("") if "provider" in attempts
                  else "")).sort_values("body_end_t_unix_ns", kind="stable")
    first = attempts.groupby(["provider", "request_id"], sort=False)["failed"].first()
    return {str(k): float(v) for k, v in first.groupby(level=0).mean().items()}


def request_outcomes(client: pd.DataFrame, generation: pd.DataFrame, lo: float,
                     hi: float) -> pd.DataFrame:
    """OUTCOME_COLUMNS for each client request sent in [lo, hi); ``generation``: the run's
    generation rows of every provider (harness.stats.fault_lane.generation_rows)."""
    sent = sent_in(client, lo, hi)
    ids = sent["request_id"].astype("string").fillna("")
    attempts = _attempts(generation, hi)
    attempts = attempts.sort_values("body_end_t_unix_ns", kind="stable")
    per_id = attempts.groupby("request_id", sort=False).agg(
        attempts=("failed", "size"), first_attempt_failed=("failed", "first"),
        attempts_after_window=("after", "sum"))
    ok = is_success(sent).to_numpy()
    latency = sent["latency_ms"].to_numpy(dtype="float64")
    joined = per_id.reindex(ids.to_numpy())
    return pd.DataFrame({
        "request_id": ids.to_numpy(),
        "start_t_unix_s": _sent_t(sent).to_numpy(dtype="float64"),
        "ok": ok,
        "time_to_success_ms": np.where(ok, latency, math.inf),
        "attempts": joined["attempts"].fillna(0).to_numpy(dtype="float64"),
        "first_attempt_failed": joined["first_attempt_failed"].astype("boolean").to_numpy(),
        "attempts_after_window": joined["attempts_after_window"].fillna(0).to_numpy(dtype="float64"),
    }, columns=list(OUTCOME_COLUMNS))


def sent_in(client: pd.DataFrame, lo: float, hi: float) -> pd.DataFrame:
    """The client rows due in [lo, hi) (by _sent_t)."""
    sent_t = _sent_t(client)
    return client[(sent_t >= lo) & (sent_t < hi)]


def _sent_t(client: pd.DataFrame) -> pd.Series:
    """When each request was due: in open loop its intended start (a slot the load generator
    sent late still belongs to its moment), else when it was sent."""
    sent = client["start_t_unix_s"].astype("float64")
    if "intended_start_t_unix_s" not in client:
        return sent
    return client["intended_start_t_unix_s"].astype("float64").fillna(sent)


def _tts(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q, method="inverted_cdf")) if values.size else math.nan


def _time_weighted(outcomes: pd.DataFrame, lo: float, hi: float, bin_s: float) -> float:
    if not len(outcomes) or not hi > lo:
        return math.nan
    bins = np.floor((outcomes["start_t_unix_s"].to_numpy() - lo) / bin_s)
    shares = pd.Series(outcomes["ok"].to_numpy(dtype="float64")).groupby(bins).mean()
    return float(shares.mean())


def request_figures(outcomes: pd.DataFrame, lo: float, hi: float,
                    provider_failure: dict[str, float], bin_s: float = BIN_S) -> dict:
    """FIGURES of one run's window from its request_outcomes and provider_failure_shares."""
    with_id = outcomes[outcomes["request_id"] != ""]
    n = len(with_id)
    attempts = float(with_id["attempts"].sum())
    reached = with_id[with_id["attempts"] > 0]
    s = float(with_id["ok"].mean()) if n else math.nan
    first = float(reached["first_attempt_failed"].astype(bool).mean()) if len(reached) else math.nan
    p = min((x for x in (first, *provider_failure.values()) if not math.isnan(x)), default=math.nan)
    amplification = attempts / n if n else math.nan
    floor = s / (1.0 - p) if n and not math.isnan(p) and p < 1.0 else math.nan
    tts = with_id["time_to_success_ms"].to_numpy(dtype="float64")
    return {
        "requests": n, "requests_without_id": int(len(outcomes) - n),
        "success_share": s, "amplification": amplification,
        "first_attempt_failure_share": first, "floor_failure_share": p,
        "excess_amplification": amplification - floor,
        **{f"tts_p{q}_ms": _tts(tts, q) for q in TTS_PERCENTILES},
        "time_weighted_success": _time_weighted(with_id, lo, hi, bin_s),
        "attempts_after_window_share": (float(with_id["attempts_after_window"].sum()) / attempts
                                        if attempts else math.nan),
        "attempts_seen": int(attempts),
    }


def tts_curve(outcomes: pd.DataFrame, grid_ms: tuple[float, ...] = TTS_GRID_MS) -> list[float]:
    """The share of the requests (with an id) answered successfully within each time of
    ``grid_ms``: a failure never is."""
    tts = outcomes.loc[outcomes["request_id"] != "", "time_to_success_ms"].to_numpy(dtype="float64")
    if not tts.size:
        return [math.nan] * len(grid_ms)
    return [float((tts <= t).mean()) for t in grid_ms]
