"""Requests in flight per key, against a running Sluice: a key's long streams are bounded by its
max_in_flight (429 + Retry-After beyond it, summed over the workers), so they cannot take the
provider connections and waiters every other key needs; every end of a request gives its place
back."""
import json
import socket

import pytest
from sluice_helpers import ENV, KEY, MSG, chat, server_config
from sluice_stub import wait_until

pytestmark = pytest.mark.integration

HOG = "sk-test-hog"


def _config(stub_url, workers=1, hog_limit=2, provider_lines=""):
    cfg = server_config(stub_url, extra=f'\n[keys.hog]\nkey = "{HOG}"\nmax_in_flight = {hog_limit}\n')
    cfg = cfg.replace("workers = 1", f"workers = {workers}")
    return cfg.replace("[providers.stub]\n", "[providers.stub]\n" + provider_lines)


def _stream_request(gate, key=HOG):
    body = json.dumps({"model": "mock-model", "stream": True, "messages": MSG}).encode()
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + key.encode()
            + b"\r\nx-test-gate: " + gate.encode() + b"\r\ncontent-length: %d\r\n\r\n" % len(body) + body)


def _outcome(s, read_s=3.0):
    """What a request sent on ``s`` got: ("held", head, b"") once a stream's first frame came,
    (status, head, body) for a complete answer, ("none", b"", b"") when nothing came within
    ``read_s``."""
    s.settimeout(read_s)
    buf = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
            head, sep, rest = buf.partition(b"\r\n\r\n")
            if not sep:
                continue
            if b"text/event-stream" in head.lower():
                if b"data: " in rest:
                    return "held", head, b""
                continue
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            if len(rest) >= length:
                return int(head.split(b" ", 2)[1]), head, rest[:length]
    except socket.timeout:
        return "none", b"", b""
    return "closed", buf, b""


def _hold(port, gate, key=HOG):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(_stream_request(gate, key))
    return s, _outcome(s)


def test_one_keys_long_streams_leave_room_for_other_keys(make_sluice, stub):
    # three provider connections and one waiter per worker: five held streams of one key would
    # take them all, and any other key's request would get 503
    gw = make_sluice(_config(stub.url, provider_lines="max_connections = 3\nmax_waiters = 1\n"), env=ENV)
    held = []
    try:
        outcomes = []
        for i in range(5):
            s, (what, head, _) = _hold(gw.port, f"hog-a{i}")
            held.append(s)
            outcomes.append(what)
            if what == 429:
                assert b"retry-after: 1" in head.lower(), head
        assert outcomes == ["held", "held", 429, 429, 429], outcomes
        status, _, body = chat(gw.port, {"model": "mock-model", "messages": MSG}, key=KEY)
        assert status == 200, (status, body)
    finally:
        for i in range(5):
            stub.open_gate(f"hog-a{i}")
        for s in held:
            s.close()


def _on_worker(port, worker):
    """A keep-alive connection that worker ``worker`` serves (asked with /debug/state); the
    workers other than 0 start after it, so this may take a while at first."""
    found = []

    def reached():
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET /debug/state HTTP/1.1\r\nhost: x\r\n\r\n")
        status, head, body = _outcome(s)
        assert status == 200, (status, head)
        if json.loads(body)["worker"] == worker:
            found.append(s)
            return True
        s.close()
        return False

    assert wait_until(reached, timeout=20), f"no connection reached worker {worker}"
    return found[0]


def test_max_in_flight_holds_over_two_workers(make_sluice, stub):
    gw = make_sluice(_config(stub.url, workers=2, hog_limit=2), env=ENV)
    conns = [_on_worker(gw.port, 0), _on_worker(gw.port, 1), _on_worker(gw.port, 0), _on_worker(gw.port, 1)]
    try:
        outcomes = []
        for i, s in enumerate(conns):
            s.sendall(_stream_request(f"hog-w{i}"))
            what, head, _ = _outcome(s)
            outcomes.append(what)
            if what == 429:
                assert b"retry-after: 1" in head.lower(), head
        # one stream on each worker: each worker alone has room for another, both together not
        assert outcomes == ["held", "held", 429, 429], outcomes
        stub.open_gate("hog-w0")
        conns[0].close()

        def retaken():  # the place worker 0 gives back (once it sees the close) taken through worker 1
            conns[3].sendall(_stream_request("hog-w4"))
            return _outcome(conns[3])[0] == "held"

        assert wait_until(retaken, timeout=5)
    finally:
        for i in range(5):
            stub.open_gate(f"hog-w{i}")
        for s in conns:
            s.close()


def test_every_end_of_a_request_gives_its_place_back(make_sluice, stub):
    gw = make_sluice(_config(stub.url, hog_limit=1), env=ENV)
    port = gw.port

    def admitted():
        return chat(port, {"model": "mock-model", "messages": MSG}, key=HOG)[0] == 200

    assert admitted()  # done
    assert chat(port, {"model": "mock-model", "messages": MSG}, key=HOG,
                headers={"x-test-status": "500"})[0] == 500  # the provider's error relayed
    assert admitted()
    assert chat(port, {"model": "mock-model", "messages": MSG}, key=HOG,
                headers={"x-test-close": "1"})[0] == 502  # the provider closed without answering
    assert admitted()
    assert chat(port, {"model": "slow-model", "messages": MSG}, key=HOG,
                headers={"x-test-delay-ms": "3000"})[0] == 504  # no response head in time
    assert admitted()
    s, (what, _, _) = _hold(port, "hog-gone")  # a client gone mid-stream
    assert what == "held"
    assert chat(port, {"model": "mock-model", "messages": MSG}, key=HOG)[0] == 429
    s.close()
    assert wait_until(admitted, timeout=5)
    stub.open_gate("hog-gone")
