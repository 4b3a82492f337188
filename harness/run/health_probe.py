"""The in-flight lane's health probe: while a streamed run leaves streams, a GET of the system's
ready path (its gateway.toml's [ready]; direct's is the mock's) every PROBE_EVERY_S, one raw row
each (harness.model.schema.PROBES). A loop blocked by the cleanup of streams its clients left
answers its health check late: harness.stats.inflight_abandon compares the probes during each
abandon wave with those of the seconds before it."""
from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from harness.files.producers import RawCsv
from harness.model.schema import PROBES

PROBE_EVERY_S = 0.1
# A probe waits this long for its answer: far beyond any health check's time, short enough that
# a stalled system still gets a probe every few seconds.
PROBE_TIMEOUT_S = 2.0


class HealthProbe:
    """Started before the load, stopped after it; ``path``: the run's raw probe file."""

    def __init__(self, url: str, path: Path, every_s: float = PROBE_EVERY_S,
                 timeout_s: float = PROBE_TIMEOUT_S):
        self.url, self.every_s, self.timeout_s = url, every_s, timeout_s
        self.rows = RawCsv(path, PROBES.raw_names)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="health-probe", daemon=True)

    def start(self) -> "HealthProbe":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(self.timeout_s + 1.0)
        self.rows.close()

    def _run(self) -> None:
        due = time.monotonic()
        while not self.stopping.is_set():
            self.rows.writerow(self.probe())
            self.rows.flush()
            # probes keep their grid; one that took longer than the period is followed at once
            due = max(due + self.every_s, time.monotonic())
            self.stopping.wait(max(0.0, due - time.monotonic()))

    def probe(self) -> dict:
        sent, start = time.time(), time.perf_counter()
        status, error = 0, ""
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as resp:
                resp.read()
                status = resp.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        except (urllib.error.URLError, OSError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:200]
        return {"t_unix_s": f"{sent:.6f}",
                "latency_ms": f"{(time.perf_counter() - start) * 1000.0:.3f}",
                "status_code": status, "error": error}
