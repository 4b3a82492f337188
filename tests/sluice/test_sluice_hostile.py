"""Hostile clients and lying providers, over raw sockets to a running Sluice: every limit answers
with its status and closes, nothing hangs, memory stays bounded, budgets hold."""
import json
import os
import re
import signal
import socket
import threading
import time

import psutil
import pytest
from sluice_helpers import (
    KEY,
    base_config,
    chat,
    count_responses,
    raw_exchange,
    request,
)
from sluice_stub import wait_until

ENV = {"SLUICE_TEST_PROVIDER_KEY": "sk-provider-secret"}
MSG = [{"role": "user", "content": "hi"}]
AUTH = b"authorization: Bearer " + KEY.encode() + b"\r\n"


def _cfg(stub_url, server_extra="", extra=""):
    return base_config(stub_url, extra).replace("max_body_bytes = 65536",
                                                "max_body_bytes = 65536\n" + server_extra)


def _post(body, path=b"/v1/chat/completions", headers=b"", auth=AUTH):
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    return (b"POST " + path + b" HTTP/1.1\r\nhost: x\r\n" + auth + headers
            + b"content-length: %d\r\n\r\n" % len(body) + body)


def _read_all(s, limit=10.0):
    """Everything until the peer closes (bounded by the socket timeout and ``limit``)."""
    buf = b""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except (socket.timeout, ConnectionResetError):
            break
        if not chunk:
            break
        buf += chunk
    return buf


def _rss(pid):
    return psutil.Process(pid).memory_info().rss


def _health_ms(port):
    t = time.perf_counter()
    assert request(port, "GET", "/health", timeout=5)[0] == 200
    return (time.perf_counter() - t) * 1000


def _spent(gw, key):
    m = re.search(r'sluice_key_tokens_spent\{key="%s"\} (\d+)' % key, gw.metrics())
    return int(m.group(1)) if m else 0


class LyingProvider:
    """A provider that answers every request with scripted raw bytes, on a kept-open connection."""

    def __init__(self, answer, close_after_s=None):
        self.answer = answer
        self.close_after_s = close_after_s
        self.requests = []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _requests(self, c):
        """Each request read from connection ``c`` (head, body), recorded, until it closes."""
        c.settimeout(30)
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                chunk = c.recv(65536)
                if not chunk:
                    return
                buf += chunk
            head, _, buf = buf.partition(b"\r\n\r\n")
            n = int(re.search(rb"content-length: *(\d+)", head, re.I).group(1))
            while len(buf) < n:
                buf += c.recv(65536)
            self.requests.append((head, buf[:n]))
            buf = buf[n:]
            yield head

    def _serve(self, c):
        try:
            for head in self._requests(c):
                if self.close_after_s is not None:
                    time.sleep(self.close_after_s)
                    return
                answer = self.answer(head) if callable(self.answer) else self.answer
                c.sendall(answer)
        except OSError:
            return
        finally:
            c.close()

    def close(self):
        self.sock.close()


def _liar_config(url, dialect="openai", server_extra=""):
    return f"""
[server]
listen = "127.0.0.1:{{port}}"
workers = 1
debug_endpoints = true
{server_extra}

[providers.liar]
base_url = "{url}/v1"
dialect = "{dialect}"
response_timeout_s = 5

[models.m]
provider = "liar"

[keys.k]
key = "{KEY}"
token_budget = 100000
"""


# ------------------------------------------------------------------ 1. pipelined answers
def _peak_growth(pid, base, seconds, stop_above):
    """The largest RSS growth of ``pid`` over ``base`` seen within ``seconds`` (sampled)."""
    peak = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        peak = max(peak, _rss(pid) - base)
        if peak > stop_above:
            break
        time.sleep(0.05)
    return peak


def _count_answers(s, status, n_wanted):
    n = 0
    tail = b""
    while n < n_wanted:
        chunk = s.recv(1 << 20)
        assert chunk, n
        n += (tail + chunk).count(status) - tail.count(status)
        tail = (tail + chunk)[-16:]
    return n


