"""How Sluice reads a provider's response framing, against lying providers over raw sockets: an
interim status that carries a body, a 204 or 304 that carries one, bytes after a response, a
parser error on a connection that would be pooled again, and chunk extensions and trailers."""
import socket
import time

import pytest
from sluice_helpers import KEY, MSG, raw_exchange, raw_post
from test_sluice_hostile_providers import LyingProvider

pytestmark = pytest.mark.integration

OK_BODY = (b'{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,'
           b'"message":{"role":"assistant","content":"good"},"finish_reason":"stop"}],'
           b'"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}')
OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(OK_BODY), OK_BODY)
OK_STREAM_BODY = (b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":'
                  b'[{"index":0,"delta":{"role":"assistant","content":"good"},"finish_reason":null}]}\n\n'
                  b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":'
                  b'[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')
OK_STREAM = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n%s" % (
    len(OK_STREAM_BODY), OK_STREAM_BODY)
# a response smuggled inside another one: it must never reach the client
EVIL = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 6\r\n\r\n\"EVIL\""


class ScriptedProvider(LyingProvider):
    """Answers the n-th request (over all connections) with ``answers[n]`` (the last one
    repeats); an answer is bytes, or a list of byte pieces sent ``gap_s`` apart. Records the
    connection each request came on."""

    def __init__(self, answers, gap_s=0.05):
        super().__init__(None)
        self.answers = answers
        self.gap_s = gap_s
        self.conns = []  # the connection number of each request, in arrival order
        self.connections = 0

    def _serve(self, c):
        self.connections += 1
        conn_no = self.connections
        try:
            for _ in self._requests(c):
                n = len(self.conns)
                self.conns.append(conn_no)
                answer = self.answers[min(n, len(self.answers) - 1)]
                for i, piece in enumerate(answer if isinstance(answer, list) else [answer]):
                    if i:
                        time.sleep(self.gap_s)
                    c.sendall(piece)
        except OSError:
            return
        finally:
            c.close()


def config(url, model_extra=""):
    return f"""
[server]
listen = "127.0.0.1:{{port}}"
workers = 1
debug_endpoints = true

[providers.liar]
base_url = "{url}/v1"
response_timeout_s = 3
stream_idle_timeout_s = 3

[models.m]
provider = "liar"
{model_extra}

[keys.k]
key = "{KEY}"
"""


def read_responses(sock, n, timeout=8):
    """Up to ``n`` responses read from ``sock`` (see ``parse_responses``); when fewer came before
    a close or the deadline, a last ("rest", b"", every byte read) says what did."""
    sock.settimeout(0.2)
    buf = b""
    deadline = time.monotonic() + timeout
    while len(parse_responses(buf, n)) < n and time.monotonic() < deadline:
        try:
            data = sock.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            break
        if not data:
            break
        buf += data
    parsed = parse_responses(buf, n)
    return parsed if len(parsed) == n else parsed + [("rest", b"", buf)]


def parse_responses(buf, n):
    """Up to ``n`` complete responses in ``buf``: [(status, lowercased head, body)], bodies framed
    as a client must (none for 1xx, 204, 304; a chunked body with its raw framing)."""
    out = []
    pos = 0
    while len(out) < n:
        end = buf.find(b"\r\n\r\n", pos)
        if end < 0:
            return out
        head = buf[pos:end].lower()
        status = int(head[9:12])
        body_start = end + 4
        if status < 200 or status in (204, 304):
            out.append((status, head, b""))
            pos = body_start
            continue
        if b"content-length:" in head:
            length = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
            if len(buf) < body_start + length:
                return out
            out.append((status, head, buf[body_start:body_start + length]))
            pos = body_start + length
        elif b"transfer-encoding: chunked" in head:
            end = _chunked_end(buf, body_start)
            if end < 0:
                return out
            out.append((status, head, buf[body_start:end]))
            pos = end
        else:
            return out
    return out


def _chunked_end(buf, pos):
    """Where the chunked body at ``buf[pos]`` ends (extensions and trailers included), or -1."""
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return -1
        size = int(buf[pos:eol].split(b";")[0], 16)
        if size == 0:
            end = buf.find(b"\r\n\r\n", eol - 2)
            return -1 if end < 0 else end + 4
        pos = eol + 4 + size


def pipelined(port, requests, n=None, timeout=8):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(b"".join(requests))
        return read_responses(s, n or len(requests), timeout)
    finally:
        s.close()


def one(port, request, timeout=8):
    return pipelined(port, [request], 1, timeout)[0]


