"""The mock's self-measurement, read: the workers' stats files merged, and diffs.

Importing this module starts nothing and does not import aiohttp.

Each worker process keeps a ``mocks.worker_stats.WorkerStats`` and writes it to
``<stats_dir>/worker-<pid>.json``.  :func:`read_stats` merges those files into the
``mock_stats.json`` shape described in ``artifacts/README.md``; :func:`diff_stats`
subtracts two such snapshots.

Definitions (the same in every worker file, merge and diff):

``count``
    generation requests answered with 200 (``POST /v1/chat/completions`` and
    ``POST /v1/messages``): a unary one when its held response is handed to the server,
    a stream when its last frame is handed to the socket.  It is incremented before the
    bytes go out, so a snapshot written after a client saw its answer always includes it.
``incomplete``
    generation responses that nobody received: the client left during the hold, or a
    stream was cut (client gone, shutdown) after its head.
``hold_*``
    one sample per generation response head: from the moment the handler had the whole
    request body to just before the head is written.  ``hold_count`` = ``count`` +
    ``incomplete`` + streams still running at the snapshot.
``hold_histogram_us``
    ``{bucket_start_us: n}`` with 10 µs buckets, sparse; keys are decimal strings
    sorted numerically (JSON keys are strings).
``errors``
    400 responses (a ``non_retriable`` fault's too).  ``by_path`` counts every request by path (unknown paths under
    ``"<other>"``), ``by_status`` every response head by status code (499: cancelled
    by shutdown before its head).
``log_dropped``
    request-log records lost because the log buffer was full or could not be written.
``faults``
    ``{label: n}``: generation requests answered with an injected fault (``mocks.faults``;
    labels as in the request log's ``fault`` column: ``status:<code>``, ``overloaded``,
    ``slow``, ``reset``, ``stall``, ``malformed``, ``mid_stream_error:event``,
    ``mid_stream_error:reset``, ``stream_cut``, ``no_response``, ``non_retriable``).  A
    status, overloaded or non_retriable fault is counted in ``by_status`` and has no hold
    sample; a reset, stall, mid_stream_error or stream_cut is ``incomplete``; a no_response is
    ``incomplete`` with no hold sample (``by_status`` 499: no head); a slow or malformed
    answer is in ``count`` like any other 200.
``down_windows``
    ``[{pid, fault_index, start_t_unix_s, end_t_unix_s}]``: when each worker actually
    closed and reopened its listener for a ``down`` fault (refused connects never reach
    the request log).
``gc``
    what Python's cyclic garbage collector did in the workers (the instrument's own
    pauses; the mode is ``config.gc``): ``collections`` (``{generation: passes}``),
    ``timed`` (of those, the passes the mock ran itself on its timer; the rest were
    automatic), ``collected`` (objects freed), ``pause_count``, ``pause_sum_ns``,
    ``pause_max_ns``, ``pause_histogram_us`` (10 µs buckets, as the holds), and in merges
    and diffs ``pause_ms`` (p50/p90/p99/max/mean) and ``pause_total_ms``.  ``None`` when
    a worker's mock predates it.

Per-request log
    Each worker also appends one CSV line per request to
    ``<stats_dir>/requests-<pid>.csv``: ``mocks.request_log`` (its columns, and
    ``read_request_log``, which merges the workers' files into one DataFrame).
"""

from __future__ import annotations

import math
import time

from mocks.worker_stats import BUCKET_US, WORKER_STATS_VERSION, load_worker_files

_BUCKET_NS = BUCKET_US * 1000

# ----------------------------------------------------------------------------- merging

def _hist_int(hist: dict) -> dict[int, int]:
    return {int(k): int(v) for k, v in hist.items()}


def _hist_str(hist: dict[int, int]) -> dict[str, int]:
    return {str(k): v for k, v in sorted(hist.items()) if v}


