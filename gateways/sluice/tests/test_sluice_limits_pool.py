"""A provider's connection pool keeps its books in constant time: a provider dropping 16,384 idle
connections at once, or as many waiting clients hanging up at once, costs Sluice work in
proportion, not its square (a list or deque searched for each one took seconds of CPU, and the
loop stalled meanwhile).

What is counted is the CPU time the Sluice process spends until its books are empty again."""
import json
import resource
import socket
import threading

import psutil
import pytest
from sluice_helpers import request
from sluice_stub import wait_until

pytestmark = pytest.mark.integration

N = 16384
# forgetting N dropped idle connections: well under a second with linear work in either build,
# several seconds with a search of the idle list for each
IDLE_DROP_CPU_S = 1.0

CHAT_BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
CHAT = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % len(CHAT_BODY) + CHAT_BODY)


class HoldingProvider:
    """A provider that never answers: it holds every connection (``conns``, in the order
    accepted, by a thread that does nothing else) until ``drop()`` closes them all at once, the
    most recent first. Made with ``accepting=False``, it accepts nothing until ``accept()``: its
    accept queue (one connection) is full, so connects to it wait, their SYNs dropped and sent
    again by the kernel, until then."""

    def __init__(self, accepting=True):
        self.conns = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(0)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        if accepting:
            self.accept()

    def accept(self):
        self.sock.listen(4096)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                self.conns.append(self.sock.accept()[0])
            except OSError:
                return

    def drop(self):
        for c in reversed(self.conns):
            c.close()

    def stop(self):
        self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() of the thread
        self.sock.close()
        for c in self.conns:
            c.close()


def _config(provider_url, extra=""):
    return f"""
[server]
listen = "127.0.0.1:{{port}}"
debug_endpoints = true
max_client_connections = {N + 64}

[providers.p]
base_url = "{provider_url}/v1"
connect_timeout_s = 600
response_timeout_s = 600
pool_idle_timeout_s = 600
{extra}
[models.m]
provider = "p"
"""


def _pool(gw):
    status, _, body = request(gw.port, "GET", "/debug/state", timeout=120)
    assert status == 200
    state = json.loads(body)
    return state["client_connections"], state["upstream"]["p"]


def _settled(gw, clients, **counts):
    """Whether Sluice has ``clients`` client connections (this request's included) and the pool
    the ``counts`` given."""
    n, pool = _pool(gw)
    return n == clients and all(pool[k] == v for k, v in counts.items())


def _cpu(pid):
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


@pytest.fixture
def open_files():
    """This process's open-file limit raised as far as the hard one allows (Sluice, started from
    it, raises its own); the test is skipped below what it needs."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = N + 1024
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.skip(f"needs {want} file descriptors (hard limit {hard})")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _send(port, n, close):
    """``n`` clients, each sending one chat request; closed at once when ``close``, else returned."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(CHAT)
        if close:
            s.close()
        else:
            socks.append(s)
    return socks


def test_a_provider_dropping_every_idle_connection_at_once(make_sluice, open_files):
    # N clients ask and hang up while their connects to the provider wait (its accept queue is
    # full): once the provider accepts, each new connection finds no waiter and idles in the
    # pool; so Sluice holds N idle provider connections, no client ones
    provider = HoldingProvider(accepting=False)
    try:
        gw = make_sluice(_config(provider.url))
        _send(gw.port, N, close=True)
        assert wait_until(lambda: _settled(gw, clients=1, waiters=0), timeout=120, interval=0.2), _pool(gw)
        provider.accept()
        assert wait_until(lambda: _settled(gw, clients=1, connecting=0), timeout=240, interval=0.5), _pool(gw)
        idle = _pool(gw)[1]["idle"]
        assert idle >= N - 16, _pool(gw)
        # the provider closes them all at once, the most recently parked first
        before = _cpu(gw.proc.pid)
        provider.drop()
        assert wait_until(lambda: _settled(gw, clients=1, idle=0), timeout=120, interval=0.2), _pool(gw)
        spent = _cpu(gw.proc.pid) - before
        assert spent < IDLE_DROP_CPU_S, f"{spent:.2f} s of CPU to forget {idle} dropped idle connections"
        assert request(gw.port, "GET", "/health")[0] == 200
    finally:
        provider.stop()


def _hang_up(gw, newest_first):
    """N requests waiting for the provider's one connection (held busy by another): the CPU time
    Sluice spends once their clients all hang up, in the order they came or the newest first."""
    busy = _send(gw.port, 1, close=False)
    assert wait_until(lambda: _settled(gw, clients=2, busy=1), timeout=30), _pool(gw)
    clients = _send(gw.port, N, close=False)
    try:
        assert wait_until(lambda: _pool(gw)[1]["waiters"] == N, timeout=120, interval=0.2), _pool(gw)
        before = _cpu(gw.proc.pid)
        for s in (reversed(clients) if newest_first else clients):
            s.close()
        clients = []
        assert wait_until(lambda: _settled(gw, clients=2, waiters=0), timeout=120, interval=0.2), _pool(gw)
        return _cpu(gw.proc.pid) - before
    finally:
        for s in clients + busy:
            s.close()
        assert wait_until(lambda: _settled(gw, clients=1, busy=0), timeout=60), _pool(gw)


def test_every_waiting_client_hanging_up_at_once(make_sluice, open_files):
    # waiters leave a queue kept in arrival order: the oldest first is cheap even for a search
    # from the front; the newest first must cost no more
    provider = HoldingProvider()
    try:
        gw = make_sluice(_config(provider.url, f"max_connections = 1\nmax_waiters = {N}\n"))
        in_order = _hang_up(gw, newest_first=False)
        newest_first = _hang_up(gw, newest_first=True)
        assert newest_first < 2 * in_order + 0.1, (f"{N} waiting clients forgotten in {in_order:.2f} s "
                                                   f"of CPU in arrival order, {newest_first:.2f} s newest first")
    finally:
        provider.stop()
