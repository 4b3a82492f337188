"""Header fields either way through a running Sluice, over raw sockets (a raw client, a recording
or lying provider): what the Connection header names is hop-by-hop and never passes; a header
spelled two ways goes to the provider once; a request without Host, or with two, is refused
(RFC 9112 3.2); an HTTP/1.0 provider's answer is relayed as Sluice's own HTTP/1.1; an allow-list
of "*" relays no hop-by-hop field."""
import socket
import time

import pytest
from sluice_helpers import MSG, count_responses, raw_exchange, raw_post
from sluice_scripted_provider import RawListener

pytestmark = pytest.mark.integration

OK_BODY = b'{"id":"x","object":"chat.completion","choices":[]}'


class _Provider(RawListener):
    """Records every request's raw head; answers each with ``answer`` (bytes), closing the
    connection after it when ``close`` is set."""

    def __init__(self, answer, close=False):
        self.answer = answer
        self.close_after = close
        self.requests = []
        super().__init__()

    def _serve(self, c):
        try:
            for _ in self._requests(c):
                c.sendall(self.answer)
                if self.close_after:
                    return
        except OSError:
            return
        finally:
            c.close()


def _ok(extra_headers=b""):
    return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n" + extra_headers
            + b"content-length: %d\r\n\r\n" % len(OK_BODY) + OK_BODY)


def _config(url, server_extra=""):
    return f"""
[server]
listen = "127.0.0.1:{{port}}"
workers = 1
{server_extra}

[providers.p]
base_url = "{url}/v1"

[models.m]
provider = "p"
"""


def _head_lines(buf):
    """The lowercased header lines of the first response in ``buf``, and its status line."""
    head = buf.split(b"\r\n\r\n", 1)[0]
    status, *lines = head.split(b"\r\n")
    return status, [ln.lower() for ln in lines]


def _post(gw, headers=b"", body=None):
    return raw_exchange(gw.port, raw_post(body or {"model": "m", "messages": MSG}, headers=headers, auth=b""))


# ------------------------------------------------------------------ requests: Connection, spellings
def test_headers_named_in_connection_are_not_forwarded(make_sluice):
    provider = _Provider(_ok())
    try:
        gw = make_sluice(_config(provider.url, 'forward_request_headers = ["content-type", "x-custom-*"]'))
        buf = _post(gw, b"Connection: keep-alive, X-Custom-Hop\r\nX-Custom-Hop: 1\r\nX-Custom-Kept: 2\r\n")
        assert buf.startswith(b"HTTP/1.1 200"), buf[:300]
        sent = provider.requests[-1][0].lower()
        assert b"\r\nx-custom-kept: 2" in sent
        assert b"x-custom-hop" not in sent, sent
    finally:
        provider.close()


def test_a_header_spelled_two_ways_is_forwarded_once(make_sluice):
    provider = _Provider(_ok())
    try:
        gw = make_sluice(_config(provider.url))  # x-request-id is forwarded by default
        buf = _post(gw, b"X-Request-Id: first\r\nx-request-id: last\r\n")
        assert buf.startswith(b"HTTP/1.1 200"), buf[:300]
        sent = provider.requests[-1][0].lower()
        assert sent.count(b"\r\nx-request-id:") == 1, sent
        assert b"\r\nx-request-id: last" in sent
    finally:
        provider.close()


# ------------------------------------------------------------------ requests: Host
def test_a_request_without_host_or_with_two_is_refused(make_sluice):
    provider = _Provider(_ok())
    try:
        gw = make_sluice(_config(provider.url))
        for head in (b"GET /health HTTP/1.1\r\n\r\n",
                     b"GET /health HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n",
                     b"GET /health HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n",
                     b"GET /health HTTP/1.1\r\nHOST: a\r\nx: 1\r\nhOsT: a\r\n\r\n"):
            buf = raw_exchange(gw.port, head + b"GET /health HTTP/1.1\r\nHost: a\r\n\r\n", until_closed=True,
                               timeout=5)
            assert buf.startswith(b"HTTP/1.1 400"), (head, buf[:300])
            assert count_responses(buf) == 1 and b"Host" in buf, buf[:300]  # then closed
        buf = raw_exchange(gw.port, raw_post({"model": "m", "messages": MSG}, headers=b"Host: y\r\n", auth=b""))
        assert buf.startswith(b"HTTP/1.1 400"), buf[:300]
        assert not provider.requests
        # the second Host in a later read than the first
        s = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
        try:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: a\r\n")
            time.sleep(0.2)
            s.sendall(b"Host: b\r\n\r\n")
            assert s.recv(65536).startswith(b"HTTP/1.1 400")
        finally:
            s.close()
        # one Host, whatever its spelling; none in HTTP/1.0
        for head in (b"GET /health HTTP/1.1\r\nhOST: a\r\n\r\n", b"GET /health HTTP/1.0\r\n\r\n"):
            assert raw_exchange(gw.port, head, timeout=5).startswith(b"HTTP/1.1 200"), head
    finally:
        provider.close()


# ------------------------------------------------------------------ responses
def test_headers_named_in_a_provider_connection_header_are_not_relayed(make_sluice):
    provider = _Provider(_ok(b"Connection: x-secret\r\nx-secret: s\r\nx-request-id: r1\r\n"))
    try:
        gw = make_sluice(_config(provider.url, 'forward_response_headers = ["content-type", "x-secret", '
                                               '"x-request-id"]'))
        status, lines = _head_lines(_post(gw))
        assert status == b"HTTP/1.1 200 OK"
        assert b"x-request-id: r1" in lines
        assert not any(ln.startswith(b"x-secret") for ln in lines), lines
    finally:
        provider.close()


def test_an_allow_list_of_everything_relays_no_hop_by_hop_field(make_sluice):
    hop = (b"Connection: keep-alive\r\nKeep-Alive: timeout=5\r\nUpgrade: h2c\r\nTrailer: x-t\r\n"
           b"TE: trailers\r\nProxy-Connection: keep-alive\r\nProxy-Authenticate: Basic\r\n")
    provider = _Provider(_ok(hop + b"x-fine: 1\r\n"))
    try:
        gw = make_sluice(_config(provider.url, 'forward_response_headers = ["*"]'))
        status, lines = _head_lines(_post(gw))
        assert status == b"HTTP/1.1 200 OK"
        assert b"x-fine: 1" in lines
        names = {ln.split(b":", 1)[0] for ln in lines}
        for name in (b"connection", b"keep-alive", b"upgrade", b"trailer", b"te", b"proxy-connection",
                     b"proxy-authenticate"):
            assert name not in names, lines
    finally:
        provider.close()


def test_an_http10_provider_answer_is_relayed_as_http11(make_sluice):
    # up to the close (no length): re-framed as chunked for an HTTP/1.1 client, which an
    # HTTP/1.0 status line must not carry (RFC 9112 6.1)
    provider = _Provider(b"HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n" + OK_BODY, close=True)
    try:
        gw = make_sluice(_config(provider.url))
        buf = _post(gw)
        status, lines = _head_lines(buf)
        assert status == b"HTTP/1.1 200 OK", buf[:300]
        assert b"transfer-encoding: chunked" in lines
        assert OK_BODY in buf
    finally:
        provider.close()
    provider = _Provider(b"HTTP/1.0 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                         % len(OK_BODY) + OK_BODY)
    try:
        gw = make_sluice(_config(provider.url))
        buf = _post(gw)
        assert buf.startswith(b"HTTP/1.1 200 OK"), buf[:300]
        assert buf.endswith(OK_BODY)
    finally:
        provider.close()
