"""Per-run figures of the time inside the system: net overhead (client latency minus the mock's
own service time, per request, joined by id), wire-timed in-gateway time (from the capture),
the join rates, the mock's own added time and the capture's CPU. A figure that could not be
measured is NaN, and ``identity_reason`` / ``wire_reason`` say why.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.model.manifests import RunManifest
from harness.stats.rows import percentile

QUANTILES = (50, 95, 99)


def mock_own_ms(mock: pd.DataFrame) -> np.ndarray:
    """Per mock row of a generation: its service time minus the hold it was asked for."""
    m = mock[(mock["status_code"] == 200) & (mock["hold_set_ns"] > 0)]
    received = m["body_end_t_unix_ns"] - m["arrival_lag_ns"]
    return ((m["last_frame_written_t_unix_ns"] - received - m["hold_set_ns"]) / 1e6).to_numpy("float64")


NOT_MEASURED = "not measured in this artifact version"


def figures(run: RunManifest, ok: pd.DataFrame, mock: pd.DataFrame | None) -> dict:
    """``ok``: the run's successful rows in its measured window; ``mock``: the run's
    mock_requests table, None when the run has none. A run manifest without the identity or
    wire check is from before they existed (its requests columns load as missing)."""
    rec: dict = {}
    net = ok["net_overhead_ms"].to_numpy("float64")
    for q in QUANTILES:
        rec[f"net_overhead_p{q}_ms"] = percentile(net, q)
    identity = run.checks.identity
    rec["identity_match_rate"] = (float(identity.match_rate)
                                  if identity is not None and identity.match_rate is not None
                                  else math.nan)
    rec["identity_reason"] = ("" if identity is not None
                              else run.checks.identity_missing_reason or NOT_MEASURED)

    for part in ("in_gateway", "request_path", "response_path"):
        for q in QUANTILES:
            rec[f"wire_{part}_p{q}_us"] = percentile(ok[f"wire_{part}_us"], q)
    rec["wire_mock_p50_us"] = percentile(ok["wire_mock_us"], 50)
    wire = run.wire
    rec["wire_join_rate"] = (float(wire.join_rate) if wire is not None and wire.join_rate is not None
                             else math.nan)
    rec["capture_cpu_s"] = (float(wire.cpu_s) if wire is not None and wire.cpu_s is not None
                            else math.nan)
    if wire is None:
        rec["wire_reason"] = NOT_MEASURED
    elif not wire.captured:
        rec["wire_reason"] = wire.reason
    elif not ok["wire_mock_us"].notna().any():
        rec["wire_reason"] = _unjoined_reason(wire)
    else:
        rec["wire_reason"] = ""

    rec["mock_own_p99_ms"] = percentile(mock_own_ms(mock), 99) if mock is not None else math.nan
    return rec


def _unjoined_reason(wire) -> str:
    """Why no request of the measured window was joined on the wire; by name when none of the
    system's requests to the mock showed its id within the bytes each packet kept."""
    reason = "no request of the measured window was joined on the wire"
    if wire.upstream_requests and wire.upstream_requests_without_id == wire.upstream_requests:
        reason += (f": none of its {wire.upstream_requests:,} requests to the mock showed an id "
                   f"within the first {wire.snaplen_bytes} bytes of a packet the capture keeps "
                   "(wire_snaplen_bytes)")
    return reason
