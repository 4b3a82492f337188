"""The mock's self-measurement: per-worker counters, worker stats files, merging, diffs.

Importing this module starts nothing and does not import aiohttp.

Each worker process keeps a :class:`WorkerStats` and writes it to
``<stats_dir>/worker-<pid>.json`` (temp file + rename, so readers never see a partial
file).  :func:`read_stats` merges those files into the ``mock_stats.json`` shape described
in ``artifacts/README.md``; :func:`diff_stats` subtracts two such snapshots.

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
    400 responses.  ``by_path`` counts every request by path (unknown paths under
    ``"<other>"``), ``by_status`` every response head by status code (499: cancelled
    by shutdown before its head).
``log_dropped``
    request-log records lost because the log buffer was full or could not be written.
``faults``
    ``{label: n}``: generation requests answered with an injected fault (``mocks.faults``;
    labels as in the request log's ``fault`` column: ``status:<code>``, ``overloaded``,
    ``slow``, ``reset``, ``stall``, ``malformed``).  A status or overloaded fault is counted
    in ``by_status`` and has no hold sample; a reset or stall is ``incomplete``; a slow or malformed answer
    is in ``count`` like any other 200.
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
    ``<stats_dir>/requests-<pid>.csv`` (see :class:`RequestLog` for the columns);
    :func:`read_request_log` merges the workers' files into one DataFrame.
"""

from __future__ import annotations

import glob
import json
import math
import os
import time

SCHEMA_VERSION = 1
BUCKET_US = 10
_BUCKET_NS = BUCKET_US * 1000
FILE_PREFIX = "worker-"
FILE_SUFFIX = ".json"
LOG_PREFIX = "requests-"
LOG_SUFFIX = ".csv"

try:  # orjson is faster, but the stats reader must work without it
    import orjson as _orjson
except ImportError:  # pragma: no cover
    _orjson = None


def _dumps(obj) -> bytes:
    if _orjson is not None:
        return _orjson.dumps(obj, option=_orjson.OPT_NON_STR_KEYS)
    return json.dumps(obj).encode()


def _loads(data: bytes):
    if _orjson is not None:
        return _orjson.loads(data)
    return json.loads(data)


def worker_file(stats_dir: str, pid: int) -> str:
    return os.path.join(stats_dir, f"{FILE_PREFIX}{pid}{FILE_SUFFIX}")


