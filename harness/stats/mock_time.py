"""The mock's own added time per request, from its request log: how exact the instrument was."""
from __future__ import annotations

import pandas as pd


def _pcts(values: pd.Series) -> dict:
    v = values.dropna()
    if v.empty:
        return {"p50": None, "p99": None, "max": None}
    return {"p50": float(v.quantile(0.5)), "p99": float(v.quantile(0.99)), "max": float(v.max())}


def mock_self_time(mock: pd.DataFrame, status_code: int = 200) -> dict:
    """The mock's own added time, from its log (generation rows with ``status_code``).

    Returns ``{name: {"p50", "p99", "max"}}`` in ms for
    ``arrival_lag_ms`` (request's last bytes received -> body read: parse, dispatch,
    event-loop lag), ``hold_over_ms`` (hold applied - hold set: the timer's lateness),
    ``write_ms`` (head write started -> handed to the socket), ``head_over_ms``
    (received -> head written, minus the setting: all of the mock's own time before the
    head), and ``hold_applied_ms``, plus ``"requests"``: the number of rows used.
    Time before the request's bytes reached the process (accept, the kernel's queues,
    the loop busy elsewhere before reading) is not visible from inside.
    """
    m = mock[(mock["status_code"] == status_code) & (mock["hold_set_ns"] > 0)]
    received = m["body_end_t_unix_ns"] - m["arrival_lag_ns"]
    out = {
        "arrival_lag_ms": _pcts(m["arrival_lag_ns"] / 1e6),
        "hold_over_ms": _pcts((m["hold_applied_ns"] - m["hold_set_ns"]) / 1e6),
        "write_ms": _pcts(m["write_ns"] / 1e6),
        "head_over_ms": _pcts((m["head_written_t_unix_ns"] - received - m["hold_set_ns"]) / 1e6),
        "hold_applied_ms": _pcts(m["hold_applied_ns"] / 1e6),
        "requests": int(len(m)),
    }
    return out
