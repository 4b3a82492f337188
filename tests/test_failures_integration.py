"""Every failed request classified at the client by its cause, on the real exceptions Locust's
FastHttpUser raises against loopback servers that refuse, close, reset, stall or answer badly,
through the load generator's own task and row (harness/run/loadgen/, in a subprocess:
importing Locust patches the interpreter)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from locust_settings import load_settings

from harness.model.config import REPO_DIR

pytestmark = pytest.mark.integration


# The load generator's task against one loopback server per case; it prints each case's row and
# the chain of exception types the row was classed from (the transport's, else Locust's).
DRIVER = r"""
import csv, importlib.util, json, socket, struct, sys
spec = importlib.util.spec_from_file_location("locustfile", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
import gevent
import locust
from locust.env import Environment

SERVER_TIMEOUT_S = 10.0
FRAME = b'data: {"content": "hi"}\n\n'
COMPLETION = b'{"object": "chat.completion"}'
listeners, held = [], []


def read_request(conn):
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 1 << 20:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
              if line.lower().startswith(b"content-length:")][0]
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return
        body += chunk


def reset(conn):  # SO_LINGER 0: close() sends a reset
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def chunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


UNARY_HEAD = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + COMPLETION
STREAM_HEAD = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
               b"Content-Type: text/event-stream\r\n\r\n" + chunk(FRAME))


def answer(data, then):
    # on loopback what was sent is in the client's queue before the close or reset that follows
    def behave(conn):
        read_request(conn)
        conn.sendall(data)
        then(conn)
    return behave


BEHAVIOURS = {
    "closes": lambda conn: (read_request(conn), conn.close()),
    "resets": lambda conn: (read_request(conn), reset(conn)),
    "never answers": lambda conn: (read_request(conn), held.append(conn)),
    "resets mid-body": answer(UNARY_HEAD, reset),
    "closes mid-body": answer(UNARY_HEAD, lambda conn: conn.close()),
    "answers 503": answer(b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy", held.append),
    "answers 429": answer(b"HTTP/1.1 429 Slow\r\nContent-Length: 4\r\n\r\nslow", held.append),
    "answers 200 without a completion": answer(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", held.append),
    "stream resets": answer(STREAM_HEAD, reset),
    "stream closes": answer(STREAM_HEAD, lambda conn: conn.close()),
    "stream stalls": answer(STREAM_HEAD, held.append),
    "stream without content": answer(
        STREAM_HEAD.replace(chunk(FRAME), chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"),
        held.append),
}


def listener(backlog):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(backlog)
    listeners.append(s)
    return s


def serve_once(behave):
    s = listener(8)
    s.settimeout(SERVER_TIMEOUT_S)

    def once():
        conn, _ = s.accept()
        conn.settimeout(SERVER_TIMEOUT_S)
        behave(conn)
    gevent.spawn(once)
    return s.getsockname()[1]


def refused_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def full_queue_port():
    # never accepts: once a connect to it fails its accept queue is full, and the kernel drops
    # every later SYN
    s = listener(0)
    for _ in range(8):
        c = socket.socket()
        c.settimeout(0.2)
        listeners.append(c)
        if c.connect_ex(s.getsockname()) != 0:
            break
    return s.getsockname()[1]


chains = []


@locust.events.request.add_listener
def observe(response=None, exception=None, context=None, **kwargs):
    e = (context or {}).get("transport_error") or getattr(response, "error", None) or exception
    names = []
    while e is not None and len(names) < 8:
        names.append(type(e).__name__)
        e = getattr(e, "original", None) or e.__cause__ or e.__context__
    chains.append(names)


env = Environment(user_classes=[mod.ChatUser], events=locust.events)
for case in json.loads(sys.argv[2]):
    port = (refused_port() if case == "refused" else full_queue_port()
            if case == "accept queue full" else serve_once(BEHAVIOURS[case]))
    mod.ChatUser.stream = case.startswith("stream")
    mod.ChatUser.host = f"http://127.0.0.1:{port}"
    mod.ChatUser(env).chat()
mod.ROWS.close()
(path,) = __import__("glob").glob(mod.SETTINGS.raw_dir + "/requests-*.csv")
rows = [{k: r[k] for k in ("status_code", "error_kind", "error_class", "error")}
        for r in csv.DictReader(open(path))]
print(json.dumps({"rows": rows, "chains": chains}))
"""

REAL_CASES = {
    "refused": "connect_refused",
    "accept queue full": "connect_timeout",
    "closes": "closed_without_answer",
    "resets": "reset_before_head",
    "never answers": "read_timeout",
    "resets mid-body": "reset_during_body",
    "closes mid-body": "closed_during_body",
    "answers 503": "http_5xx",
    "answers 429": "http_4xx",
    "answers 200 without a completion": "bad_body",
    "stream resets": "reset_during_body",
    "stream closes": "closed_during_body",
    "stream stalls": "read_timeout",
    "stream without content": "bad_body",
}


def test_real_failures_over_loopback_get_their_class_in_the_row(tmp_path):
    path = tmp_path / "load.json"
    path.write_text(load_settings(tmp_path, chat_path="/v1/chat", request_timeout_s=1.0,
                                  seed=1).to_json())
    done = subprocess.run([sys.executable, "-c", DRIVER, str(REPO_DIR / "harness/run/loadgen/locustfile.py"),
                           json.dumps(list(REAL_CASES))],
                          env={"SLUICE_LOAD_FILE": str(path), "PYTHONPATH": str(REPO_DIR),
                               "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(out["rows"]) == len(REAL_CASES), out
    got = {case: row["error_class"] for case, row in zip(REAL_CASES, out["rows"])}
    raised = dict(zip(REAL_CASES, out["chains"]))
    assert got == REAL_CASES, json.dumps(raised, indent=1)
    # the older columns are as they were: every failure still has its kind and text
    assert all(row["error_kind"] and row["error"] for row in out["rows"])
