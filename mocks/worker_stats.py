"""One worker's counters (:class:`WorkerStats`) and its stats file.

Importing this module starts nothing and does not import aiohttp.

Each worker process keeps a :class:`WorkerStats` and writes it to
``<stats_dir>/worker-<pid>.json`` (temp file + rename, so readers never see a partial
file); :func:`load_worker_files` reads them back for ``mocks.stats``, which merges them and
defines every figure.  :func:`clear_worker_files` empties a stats directory of an earlier
mock's files (worker files and request logs).
"""

from __future__ import annotations

import glob
import json
import os
import time

from mocks.request_log import LOG_PREFIX, LOG_SUFFIX

WORKER_STATS_VERSION = 1   # the version of a worker's stats file (worker-<pid>.json)
BUCKET_US = 10
_BUCKET_NS = BUCKET_US * 1000
FILE_PREFIX = "worker-"
FILE_SUFFIX = ".json"

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
    """Counters of one worker process (each figure is defined in ``mocks.stats``); updated
    on the event loop, no locking."""

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
        bucket = hold_ns // _BUCKET_NS * BUCKET_US
        hist = self.hist
        hist[bucket] = hist.get(bucket, 0) + 1
        self.hold_count += 1
        self.hold_sum_ns += hold_ns
        if hold_ns > self.hold_max_ns:
            self.hold_max_ns = hold_ns

    def record_response(self, path_key: str, status: int) -> None:
        by_path = self.by_path
        by_path[path_key] = by_path.get(path_key, 0) + 1
        by_status = self.by_status
        by_status[status] = by_status.get(status, 0) + 1
        if status == 400:
            self.errors += 1
        self.version += 1

    def record_gc(self, generation: int, pause_ns: int, collected: int, timed: bool) -> None:
        """One collection, as a gc.callbacks hook saw it."""
        self.gc_collections[generation] += 1
        if timed:
            self.gc_timed += 1
        self.gc_collected += collected
        bucket = pause_ns // _BUCKET_NS * BUCKET_US
        hist = self.gc_pause_hist
        hist[bucket] = hist.get(bucket, 0) + 1
        self.gc_pause_sum_ns += pause_ns
        if pause_ns > self.gc_pause_max_ns:
            self.gc_pause_max_ns = pause_ns
        # no version bump: 50 timed passes a second would rewrite an idle worker's file at every
        # tick; the stats writer's heartbeat (mocks.worker) keeps these figures at most 0.5 s old

    def record_fault(self, label: str) -> None:
        faults = self.faults
        faults[label] = faults.get(label, 0) + 1
        self.version += 1

    def snapshot(self) -> dict:
        """The worker-file dict (also what /stats uses for the answering worker)."""
        return {
            "schema_version": WORKER_STATS_VERSION,
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



def load_worker_files(stats_dir: str) -> list[dict]:
    """Every worker file in ``stats_dir``, parsed (a file removed meanwhile is left out)."""
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