def test_pipelined_metrics_are_bounded_by_backpressure(make_sluice, stub):
    # 80 keys with a budget: every /metrics render is about 10 KB (two gauge lines a key), so
    # 7,500 renders queued for a client that does not read would hold about 75 MB
    keys = "".join(f'\n[keys.metrics-budget-key-{i:03d}]\nkey = "sk-mb-{i}"\ntoken_budget = 1000\n'
                   for i in range(80))
    gw = make_sluice(_cfg(stub.url, extra=keys), env=ENV)
    size = len(request(gw.port, "GET", "/metrics")[2])
    assert size > 8000, size
    base = _rss(gw.proc.pid)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    s.settimeout(20)
    s.connect(("127.0.0.1", gw.port))
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 7500)  # never read (yet)
        # answers are produced as the client reads them: a few hundred KB at most, not 75 MB
        grown = _peak_growth(gw.proc.pid, base, 4.0, stop_above=30e6)
        assert grown < 15e6, f"{grown / 1e6:.0f} MB held for a client that does not read"
        assert _health_ms(gw.port) < 1000  # another connection is served meanwhile
        # reading lets the answers through, one per request
        _count_answers(s, b"HTTP/1.1 200 OK", 300)
    finally:
        s.close()


def test_pipelined_404s_stop_when_the_client_does_not_read(make_sluice, stub):
    # 40 connections each pipeline 20,000 tiny requests for a path with no route and read
    # nothing. Each 20-byte request gets a ~200-byte 404: answering whole reads (up to
    # 256 KiB, ~13,000 requests) would hold megabytes per connection, not the transport's
    # high-water mark (64 KiB) and one unparsed read.
    gw = make_sluice(_cfg(stub.url), env=ENV)
    one = b"GET /n HTTP/1.1\r\n\r\n"
    assert raw_exchange(gw.port, one, timeout=5).startswith(b"HTTP/1.1 404")
    base = _rss(gw.proc.pid)
    socks = []
    try:
        # the worker is stopped while the requests arrive, so each connection's first read is
        # a full one whatever the machine's load
        os.kill(gw.proc.pid, signal.SIGSTOP)
        try:
            for _ in range(40):
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.settimeout(20)
                s.connect(("127.0.0.1", gw.port))
                socks.append(s)
            senders = [threading.Thread(target=s.sendall, args=(one * 20000,), daemon=True) for s in socks]
            for t in senders:
                t.start()
            time.sleep(1.0)
        finally:
            os.kill(gw.proc.pid, signal.SIGCONT)
        grown = _peak_growth(gw.proc.pid, base, 4.0, stop_above=40e6)
        assert grown < 15e6, f"{grown / 1e6:.0f} MB of 404s held for clients that do not read"
        # the worker holds back: answers are produced as the client reads them
        assert _health_ms(gw.port) < 5000  # another connection is served meanwhile
        for s in socks[:2]:  # every request is still answered, in order, as the client reads
            assert _count_answers(s, b"HTTP/1.1 404", 20000) == 20000
    finally:
        for s in socks:
            s.close()


# ------------------------------------------------------------------ 2. head limits
def test_huge_header_value_431_and_close(make_sluice, stub):
    gw = make_sluice(_cfg(stub.url), env=ENV)
    base = _rss(gw.proc.pid)
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    try:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nx-big: ")
        sent = 0
        try:
            while sent < 32 << 20:
                s.sendall(b"a" * 65536)
                sent += 65536
        except (BrokenPipeError, ConnectionResetError):
            pass
        buf = _read_all(s)
    finally:
        s.close()
    assert buf.startswith(b"HTTP/1.1 431"), buf[:100]
    assert b"connection: close" in buf
    assert _rss(gw.proc.pid) - base < 20e6
    assert _health_ms(gw.port) < 1000


def test_too_many_headers_431(sluice):
    head = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"x-h%d: 1\r\n" % i for i in range(150)) + b"\r\n"
    buf = raw_exchange(sluice.port, head, until_closed=True)
    assert buf.startswith(b"HTTP/1.1 431")
    # many repeats of one name are bounded by the head size
    head = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"x-h: 1\r\n" * 100000 + b"\r\n"
    buf = raw_exchange(sluice.port, head, until_closed=True)
    assert buf.startswith(b"HTTP/1.1 431")


