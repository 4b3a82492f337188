"""A provider that answers with random statuses and framings (hypothesis, a bounded number of
examples): interim statuses, 204 and 304 with and without a body, chunked bodies with extensions
and trailers, Content-Length that lies, bytes after the response, all split at random points.
Invariants: one answer per client request (or the connection closed), never a hang past the
provider deadlines, no 1xx and nothing the provider sent past a response's end (or inside a 1xx,
204 or 304, or in chunk extensions and trailers) reaches the client, the worker's memory bounded,
and a fresh request is still served."""
import socket
import threading
import time

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sluice_helpers import KEY, MSG, Sluice, raw_post
from test_sluice_hardening_provider import ANTHROPIC_REQ, ANTHROPIC_STREAM_REQ, OK, OK_BODY, parse_responses
from test_sluice_hostile_providers import LyingProvider

pytestmark = pytest.mark.integration

DEADLINE_S = 1.0  # response_timeout_s and stream_idle_timeout_s below
MARK = b"EVIL"    # only ever in bytes a client must not get


class FuzzProvider(LyingProvider):
    """Answers every request with the current script: pieces sent ``gap_s`` apart, then maybe
    late bytes, then maybe a close. ``busy`` counts answers still being sent."""

    def __init__(self):
        super().__init__(None)
        self.script = ([OK], b"", False)
        self.busy = 0
        self.lock = threading.Lock()

    def _serve(self, c):
        try:
            for _ in self._requests(c):
                pieces, late, close = self.script
                with self.lock:
                    self.busy += 1
                try:
                    for i, piece in enumerate(pieces):
                        if i:
                            time.sleep(0.01)
                        c.sendall(piece)
                    if late:
                        time.sleep(0.05)
                        c.sendall(late)
                finally:
                    with self.lock:
                        self.busy -= 1
                if close:
                    return
        except OSError:
            return
        finally:
            c.close()

    def settle(self, timeout=3):
        deadline = time.monotonic() + timeout
        while self.busy and time.monotonic() < deadline:
            time.sleep(0.01)


@pytest.fixture(scope="module")
def provider():
    p = FuzzProvider()
    yield p
    p.close()


@pytest.fixture(scope="module")
def fuzz_gw(provider, tmp_path_factory):
    cfg = f"""
[server]
listen = "127.0.0.1:{{port}}"
workers = 1

[providers.liar]
base_url = "{provider.url}/v1"
response_timeout_s = {DEADLINE_S}
stream_idle_timeout_s = {DEADLINE_S}

[models.m]
provider = "liar"

[keys.k]
key = "{KEY}"
"""
    gw = Sluice(cfg, str(tmp_path_factory.mktemp("fuzz-provider"))).start()
    gw.base_rss = psutil.Process(gw.proc.pid).memory_info().rss
    yield gw
    gw.stop()


