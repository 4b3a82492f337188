"""The metric registry: what each figure of a study is called, its unit, which way is better and
how many digits it is shown with. Every table of the report, the suite report, the A/A check and
the gate take these from here, so a figure reads the same wherever it appears.

A figure is stored in its natural unit (the run_summary column's suffix: ``_ms``, ``_rps``,
``_bytes``); ``scale`` converts it to the shown ``unit`` (stored / scale), e.g. bytes to MiB.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

MIB = float(2**20)


class Better(Enum):
    HIGHER = "higher"
    LOWER = "lower"


@dataclass(frozen=True)
class Metric:
    name: str                 # the column in run_summary (or in a lane's table)
    label: str                # words, without the unit
    unit: str                 # the unit it is shown in ("" for a plain number)
    better: Better
    digits: int               # decimals shown, in ``unit``
    scale: float = 1.0        # stored value / scale = shown value
    words: tuple[str, str] = ("faster", "slower")   # the verdict when better / when worse
    near_zero: bool = False   # can be ~0 (an overhead): a ratio to it floors the denominator

    @property
    def higher_is_better(self) -> bool:
        return self.better is Better.HIGHER


def _m(name: str, label: str, unit: str, better: str, digits: int, **kw) -> Metric:
    return Metric(name, label, unit, Better(better), digits, **kw)


_CPU = ("less CPU", "more CPU")
_MEM = ("less memory", "more memory")
_ERR = ("fewer errors", "more errors")
_RATE = ("keeps up with more", "keeps up with less")

_ALL: tuple[Metric, ...] = (
    # --- the headline, per run (run_summary) and across runs -----------------------------------
    _m("throughput_rps", "throughput", "req/s", "higher", 1),
    *(_m(f"latency_p{q}_ms", f"latency p{q}", "ms", "lower", 2) for q in (50, 95, 99)),
    *(_m(f"overhead_vs_mock_p{q}_ms", f"{'median' if q == 50 else f'p{q}'} overhead vs mock", "ms",
         "lower", 2, near_zero=True) for q in (50, 95, 99)),
    *(_m(f"overhead_vs_direct_p{q}_ms", f"{'median' if q == 50 else f'p{q}'} overhead vs floor",
         "ms", "lower", 2, near_zero=True) for q in (50, 95, 99)),
    _m("cpu_ms_per_request", "CPU time per request", "ms", "lower", 3, words=_CPU),
    _m("rss_peak_bytes", "peak RSS", "MiB", "lower", 1, scale=MIB, words=_MEM),
    _m("rss_steady_bytes", "steady RSS", "MiB", "lower", 1, scale=MIB, words=_MEM),
    _m("rss_idle_bytes", "idle RSS", "MiB", "lower", 1, scale=MIB, words=_MEM),
    _m("rss_recovered_bytes", "RSS after the load", "MiB", "lower", 1, scale=MIB, words=_MEM),
    _m("errors_total", "errors", "requests", "lower", 1, words=_ERR),
    *(_m(f"errors_{k}", f"{k} errors", "requests", "lower", 0, words=_ERR)
      for k in ("http", "timeout", "connection", "other")),
    _m("window_s", "window", "s", "higher", 1),
    _m("requests_in_window", "requests in window", "", "higher", 0),
    _m("inflight_at_stop", "in flight at stop", "", "lower", 0, words=_ERR),
    _m("self_overhead_p50_ms", "self-reported overhead p50", "ms", "lower", 3, near_zero=True),
    _m("self_overhead_p95_ms", "self-reported overhead p95", "ms", "lower", 3, near_zero=True),
    # client-observed overhead minus the self-reported one: what the system's own clock misses
    _m("self_overhead_gap_p50_ms", "gap p50", "ms", "lower", 3, near_zero=True),
    _m("self_overhead_gap_p95_ms", "gap p95", "ms", "lower", 3, near_zero=True),
    # --- time inside the system (identity join and wire capture) --------------------------------
    *(_m(f"net_overhead_p{q}_ms", f"net overhead p{q}", "ms", "lower", 3, near_zero=True)
      for q in (50, 95, 99)),
    *(_m(f"wire_in_gateway_p{q}_us", f"in-gateway time p{q} (wire)", "µs", "lower", 0,
         near_zero=True) for q in (50, 95, 99)),
    *(_m(f"wire_{part}_path_p{q}_us", f"{part} path p{q} (wire)", "µs", "lower", 0, near_zero=True)
      for part in ("request", "response") for q in (50, 95, 99)),
    _m("wire_mock_p50_us", "mock on the wire p50", "µs", "lower", 0),
    _m("identity_match_rate", "identity match rate", "%", "higher", 1, scale=0.01,
       words=("more matched", "fewer matched")),
    _m("wire_join_rate", "wire join rate", "%", "higher", 1, scale=0.01,
       words=("more joined", "fewer joined")),
    _m("mock_own_p99_ms", "mock's own added time p99", "ms", "lower", 3),
    _m("capture_cpu_s", "capture CPU", "s", "lower", 3, words=_CPU),
    _m("mock_hold_excess_p50_ms", "mock's hold above its setting (p50)", "ms", "lower", 3),
    # --- sizing and cost (harness/stats/sizing.py), at a planned load ------------------------------
    _m("cores", "CPU", "cores", "lower", 2, words=_CPU),
    _m("memory_gib", "memory", "GiB", "lower", 2, words=_MEM),
    _m("usd_month", "monthly cost", "USD", "lower", 0, words=("cheaper", "dearer")),
    # --- what else could have limited a run ------------------------------------------------------
    _m("locust_cpu_peak_percent", "Locust CPU peak", "%", "lower", 0, words=_CPU),
    _m("mock_cpu_peak_percent", "mock CPU peak", "%", "lower", 0, words=_CPU),
    _m("other_cpu_mean_percent", "other processes' CPU (mean)", "%", "lower", 0, words=_CPU),
    _m("mock_hold_p99_ms", "mock hold p99", "ms", "lower", 2),
    _m("mock_cpu_wait_per_request_ms", "mock's wait for a CPU per request", "ms", "lower", 3),
    _m("load_avg_before", "load average before", "", "lower", 2),
    # --- the streaming lane ----------------------------------------------------------------------
    _m("streams", "streams", "", "higher", 0),
    _m("failed_streams", "failed streams", "", "lower", 0, words=_ERR),
    _m("ttfb_p50_ms", "TTFB p50", "ms", "lower", 2),
    *(_m(f"ttft_p{q}_ms", f"TTFT p{q}", "ms", "lower", 2) for q in (50, 95, 99)),
    _m("ttft_overhead_p50_ms", "TTFT overhead p50", "ms", "lower", 2, near_zero=True),
    _m("gap_p50_ms", "gap p50", "ms", "lower", 2),
    _m("gap_p99_ms", "gap p99", "ms", "lower", 2),
    _m("gap_overhead_p99_ms", "gap overhead p99", "ms", "lower", 2, near_zero=True),
    _m("chunks_mean", "frames (mean)", "", "higher", 1),
    _m("done_share", "ended with [DONE]", "%", "higher", 0, scale=0.01),
    # --- the open-loop lane ----------------------------------------------------------------------
    _m("offered_rps", "offered", "req/s", "higher", 0),
    _m("achieved_rps", "achieved", "req/s", "higher", 1),
    _m("scheduled", "slots", "", "higher", 0),
    _m("unsent", "unsent", "", "lower", 0, words=_ERR),
    _m("failed", "failed", "", "lower", 0, words=_ERR),
    *(_m(f"from_{w}_p{q}_ms", f"p{q} from {'intended' if w == 'intended' else 'start'}", "ms",
         "lower", 2) for w in ("intended", "start") for q in (50, 99)),
    _m("schedule_lag_p99_ms", "schedule lag p99", "ms", "lower", 2),
    _m("p99_added_ms", "p99 added", "ms", "lower", 2, near_zero=True),
    _m("sustained_rps", "sustained", "req/s", "higher", 0, words=_RATE),
    _m("stopped_at_rps", "stopped keeping up at", "req/s", "higher", 0, words=_RATE),
    # --- the provider-fault lane (per window of a fault run) ---------------------------------------
    _m("success_share", "success", "%", "higher", 1, scale=0.01, words=_ERR),
    _m("amplification", "provider requests per client request", "x", "lower", 2),
    _m("added_p50_ms", "added p50", "ms", "lower", 2, near_zero=True),
    _m("added_p99_ms", "added p99", "ms", "lower", 2, near_zero=True),
    _m("client_dialect_share", "error bodies in the client's dialect", "%", "higher", 0,
       scale=0.01, words=("more in the client's dialect", "fewer in the client's dialect")),
    _m("recovery_s", "time to recover", "s", "lower", 0),
    _m("failback_s", "back on the primary after", "s", "lower", 0),
    _m("partial_streams", "partial streams", "", "lower", 0, words=_ERR),
    # --- counted per request sent in the fault window (harness/stats/fault_requests.py) --------
    _m("excess_amplification", "provider requests beyond what the success needed", "x", "lower",
       3, near_zero=True),
    _m("tts_p50_ms", "time to success p50", "ms", "lower", 1),
    _m("tts_p99_ms", "time to success p99", "ms", "lower", 1),
    _m("time_weighted_success", "success, each second alike", "%", "higher", 1, scale=0.01,
       words=_ERR),
    _m("attempts_after_window_share", "attempts landing after the window", "%", "lower", 1,
       scale=0.01),
    # --- each scenario's own question (harness/stats/fault_scenarios.py) -----------------------
    _m("silent_truncations", "silent truncations", "", "lower", 1, words=_ERR),
    _m("early_retry_share", "retries before Retry-After", "%", "lower", 1, scale=0.01),
)

METRICS: dict[str, Metric] = {m.name: m for m in _ALL}


def metric(name: str) -> Metric:
    """The registry's entry for ``name``; KeyError naming the registry otherwise."""
    try:
        return METRICS[name]
    except KeyError:
        raise KeyError(f"{name!r} is not in the metric registry (harness/model/metrics.py)") from None