def test_long_url_414(sluice):
    buf = raw_exchange(sluice.port, b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", until_closed=True)
    assert buf.startswith(b"HTTP/1.1 414")
    s = socket.create_connection(("127.0.0.1", sluice.port), timeout=10)
    try:
        s.sendall(b"GET /")
        try:
            for _ in range(128):  # 8 MB, refused after the first 32 KiB
                s.sendall(b"a" * 65536)
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert _read_all(s).startswith(b"HTTP/1.1 414")
    finally:
        s.close()


# ------------------------------------------------------------------ 3. chunked bodies
def _peak_rss(pid):
    """The process's peak resident set (VmHWM), in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_tiny_chunks_are_linear_and_bounded(make_sluice, stub):
    # 2-byte chunks (1-byte bytes objects are interned singletons, 2-byte ones are not): one
    # object per chunk would cost ~50 B per 2 payload bytes, ~50 MB for this 2 MB body
    gw = make_sluice(_cfg(stub.url).replace("max_body_bytes = 65536", "max_body_bytes = 3000000"), env=ENV)
    pid = gw.proc.pid
    base = max(_rss(pid), _peak_rss(pid))
    cpu0 = psutil.Process(pid).cpu_times()
    body = json.dumps({"model": "mock-model", "messages": MSG, "pad": "p" * 2_000_000}).encode()
    chunked = b"".join(b"2\r\n" + body[i:i + 2] + b"\r\n" for i in range(0, len(body) - 1, 2))
    if len(body) % 2:
        chunked += b"1\r\n" + body[-1:] + b"\r\n"
    chunked += b"0\r\n\r\n"
    head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n" + AUTH + b"transfer-encoding: chunked\r\n\r\n"
    buf = raw_exchange(gw.port, head + chunked, timeout=60)
    assert buf.startswith(b"HTTP/1.1 200"), buf[:200]
    assert stub.requests[-1]["body"] == body  # the body arrived whole
    cpu1 = psutil.Process(pid).cpu_times()
    assert (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system) < 10.0
    grown = _peak_rss(pid) - base
    assert grown < 25e6, f"peak memory grew {grown / 1e6:.0f} MB for a 2 MB chunked body"


def test_oversize_chunked_body_413_without_draining(sluice):
    s = socket.create_connection(("127.0.0.1", sluice.port), timeout=10)
    try:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n" + AUTH + b"transfer-encoding: chunked\r\n\r\n")
        try:
            for _ in range(100):  # 100 x 64 KiB, far over the 64 KiB limit, never terminated
                s.sendall(b"10000\r\n" + b"x" * 65536 + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        buf = _read_all(s)
    finally:
        s.close()
    assert buf.startswith(b"HTTP/1.1 413") and b"connection: close" in buf


def test_early_413_whatever_the_header_case(sluice):
    for name in (b"CONTENT-LENGTH", b"content-Length"):
        s = socket.create_connection(("127.0.0.1", sluice.port), timeout=10)
        try:
            s.sendall(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\n" + name + b": 10000000\r\n\r\n")
            buf = _read_all(s)  # answered before any body byte was sent
        finally:
            s.close()
        assert buf.startswith(b"HTTP/1.1 413"), buf[:100]
        assert json.loads(buf.split(b"\r\n\r\n", 1)[1])["type"] == "error"  # Anthropic shape


# ------------------------------------------------------------------ 4. budgets and disconnects
def test_disconnect_before_usage_is_charged_for_what_was_relayed(make_sluice, stub):
    gw = make_sluice(_cfg(stub.url, extra="\n[keys.budget2]\nkey = \"sk-budget2\"\ntoken_budget = 100000\n"),
                     env=ENV)
    body = json.dumps({"model": "fast", "stream": True, "stream_options": {"include_usage": True},
                       "messages": MSG, "max_tokens": 500}).encode()
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    s.sendall(_post(body, auth=b"authorization: Bearer sk-budget2\r\n",
                    headers=b"x-test-chunks: 200\r\nx-test-chunk-delay-ms: 10\r\n"))
    buf = b""
    while buf.count(b"data: ") < 40:
        chunk = s.recv(65536)
        assert chunk
        buf += chunk
    s.close()  # before the usage frame and [DONE]
    assert wait_until(lambda: gw.state()["in_flight"] == 0)
    assert wait_until(lambda: _spent(gw, "budget2") >= len(body) // 4 + 40, timeout=5), _spent(gw, "budget2")


# ------------------------------------------------------------------ 5. failures inside a request
def test_deep_alias_body_is_answered(sluice):
    deep = b"[" * 300 + b"]" * 300
    # the model cannot be located in the bytes (two "model" keys): the body would be re-serialized
    body = b'{"messages": [], "x": ' + deep + b', "meta": {"model": "fast"}, "model": "fast"}'
    buf = raw_exchange(sluice.port, _post(body) + _post({"model": "mock-model", "messages": MSG}),
                       expect_responses=2)
    assert count_responses(buf) == 2
    assert buf.startswith(b"HTTP/1.1 400") and b"HTTP/1.1 200" in buf
    assert wait_until(lambda: sluice.state()["in_flight"] == 0)


def test_odd_model_values_are_answered(make_sluice, stub):
    gw = make_sluice(_cfg(stub.url, "validate_json = false"), env=ENV)
    for body in (b'{"model": 5, "messages": []}', b'{"model": "\xff\xfe", "messages": []}',
                 b'{"model": null}', b'{"model": "fast", "model": 7}'):
        buf = raw_exchange(gw.port, _post(body), timeout=5)
        assert count_responses(buf) == 1, (body, buf)
        assert buf.startswith((b"HTTP/1.1 400", b"HTTP/1.1 404")), (body, buf[:100])
    assert gw.state()["in_flight"] == 0


# ------------------------------------------------------------------ 6. a provider that says too much
def test_bytes_after_content_length_never_reach_the_client(make_sluice):
    evil = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nEVIL!"
    liar = LyingProvider(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}" + evil)
    try:
        gw = make_sluice(_liar_config(liar.url))
        req = _post({"model": "m", "messages": MSG})
        buf = raw_exchange(gw.port, req + req, expect_responses=2, timeout=5)
        assert count_responses(buf) == 2
        assert b"EVIL" not in buf
        # the connection that carried the extra bytes was not reused
        assert len(liar.requests) == 2
    finally:
        liar.close()


def test_bytes_after_a_chunked_end_never_reach_the_client(make_sluice):
    answer = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
              b"2\r\n{}\r\n0\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nEVIL!")
    liar = LyingProvider(answer)
    try:
        gw = make_sluice(_liar_config(liar.url))
        req = _post({"model": "m", "messages": MSG})
        buf = raw_exchange(gw.port, req + req, expect_responses=2, timeout=5)
        assert count_responses(buf) == 2 and b"EVIL" not in buf
    finally:
        liar.close()


def test_usage_that_cannot_be_true_leaves_the_key_usable(make_sluice):
    for usage in (b'"x"', b"null", b"-5", b"99999999999999999999999"):
        body = (b'{"id":"m","type":"message","role":"assistant","model":"m","content":[{"type":"text",'
                b'"text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":' + usage
                + b',"output_tokens":' + usage + b"}}")
        liar = LyingProvider(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                             % len(body) + body)
        try:
            gw = make_sluice(_liar_config(liar.url, dialect="anthropic"))
            for _ in range(2):
                status, _, _ = chat(gw.port, {"model": "m", "messages": MSG})
                assert status in (200, 502)
            assert gw.state()["in_flight"] == 0
            assert 0 <= _spent(gw, "k") < 100000
            gw.stop()
        finally:
            liar.close()


# ------------------------------------------------------------------ 7. worker restarts
def test_restarted_worker_keeps_counted_usage_and_the_loaded_config(make_sluice, stub):
    cfg = _cfg(stub.url).replace("workers = 1", "workers = 2")
    gw = make_sluice(cfg, env=ENV)
    parent = psutil.Process(gw.proc.pid)
    assert wait_until(lambda: len(parent.children()) == 1)
    child = parent.children()[0]
    for _ in range(30):
        assert chat(gw.port, {"model": "fast", "messages": MSG, "max_tokens": 1}, key="sk-test-budget")[0] in (200, 429)
    time.sleep(1.5)  # every worker publishes within a second
    spent = _spent(gw, "budget")
    assert spent > 0
    with open(gw.path, "a") as f:  # an edited file must not reach the restarted worker
        f.write('\n[keys.late]\nkey = "sk-late"\n')
    os.kill(child.pid, signal.SIGKILL)
    assert wait_until(lambda: [c.pid for c in parent.children() if c.status() != psutil.STATUS_ZOMBIE]
                      not in ([], [child.pid]), timeout=10)
    time.sleep(2.0)
    assert _spent(gw, "budget") == spent
    for _ in range(10):
        assert chat(gw.port, {"model": "fast", "messages": MSG}, key="sk-late")[0] == 401


# ------------------------------------------------------------------ 8. protocol corners
def test_head_gets_no_body(sluice):
    buf = raw_exchange(sluice.port, b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n",
                       timeout=5, expect_responses=2)
    head, _, rest = buf.partition(b"\r\n\r\n")
    assert int(re.search(rb"content-length: (\d+)", head).group(1)) > 0
    assert rest.startswith(b"HTTP/1.1 200"), rest[:50]  # the next response follows the head directly


@pytest.mark.parametrize("req", [
    b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n"
    b"content-length: 2\r\n\r\n{}",
])
def test_upgrade_and_connect_get_one_response(sluice, req):
    buf = raw_exchange(sluice.port, req, until_closed=True, timeout=5)
    assert buf.count(b"HTTP/1.1 ") == 1 and buf.startswith((b"HTTP/1.1 400", b"HTTP/1.1 405")), buf


def test_duplicate_keys_cannot_pass_the_model_list(make_sluice, stub):
    gw = make_sluice(_cfg(stub.url, "validate_json = false"), env=ENV)
    n = len(stub.requests)
    body = b'{"model": "claude", "model": "mock-model", "messages": [{"role": "user", "content": "x"}]}'
    status, _, _ = chat(gw.port, body, key="sk-test-limited")
    assert status == 403
    assert len(stub.requests) == n


def test_metrics_snapshot_of_a_large_config_is_merged(make_sluice, stub):
    # 400 models with 3,000-character names, each asked once over two workers: each worker's
    # snapshot is well over 256 KiB (one labelled series per model it served)
    names = [f"m{i:03d}-" + "x" * 3000 for i in range(400)]
    models = "".join(f'\n[models."{n}"]\nprovider = "stub"\n' for n in names)
    gw = make_sluice(_cfg(stub.url, extra=models).replace("workers = 1", "workers = 2"), env=ENV)
    parent = psutil.Process(gw.proc.pid)
    assert wait_until(lambda: len(parent.children()) == 1, timeout=10)
    time.sleep(1.0)  # the second worker listens too
    for n in names:
        assert chat(gw.port, {"model": n, "messages": MSG}, headers={"x-test-status": "418"})[0] == 418
    time.sleep(2.0)  # every worker publishes its snapshot within a second
    for _ in range(4):  # whichever worker answers, the other's snapshot is merged in
        try:
            status, _, data = request(gw.port, "GET", "/metrics", timeout=10)
        except OSError as e:
            raise AssertionError(f"/metrics failed: {e!r}") from None
        assert status == 200, data[:200]
        got = re.findall(r'sluice_requests_total\{model="m(\d+)-x+",status="418"\} (\d+)', data.decode())
        assert sum(int(v) for _, v in got) == 400, len(got)


# ------------------------------------------------------------------ 9. slowloris, connection cap
def _trickle(port, prefix, byte, seconds):
    """Send ``prefix``, then one byte every 0.2 s; what came back (until close or ``seconds``)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    buf = b""
    try:
        s.sendall(prefix)
        deadline = time.monotonic() + seconds
        s.settimeout(0.2)
        while time.monotonic() < deadline:
            try:
                s.sendall(byte)  # one byte now and then: never idle
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
            except socket.timeout:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
    finally:
        s.close()
    return buf


def test_slowloris_gets_408_within_the_head_deadline(make_sluice, stub):
    # the defaults: a head must be complete within 30 s of its first byte, however it trickles
    # (no config key needed, so any Sluice can be asked)
    gw = make_sluice(_cfg(stub.url), env=ENV)
    t = time.monotonic()
    buf = _trickle(gw.port, b"GET /health HTTP/1.1\r\nHo", b"s", 40)
    assert buf.startswith(b"HTTP/1.1 408"), (time.monotonic() - t, buf[:100])
    assert time.monotonic() - t > 25  # not before the default deadline
    # shorter deadlines, head and body
    gw = make_sluice(_cfg(stub.url, "client_header_timeout_s = 1\nclient_body_timeout_s = 1"), env=ENV)
    for prefix, byte in ((b"GET /health HTTP/1.1\r\nHo", b"s"), (_post({"model": "fast", "messages": MSG})[:-10], b" ")):
        buf = _trickle(gw.port, prefix, byte, 6)
        assert buf.startswith(b"HTTP/1.1 408"), buf[:100]


def test_connection_cap_refuses_cleanly(make_sluice, stub):
    # the default cap (4,096 client connections a worker): no config key needed
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 9000
    if soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            pytest.skip(f"needs {want} file descriptors (hard limit {hard})")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # Sluice inherits it too
    try:
        gw = make_sluice(_cfg(stub.url), env=ENV)
        held = []
        try:
            for _ in range(4096):
                held.append(socket.create_connection(("127.0.0.1", gw.port), timeout=10))
            # once the worker has accepted them all, the next connection is refused cleanly
            buf = b""
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                buf = raw_exchange(gw.port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", until_closed=True,
                                   timeout=5)
                if not buf.startswith(b"HTTP/1.1 200"):
                    break
                time.sleep(0.2)
            assert count_responses(buf) == 1, buf[:200]
            assert buf.startswith(b"HTTP/1.1 503") and b"retry-after" in buf, buf[:200]
        finally:
            for s in held:
                s.close()
        assert wait_until(lambda: request(gw.port, "GET", "/health")[0] == 200, timeout=10)
        m = re.search(r"sluice_client_connections_refused_total (\d+)", gw.metrics())
        assert m and int(m.group(1)) >= 1
        # a configured cap
        gw = make_sluice(_cfg(stub.url, "max_client_connections = 5"), env=ENV)
        held = [socket.create_connection(("127.0.0.1", gw.port), timeout=5) for _ in range(5)]
        try:
            time.sleep(0.3)
            buf = raw_exchange(gw.port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", until_closed=True, timeout=5)
            assert count_responses(buf) == 1
            assert buf.startswith(b"HTTP/1.1 503") and b"retry-after" in buf
        finally:
            for s in held:
                s.close()
        assert wait_until(lambda: request(gw.port, "GET", "/health")[0] == 200)
        assert "sluice_client_connections_refused_total 1" in gw.metrics()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# ------------------------------------------------------------------ 10. provider-account headers
def test_account_headers_are_not_forwarded_either_way(make_sluice):
    liar = LyingProvider(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nopenai-organization: org-secret\r\n"
                         b"openai-project: proj-secret\r\nx-ratelimit-remaining-tokens: 99\r\nx-request-id: r1\r\n"
                         b"content-length: 2\r\n\r\n{}")
    try:
        gw = make_sluice(_liar_config(liar.url))
        status, headers, _ = chat(gw.port, {"model": "m", "messages": MSG},
                                  headers={"OpenAI-Organization": "org-other", "OpenAI-Project": "p",
                                           "anthropic-beta": "paid", "x-custom": "1"})
        assert status == 200
        sent = liar.requests[-1][0].lower()
        assert b"openai-organization" not in sent and b"openai-project" not in sent
        assert b"anthropic-beta" not in sent and b"x-custom" not in sent
        assert b"user-agent" in sent or b"content-type" in sent
        assert "openai-organization" not in headers and "openai-project" not in headers
        assert not any(k.startswith("x-ratelimit") for k in headers)
        assert headers["x-request-id"] == "r1"
    finally:
        liar.close()


# ------------------------------------------------------------------ 11. smaller ones
def test_http_version_is_read_per_request(sluice):
    # an HTTP/1.0 request after an HTTP/1.1 one on the same connection: HTTP/1.0 rules apply to
    # it (Sluice closes after an HTTP/1.0 request, keep-alive asked or not), so the third
    # request is not answered
    reqs = (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
            b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    buf = raw_exchange(sluice.port, reqs, until_closed=True, timeout=5)
    parts = buf.split(b"HTTP/1.1 200")[1:]
    assert len(parts) == 2, buf
    assert b"connection: close" not in parts[0] and b"connection: close" in parts[1]
    # a streamed answer to an HTTP/1.0 request is never chunked (an HTTP/1.0 client cannot
    # read chunked framing), even after an HTTP/1.1 request on the same connection
    stream = json.dumps({"model": "mock-model", "stream": True, "messages": MSG}).encode()
    reqs = (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
            + _post(stream).replace(b" HTTP/1.1\r\n", b" HTTP/1.0\r\n", 1))
    buf = raw_exchange(sluice.port, reqs, until_closed=True, timeout=10)
    first, _, second = buf.partition(b"HTTP/1.1 200")[2].partition(b"HTTP/1.1 200")
    head, _, body = second.partition(b"\r\n\r\n")
    assert b"text/event-stream" in head, buf[:300]
    assert b"transfer-encoding: chunked" not in head.lower(), head
    assert body.rstrip().endswith(b"data: [DONE]"), body[-200:]
    assert not re.match(rb"[0-9a-f]+\r\n", body), body[:50]


def test_nothing_after_a_closing_request_is_answered(sluice, stub):
    # the request after the closing one is a chat request: it must not reach the provider
    marker = "after-close-%d" % time.monotonic_ns()
    chat_req = _post({"model": "mock-model", "messages": [{"role": "user", "content": marker}]})
    # "Connection: close" (the parser itself stops there), and an HTTP/1.0 request asking for
    # keep-alive (the parser would go on; Sluice closes after any HTTP/1.0 request)
    for closing in (b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    b"GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"):
        # a pooled provider connection is idle: a request handled now would go out at once
        assert chat(sluice.port, {"model": "mock-model", "messages": MSG})[0] == 200
        reqs = closing + chat_req + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" * 3 + chat_req
        buf = raw_exchange(sluice.port, reqs, until_closed=True, timeout=5)
        assert buf.count(b"HTTP/1.1 ") == 1 and buf.startswith(b"HTTP/1.1 200"), buf
        assert b"connection: close" in buf.lower()
    time.sleep(1.0)
    sent = [r for r in stub.requests if marker.encode() in r["body"]]
    assert sent == [], f"{len(sent)} request(s) pipelined after a closing request reached the provider"
    assert wait_until(lambda: sluice.state()["in_flight"] == 0)


class _StaleAfterFirst(LyingProvider):
    """Each connection: the first request is answered; any later one is read, then the
    connection is closed ``delay_s`` later without a byte of answer."""

    def __init__(self, answer, delay_s):
        super().__init__(answer)
        self.delay_s = delay_s

    def _serve(self, c):
        try:
            for n, _ in enumerate(self._requests(c), 1):
                if n > 1:
                    time.sleep(self.delay_s)
                    return
                c.sendall(self.answer)
        except OSError:
            return
        finally:
            c.close()


def test_a_late_close_is_not_retried(make_sluice):
    # the second request goes out on the pooled connection of the first; the provider reads
    # it and closes 2 s later without answering: it may have acted on it, so it is not sent again
    ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
    liar = _StaleAfterFirst(ok, delay_s=2.0)
    try:
        gw = make_sluice(_liar_config(liar.url))
        status, _, _ = chat(gw.port, {"model": "m", "messages": MSG}, timeout=10)
        assert status == 200
        marker = "late-close-%d" % time.monotonic_ns()
        status, _, _ = chat(gw.port, {"model": "m", "messages": [{"role": "user", "content": marker}]},
                            timeout=15)
        time.sleep(0.5)
        got = sum(1 for _, body in liar.requests if marker.encode() in body)
        assert got == 1, f"the request reached the provider {got} times"
        assert status == 502
    finally:
        liar.close()


def test_config_values_with_line_breaks_are_refused(tmp_path):
    from sluice.config import Config, ConfigError
    base = {"providers": {"p": {"base_url": "http://h/v1"}}, "models": {"m": {"provider": "p"}}}
    for table, key, value in (("providers", "api_key", "a\r\nx-evil: 1"),
                              ("providers", "anthropic_version", "1\nx: y"),
                              ("models", "upstream_model", 'a"b'),
                              ("providers", "base_url", "http://h/v1 HTTP/1.1\r\nx")):
        data = json.loads(json.dumps(base))
        target = data[table]["p" if table == "providers" else "m"]
        target[key] = value
        with pytest.raises(ConfigError):
            Config(data)


def test_parser_errors_and_408_in_the_client_dialect(make_sluice, stub):
    # only keys any Sluice knows: a request that stopped arriving is cut by the idle timeout
    gw = make_sluice(_cfg(stub.url, "client_idle_timeout_s = 1"), env=ENV)
    buf = raw_exchange(gw.port, b"POST /v1/messages HTTP/1.1\r\nHost: x\r\ncontent-length: 1\r\n"
                       b"transfer-encoding: chunked\r\n\r\n", until_closed=True, timeout=5)
    assert buf.startswith(b"HTTP/1.1 400"), buf[:100]
    assert json.loads(buf.split(b"\r\n\r\n", 1)[1]).get("type") == "error", buf
    buf = raw_exchange(gw.port, b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n", until_closed=True, timeout=8)
    assert buf.startswith(b"HTTP/1.1 408"), buf[:100]
    assert json.loads(buf.split(b"\r\n\r\n", 1)[1]).get("type") == "error", buf
    # and the head deadline's 408
    gw = make_sluice(_cfg(stub.url, "client_header_timeout_s = 0.5"), env=ENV)
    buf = raw_exchange(gw.port, b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n", until_closed=True, timeout=5)
    assert buf.startswith(b"HTTP/1.1 408")
    assert json.loads(buf.split(b"\r\n\r\n", 1)[1]).get("type") == "error"


def test_connect_errors_do_not_show_addresses(sluice, make_sluice, tmp_path):
    status, _, data = chat(sluice.port, {"model": "down-model", "messages": MSG})
    assert status == 502 and b"127.0.0.1" not in data
    # a TLS provider whose certificate names another host: the verification error names the
    # address Sluice connected to; the client gets the provider's name only
    import shutil
    import ssl
    import subprocess

    from sluice_stub import Stub
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "2", "-subj", "/CN=other.example",
                    "-addext", "subjectAltName=DNS:other.example"], check=True, capture_output=True, timeout=60)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert), str(key))
    tls = Stub(ssl_context=ctx).start()
    try:
        gw = make_sluice(f"""
[server]
listen = "127.0.0.1:{{port}}"
[providers.secure]
base_url = "{tls.url}/v1"
api_key = "sk-tls"
ca_file = "{cert}"
[models.m]
provider = "secure"
""")
        status, _, data = chat(gw.port, {"model": "m", "messages": MSG}, key=None)
        assert status == 502, data
        assert b"127.0.0.1" not in data and str(tls.port).encode() not in data, data
        assert b"secure" in data
    finally:
        tls.stop()


def test_metrics_token_and_debug_state_off_by_default(make_sluice, stub):
    # the defaults (no new config key): /debug/state is off unless asked for
    gw = make_sluice(_cfg(stub.url).replace("debug_endpoints = true\n", ""), env=ENV)
    status, _, data = request(gw.port, "GET", "/debug/state")
    assert status == 404, (status, data[:200])
    assert request(gw.port, "GET", "/metrics")[0] == 200  # no token configured: open
    # a scrape token, when configured
    cfg = _cfg(stub.url, 'metrics_token = "scrape-me"').replace("debug_endpoints = true\n", "")
    gw = make_sluice(cfg, env=ENV)
    assert request(gw.port, "GET", "/metrics")[0] == 401
    assert request(gw.port, "GET", "/metrics", headers={"authorization": "Bearer scrape-me"})[0] == 200
    assert request(gw.port, "GET", "/debug/state")[0] == 404