FINAL = [200, 200, 201, 204, 304, 400, 429, 500, 503, 101, 102, 150, 199]
BODILESS = (204, 304)
INTERIM = [b"", b"", b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n",
           b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\n\r\n"]
EXTRA = [b"", b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\n\"EVIL\"", b"EVIL garbage\r\n\r\n",
         b"\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\nEVIL\r\n0\r\n\r\n", b"HTTP/1.1 2"]


@st.composite
def chunked(draw, body):
    """``body`` chunked at random sizes, with random extensions and trailers (marked)."""
    out = []
    pos = 0
    while pos < len(body):
        size = draw(st.integers(1, max(1, len(body) - pos)))
        ext = draw(st.sampled_from([b"", b";EVIL", b";a=EVIL", b';q="EVIL x";b']))
        out.append(b"%x%s\r\n%s\r\n" % (size, ext, body[pos:pos + size]))
        pos += size
    last_ext = draw(st.sampled_from([b"", b";EVIL=1"]))
    trailers = draw(st.sampled_from([b"", b"set-cookie: EVIL\r\n", b"x-EVIL: 1\r\ncontent-type: EVIL\r\n"]))
    return b"".join(out) + b"0" + last_ext + b"\r\n" + trailers + b"\r\n"


@st.composite
def answers(draw):
    """(pieces, late bytes, close after): one scripted answer."""
    status = draw(st.sampled_from(FINAL))
    ctype = draw(st.sampled_from([b"application/json", b"text/event-stream"]))
    good = OK_BODY if ctype == b"application/json" else b'data: {"choices":[]}\n\ndata: [DONE]\n\n'
    # what a 1xx (but 100 and 103), a 204 or a 304 carries is never relayed: marked
    body = MARK + b"-not-a-response" if status < 200 or status in BODILESS else good
    if status in BODILESS and draw(st.booleans()):
        body = b""
    framing = draw(st.sampled_from(["length", "short", "long", "chunked", "none"]))
    lines = [b"HTTP/1.1 %d X" % status, b"content-type: " + ctype]
    extra_allowed = True  # whether extra bytes are past the response's end for sure
    if framing == "length":
        lines.append(b"content-length: %d" % len(body))
    elif framing == "short":  # the rest of the body is past the end
        lines.append(b"content-length: %d" % draw(st.integers(0, max(0, len(body) - 1))))
        body += MARK
    elif framing == "long":  # what follows is body, and the response never ends
        lines.append(b"content-length: %d" % (len(body) + draw(st.integers(1, 50))))
        extra_allowed = status < 200 or status in BODILESS
    elif framing == "chunked":
        lines.append(b"transfer-encoding: chunked")
        body = draw(chunked(body))
    else:  # up to the close
        extra_allowed = status < 200 or status in BODILESS
    extra = draw(st.sampled_from(EXTRA)) if extra_allowed else b""
    response = draw(st.sampled_from(INTERIM)) + b"\r\n".join(lines) + b"\r\n\r\n" + body
    cuts = sorted(set(draw(st.lists(st.integers(1, len(response) - 1), max_size=3))))
    pieces = [response[a:b] for a, b in zip([0] + cuts, cuts + [len(response)])]
    late = b""
    if extra and draw(st.booleans()):
        late = extra  # arrives later, on a connection with no request outstanding (one request)
    else:
        pieces[-1] += extra  # in the read that ends the response
    return pieces, late, framing == "none" or draw(st.booleans())


REQUESTS = [raw_post({"model": "m", "messages": MSG}), raw_post({"model": "m", "messages": MSG, "stream": True}),
            ANTHROPIC_REQ, ANTHROPIC_STREAM_REQ]


def _exchange(port, data, n):
    """The client's bytes: until ``n`` responses, a close, or the deadline (a hang fails)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    buf = b""
    closed = False
    try:
        s.sendall(data)
        s.settimeout(0.2)
        deadline = time.monotonic() + 2 * DEADLINE_S + 4  # both deadlines, the sweeper, slack
        while len(parse_responses(buf, n)) < n:
            if time.monotonic() > deadline:
                pytest.fail(f"no answer within the deadlines: {buf[:400]!r}")
            try:
                got = s.recv(65536)
            except socket.timeout:
                continue
            except ConnectionResetError:
                got = b""
            if not got:
                closed = True
                break
            buf += got
        else:  # n answers: whatever else comes soon is read too (there must be none)
            try:
                s.settimeout(0.1)
                buf += s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                pass
    finally:
        s.close()
    return buf, closed


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(answer=answers(), request_index=st.integers(0, len(REQUESTS) - 1), pipelined=st.booleans())
def test_random_provider_framings_keep_the_invariants(fuzz_gw, provider, answer, request_index, pipelined):
    pieces, late, close = answer
    n = 1 if late else 1 + pipelined  # late bytes with a pipelined request would be its answer
    provider.script = (pieces, late, close)
    buf, closed = _exchange(fuzz_gw.port, REQUESTS[request_index] * n, n)
    provider.settle()
    answers_seen = parse_responses(buf, n + 1)
    assert len(answers_seen) == n or (closed and len(answers_seen) < n), buf[:600]
    assert all(status >= 200 for status, _, _ in answers_seen), buf[:600]
    assert MARK not in buf and b"evil" not in buf.lower(), (pieces, late, buf[:800])
    assert psutil.Process(fuzz_gw.proc.pid).memory_info().rss - fuzz_gw.base_rss < 60e6
    # a fresh request is served, by a connection whose parser is clean
    provider.script = ([OK], b"", False)
    buf, _ = _exchange(fuzz_gw.port, REQUESTS[0], 1)
    got = parse_responses(buf, 1)
    assert got and got[0][0] == 200 and got[0][2] == OK_BODY, buf[:600]