REQ = raw_post({"model": "m", "messages": MSG})
ANTHROPIC_REQ = raw_post({"model": "m", "max_tokens": 10, "messages": MSG}, path=b"/v1/messages",
                         headers=b"anthropic-version: 2023-06-01\r\n")
ANTHROPIC_STREAM_REQ = raw_post({"model": "m", "max_tokens": 10, "messages": MSG, "stream": True},
                                path=b"/v1/messages", headers=b"anthropic-version: 2023-06-01\r\n")


# ------------------------------------------------------------------ interim and bodiless statuses
@pytest.mark.parametrize("status", [150, 102, 199, 101])
def test_an_interim_status_other_than_100_and_103_is_a_protocol_error(make_sluice, status):
    # llhttp reads a Content-Length body after a 150: the bytes inside it must not be taken as a head
    interim = b"HTTP/1.1 %d Odd\r\ncontent-length: %d\r\n\r\n%s" % (status, len(EVIL), EVIL)
    liar = ScriptedProvider([interim + OK, OK])
    try:
        gw = make_sluice(config(liar.url))
        answers = pipelined(gw.port, [REQ, REQ])
        assert [a[0] for a in answers] == [502, 200], answers
        assert b"EVIL" not in b"".join(a[2] for a in answers)
        assert b"upstream_unavailable" in answers[0][2]  # the client's dialect (OpenAI)
        assert answers[1][2] == OK_BODY
        assert liar.conns[1] != liar.conns[0], "the provider connection was kept"
    finally:
        liar.close()


def test_interim_100_and_103_are_skipped(make_sluice):
    interim = b"HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n"
    liar = ScriptedProvider([[interim, OK], interim + OK])
    try:
        gw = make_sluice(config(liar.url))
        answers = pipelined(gw.port, [REQ, REQ])
        assert [(a[0], a[2]) for a in answers] == [(200, OK_BODY), (200, OK_BODY)], answers
    finally:
        liar.close()


@pytest.mark.parametrize("status", [204, 304])
def test_a_204_or_304_never_relays_a_body(make_sluice, status):
    bodiless = b"HTTP/1.1 %d X\r\ncontent-length: %d\r\n\r\n%s" % (status, len(EVIL), EVIL)
    liar = ScriptedProvider([bodiless, OK])
    try:
        gw = make_sluice(config(liar.url))
        s = socket.create_connection(("127.0.0.1", gw.port), timeout=8)
        try:
            s.sendall(REQ + REQ)
            answers = read_responses(s, 2)
            time.sleep(0.3)
            s.settimeout(0.2)
            try:
                rest = s.recv(65536)
            except socket.timeout:
                rest = b""
        finally:
            s.close()
        assert [a[0] for a in answers] == [status, 200], answers
        assert answers[1][2] == OK_BODY
        assert b"EVIL" not in b"".join(a[2] for a in answers) + rest
        assert b"content-length" not in answers[0][1]  # a naive client reads no body either
        assert liar.conns[1] != liar.conns[0], "the provider connection was kept"
    finally:
        liar.close()


def test_bytes_after_a_response_on_an_idle_connection_discard_it(make_sluice):
    liar = ScriptedProvider([[OK, EVIL], OK], gap_s=0.3)
    try:
        gw = make_sluice(config(liar.url))
        assert one(gw.port, REQ)[:3:2] == (200, OK_BODY)
        time.sleep(0.8)  # the extra bytes arrive on the idle pooled connection
        assert one(gw.port, REQ)[:3:2] == (200, OK_BODY)
        assert liar.conns[1] != liar.conns[0]
    finally:
        liar.close()


# ------------------------------------------------------------------ a parse error ends the connection
GARBAGE = b"XYZ not http\r\n\r\n"
MALFORMED_500 = b"HTTP/1.1 500 Oops\r\ncontent-type: application/json\r\ncontent-length: 0\r\n\r\n" + GARBAGE


MALFORMED_STREAM = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 0\r\n\r\n"
                    + GARBAGE)
RETRY = '[models.m.retry]\nmax_attempts = 2\non = ["5xx"]\nbackoff_base_ms = 1\nbackoff_max_ms = 2\n'
# mode: (the answers, the model's extra config, the requests: the last one must get the good answer)
PARSE_ERROR_CASES = {
    # the failed attempt is read and dropped, and the retry follows at once
    "retry-discard": ([MALFORMED_500, OK], RETRY, [REQ]),
    # an Anthropic client, an OpenAI provider: the answer is buffered and translated
    "buffered": ([MALFORMED_500, OK], "", [ANTHROPIC_REQ, ANTHROPIC_REQ]),
    "stream-translation": ([MALFORMED_STREAM, OK_STREAM], "", [ANTHROPIC_STREAM_REQ, ANTHROPIC_STREAM_REQ]),
}


