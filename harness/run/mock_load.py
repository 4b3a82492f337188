"""Is the mock still an exact instrument at many connections? Starts the mock, holds that many
keep-alive connections open from one asyncio (uvloop) client, each sending a request with an id,
reading the answer and waiting between calls (the study's closed loop), then stops the mock.
The command is ``python -m harness mock`` (harness/commands/mock.py). Load goes to 127.0.0.1
only."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import tempfile
import time

import uvloop

from harness.host.processes import free_port
from mocks.request_log import read_request_log
from mocks.stats import diff_stats, read_stats


def _cpu_pressure_us() -> int | None:
    """Cumulative µs in which some task waited for a CPU (None without PSI)."""
    try:
        with open("/proc/pressure/cpu") as f:
            return int(f.readline().rsplit("total=", 1)[1])
    except (OSError, IndexError, ValueError):
        return None


def _cpu_s(pid: int) -> float:
    import psutil
    p = psutil.Process(pid)
    t = p.cpu_times()
    total = t.user + t.system
    for c in p.children(recursive=True):
        try:
            ct = c.cpu_times()
            total += ct.user + ct.system
        except psutil.Error:
            pass
    return total


def _rss_mib(pid: int) -> float:
    """Resident memory of the mock and its workers (what its garbage-collector mode keeps)."""
    import psutil
    p = psutil.Process(pid)
    total = p.memory_info().rss
    for c in p.children(recursive=True):
        try:
            total += c.memory_info().rss
        except psutil.Error:
            pass
    return round(total / 2**20, 1)


def _request(rid: str) -> bytes:
    body = (b'{"model":"mock-model","messages":[{"role":"user","content":"[rid:%s] Say hello."}]}'
            % rid.encode())
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: mock\r\nx-request-id: %s\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (rid.encode(), len(body))) + body


async def _user(k: int, port: int, stop_at: float, think_s: float, ramp_s: float, done: list) -> None:
    await asyncio.sleep(random.random() * ramp_s)  # connections open spread over the ramp
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    i = 0
    try:
        while time.monotonic() < stop_at:
            writer.write(_request(f"c{k}-{i}"))
            head = await reader.readuntil(b"\r\n\r\n")
            clen = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(clen)
            done.append(head.startswith(b"HTTP/1.1 200"))
            i += 1
            await asyncio.sleep(think_s * (0.5 + random.random()))  # mean think_s, desynchronised
    finally:
        writer.close()


async def _load(port: int, connections: int, duration_s: float, think_s: float, ramp_s: float,
                stats_dir: str) -> tuple[list, dict]:
    """The answers, and the mock's stats once the ramp is over (read in a thread)."""
    async def after_ramp() -> dict:
        await asyncio.sleep(ramp_s)
        ramp_end_t_unix_s = time.time()
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: read_stats(stats_dir, fresher_than_t_unix_s=ramp_end_t_unix_s))

    done: list = []
    stop_at = time.monotonic() + ramp_s + duration_s
    snapshot = asyncio.ensure_future(after_ramp())
    await asyncio.gather(*(_user(k, port, stop_at, think_s, ramp_s, done) for k in range(connections)))
    return done, await snapshot


def measure_mock(connections: int, workers: int, latency_ms: float, duration_s: float,
                 ramp_s: float, think_s: float, gc_mode: str) -> dict:
    """The mock at ``connections`` keep-alive connections: what the client saw, the mock's CPU
    and memory, the machine's CPU pressure, the collector's work after the ramp, and the mock's
    per-request log of the measured part (``log``, for its own time). RuntimeError when the mock
    does not start."""
    stats_dir = tempfile.mkdtemp(prefix="sluice-mock-load-")
    port = free_port()
    mock = subprocess.Popen([sys.executable, "-m", "mocks.server", "--port", str(port), "--workers",
                             str(workers), "--latency-ms", str(latency_ms), "--stats-dir", stats_dir,
                             "--gc", gc_mode],
                            stdout=subprocess.PIPE, text=True)
    try:
        if "ready" not in (mock.stdout.readline() or ""):
            raise RuntimeError("the mock did not start")
        t_load_ns = time.time_ns()
        t0 = time.monotonic()
        psi0, cpu0 = _cpu_pressure_us(), _cpu_s(mock.pid)
        done, after_ramp = uvloop.run(_load(port, connections, duration_s, think_s, ramp_s,
                                            stats_dir))
        elapsed_s = time.monotonic() - t0
        psi1, cpu1, rss = _cpu_pressure_us(), _cpu_s(mock.pid), _rss_mib(mock.pid)
    finally:
        mock.send_signal(signal.SIGTERM)
        mock.wait(30)
    gc_window = diff_stats(read_stats(stats_dir), after_ramp)["gc"]
    log = read_request_log(stats_dir)
    # the measured part: after the ramp (all connections open)
    log = log[log["body_end_t_unix_ns"] >= t_load_ns + int(ramp_s * 1e9)]
    measured_s = (log["body_end_t_unix_ns"].max() - log["body_end_t_unix_ns"].min()) / 1e9 if len(log) else 0
    return {"connections": connections, "workers": workers, "latency_ms": latency_ms,
            "gc_mode": gc_mode,
            "answered": len(done), "ok": sum(done), "measured_requests": int(len(log)),
            "rate_per_s": round(len(log) / measured_s, 1) if measured_s else None,
            "mock_cpu_cores": round((cpu1 - cpu0) / elapsed_s, 3), "mock_rss_mib_at_end": rss,
            "cpu_pressure_some_pct": (round((psi1 - psi0) / 1e4 / elapsed_s, 1)
                                      if psi0 is not None else None),
            "gc": ({k: v for k, v in gc_window.items() if k != "pause_histogram_us"}
                   if gc_window else None),
            "stats_dir": stats_dir, "log": log}
