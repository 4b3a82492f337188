"""The wire tests' summary of harness.run.wire's per-request times (the harness itself keeps
them per request, in requests.parquet)."""
import pandas as pd


def summarize(per_request: pd.DataFrame) -> dict:
    """p50/p90/p99/max (µs) of the wire times over the joined requests."""
    out = {}
    for col in ("request_path_us", "request_first_path_us", "response_path_us", "in_gateway_us",
                "mock_wire_us", "frame_path_p50_us"):
        v = per_request[col].dropna().astype("float64")
        out[col] = None if v.empty else {
            "n": int(len(v)), "p50": float(v.quantile(0.5)), "p90": float(v.quantile(0.9)),
            "p99": float(v.quantile(0.99)), "max": float(v.max())}
    return out
