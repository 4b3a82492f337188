"""Native processes: started in their own process group, logged to a file, always stopped.

Every process the harness starts is registered until it is stopped, so that an error, an
interrupt or interpreter exit can stop all of them (and everything they spawned).
"""
from __future__ import annotations

import atexit
import os
import random
import resource
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterable

import psutil

_live: dict[int, "ManagedProcess"] = {}
_live_lock = threading.Lock()
POLL_S = 0.05


class ProcessError(RuntimeError):
    """A process that could not start, exited early or never became ready."""


# free_port's ports: below Linux's default ephemeral range (ip_local_port_range, 32768-60999)
PORTS = range(10000, 32768)
_port_draws = random.SystemRandom()   # never the seeded global generator: two processes seeded
                                      # alike would draw the same ports


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, for another process to bind.

    Drawn at random below the kernel's ephemeral range: a port from that range (what binding
    port 0 gives) may become any outgoing connection's source port before the process it is
    handed to binds it. Below it only another picker can take it, one chance in ~20,000."""
    for _ in range(1000):
        port = _port_draws.choice(PORTS)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port in {PORTS.start}-{PORTS.stop - 1}")


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def raise_open_files_limit(wanted: int) -> tuple[int, int]:
    """This process's soft open-file limit raised to ``wanted`` (0: to the hard limit), so every
    process it starts inherits it (a default soft limit of 1,024 stops a process at about 1,000
    connections); capped at the hard limit, never lowered. (soft, hard) after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if wanted <= 0 or (hard != resource.RLIM_INFINITY and wanted > hard) else wanted
    if soft == resource.RLIM_INFINITY or (target != resource.RLIM_INFINITY and soft >= target):
        return soft, hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def open_files_limit_of(pid: int) -> int | None:
    """The soft open-file limit process ``pid`` runs with (None: gone, or not ours to read)."""
    try:
        return int(psutil.Process(pid).rlimit(psutil.RLIMIT_NOFILE)[0])
    except (psutil.Error, OSError):
        return None


def most_fds_in_tree(pid: int) -> int | None:
    """The most descriptors any one process of ``pid``'s tree holds now (None: gone, or not
    ours to read): what a process needs before it holds a connection."""
    try:
        root = psutil.Process(pid)
        return max(p.num_fds() for p in [root, *_descendants(root)])
    except (psutil.Error, OSError):
        return None


def log_tail(path: Path, max_lines: int = 30) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-max_lines:])


class ManagedProcess:
    """One started command and its whole process tree."""

    def __init__(self, role: str, argv: list[str], log_path: Path, cwd: Path | None = None,
                 env: dict | None = None, stop_signal: str = "SIGTERM", stop_timeout_s: float = 10.0):
        self.role = role
        self.argv = list(argv)
        self.log_path = Path(log_path)
        self.stop_signal = getattr(signal, stop_signal)
        self.stop_timeout_s = stop_timeout_s
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        try:
            self.popen = subprocess.Popen(
                self.argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=self._log,
                stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            self._log.close()
            raise ProcessError(f"{role}: cannot start {argv[0]!r}: {exc.strerror or exc}") from None
        self.pid = self.popen.pid
        self.started_t_unix_s = time.time()
        self._seen: dict[int, psutil.Process] = {}
        with _live_lock:
            _live[self.pid] = self

    def alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def tree(self) -> list[psutil.Process]:
        """The root and every descendant alive now (remembered, so stop() finds them all)."""
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            procs = []
        for p in procs:
            self._seen.setdefault(p.pid, p)
        return procs

    def stop(self) -> None:
        """stop_tree() on its group and every descendant seen, then reap the root."""
        self.tree()
        stop_tree(self.pid, self.stop_signal, self.stop_timeout_s, self._seen.values())
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()
        with _live_lock:
            _live.pop(self.pid, None)

    def kill_tree(self) -> None:
        """SIGKILL to everything at once (used by fault injection and interrupts)."""
        self.stop_signal = signal.SIGKILL
        self.stop_timeout_s = 2.0
        self.stop()


def _is_alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _descendants(p: psutil.Process) -> list[psutil.Process]:
    try:
        return p.children(recursive=True)
    except psutil.Error:
        return []


def stop_tree(pid: int, sig: signal.Signals, timeout_s: float,
              known: Iterable[psutil.Process] = ()) -> bool:
    """Stop the process group `pid` leads and every descendant: `sig` to the group, up to
    timeout_s for all of them to exit (children started meanwhile included), then SIGKILL to the
    group and to each one left, by pid (a child may have left the group). `known`: processes
    seen earlier, whose parent may be gone by now. True when nothing is left alive.
    The one stopper for local processes (ManagedProcess) and remote ones (harness.remote.launch)."""
    tree = list(known)
    try:
        root = psutil.Process(pid)
        tree += [p for p in (root, *_descendants(root)) if p not in tree]
    except psutil.Error:
        pass
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(_is_alive(p) for p in tree):
        tree += [c for p in tree if _is_alive(p) for c in _descendants(p) if c not in tree]
        time.sleep(POLL_S)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for p in tree:
        try:
            p.kill()
        except psutil.Error:
            pass
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(_is_alive(p) for p in tree):
        time.sleep(POLL_S)
    return not any(_is_alive(p) for p in tree)


def stop_all() -> None:
    """Stop every registered process, newest first (clients before servers)."""
    with _live_lock:
        procs = sorted(_live.values(), key=lambda p: p.started_t_unix_s, reverse=True)
    for proc in procs:
        proc.stop()


atexit.register(stop_all)


def wait_ready(proc: ManagedProcess | None, url: str, expect_status: int, timeout_s: float,
               what: str) -> float:
    """Poll url until it answers expect_status; return seconds waited. Fails fast if proc exits."""
    start = time.monotonic()
    deadline = start + timeout_s
    last_error = "no answer yet"
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise ProcessError(f"{what}: exited with code {proc.returncode} before it was ready "
                               f"({url}).\n--- log tail ({proc.log_path}) ---\n{log_tail(proc.log_path)}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == expect_status:
                    return time.monotonic() - start
                last_error = f"HTTP {resp.status}"
        except urllib.error.HTTPError as exc:
            if exc.code == expect_status:
                return time.monotonic() - start
            last_error = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            last_error = str(getattr(exc, "reason", exc))
        time.sleep(0.1)
    tail = log_tail(proc.log_path) if proc is not None else ""
    raise ProcessError(f"{what}: not ready after {timeout_s:.0f} s at {url} (last: {last_error}).\n"
                       f"--- log tail ({proc.log_path if proc else '-'}) ---\n{tail}")
