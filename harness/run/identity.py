"""Per-request identity: the load generator's rows joined with the mock's request log.

Pure functions over two DataFrames; nothing here reads files or starts anything.

Client rows (one per request the load generator sent) need the columns
    ``request_id`` (str), ``latency_ms`` (float: send -> last byte received),
    ``error_kind`` (str; ``""``/NA for a success), ``start_t_unix_s`` (float).
Mock rows are ``mocks.request_log.read_request_log(stats_dir)`` (columns:
``mocks.request_log.REQUEST_LOG_COLUMNS``), both providers' when a standby ran.

The join is by ``request_id``.  Every successful client row should match exactly one mock
row; what does not is counted and listed, never dropped:

``client_without_mock``
    successful client rows whose id the mock never logged (answered by the gateway
    itself: a cache, a mock-less error page, or a lost log line).
``mock_without_client``
    mock rows (with an id) whose id no client row has (a request the load generator did
    not record, or one a gateway invented).
``ids_seen_more_than_once``
    client ids the mock logged more than once: the gateway retried (or duplicated) it.
    Under provider faults that is the system's answer to them: counted in ``amplification``,
    not judged a problem (``harness.stats.runs``).
``amplification``
    mock rows per client request, over the ids of the client rows: 1.0 without retries,
    4.0 when every request was tried four times.

Net overhead per request: ``net_overhead_ms = latency_ms - mock_service_ms``, where
``mock_service_ms`` runs from the moment the mock received the request's last bytes
(``body_end - arrival_lag``) to the moment its last response byte went to the socket
(``last_frame_written``): the client's latency ends at the same last byte, so what is
left is the client's, the network's and the gateway's time, not the mock's.  When the
mock saw an id more than once, the last attempt's row is used (the earlier attempts'
time is the gateway's doing).
"""

from __future__ import annotations

import pandas as pd

LIST_CAP = 20  # ids listed per kind in a summary (the counts are always complete)

PER_REQUEST_COLUMNS = (
    "request_id", "start_t_unix_s", "latency_ms", "error_kind", "mock_rows", "mock_seq",
    "worker_pid", "mock_status_code", "mock_hold_set_ms", "mock_hold_applied_ms",
    "mock_service_ms", "mock_own_ms", "net_overhead_ms",
)


def _ok(client: pd.DataFrame) -> pd.Series:
    err = client["error_kind"]
    return err.isna() | (err.astype("string").fillna("") == "")


def _last_attempts(mock: pd.DataFrame) -> pd.DataFrame:
    """One mock row per id (the last by body end), with the service-time columns."""
    m = mock[mock["request_id"].fillna("") != ""]
    m = m.sort_values("body_end_t_unix_ns", kind="stable")
    counts = m.groupby("request_id", sort=False).size().rename("mock_rows")
    last = m.drop_duplicates("request_id", keep="last").set_index("request_id")
    arrived_ns = last["body_end_t_unix_ns"] - last["arrival_lag_ns"]
    service_ms = (last["last_frame_written_t_unix_ns"] - arrived_ns) / 1e6
    return pd.DataFrame({
        "mock_rows": counts,
        "mock_seq": last["mock_seq"],
        "worker_pid": last["worker_pid"],
        "mock_status_code": last["status_code"],
        "mock_hold_set_ms": last["hold_set_ns"] / 1e6,
        "mock_hold_applied_ms": last["hold_applied_ns"] / 1e6,
        "mock_service_ms": service_ms,
        "mock_own_ms": service_ms - last["hold_set_ns"] / 1e6,
    })


# Over 60 lines on purpose: the join and its counts read as one pass over the same frames.
def join_requests(client: pd.DataFrame, mock: pd.DataFrame,
                  list_cap: int = LIST_CAP) -> tuple[pd.DataFrame, dict]:
    """Join one run's client rows with the mock's rows by ``request_id``.

    Returns ``(per_request, summary)``.  ``per_request`` has one row per client row, in
    the client's order, with ``PER_REQUEST_COLUMNS`` (``mock_rows`` 0 and the mock
    columns NA where the mock never saw the id).  ``summary`` holds the counts
    (``client_rows``, ``client_ok``, ``client_without_id``, ``mock_rows``,
    ``mock_without_id``, ``matched``, ``matched_once``, ``client_without_mock``,
    ``mock_without_client``, ``ids_seen_more_than_once``, ``amplification``,
    ``match_rate`` = matched_once / client_ok) and, for the three anomalies, at most
    ``list_cap`` ids each under ``<kind>_ids``.
    """
    ids = client["request_id"].astype("string").fillna("")
    ok = _ok(client)
    per_mock = _last_attempts(mock)
    joined = per_mock.reindex(ids.to_numpy())
    joined.index = client.index
    rows = joined["mock_rows"].fillna(0).astype("int64")
    out = pd.DataFrame({
        "request_id": ids,
        "start_t_unix_s": client["start_t_unix_s"].astype("float64"),
        "latency_ms": client["latency_ms"].astype("float64"),
        "error_kind": client["error_kind"].astype("string").fillna(""),
        "mock_rows": rows,
    })
    for col in PER_REQUEST_COLUMNS[5:-1]:
        out[col] = joined[col]
    out.loc[ids == "", "mock_rows"] = 0
    out["net_overhead_ms"] = out["latency_ms"] - out["mock_service_ms"]
    out = out[list(PER_REQUEST_COLUMNS)].reset_index(drop=True)

    has_id = (ids != "").to_numpy()
    okv = ok.to_numpy()
    client_ids = set(ids[has_id])
    mock_ids = mock["request_id"].fillna("")
    missing = ids[okv & has_id & (rows.to_numpy() == 0)]
    extra = mock_ids[(mock_ids != "") & ~mock_ids.isin(client_ids)]
    repeated = out.loc[has_id & (out["mock_rows"] > 1).to_numpy(), "request_id"].drop_duplicates()
    matched = okv & has_id & (rows.to_numpy() >= 1)
    matched_once = okv & has_id & (rows.to_numpy() == 1)
    client_ok = int(okv.sum())
    n_with_id = int(has_id.sum())
    summary = {
        "client_rows": int(len(client)),
        "client_ok": client_ok,
        "client_without_id": int((~has_id).sum()),
        "mock_rows": int(len(mock)),
        "mock_without_id": int((mock_ids == "").sum()),
        "matched": int(matched.sum()),
        "matched_once": int(matched_once.sum()),
        "client_without_mock": int(len(missing)),
        "mock_without_client": int(len(extra)),
        "ids_seen_more_than_once": int(len(repeated)),
        "amplification": (float(out.loc[has_id, "mock_rows"].sum()) / n_with_id) if n_with_id else None,
        "match_rate": (float(matched_once.sum()) / client_ok) if client_ok else None,
        "client_without_mock_ids": list(missing[:list_cap]),
        "mock_without_client_ids": list(extra.drop_duplicates()[:list_cap]),
        "ids_seen_more_than_once_ids": list(repeated[:list_cap]),
    }
    return out, summary