def _hold_summary(hist: dict[int, int], sum_ns: int, max_ns: int | None) -> dict:
    """p50/p90/p99/max/mean in ms from a 10 µs histogram (nearest rank, bucket midpoints).

    ``max_ns`` is the exact maximum when known; percentiles never exceed it.
    """
    samples = sum(hist.values())
    if samples <= 0:
        return {"p50": None, "p90": None, "p99": None, "max": None, "mean": None}
    buckets = sorted((k, v) for k, v in hist.items() if v)
    top_upper_us = buckets[-1][0] + BUCKET_US
    max_us = (max_ns / 1000.0) if max_ns is not None else top_upper_us

    def percentile_us(q: float) -> float:
        rank = max(1, math.ceil(q * samples))
        below = 0
        for start_us, count in buckets:
            below += count
            if below >= rank:
                return min(start_us + BUCKET_US / 2.0, max_us)
        return max_us  # pragma: no cover

    return {
        "p50": round(percentile_us(0.50) / 1000.0, 4),
        "p90": round(percentile_us(0.90) / 1000.0, 4),
        "p99": round(percentile_us(0.99) / 1000.0, 4),
        "max": round(max_us / 1000.0, 4),
        "mean": round(sum_ns / samples / 1e6, 4),
    }


def _empty_totals() -> dict:
    return {"count": 0, "incomplete": 0, "errors": 0, "by_path": {}, "by_status": {},
            "hist": {}, "hold_sum_ns": 0, "hold_max_ns": 0, "log_dropped": 0, "faults": {},
            "down_windows": [], "gc": None}


_GC_COUNTS = ("timed", "collected", "pause_sum_ns")


def _empty_gc() -> dict:
    return {"collections": {}, "hist": {}, "pause_max_ns": 0, **{k: 0 for k in _GC_COUNTS}}


def _gc_totals(records: list) -> dict | None:
    """The workers' gc records summed; None when one has none (a mock from before them)."""
    if not records or any(record is None for record in records):
        return None
    totals = _empty_gc()
    for record in records:
        _add_counts(totals["collections"], record.get("collections", {}))
        _add_counts(totals["hist"], _hist_int(record.get("pause_histogram_us", {})))
        for k in _GC_COUNTS:
            totals[k] += int(record.get(k, 0))
        totals["pause_max_ns"] = max(totals["pause_max_ns"], int(record.get("pause_max_ns", 0)))
    return totals


def _gc_diff(later: dict | None, earlier: dict | None) -> dict | None:
    if later is None or earlier is None:
        return None
    totals = _empty_gc()
    _add_counts(totals["collections"], later.get("collections", {}))
    _add_counts(totals["collections"], earlier.get("collections", {}), -1)
    _add_counts(totals["hist"], _hist_int(later.get("pause_histogram_us", {})))
    _add_counts(totals["hist"], _hist_int(earlier.get("pause_histogram_us", {})), -1)
    for k in _GC_COUNTS:
        totals[k] = int(later.get(k, 0)) - int(earlier.get(k, 0))
    _refuse_negative({f"gc.{k}": totals[k] for k in _GC_COUNTS},
                     {"gc.collections": totals["collections"], "gc.pause_histogram_us": totals["hist"]})
    totals["pause_max_ns"] = _window_max(totals["hist"], int(later.get("pause_max_ns", 0)),
                                    int(earlier.get("pause_max_ns", 0)))
    return totals


def _gc_shape(totals: dict | None) -> dict | None:
    if totals is None:
        return None
    hist = {k: v for k, v in totals["hist"].items() if v}
    pauses = sum(hist.values())
    return {"collections": dict(sorted(totals["collections"].items())), "timed": totals["timed"],
            "collected": totals["collected"], "pause_count": pauses, "pause_sum_ns": totals["pause_sum_ns"],
            "pause_max_ns": totals["pause_max_ns"] if pauses else 0,
            "pause_total_ms": round(totals["pause_sum_ns"] / 1e6, 4),
            "pause_ms": _hold_summary(hist, totals["pause_sum_ns"], totals["pause_max_ns"] if pauses else None),
            "pause_histogram_us": _hist_str(hist)}


def _window_max(hist: dict[int, int], later_max: int, earlier_max: int) -> int:
    """The largest sample of a difference of histograms: exact when the later snapshot's
    maximum is new since the earlier one; otherwise bounded by the difference's top bucket."""
    hist = {k: v for k, v in hist.items() if v}
    if not hist:
        return 0
    if later_max > earlier_max:
        return later_max  # the maximum happened inside the window
    top = max(hist) * 1000 + _BUCKET_NS
    return min(top, later_max) if later_max else top


