"""1-second samples of RSS and CPU for each role's whole process tree, and of the machine.

CPU is counted per pid: a child that exits keeps the CPU seconds last seen for it, so the
cumulative figure never drops and CPU-ms per request covers every worker of a system.
"""
from __future__ import annotations

import math
import os
import socket
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable

import psutil

from harness.files.producers import RawCsv
from harness.model.schema import SAMPLES


def _schedstat(pid: int) -> dict[int, tuple[int, int]]:
    """Per live thread of a process, (ns on a CPU, ns runnable but waiting for one): the first
    two fields of /proc/<pid>/task/<tid>/schedstat; {} where the kernel keeps none."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return {}
    out = {}
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                on_cpu, waiting = f.read().split()[:2]
            out[int(tid)] = (int(on_cpu), int(waiting))
        except (OSError, ValueError):
            continue
    return out


def task_cpu_ns(pid: int) -> dict[int, int]:
    """CPU time of each live thread of a process, in ns (schedstat); {} where the kernel keeps
    none. psutil's cpu_times count clock ticks (10 ms here): over a 20-s window of a process
    using 35 ms a second, that quantization alone moved CPU per request by several percent
    between two runs of the same nginx."""
    return {tid: on_cpu for tid, (on_cpu, _) in _schedstat(pid).items()}


def run_queue_wait_ns(pids) -> int | None:
    """Nanoseconds the threads of these processes have spent runnable but waiting for a CPU,
    summed; None where the kernel keeps no schedstat or no process could be read."""
    threads = [waiting for pid in pids for _, waiting in _schedstat(pid).values()]
    return sum(threads) if threads else None


def scrape_gauge(url: str, gauge: str, timeout_s: float = 0.5) -> float:
    """Sum of a Prometheus gauge's samples (all label sets); NaN when it cannot be read."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            text = resp.read().decode(errors="replace")
    except (OSError, ValueError):
        return math.nan
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith(gauge) and line[len(gauge):len(gauge) + 1] in (" ", "{"):
            try:
                total += float(line.rsplit(" ", 1)[1])
                found = True
            except ValueError:
                pass
    return total if found else math.nan


class _RoleTree:
    def __init__(self, roots: Callable[[], list[int]], inflight: Callable[[], float] | None):
        self.roots = roots
        self.inflight = inflight
        self.procs: dict[int, psutil.Process] = {}
        # CPU seconds per (pid, tid) from schedstat, or per (pid, None) from psutil where the
        # kernel keeps no schedstat; an exited process or thread keeps its last value
        self.cpu_by_task: dict[tuple[int, int | None], float] = {}
        self.last_total = 0.0

    def sample(self) -> tuple[int, int, float, int]:
        live = []
        for root in self.roots():
            try:
                proc = self.procs.get(root) or psutil.Process(root)
                live += [proc, *proc.children(recursive=True)]
            except psutil.Error:
                continue
        rss = fds = count = 0
        for proc in live:
            proc = self.procs.setdefault(proc.pid, proc)
            precise = task_cpu_ns(proc.pid)
            try:
                with proc.oneshot():
                    times = None if precise else proc.cpu_times()  # ticks: only without schedstat
                    mem = proc.memory_info().rss
                    nfds = proc.num_fds()
            except psutil.Error:
                continue
            if precise:
                self.cpu_by_task.pop((proc.pid, None), None)
                for tid, ns in precise.items():
                    self.cpu_by_task[(proc.pid, tid)] = ns / 1e9
            elif not any(key[0] == proc.pid for key in self.cpu_by_task if key[1] is not None):
                self.cpu_by_task[(proc.pid, None)] = times.user + times.system
            rss += mem
            fds += nfds
            count += 1
        return count, rss, sum(self.cpu_by_task.values()), fds


class Sampler:
    """Samples named roles every interval_s in a background thread; rows also go to a CSV as
    they are taken, so a crash keeps what was sampled."""

    def __init__(self, csv_path: Path, interval_s: float = 1.0, host: str = ""):
        self.csv_path = Path(csv_path)
        self.host = host or socket.gethostname()  # the topology's name for this machine
        self.interval_s = interval_s
        self.roles: dict[str, _RoleTree] = {}
        self.rows: list[dict] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._writer = None
        self._machine_cpu_last = None

    def watch(self, role: str, roots: Callable[[], list[int]],
              inflight: Callable[[], float] | None = None) -> None:
        """roots: the role's root pids now; inflight: reads its in-flight requests, if it can."""
        with self._lock:
            self.roles[role] = _RoleTree(roots, inflight)

    def start(self) -> None:
        self._writer = RawCsv(self.csv_path, SAMPLES.raw_names)
        psutil.cpu_percent(None)
        self._thread = threading.Thread(target=self._loop, name="sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        next_t = time.monotonic()
        last_t = None
        while not self._stop.is_set():
            now = time.monotonic()
            # The first sample has no interval: its CPU seconds are where the rates start.
            self.sample_once(now - last_t if last_t is not None else 0.0)
            last_t = now
            next_t += self.interval_s
            self._stop.wait(max(0.0, next_t - time.monotonic()))

    def sample_once(self, elapsed_s: float) -> None:
        t = time.time()
        load1 = os.getloadavg()[0]
        rows = []
        with self._lock:
            for role, tree in self.roles.items():
                count, rss, cpu_total, fds = tree.sample()
                delta = max(0.0, cpu_total - tree.last_total)
                tree.last_total = max(tree.last_total, cpu_total)
                pct = 100.0 * delta / elapsed_s if elapsed_s > 0 else 0.0
                inflight = tree.inflight() if tree.inflight else math.nan
                rows.append(self._row(t, role, count, rss, pct, cpu_total, fds, load1, inflight))
        vm = psutil.virtual_memory()
        cpu_times = psutil.cpu_times()
        busy = cpu_times.user + cpu_times.system + getattr(cpu_times, "irq", 0) + \
            getattr(cpu_times, "softirq", 0) + getattr(cpu_times, "nice", 0)
        pct = 0.0
        if self._machine_cpu_last is not None and elapsed_s > 0:
            pct = 100.0 * (busy - self._machine_cpu_last) / elapsed_s
        self._machine_cpu_last = busy
        rows.append(self._row(t, "machine", len(psutil.pids()), vm.total - vm.available, pct, busy,
                              0, load1, math.nan))
        self.rows.extend(rows)
        if self._writer is not None:
            self._writer.writerows(rows)
            self._writer.flush()

    def _row(self, t: float, role: str, pids: int, rss: int, cpu_percent: float,
             cpu_seconds: float, fds: int, load1: float, inflight: float) -> dict:
        return {"t_unix_s": t, "role": role, "pid_count": pids, "rss_bytes": rss,
                "cpu_percent": round(cpu_percent, 2), "cpu_seconds_total": round(cpu_seconds, 4),
                "num_fds": fds, "load_avg_1m": load1, "inflight_requests": inflight,
                "host": self.host}

    def stop(self) -> list[dict]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        return self.rows
