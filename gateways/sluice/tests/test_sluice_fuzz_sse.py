"""Hostile SSE from a provider (hypothesis, a bounded number of examples): a raw provider streams
random event-stream bytes (frames over max_sse_frame_bytes, no blank lines, CR-only line ends,
comments, unknown events, invalid JSON in data) split at random points, to translated and
same-dialect streaming routes. Invariants: one answer per request, the stream ends (an error
event or a clean end) within the deadlines, the worker's memory bounded, and a fresh request
still served."""
import json
import socket
import time

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sluice_helpers import KEY, MSG, Sluice, count_responses, raw_post, request
from sluice_scripted_provider import ScriptedProvider, chunk

pytestmark = pytest.mark.integration

MAX_FRAME = 4096
REQUEST_TIMEOUT_S = 2.0
ANSWER_WITHIN_S = REQUEST_TIMEOUT_S + 8  # the sweeper runs once a second; a loaded machine


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    provider = ScriptedProvider(None)
    cfg = f"""
[server]
listen = "127.0.0.1:{{port}}"
workers = 1
debug_endpoints = true
max_sse_frame_bytes = {MAX_FRAME}
request_timeout_s = {REQUEST_TIMEOUT_S}

[providers.oai]
base_url = "{provider.url}/v1"
stream_idle_timeout_s = 30

[providers.ant]
base_url = "{provider.url}/v1"
dialect = "anthropic"
stream_idle_timeout_s = 30

[models.via-openai]
provider = "oai"

[models.via-anthropic]
provider = "ant"

[keys.k]
key = "{KEY}"
token_budget = 1000000000
"""
    gw = Sluice(cfg, str(tmp_path_factory.mktemp("fuzz-sse"))).start()
    gw.provider = provider
    gw.base_rss = psutil.Process(gw.proc.pid).memory_info().rss
    yield gw
    gw.stop()
    provider.close()


OPENAI_CHUNK = (b'{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,'
                b'"delta":{"content":"hi"},"finish_reason":null}]}')
ANTHROPIC_DELTA = b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}'
line_ends = st.sampled_from([b"\n", b"\r\n", b"\r"])
junk = st.binary(max_size=40).map(lambda b: b.replace(b"HTTP/", b"http/"))

frames = st.one_of(
    st.builds(lambda d, e: b"data: " + d + e + e, st.sampled_from([OPENAI_CHUNK, ANTHROPIC_DELTA, b"[DONE]"]),
              line_ends),
    st.builds(lambda n, e: b"data: " + b"x" * n + e + e, st.integers(MAX_FRAME - 64, MAX_FRAME * 3), line_ends),
    st.builds(lambda n: b"data: " + b"z" * n, st.integers(1, MAX_FRAME * 3)),           # no blank line
    st.builds(lambda c, e: b":" + c + e, junk, line_ends),                                # a comment
    st.builds(lambda e, d, le: b"event: " + e + le + b"data: " + d + le + le,
              st.sampled_from([b"ping", b"nonsense", b"message_stop", b"error", b"content_block_delta"]),
              st.sampled_from([b"{", b"{}", b"null", b"[1,2]", b'{"type":7}', ANTHROPIC_DELTA]), line_ends),
    st.builds(lambda d, e: b"data: " + d + e + e, junk, line_ends),                      # invalid JSON
    junk,
)


@st.composite
def streams(draw):
    body = b"".join(draw(st.lists(frames, min_size=1, max_size=8)))
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=6)))
    pieces = [body[a:b] for a, b in zip([0] + cuts, cuts + [len(body)]) if b > a]
    framing = draw(st.sampled_from(["chunked", "close", "length"]))
    ending = draw(st.sampled_from(["end", "end", "hang"]))  # hang: only the deadline ends it
    return pieces, framing, ending


def _script(pieces, framing, ending):
    def answer(provider, c, head, body):
        h = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        if framing == "chunked":
            h += b"transfer-encoding: chunked\r\n"
        elif framing == "length":
            h += b"content-length: %d\r\n" % sum(map(len, pieces))
        c.sendall(h + b"connection: close\r\n\r\n")
        for p in pieces:
            c.sendall(chunk(p) if framing == "chunked" else p)
            time.sleep(0.001)
        if ending == "hang":
            provider.hold(c, 15)
        elif framing == "chunked":
            c.sendall(b"0\r\n\r\n")
            provider.hold(c, 0.2)
    return answer


def _answer(port, path, model):
    """The raw answer to one streamed request, and whether it was over within the deadline."""
    s = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_WITHIN_S)
    s.settimeout(0.5)
    headers = b"anthropic-version: 2023-06-01\r\n" if path == b"/v1/messages" else b""
    s.sendall(raw_post({"model": model, "messages": MSG, "stream": True, "max_tokens": 10},
                       path=path, headers=headers))
    buf = b""
    end = time.monotonic() + ANSWER_WITHIN_S
    try:
        while time.monotonic() < end:
            try:
                piece = s.recv(65536)
            except socket.timeout:
                if count_responses(buf):  # a clean end on a kept-alive connection
                    return buf, True
                continue
            except ConnectionResetError:
                return buf, True
            if not piece:
                return buf, True
            buf += piece
        return buf, False
    finally:
        s.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(stream=streams(), route=st.sampled_from([
    (b"/v1/chat/completions", "via-openai"), (b"/v1/messages", "via-anthropic"),      # same dialect
    (b"/v1/chat/completions", "via-anthropic"), (b"/v1/messages", "via-openai")]))  # translated
def test_hostile_provider_streams(hostile, stream, route):
    pieces, framing, ending = stream
    hostile.provider.script = _script(pieces, framing, ending)
    buf, ended = _answer(hostile.port, *route)
    assert ended, f"no end within {ANSWER_WITHIN_S}s: {buf[-200:]!r}"
    assert buf.startswith(b"HTTP/1.1 "), buf[:200]
    assert buf.count(b"HTTP/1.1 ") == 1, buf[:400]  # one answer (the provider's bytes never say HTTP/)
    assert request(hostile.port, "GET", "/health", timeout=5)[0] == 200
    grown = psutil.Process(hostile.proc.pid).memory_info().rss - hostile.base_rss
    assert grown < 60e6, f"{grown / 1e6:.0f} MB more than at start"


def test_fresh_request_served_after_the_fuzzing(hostile):
    def ok(provider, c, head, body):
        frame = b"data: " + OPENAI_CHUNK + b"\n\ndata: [DONE]\n\n"
        c.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n"
                  b"connection: close\r\n\r\n" % len(frame) + frame)
    hostile.provider.script = ok
    buf, ended = _answer(hostile.port, b"/v1/chat/completions", "via-openai")
    assert ended and buf.startswith(b"HTTP/1.1 200") and b"[DONE]" in buf, buf[-300:]
    state = json.loads(request(hostile.port, "GET", "/debug/state")[2])
    assert state["in_flight"] == 0, state