@pytest.mark.parametrize("mode", sorted(PARSE_ERROR_CASES))
def test_a_parse_error_never_returns_the_connection_to_the_pool(make_sluice, mode):
    answers, model_extra, requests = PARSE_ERROR_CASES[mode]
    liar = ScriptedProvider(answers)
    try:
        gw = make_sluice(config(liar.url, model_extra))
        for request in requests[:-1]:
            assert one(gw.port, request)[0] in (200, 500)
            time.sleep(0.2)
        answer = one(gw.port, requests[-1])
        assert answer[0] == 200 and b"good" in answer[2], answer
        assert len(liar.conns) == 2 and liar.conns[1] != liar.conns[0], liar.conns
    finally:
        liar.close()


# ------------------------------------------------------------------ chunk extensions and trailers
def _chunked(pieces_of_body, trailer=b"set-cookie: session=stolen\r\nx-evil: 1\r\n"):
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    chunks = [b"%x;ext=evil;q=\"1\"\r\n%s\r\n" % (len(p), p) for p in pieces_of_body]
    return head, chunks, b"0;last=evil\r\n" + trailer + b"\r\n"


def _decoded(raw):
    out = b""
    pos = 0
    while True:
        eol = raw.find(b"\r\n", pos)
        size = int(raw[pos:eol], 16)  # no extension can be there: int() refuses one
        if size == 0:
            assert raw[eol:] == b"\r\n\r\n", raw  # no trailer either
            return out
        out += raw[eol + 2:eol + 2 + size]
        pos = eol + 4 + size


@pytest.mark.parametrize("split", [False, True])
def test_chunk_extensions_and_trailers_never_reach_the_client(make_sluice, split):
    half = len(OK_BODY) // 2
    head, chunks, end = _chunked([OK_BODY[:half], OK_BODY[half:]])
    answer = [head + chunks[0][:5], chunks[0][5:] + chunks[1], end] if split else head + b"".join(chunks) + end
    liar = ScriptedProvider([answer])
    try:
        gw = make_sluice(config(liar.url))
        http10 = REQ.replace(b"HTTP/1.1", b"HTTP/1.0")
        answers = pipelined(gw.port, [REQ, REQ])
        for status, _, body in answers:
            assert status == 200, answers
            assert b"evil" not in body and b"set-cookie" not in body and b"stolen" not in body
            assert _decoded(body) == OK_BODY
        # an HTTP/1.0 client: the decoded body, close-delimited
        raw10 = raw_exchange(gw.port, http10, timeout=8, until_closed=True)
        assert raw10.startswith(b"HTTP/1.1 200") and raw10.endswith(b"\r\n\r\n" + OK_BODY), raw10
    finally:
        liar.close()


def test_a_translated_stream_ignores_chunk_extensions_and_trailers(make_sluice):
    head, chunks, end = _chunked([OK_STREAM_BODY])
    head = head.replace(b"application/json", b"text/event-stream")
    liar = ScriptedProvider([[head + chunks[0], end]])
    try:
        gw = make_sluice(config(liar.url))
        status, _, body = one(gw.port, ANTHROPIC_STREAM_REQ)
        assert status == 200 and b"good" in body and b"message_stop" in body
        assert b"evil" not in body and b"stolen" not in body
    finally:
        liar.close()


# ------------------------------------------------------------------ bodies that end with the close
class ClosingProvider(LyingProvider):
    """Answers a request with ``answer``, then closes the connection: a body framed by neither
    Content-Length nor chunking ends there."""

    def _serve(self, c):
        try:
            for _ in self._requests(c):
                c.sendall(self.answer)
                return
        except OSError:
            return
        finally:
            c.close()


@pytest.mark.parametrize("status, request_bytes", [(400, REQ), (400, ANTHROPIC_REQ), (500, REQ),
                                                   (200, ANTHROPIC_REQ)],
                         ids=["error", "error-translated", "5xx", "translated"])
def test_a_body_ended_by_the_close_is_answered(make_sluice, status, request_bytes):
    """An error body (kept for the log) and a body translated at its end are read up to the
    provider's close, then answered; the worker holds none of their bytes afterwards."""
    liar = ClosingProvider(b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\n\r\n%s" % (status, OK_BODY))
    try:
        gw = make_sluice(config(liar.url))
        for _ in range(3):
            got, _, body = one(gw.port, request_bytes)
            assert got == status, body
            assert (b"good" in body) == (status == 200), body
        assert gw.state()["body_bytes_held"] == 0
    finally:
        liar.close()
