"""Thresholds, the figures summarised and compared, and the methodology's words, shared by every
statistic. How each figure is named and shown is the metric registry's (harness/model/metrics.py)."""
from __future__ import annotations

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
# A relative figure divides by an overhead that can be ~0 ms (a hop adds well under a
# millisecond): its denominator is floored here, about the resolution of the latency measurement.
OVERHEAD_EPSILON_MS = 0.05
PERCENTILES = (50, 95, 99)
ERROR_KINDS = ("http", "timeout", "connection", "other")

# The figures summarised across runs and compared with the reference, by name; what each is
# called, its unit and its better direction are in the registry (harness/model/metrics.py).
SUMMARY_METRICS: tuple[str, ...] = (
    "throughput_rps", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms",
    "overhead_vs_mock_p50_ms", "overhead_vs_mock_p95_ms", "overhead_vs_mock_p99_ms",
    "overhead_vs_direct_p50_ms", "overhead_vs_direct_p95_ms", "overhead_vs_direct_p99_ms",
    "cpu_ms_per_request", "rss_peak_bytes", "rss_steady_bytes", "errors_total",
    "net_overhead_p50_ms", "net_overhead_p99_ms", "wire_in_gateway_p50_us")
# judged against a reference; the time-inside-the-system figures too, since the report's overhead
# verdict prefers them where measured (harness.stats.across.OVERHEAD_FIGURES); not by the gate
COMPARE_METRICS = tuple(m for m in SUMMARY_METRICS if m != "errors_total")

DEFINITIONS: dict[str, str] = {
    "measured window": "[hold_start, hold_end) from each run manifest's phases; a request belongs "
                       "to it when it was sent inside (the rows with phase == \"hold\"). Warm-up, "
                       "ramp and tail are excluded.",
    "latency percentiles": "over the window's successful requests (error_kind == \"\"), numpy's "
                           "default linear interpolation, in ms from send to last byte.",
    "throughput": "successful requests sent in the window divided by the window's length.",
    "overhead vs mock": "a latency percentile minus the mock's set latency (the HeimOS way).",
    "overhead vs floor": "a latency percentile minus the same percentile of the floor system "
                            "(gateway.toml role \"floor\": the client straight to the mock; mean "
                            "over its completed runs) at the same user count (users binned).",
    "errors": "rows of the whole run by error_kind (http, timeout, connection, other), plus the "
              "requests still in flight when the load stopped (run manifest checks).",
    "CPU-ms per request": "the system's process-tree cpu_seconds_total difference over the window "
                          "(interpolated at its edges) × 1000 / requests sent in the window.",
    "memory": "the system's tree-summed RSS: idle = median before the load, peak = maximum over "
              "the run, steady = median in the window, recovered = last sample after the load.",
    "summary across runs": "mean ± sample sd over completed runs only; CoV = sd / |mean|, a run set "
                           f"with CoV ≥ {UNSTABLE_COV:.0%} is flagged unstable; 95% CI = mean ± "
                           "t(0.975, n−1)·sd/√n.",
    "verdict": "against the reference system: the ratio of means with its propagated sd (or, when "
               "the reference mean is ≤ 0 or, for an overhead, its 95% CI reaches zero, the "
               f"difference of means with its Welch 95% CI, needing p < {VERDICT_ALPHA:g} and at "
               f"least {VERDICT_MIN_EFFECT:.0%} of the reference, floored at "
               f"{OVERHEAD_EPSILON_MS:g} ms); "
               "\"faster\"/\"slower\" (or less/more CPU, memory) only when Welch's t-test gives "
               f"p < {VERDICT_ALPHA:g} and the ratio differs from 1 by at least "
               f"{VERDICT_MIN_EFFECT:.0%}; otherwise "
               "\"no clear difference\". The headline's overhead verdict uses, per system, the "
               "least noisy overhead figure measured (in at least two completed runs, or the only "
               "one) for both it and the reference: the wire-timed in-gateway p50, else the net "
               "overhead p50, else the median overhead vs the mock; it says which. Studies run "
               "on different machines (CPU model or core count) are compared side by side, "
               "never judged.",
    "capacity or behaviour": "a run measures capacity only when nothing but the system limited it: "
                             f"Locust below {LOCUST_CPU_LIMIT_PERCENT:g}% CPU per process and no "
                             "Locust CPU warning, the mock's hold-time p99 within "
                             f"{MOCK_HOLD_TOLERANCE_MS:g} ms of its setting, the mock's CPU below "
                             f"{MOCK_CPU_LIMIT_FRACTION:.0%} of its workers' cores, the load average "
                             "before the run below the core count, zero failed requests, every "
                             "request found once at the mock by its id (and the mock's count "
                             "equal to the successful rows), and a throughput below "
                             f"{OFFERED_SHARE:.0%} of what the users' think time offered (else "
                             "the offered load, not the system, set it); and, beyond those, "
                             "other processes on the machine using at most "
                             f"{OTHER_CPU_LIMIT_PERCENT:g}% of a core on average in the window. "
                             "Otherwise it shows behaviour.",
}


