"""The ``truncated`` verdict: a 200 that looked like a success but was cut short.

A streamed answer without its dialect's terminal event (``stream_done`` false), any answer
whose assembled content (the client row's ``content_chars``) is shorter than what the provider
sent on the attempt that answered (its ``content_chars_sent``), or any 200 answered from an
attempt the provider broke (its ``ended`` one of FAILED_ENDINGS: cut, reset, ended by an error
event; a system that closes such a stream with its own terminal event relays all the provider
sent and still hides the cut) is a failure of kind ``truncated``: the client got less than a
whole answer and nothing told it so. It is judged once, when a run's rows are joined with the
providers' log (harness.run.consolidate), so every lane that reads requests.parquet counts it as
a failure.

The attempt that answered: the provider row whose ``mock_seq`` the system echoed back
(``mock_request_id``), else the request id's last attempt (by body end) that was not an error
answer, else its last attempt. Content longer than that attempt sent is not a truncation (a
system that replayed a stream it had started to relay: the fault figures count it as
duplicated content).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

TRUNCATED = "truncated"
# How a provider's answer ended when it left the system without a usable answer, whatever the
# head said (mocks.request_log): cut by a reset or a close, a stream without its terminal event,
# the dialect's error event, never answered, or closed by a down window.
FAILED_ENDINGS = ("fault_reset", "fault_closed", "fault_cut", "fault_error_event",
                  "never_answered", "mock_closed")


@dataclass(frozen=True)
class Answering:
    """Per client row, the attempt that answered it (``answering``)."""
    sent_chars: np.ndarray   # its content_chars_sent; NaN where unknown
    broken: np.ndarray       # it ended without a whole answer (FAILED_ENDINGS)


def answering(client: pd.DataFrame, mock: pd.DataFrame | None) -> Answering:
    """Per client row, the attempt that answered it: NaN and not broken where the provider never
    logged its id, or its log predates the column."""
    sent = np.full(len(client), np.nan)
    broken = np.zeros(len(client), dtype=bool)
    if mock is None or not len(mock) or "content_chars_sent" not in mock:
        return Answering(sent, broken)
    m = mock[mock["request_id"].astype("string").fillna("") != ""]
    m = m.sort_values("body_end_t_unix_ns", kind="stable").reset_index(drop=True)
    at = pd.Series(np.arange(len(m), dtype="float64"), index=m.index)
    by_seq = at.set_axis(m["mock_seq"].to_numpy())
    by_seq = by_seq[~by_seq.index.duplicated(keep="last")]
    by_id = at.set_axis(m["request_id"].to_numpy())
    last = by_id[~by_id.index.duplicated(keep="last")]
    good = by_id[(m["status_code"] < 400).to_numpy()]
    last_good = good[~good.index.duplicated(keep="last")]
    ids = client["request_id"].astype("string").fillna("").to_numpy()
    seqs = (client["mock_request_id"].astype("string").fillna("").to_numpy()
            if "mock_request_id" in client else np.full(len(client), ""))
    row = np.full(len(client), np.nan)
    for source, keys in ((last, ids), (last_good, ids), (by_seq, seqs)):  # later ones win
        found = source.reindex(keys).to_numpy(dtype="float64", copy=True)
        found[keys == ""] = np.nan
        row = np.where(np.isnan(found), row, found)
    known = ~np.isnan(row)
    rows = row[known].astype("int64")
    chars = pd.to_numeric(m["content_chars_sent"], errors="coerce").to_numpy(dtype="float64")
    sent[known] = chars[rows]
    if "ended" in m:
        ended = m["ended"].astype("string").fillna("").to_numpy()
        broken[known] = np.isin(ended[rows], FAILED_ENDINGS)
    return Answering(sent, broken)


def truncated(client: pd.DataFrame, answer: Answering, stream: bool) -> np.ndarray:
    """Per client row, whether it is a silent truncation: judged a success by the client, with
    status 200, yet without its stream's terminal event, with less content than was sent, or
    answered from an attempt the provider broke."""
    ok = (client["error_kind"].astype("string").fillna("") == "").to_numpy()
    status_ok = (client["status_code"].to_numpy() == 200)
    got = pd.to_numeric(client["content_chars"], errors="coerce").to_numpy(dtype="float64")
    short = ~np.isnan(answer.sent_chars) & (got < answer.sent_chars)
    no_end = ~client["stream_done"].fillna(False).astype(bool).to_numpy() if stream else False
    return ok & status_ok & (short | no_end | answer.broken)