def _add_counts(dst: dict, src: dict, sign: int = 1) -> None:
    for k, v in src.items():
        dst[k] = dst.get(k, 0) + sign * int(v)


def _refuse_negative(counts: dict[str, int], by_key: dict[str, dict]) -> None:
    """A difference went negative: the later snapshot is not a continuation of the earlier
    one (ValueError naming up to five of the counts)."""
    negative = [name for name, v in counts.items() if v < 0]
    for name, counts_by_key in by_key.items():
        negative += [f"{name}[{k}]" for k, v in counts_by_key.items() if v < 0]
    if negative:
        raise ValueError(f"later snapshot is not a continuation of earlier: {negative[:5]}")


def _shape(totals: dict, latency_ms, workers: int, extra: dict) -> dict:
    hist = {k: v for k, v in totals["hist"].items() if v}
    hold_count = sum(hist.values())
    out = {
        "schema_version": WORKER_STATS_VERSION,
        "count": totals["count"],
        "by_path": {k: v for k, v in sorted(totals["by_path"].items()) if v},
        "errors": totals["errors"],
        "hold_ms": _hold_summary(hist, totals["hold_sum_ns"], totals["hold_max_ns"] if hold_count else None),
        "hold_histogram_us": _hist_str(hist),
        "latency_ms": latency_ms,
        "workers": workers,
        # extras (not in the minimal schema, kept so that diffs stay exact)
        "by_status": {k: v for k, v in sorted(totals["by_status"].items(), key=lambda kv: int(kv[0])) if v},
        "incomplete": totals["incomplete"],
        "hold_count": hold_count,
        "hold_sum_ns": totals["hold_sum_ns"],
        "hold_max_ns": totals["hold_max_ns"] if hold_count else 0,
        "log_dropped": totals["log_dropped"],
        "faults": {k: v for k, v in sorted(totals["faults"].items()) if v},
        "down_windows": sorted(totals["down_windows"], key=lambda w: (w["start_t_unix_s"], w["pid"])),
        "gc": _gc_shape(totals["gc"]),
    }
    out.update(extra)
    return out


def merge_worker_snapshots(snaps: list[dict], stale_pids: list[int] | None = None) -> dict:
    """Merge worker-file dicts into the ``mock_stats.json`` shape."""
    totals = _empty_totals()
    latency_ms = None
    config = None
    for snap in snaps:
        totals["count"] += int(snap.get("count", 0))
        totals["incomplete"] += int(snap.get("incomplete", 0))
        totals["errors"] += int(snap.get("errors", 0))
        totals["log_dropped"] += int(snap.get("log_dropped", 0))
        _add_counts(totals["by_path"], snap.get("by_path", {}))
        _add_counts(totals["by_status"], snap.get("by_status", {}))
        _add_counts(totals["faults"], snap.get("faults", {}))
        totals["down_windows"] += snap.get("down_windows", [])
        _add_counts(totals["hist"], _hist_int(snap.get("hold_histogram_us", {})))
        totals["hold_sum_ns"] += int(snap.get("hold_sum_ns", 0))
        totals["hold_max_ns"] = max(totals["hold_max_ns"], int(snap.get("hold_max_ns", 0)))
        if latency_ms is None:
            latency_ms = snap.get("latency_ms")
            config = snap.get("config")
    totals["gc"] = _gc_totals([snap.get("gc") for snap in snaps])
    stale = sorted(stale_pids or [])
    extra = {
        "worker_pids": sorted(int(snap["pid"]) for snap in snaps if "pid" in snap),
        "updated_t_unix_s": min((float(snap.get("updated_t_unix_s", 0.0)) for snap in snaps), default=None),
        "final": bool(snaps) and all(bool(snap.get("final")) for snap in snaps),
        "fresh": not stale,
        "stale_workers": stale,
        "config": config or {},
    }
    return _shape(totals, latency_ms, len(snaps), extra)


