"""The ``truncated`` verdict: a 200 that looked like a success but was cut short.

A streamed answer without its dialect's terminal event (``stream_done`` false), or any answer
whose assembled content (the client row's ``content_chars``) is shorter than what the provider
sent on the attempt that answered (its ``content_chars_sent``), is a failure of kind
``truncated``: the client got less than it was sent and nothing told it so. It is judged once,
when a run's rows are joined with the providers' log (harness.run.consolidate), so every lane
that reads requests.parquet counts it as a failure.

The attempt that answered: the provider row whose ``mock_seq`` the system echoed back
(``mock_request_id``), else the request id's last attempt (by body end) that was not an error
answer, else its last attempt. Content longer than that attempt sent is not a truncation (a
system that replayed a stream it had started to relay: the fault figures count it as
duplicated content).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

TRUNCATED = "truncated"


def answering_chars(client: pd.DataFrame, mock: pd.DataFrame) -> np.ndarray:
    """Per client row, the provider's ``content_chars_sent`` on the attempt that answered it;
    NaN where the provider never logged its id, or its log predates the column."""
    out = np.full(len(client), np.nan)
    if mock is None or not len(mock) or "content_chars_sent" not in mock:
        return out
    m = mock[mock["request_id"].astype("string").fillna("") != ""]
    m = m.assign(sent=pd.to_numeric(m["content_chars_sent"], errors="coerce").astype("float64"))
    m = m.sort_values("body_end_t_unix_ns", kind="stable")
    by_seq = m.drop_duplicates("mock_seq", keep="last").set_index("mock_seq")["sent"]
    good = m[m["status_code"] < 400]
    last_good = good.drop_duplicates("request_id", keep="last").set_index("request_id")["sent"]
    last = m.drop_duplicates("request_id", keep="last").set_index("request_id")["sent"]
    ids = client["request_id"].astype("string").fillna("").to_numpy()
    seqs = (client["mock_request_id"].astype("string").fillna("").to_numpy()
            if "mock_request_id" in client else np.full(len(client), ""))
    for source, keys in ((last, ids), (last_good, ids), (by_seq, seqs)):  # later ones win
        found = source.reindex(keys).to_numpy(dtype="float64", copy=True)
        found[keys == ""] = np.nan
        out = np.where(np.isnan(found), out, found)
    return out


def truncated(client: pd.DataFrame, sent_chars: np.ndarray, stream: bool) -> np.ndarray:
    """Per client row, whether it is a silent truncation: judged a success by the client, with
    status 200, yet without its stream's terminal event, or with less content than was sent."""
    ok = (client["error_kind"].astype("string").fillna("") == "").to_numpy()
    status_ok = (client["status_code"].to_numpy() == 200)
    got = pd.to_numeric(client["content_chars"], errors="coerce").to_numpy(dtype="float64")
    short = ~np.isnan(sent_chars) & (got < sent_chars)
    no_end = ~client["stream_done"].fillna(False).astype(bool).to_numpy() if stream else False
    return ok & status_ok & (short | no_end)
