"""Driving the real mock (python -m mocks.server) from the tests: start and stop it on a free
127.0.0.1 port, send requests and streams, read SSE events, wait for processes to go."""
import http.client
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time

import psutil
from polling import wait_for

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PY = sys.executable
BODY = {"model": "gpt-test", "messages": [{"role": "user", "content": "Hello there, mock."}]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Mock:
    """A running ``python -m mocks.server``; stop() sends SIGTERM and waits."""

    def __init__(self, stats_dir, *args, workers=1):
        self.stats_dir = str(stats_dir)
        for _attempt in range(3):
            self.port = _free_port()
            cmd = [PY, "-m", "mocks.server", "--host", "127.0.0.1", "--port", str(self.port),
                   "--workers", str(workers), "--stats-dir", self.stats_dir, *args]
            self.proc = subprocess.Popen(cmd, cwd=REPO_DIR, stdout=subprocess.PIPE, text=True)
            self.line = self._read_line(30.0)
            if self.line:
                break
            self.proc.wait(10)  # port taken between probe and bind: try another
        assert self.line, "mock did not start"
        fields = dict(kv.split("=", 1) for kv in self.line.split() if "=" in kv)
        assert int(fields["port"]) == self.port and int(fields["pid"]) == self.proc.pid
        assert int(fields["workers"]) == workers
        self.workers = [c.pid for c in psutil.Process(self.proc.pid).children()]

    def _read_line(self, timeout_s):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return ""
            r, _, _ = select.select([self.proc.stdout], [], [], 0.1)
            if r:
                return self.proc.stdout.readline().strip()
        return ""

    def client(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)

    def stop(self, sig=signal.SIGTERM, timeout_s=20.0):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            for c in psutil.Process(self.proc.pid).children(recursive=True):
                c.kill()
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self.proc.stdout.close()


def call(conn, method, path, body=None, headers=None):
    """One request on a keep-alive connection: (status, headers, body, elapsed_s)."""
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    hdrs = {"Content-Type": "application/json"}
    hdrs.update(headers or {})
    t0 = time.perf_counter()
    conn.request(method, path, body=data, headers=hdrs)
    resp = conn.getresponse()
    raw = resp.read()
    return resp.status, resp.headers, raw, time.perf_counter() - t0


def stream(conn, path, body, headers=None):
    """Streaming request: (status, headers, [(t_since_send_s, line)]) read as lines arrive."""
    hdrs = {"Content-Type": "application/json"}
    hdrs.update(headers or {})
    t0 = time.perf_counter()
    conn.request("POST", path, body=json.dumps(body).encode(), headers=hdrs)
    resp = conn.getresponse()
    lines = []
    while True:
        line = resp.readline()
        if not line:
            break
        lines.append((time.perf_counter() - t0, line.decode().rstrip("\n")))
    return resp.status, resp.headers, lines


def sse_events(lines):
    """Group SSE lines into events: [(t, event_name_or_None, data_str)]."""
    out, event, t = [], None, None
    for ts, line in lines:
        if line.startswith("event: "):
            event, t = line[7:], ts
        elif line.startswith("data: "):
            out.append((t if event else ts, event, line[6:]))
            event = None
    return out


def alive(pid):
    try:
        p = psutil.Process(pid)
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids, timeout_s=10.0):
    wait_for(lambda: not any(alive(p) for p in pids), timeout_s)
    return [p for p in pids if alive(p)]