class WorkerStats:
    """Counters of one worker process; updated on the event loop, no locking."""

    __slots__ = ("pid", "started_t_unix_s", "latency_ms", "config", "count", "incomplete",
                 "errors", "by_path", "by_status", "hist", "hold_count", "hold_sum_ns",
                 "hold_max_ns", "version", "final", "log_dropped", "faults", "down_windows",
                 "gc_collections", "gc_timed", "gc_collected", "gc_pause_hist", "gc_pause_sum_ns",
                 "gc_pause_max_ns")

    def __init__(self, latency_ms: float, config: dict | None = None, pid: int | None = None):
        self.pid = os.getpid() if pid is None else pid
        self.started_t_unix_s = time.time()
        self.latency_ms = float(latency_ms)
        self.config = dict(config or {})
        self.count = 0
        self.incomplete = 0
        self.errors = 0
        self.by_path: dict[str, int] = {}
        self.by_status: dict[int, int] = {}
        self.hist: dict[int, int] = {}
        self.hold_count = 0
        self.hold_sum_ns = 0
        self.hold_max_ns = 0
        self.version = 0  # bumped on every change; the file writer compares it
        self.final = False
        self.log_dropped = 0
        self.faults: dict[str, int] = {}
        self.down_windows: list[dict] = []
        self.gc_collections = [0, 0, 0]  # passes by generation
        self.gc_timed = 0
        self.gc_collected = 0
        self.gc_pause_hist: dict[int, int] = {}
        self.gc_pause_sum_ns = 0
        self.gc_pause_max_ns = 0

    def record_hold(self, hold_ns: int) -> None:
        b = hold_ns // _BUCKET_NS * BUCKET_US
        h = self.hist
        h[b] = h.get(b, 0) + 1
        self.hold_count += 1
        self.hold_sum_ns += hold_ns
        if hold_ns > self.hold_max_ns:
            self.hold_max_ns = hold_ns

    def record_response(self, path_key: str, status: int) -> None:
        bp = self.by_path
        bp[path_key] = bp.get(path_key, 0) + 1
        bs = self.by_status
        bs[status] = bs.get(status, 0) + 1
        if status == 400:
            self.errors += 1
        self.version += 1

    def record_gc(self, generation: int, pause_ns: int, collected: int, timed: bool) -> None:
        """One collection, as a gc.callbacks hook saw it."""
        self.gc_collections[generation] += 1
        if timed:
            self.gc_timed += 1
        self.gc_collected += collected
        b = pause_ns // _BUCKET_NS * BUCKET_US
        h = self.gc_pause_hist
        h[b] = h.get(b, 0) + 1
        self.gc_pause_sum_ns += pause_ns
        if pause_ns > self.gc_pause_max_ns:
            self.gc_pause_max_ns = pause_ns
        # no version bump: 50 timed passes a second would rewrite an idle worker's file at every
        # tick; the stats writer's heartbeat (mocks.server) keeps these figures at most 0.5 s old

    def record_fault(self, label: str) -> None:
        f = self.faults
        f[label] = f.get(label, 0) + 1
        self.version += 1

    def snapshot(self) -> dict:
        """The worker-file dict (also what /stats uses for the answering worker)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "pid": self.pid,
            "started_t_unix_s": self.started_t_unix_s,
            "updated_t_unix_s": time.time(),
            "final": self.final,
            "latency_ms": self.latency_ms,
            "config": self.config,
            "count": self.count,
            "incomplete": self.incomplete,
            "errors": self.errors,
            "by_path": dict(self.by_path),
            "by_status": {str(k): v for k, v in self.by_status.items()},
            "hold_count": self.hold_count,
            "hold_sum_ns": self.hold_sum_ns,
            "hold_max_ns": self.hold_max_ns,
            "log_dropped": self.log_dropped,
            "faults": dict(self.faults),
            "down_windows": [dict(w, pid=self.pid) for w in self.down_windows],
            # int keys (orjson writes them as strings); readers normalise with int()
            "hold_histogram_us": dict(self.hist),
            "gc": {"collections": {str(g): n for g, n in enumerate(self.gc_collections)},
                   "timed": self.gc_timed, "collected": self.gc_collected,
                   "pause_count": sum(self.gc_pause_hist.values()),
                   "pause_sum_ns": self.gc_pause_sum_ns, "pause_max_ns": self.gc_pause_max_ns,
                   "pause_histogram_us": dict(self.gc_pause_hist)},
        }

    def write(self, stats_dir: str) -> dict:
        """Write the worker file atomically; returns the snapshot written."""
        snap = self.snapshot()
        path = worker_file(stats_dir, self.pid)
        tmp = f"{path}.tmp"
        with open(tmp, "wb") as f:
            f.write(_dumps(snap))
        os.replace(tmp, path)
        return snap


# ----------------------------------------------------------------------------- merging

def _hist_int(h: dict) -> dict[int, int]:
    return {int(k): int(v) for k, v in h.items()}


def _hist_str(h: dict[int, int]) -> dict[str, int]:
    return {str(k): v for k, v in sorted(h.items()) if v}


def _hold_summary(hist: dict[int, int], sum_ns: int, max_ns: int | None) -> dict:
    """p50/p90/p99/max/mean in ms from a 10 µs histogram (nearest rank, bucket midpoints).

    ``max_ns`` is the exact maximum when known; percentiles never exceed it.
    """
    n = sum(hist.values())
    if n <= 0:
        return {"p50": None, "p90": None, "p99": None, "max": None, "mean": None}
    items = sorted((k, v) for k, v in hist.items() if v)
    top_upper_us = items[-1][0] + BUCKET_US
    max_us = (max_ns / 1000.0) if max_ns is not None else top_upper_us

    def pct(q: float) -> float:
        rank = max(1, math.ceil(q * n))
        cum = 0
        for start, cnt in items:
            cum += cnt
            if cum >= rank:
                return min(start + BUCKET_US / 2.0, max_us)
        return max_us  # pragma: no cover

    return {
        "p50": round(pct(0.50) / 1000.0, 4),
        "p90": round(pct(0.90) / 1000.0, 4),
        "p99": round(pct(0.99) / 1000.0, 4),
        "max": round(max_us / 1000.0, 4),
        "mean": round(sum_ns / n / 1e6, 4),
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
    if not records or any(r is None for r in records):
        return None
    t = _empty_gc()
    for r in records:
        _add_counts(t["collections"], r.get("collections", {}))
        _add_counts(t["hist"], _hist_int(r.get("pause_histogram_us", {})))
        for k in _GC_COUNTS:
            t[k] += int(r.get(k, 0))
        t["pause_max_ns"] = max(t["pause_max_ns"], int(r.get("pause_max_ns", 0)))
    return t


def _gc_diff(later: dict | None, earlier: dict | None) -> dict | None:
    if later is None or earlier is None:
        return None
    t = _empty_gc()
    _add_counts(t["collections"], later.get("collections", {}))
    _add_counts(t["collections"], earlier.get("collections", {}), -1)
    _add_counts(t["hist"], _hist_int(later.get("pause_histogram_us", {})))
    _add_counts(t["hist"], _hist_int(earlier.get("pause_histogram_us", {})), -1)
    for k in _GC_COUNTS:
        t[k] = int(later.get(k, 0)) - int(earlier.get(k, 0))
    negative = [f"gc.{k}" for k in _GC_COUNTS if t[k] < 0]
    negative += [f"gc.collections[{k}]" for k, v in t["collections"].items() if v < 0]
    negative += [f"gc.pause_histogram_us[{k}]" for k, v in t["hist"].items() if v < 0]
    if negative:
        raise ValueError(f"later snapshot is not a continuation of earlier: {negative[:5]}")
    t["pause_max_ns"] = _window_max(t["hist"], int(later.get("pause_max_ns", 0)),
                                    int(earlier.get("pause_max_ns", 0)))
    return t


def _gc_shape(t: dict | None) -> dict | None:
    if t is None:
        return None
    hist = {k: v for k, v in t["hist"].items() if v}
    n = sum(hist.values())
    return {"collections": dict(sorted(t["collections"].items())), "timed": t["timed"],
            "collected": t["collected"], "pause_count": n, "pause_sum_ns": t["pause_sum_ns"],
            "pause_max_ns": t["pause_max_ns"] if n else 0,
            "pause_total_ms": round(t["pause_sum_ns"] / 1e6, 4),
            "pause_ms": _hold_summary(hist, t["pause_sum_ns"], t["pause_max_ns"] if n else None),
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


def _shape(t: dict, latency_ms, workers: int, extra: dict) -> dict:
    hist = {k: v for k, v in t["hist"].items() if v}
    hold_count = sum(hist.values())
    out = {
        "schema_version": SCHEMA_VERSION,
        "count": t["count"],
        "by_path": {k: v for k, v in sorted(t["by_path"].items()) if v},
        "errors": t["errors"],
        "hold_ms": _hold_summary(hist, t["hold_sum_ns"], t["hold_max_ns"] if hold_count else None),
        "hold_histogram_us": _hist_str(hist),
        "latency_ms": latency_ms,
        "workers": workers,
        # extras (not in the minimal schema, kept so that diffs stay exact)
        "by_status": {k: v for k, v in sorted(t["by_status"].items(), key=lambda kv: int(kv[0])) if v},
        "incomplete": t["incomplete"],
        "hold_count": hold_count,
        "hold_sum_ns": t["hold_sum_ns"],
        "hold_max_ns": t["hold_max_ns"] if hold_count else 0,
        "log_dropped": t["log_dropped"],
        "faults": {k: v for k, v in sorted(t["faults"].items()) if v},
        "down_windows": sorted(t["down_windows"], key=lambda w: (w["start_t_unix_s"], w["pid"])),
        "gc": _gc_shape(t["gc"]),
    }
    out.update(extra)
    return out


def merge_worker_snapshots(snaps: list[dict], stale_pids: list[int] | None = None) -> dict:
    """Merge worker-file dicts into the ``mock_stats.json`` shape."""
    t = _empty_totals()
    latency_ms = None
    config = None
    for s in snaps:
        t["count"] += int(s.get("count", 0))
        t["incomplete"] += int(s.get("incomplete", 0))
        t["errors"] += int(s.get("errors", 0))
        t["log_dropped"] += int(s.get("log_dropped", 0))
        _add_counts(t["by_path"], s.get("by_path", {}))
        _add_counts(t["by_status"], s.get("by_status", {}))
        _add_counts(t["faults"], s.get("faults", {}))
        t["down_windows"] += s.get("down_windows", [])
        _add_counts(t["hist"], _hist_int(s.get("hold_histogram_us", {})))
        t["hold_sum_ns"] += int(s.get("hold_sum_ns", 0))
        t["hold_max_ns"] = max(t["hold_max_ns"], int(s.get("hold_max_ns", 0)))
        if latency_ms is None:
            latency_ms = s.get("latency_ms")
            config = s.get("config")
    t["gc"] = _gc_totals([s.get("gc") for s in snaps])
    stale = sorted(stale_pids or [])
    extra = {
        "worker_pids": sorted(int(s["pid"]) for s in snaps if "pid" in s),
        "updated_t_unix_s": min((float(s.get("updated_t_unix_s", 0.0)) for s in snaps), default=None),
        "final": bool(snaps) and all(bool(s.get("final")) for s in snaps),
        "fresh": not stale,
        "stale_workers": stale,
        "config": config or {},
    }
    return _shape(t, latency_ms, len(snaps), extra)


def _load_worker_files(stats_dir: str) -> list[dict]:
    snaps = []
    for path in sorted(glob.glob(os.path.join(stats_dir, f"{FILE_PREFIX}*{FILE_SUFFIX}"))):
        for _attempt in range(3):
            try:
                with open(path, "rb") as f:
                    snaps.append(_loads(f.read()))
                break
            except FileNotFoundError:
                break  # replaced/removed between glob and open
            except ValueError:  # not expected (atomic rename), but never fail a read on it
                time.sleep(0.005)
    return snaps


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
        snaps = _load_worker_files(stats_dir)
        if _override is not None:
            snaps = [s for s in snaps if s.get("pid") != _override.get("pid")] + [_override]
        stale = [int(s.get("pid", -1)) for s in snaps if not _is_fresh(s, fresher_than_t_unix_s)]
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
    t = _empty_totals()
    for key in ("count", "incomplete", "errors", "hold_sum_ns", "log_dropped"):
        t[key] = int(later.get(key, 0)) - int(earlier.get(key, 0))
    for key in ("by_path", "by_status", "faults"):
        _add_counts(t[key], later.get(key, {}))
        _add_counts(t[key], earlier.get(key, {}), -1)
    seen = {(w["pid"], w["start_t_unix_s"]) for w in earlier.get("down_windows", [])}
    t["down_windows"] = [w for w in later.get("down_windows", []) if (w["pid"], w["start_t_unix_s"]) not in seen]
    _add_counts(t["hist"], _hist_int(later.get("hold_histogram_us", {})))
    _add_counts(t["hist"], _hist_int(earlier.get("hold_histogram_us", {})), -1)
    negative = [k for k in ("count", "incomplete", "errors", "hold_sum_ns") if t[k] < 0]
    negative += [f"by_path[{k}]" for k, v in t["by_path"].items() if v < 0]
    negative += [f"by_status[{k}]" for k, v in t["by_status"].items() if v < 0]
    negative += [f"faults[{k}]" for k, v in t["faults"].items() if v < 0]
    negative += [f"hold_histogram_us[{k}]" for k, v in t["hist"].items() if v < 0]
    if negative:
        raise ValueError(f"later snapshot is not a continuation of earlier: {negative[:5]}")
    t["hold_max_ns"] = _window_max(t["hist"], int(later.get("hold_max_ns", 0)),
                                   int(earlier.get("hold_max_ns", 0)))
    t["gc"] = _gc_diff(later.get("gc"), earlier.get("gc"))
    extra = {
        "worker_pids": later.get("worker_pids", []),
        "updated_t_unix_s": later.get("updated_t_unix_s"),
        "since_t_unix_s": earlier.get("updated_t_unix_s"),
        "final": later.get("final", False),
        "fresh": bool(later.get("fresh", True)) and bool(earlier.get("fresh", True)),
        "stale_workers": sorted(set(later.get("stale_workers", [])) | set(earlier.get("stale_workers", []))),
        "config": later.get("config", {}),
    }
    return _shape(t, later.get("latency_ms"), later.get("workers", 0), extra)


def clear_worker_files(stats_dir: str) -> None:
    """Remove worker files, request logs (and leftover temp files) of an earlier mock in
    this directory."""
    paths = glob.glob(os.path.join(stats_dir, f"{FILE_PREFIX}*"))
    paths += glob.glob(os.path.join(stats_dir, f"{LOG_PREFIX}*{LOG_SUFFIX}"))
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


# ----------------------------------------------------------------------------- request log

def request_log_file(stats_dir: str, pid: int) -> str:
    return os.path.join(stats_dir, f"{LOG_PREFIX}{pid}{LOG_SUFFIX}")


# (column, dtype) in file order; times are wall-clock ns, durations monotonic ns
REQUEST_LOG_COLUMNS = (
    ("request_id", "string"),            # the load generator's id ("" when none was found)
    ("mock_seq", "string"),              # the mock's own <pid>-<seq> (x-mock-request-id)
    ("path", "string"),
    ("worker_pid", "int64"),
    ("status_code", "int64"),
    ("fault", "string"),                 # injected fault ("" = none)
    ("body_end_t_unix_ns", "int64"),     # whole request body read: the hold starts
    ("hold_set_ns", "int64"),            # the hold asked for (setting or x-mock-latency-ms)
    ("hold_applied_ns", "int64"),        # body end -> head write started
    ("head_written_t_unix_ns", "int64"),  # response head handed to the socket
    ("last_frame_written_t_unix_ns", "int64"),  # last byte handed to the socket
    ("bytes_in", "int64"),               # request head + body
    ("bytes_out", "int64"),              # response head + body
    ("arrival_lag_ns", "int64"),         # request's last bytes received -> body end
    ("write_ns", "int64"),               # head write started -> head handed to the socket
    ("peer_port", "int64"),              # the client's (gateway's) source port
)
_LOG_HEADER = (",".join(c for c, _ in REQUEST_LOG_COLUMNS) + "\n").encode()
_LOG_LINE = b"%s,%s,%s,%d,%d,%s,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d\n"


class RequestLog:
    """One worker's per-request log: a CSV line per request, buffered in memory.

    ``record`` formats the line at once (about a microsecond, spread over the requests)
    so that ``flush`` is only a join and one ``write``: no pause on the event loop long
    enough to show in the holds.  Times are given as ``time.monotonic_ns()`` values and
    written as wall clock (``time.time_ns()`` scale) through an offset that ``flush``
    re-reads: every duration between two logged times is a monotonic one.  At most
    ``max_buffered`` lines wait for a flush; beyond that, and when a write fails, lines
    are dropped and counted in ``dropped``.  Ids and paths are written unquoted: the mock
    only logs ids made of ``[A-Za-z0-9._:-]`` and its own route keys.
    """

    __slots__ = ("path", "pid", "max_buffered", "dropped", "_buf", "_offset_ns", "_fd")

    def __init__(self, stats_dir: str, pid: int | None = None, max_buffered: int = 200_000):
        self.pid = os.getpid() if pid is None else pid
        self.path = request_log_file(stats_dir, self.pid)
        self.max_buffered = max_buffered
        self.dropped = 0
        self._buf: list[bytes] = []
        self._offset_ns = time.time_ns() - time.monotonic_ns()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        os.write(self._fd, _LOG_HEADER)

    def record(self, request_id: str, mock_seq: str, path: str, status: int, fault: str,
               body_end_ns: int, hold_set_ns: int, hold_applied_ns: int, head_written_ns: int,
               last_written_ns: int, bytes_in: int, bytes_out: int, arrival_lag_ns: int,
               write_ns: int, peer_port: int) -> None:
        buf = self._buf
        if len(buf) >= self.max_buffered:
            self.dropped += 1
            return
        off = self._offset_ns
        buf.append(_LOG_LINE % (
            request_id.encode(), mock_seq.encode(), path.encode(), self.pid, status, fault.encode(),
            body_end_ns + off, hold_set_ns, hold_applied_ns, head_written_ns + off,
            last_written_ns + off, bytes_in, bytes_out, arrival_lag_ns, write_ns, peer_port))

    def flush(self) -> None:
        """Append the buffered lines to the file; raises OSError (the lines are dropped)."""
        self._offset_ns = time.time_ns() - time.monotonic_ns()
        buf = self._buf
        if not buf or self._fd < 0:
            return
        self._buf = []
        data = b"".join(buf)
        try:
            while data:  # a regular file takes it in one write; loop for the rare short one
                data = data[os.write(self._fd, data):]
        except OSError:
            self.dropped += data.count(b"\n")
            raise

    def close(self) -> None:
        try:
            self.flush()
        finally:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def read_request_log(stats_dir: str):
    """All workers' request logs in ``stats_dir`` as one pandas DataFrame (columns and
    dtypes: ``REQUEST_LOG_COLUMNS``), sorted by ``body_end_t_unix_ns``.

    Safe while the mock runs: a line still being written (no newline yet) is left out.
    """
    import io

    import pandas as pd

    dtypes = dict(REQUEST_LOG_COLUMNS)
    parts = []
    for path in sorted(glob.glob(os.path.join(stats_dir, f"{LOG_PREFIX}*{LOG_SUFFIX}"))):
        with open(path, "rb") as f:
            data = f.read()
        data = data[:data.rfind(b"\n") + 1]
        if data.count(b"\n") <= 1:
            continue
        parts.append(pd.read_csv(io.BytesIO(data), dtype=dtypes, keep_default_na=False))
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in REQUEST_LOG_COLUMNS})
    df = pd.concat(parts, ignore_index=True)
    return df.sort_values("body_end_t_unix_ns", kind="stable", ignore_index=True)
