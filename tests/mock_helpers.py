"""Driving the real mock (python -m mocks.server) from the tests: start and stop it on a free
127.0.0.1 port, send requests and streams (also over a raw socket), read SSE events, wait for
its request log's lines and for processes to go."""
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

from harness.host.processes import free_port
from mocks.request_log import read_request_log

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PY = sys.executable
BODY = {"model": "gpt-test", "messages": [{"role": "user", "content": "Hello there, mock."}]}
OPENAI = "/v1/chat/completions"
ANTHROPIC = "/v1/messages"



# A fault epoch given on a mock's command line lies this far ahead, so that the mock is up
# before it however loaded the machine (a 2-core machine at load 12 took over 2.5 s).
START_MARGIN_S = 5.0


def fault_epoch() -> float:
    return time.time() + START_MARGIN_S


def wait_for_epoch(epoch: float, lead_s: float) -> None:
    """Once the mock is up: fail if it came up after ``epoch``, else sleep until ``lead_s``
    before it (the requests the test sends before the epoch start there)."""
    assert time.time() < epoch - lead_s, f"the mock was not up {lead_s} s before its fault epoch"
    time.sleep(max(0.0, epoch - lead_s - time.time()))


class Mock:
    """A running ``python -m mocks.server``; stop() sends SIGTERM and waits."""

    def __init__(self, stats_dir, *args, workers=1):
        self.stats_dir = str(stats_dir)
        for _attempt in range(3):
            self.port = free_port()
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


def sse_data(lines):
    return [d for _, _, d in sse_events(lines)]


def raw_request(port, path=OPENAI, body=None, headers=b"", timeout_s=10.0):
    """One request over a raw socket: (bytes received, how it ended: "eof" or "reset"),
    with the time of the last received bytes and of the end, relative to the send."""
    data = json.dumps(body or BODY).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    got, end, t_last = b"", "eof", 0.0
    t0 = time.monotonic()
    try:
        s.sendall(b"POST %s HTTP/1.1\r\nHost: mock\r\nContent-Type: application/json\r\n%s"
                  b"Content-Length: %d\r\n\r\n%s" % (path.encode(), headers, len(data), data))
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                end = "reset"
                break
            if not chunk:
                break
            got += chunk
            t_last = time.monotonic() - t0
    finally:
        s.close()
    return got, end, t_last, time.monotonic() - t0


def split_head(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    hdrs = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    return int(lines[0].split()[1]), hdrs, body


def log_by_request_id(stats_dir):
    log = read_request_log(stats_dir)
    return {r.request_id: r for r in log.itertuples() if r.request_id}


def wait_logged(stats_dir, request_ids, timeout_s=5.0):
    """The mock flushes its log every 0.25 s: wait until these ids are in it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rows = log_by_request_id(stats_dir)
        if all(r in rows for r in request_ids):
            return rows
        time.sleep(0.05)
    raise AssertionError(f"not logged within {timeout_s} s: {set(request_ids) - set(rows)}")


def alive(pid):
    try:
        p = psutil.Process(pid)
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids, timeout_s=10.0):
    wait_for(lambda: not any(alive(p) for p in pids), timeout_s)
    return [p for p in pids if alive(p)]