def _is_fresh(snap: dict, fresher_than_t_unix_s: float | None) -> bool:
    if fresher_than_t_unix_s is None or snap.get("final"):
        return True
    return float(snap.get("updated_t_unix_s", 0.0)) > fresher_than_t_unix_s


def read_stats(stats_dir: str, fresher_than_t_unix_s: float | None = None,
               timeout_s: float = 2.0, _override: dict | None = None) -> dict:
    """Merge every ``worker-<pid>.json`` in ``stats_dir`` into the ``mock_stats.json`` shape.

    With ``fresher_than_t_unix_s``, wait (at most ``timeout_s``) until every worker file
    was written after that wall-clock time (a worker's final file, written as it exits,
    always counts as fresh).  Workers rewrite their file at least every 0.5 s even when
    idle, so a running mock satisfies the wait within about half a second.  If the
    deadline passes, the result still comes back, with ``fresh`` false and the lagging
    pids in ``stale_workers``.

    ``_override`` (internal, used by ``GET /stats``): a live snapshot that replaces the
    file of the same pid.
    """
    deadline = time.monotonic() + max(0.0, timeout_s)
    while True:
        snaps = load_worker_files(stats_dir)
        if _override is not None:
            snaps = [snap for snap in snaps if snap.get("pid") != _override.get("pid")] + [_override]
        stale = [int(snap.get("pid", -1)) for snap in snaps if not _is_fresh(snap, fresher_than_t_unix_s)]
        need_files = fresher_than_t_unix_s is not None and not snaps
        if (not stale and not need_files) or time.monotonic() >= deadline:
            out = merge_worker_snapshots(snaps, stale)
            if need_files:
                out["fresh"] = False
            return out
        time.sleep(0.02)


def diff_stats(later: dict, earlier: dict) -> dict:
    """``later - earlier`` for two snapshots of the same mock (same shape as read_stats).

    Counts, per-path/status/fault counts and the histogram are subtracted exactly (down
    windows: those of ``later`` not in ``earlier``), the hold
    summary is recomputed from the difference.  The maximum is exact when the later
    snapshot's maximum is new since the earlier one; otherwise it is bounded by the top
    bucket of the difference.  Raises ValueError if ``later`` is not a continuation of
    ``earlier`` (a count would go negative).
    """
    totals = _empty_totals()
    for key in ("count", "incomplete", "errors", "hold_sum_ns", "log_dropped"):
        totals[key] = int(later.get(key, 0)) - int(earlier.get(key, 0))
    for key in ("by_path", "by_status", "faults"):
        _add_counts(totals[key], later.get(key, {}))
        _add_counts(totals[key], earlier.get(key, {}), -1)
    seen = {(w["pid"], w["start_t_unix_s"]) for w in earlier.get("down_windows", [])}
    totals["down_windows"] = [w for w in later.get("down_windows", []) if (w["pid"], w["start_t_unix_s"]) not in seen]
    _add_counts(totals["hist"], _hist_int(later.get("hold_histogram_us", {})))
    _add_counts(totals["hist"], _hist_int(earlier.get("hold_histogram_us", {})), -1)
    _refuse_negative({k: totals[k] for k in ("count", "incomplete", "errors", "hold_sum_ns")},
                     {"by_path": totals["by_path"], "by_status": totals["by_status"],
                      "faults": totals["faults"], "hold_histogram_us": totals["hist"]})
    totals["hold_max_ns"] = _window_max(totals["hist"], int(later.get("hold_max_ns", 0)),
                                   int(earlier.get("hold_max_ns", 0)))
    totals["gc"] = _gc_diff(later.get("gc"), earlier.get("gc"))
    extra = {
        "worker_pids": later.get("worker_pids", []),
        "updated_t_unix_s": later.get("updated_t_unix_s"),
        "since_t_unix_s": earlier.get("updated_t_unix_s"),
        "final": later.get("final", False),
        "fresh": bool(later.get("fresh", True)) and bool(earlier.get("fresh", True)),
        "stale_workers": sorted(set(later.get("stale_workers", [])) | set(earlier.get("stale_workers", []))),
        "config": later.get("config", {}),
    }
    return _shape(totals, later.get("latency_ms"), later.get("workers", 0), extra)
