"""A request written to a provider is never sent again on Sluice's own account, over a raw-socket
provider behind a running Sluice: a pooled connection the provider closes right after reading a
request (no byte of answer, well within a second) ends in 502, unless the model's retry policy
allows what was sent to be sent again (``retry_after_send``); a pooled connection the provider
closed while it was idle is not used."""
import time

import pytest
from sluice_helpers import MSG, chat
from sluice_scripted_provider import RawListener

pytestmark = pytest.mark.integration

OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


class _ClosesWhenIdle(RawListener):
    """Each connection: its first request is answered, then the connection closed ``idle_s``
    later (a provider's keep-alive timeout)."""

    def __init__(self, idle_s):
        self.idle_s = idle_s
        self.requests = []
        super().__init__()

    def _serve(self, c):
        try:
            for _ in self._requests(c):
                c.sendall(OK)
                time.sleep(self.idle_s)
                return
        except OSError:
            return
        finally:
            c.close()


class _ClosesAfterReading(RawListener):
    """Each connection: its first request is answered (and the connection kept); a later one is
    read, then the connection closed ``delay_s`` later without a byte of answer."""

    def __init__(self, delay_s):
        self.delay_s = delay_s
        self.requests = []
        super().__init__()

    def _serve(self, c):
        try:
            for n, _ in enumerate(self._requests(c), 1):
                if n > 1:
                    time.sleep(self.delay_s)
                    return
                c.sendall(OK)
        except OSError:
            return
        finally:
            c.close()


def _config(url, model_extra=""):
    return f"""
[server]
listen = "127.0.0.1:{{port}}"
workers = 1

[providers.p]
base_url = "{url}/v1"
response_timeout_s = 5

[models.m]
provider = "p"
{model_extra}
"""


def _arrivals(provider, marker):
    return sum(1 for _, body in provider.requests if marker.encode() in body)


def test_a_request_read_then_dropped_on_a_pooled_connection_is_not_sent_again(make_sluice):
    provider = _ClosesAfterReading(delay_s=0.1)
    try:
        gw = make_sluice(_config(provider.url))
        status, _, _ = chat(gw.port, {"model": "m", "messages": MSG}, key=None)
        assert status == 200
        # the second request goes out on the pooled connection, which the provider closes 0.1 s
        # after reading it: it may have acted on it
        marker = "sent-once-%d" % time.monotonic_ns()
        status, _, data = chat(gw.port, {"model": "m", "messages": [{"role": "user", "content": marker}]},
                               key=None, timeout=15)
        time.sleep(0.3)
        assert _arrivals(provider, marker) == 1, f"the request reached the provider {_arrivals(provider, marker)} times"
        assert status == 502, data
        assert b"closed the connection before answering" in data
    finally:
        provider.close()


def test_retry_after_send_lets_the_policy_send_it_again(make_sluice):
    provider = _ClosesAfterReading(delay_s=0.1)
    try:
        gw = make_sluice(_config(provider.url, 'retry = { on = ["reset"], retry_after_send = true }'))
        assert chat(gw.port, {"model": "m", "messages": MSG}, key=None)[0] == 200
        marker = "sent-twice-%d" % time.monotonic_ns()
        status, _, data = chat(gw.port, {"model": "m", "messages": [{"role": "user", "content": marker}]},
                               key=None, timeout=15)
        assert status == 200, data  # the retry went out on a new connection, answered there
        assert _arrivals(provider, marker) == 2
    finally:
        provider.close()


def test_a_pooled_connection_the_provider_closed_is_not_used(make_sluice):
    provider = _ClosesWhenIdle(idle_s=0.1)
    try:
        gw = make_sluice(_config(provider.url))
        for i in range(3):
            marker = "after-idle-%d-%d" % (i, time.monotonic_ns())
            status, _, data = chat(gw.port, {"model": "m", "messages": [{"role": "user", "content": marker}]},
                                   key=None)
            assert status == 200, data  # on a new connection: the closed one was dropped
            assert _arrivals(provider, marker) == 1
            time.sleep(0.3)
    finally:
        provider.close()
