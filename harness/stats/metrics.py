"""Thresholds, metric definitions and the methodology's words, shared by every statistic."""
from __future__ import annotations

from typing import Any

# --- thresholds (the criteria) -----------------------------------------------------------
LOCUST_CPU_LIMIT_PERCENT = 90.0      # per Locust process; Locust itself warns at 90 %
MOCK_HOLD_TOLERANCE_MS = 2.0         # the mock's hold-time p99 must be within this of its setting
MOCK_CPU_LIMIT_FRACTION = 0.9        # the mock's CPU must stay below this share of its workers' cores
OTHER_CPU_LIMIT_PERCENT = 20.0       # other processes' mean CPU in the window (100 = one core);
                                     # beyond the list: on a shared machine they compete
OFFERED_SHARE = 0.90                 # serving this share of a paced offered load: not a limit
UNSTABLE_COV = 0.10                  # a run set with CoV >= 10 % is unstable
VERDICT_ALPHA = 0.05                 # Welch's t-test p below this ...
VERDICT_MIN_EFFECT = 0.10            # ... and the ratio off 1 by at least this: a verdict
DEFAULT_BIN_USERS = 50
DEFAULT_REFERENCE = "nginx"
DEFAULT_DIRECT = "direct"
PERCENTILES = (50, 95, 99)
ERROR_KINDS = ("http", "timeout", "connection", "other")

# The headline figures: (column, unit, which direction is better, verdict words better/worse).
METRICS: dict[str, dict[str, Any]] = {
    "throughput_rps": dict(label="throughput", unit="req/s", higher_is_better=True,
                           words=("faster", "slower")),
    "latency_p50_ms": dict(label="latency p50", unit="ms", higher_is_better=False,
                           words=("faster", "slower")),
    "latency_p95_ms": dict(label="latency p95", unit="ms", higher_is_better=False,
                           words=("faster", "slower")),
    "latency_p99_ms": dict(label="latency p99", unit="ms", higher_is_better=False,
                           words=("faster", "slower")),
    "overhead_vs_mock_p50_ms": dict(label="median overhead (vs mock)", unit="ms",
                                    higher_is_better=False, words=("faster", "slower")),
    "overhead_vs_mock_p95_ms": dict(label="p95 overhead (vs mock)", unit="ms",
                                    higher_is_better=False, words=("faster", "slower")),
    "overhead_vs_mock_p99_ms": dict(label="p99 overhead (vs mock)", unit="ms",
                                    higher_is_better=False, words=("faster", "slower")),
    "overhead_vs_direct_p50_ms": dict(label="median overhead (vs direct)", unit="ms",
                                      higher_is_better=False, words=("faster", "slower")),
    "overhead_vs_direct_p95_ms": dict(label="p95 overhead (vs direct)", unit="ms",
                                      higher_is_better=False, words=("faster", "slower")),
    "overhead_vs_direct_p99_ms": dict(label="p99 overhead (vs direct)", unit="ms",
                                      higher_is_better=False, words=("faster", "slower")),
    "cpu_ms_per_request": dict(label="CPU-ms per request", unit="ms", higher_is_better=False,
                               words=("less CPU", "more CPU")),
    "rss_peak_bytes": dict(label="peak RSS", unit="bytes", higher_is_better=False,
                           words=("less memory", "more memory")),
    "rss_steady_bytes": dict(label="steady RSS", unit="bytes", higher_is_better=False,
                             words=("less memory", "more memory")),
    "errors_total": dict(label="errors", unit="requests", higher_is_better=False,
                         words=("fewer errors", "more errors")),
}
SUMMARY_METRICS = tuple(METRICS)
COMPARE_METRICS = tuple(m for m in METRICS if m != "errors_total")

DEFINITIONS: dict[str, str] = {
    "measured window": "[hold_start, hold_end) from each run manifest's phases; a request belongs "
                       "to it when it was sent inside (the rows with phase == \"hold\"). Warm-up, "
                       "ramp and tail are excluded.",
    "latency percentiles": "over the window's successful requests (error_kind == \"\"), numpy's "
                           "default linear interpolation, in ms from send to last byte.",
    "throughput": "successful requests sent in the window divided by the window's length.",
    "overhead vs mock": "a latency percentile minus the mock's set latency (the HeimOS way).",
    "overhead vs direct": "a latency percentile minus the same percentile of the direct baseline "
                          "(mean over its completed runs) at the same user count (users binned).",
    "errors": "rows of the whole run by error_kind (http, timeout, connection, other), plus the "
              "requests still in flight when the load stopped (run manifest checks).",
    "CPU-ms per request": "the system's process-tree cpu_seconds_total difference over the window "
                          "(interpolated at its edges) × 1000 / requests sent in the window.",
    "memory": "the system's tree-summed RSS: idle = median before the load, peak = maximum over "
              "the run, steady = median in the window, recovered = last sample after the load.",
    "summary across runs": "mean ± sample sd over completed runs only; CoV = sd / |mean|, a run set "
                           "with CoV ≥ 10% is flagged unstable; 95% CI = mean ± t(0.975, n−1)·sd/√n.",
    "verdict": "against the reference system: the ratio of means with its propagated sd; "
               "\"faster\"/\"slower\" (or less/more CPU, memory) only when Welch's t-test gives "
               "p < 0.05 and the ratio differs from 1 by at least 10%; otherwise "
               "\"no clear difference\".",
    "capacity or behaviour": "a run measures capacity only when nothing but the system limited it: "
                             "Locust below 90% CPU per process and no Locust CPU warning, the mock's "
                             "hold-time p99 within 2 ms of its setting, the mock's CPU below 90% of "
                             "its workers' cores, the load average before the run below the core "
                             "count, zero failed requests; and, beyond those, other processes on "
                             "the machine using at most 20% of a core on average in the window. "
                             "Otherwise it shows behaviour.",
}


