"""Random framings, header sets and JSON bodies thrown at a running Sluice (hypothesis, a bounded
number of examples). Invariants: at most one response per request and never a hang past the
configured deadlines, the worker's memory bounded, and a new connection still served. Chunked
bodies get their own generator: transfer-coding lists, trailer sections around and over the head
limits, many trailer lines, bytes without CRLF."""
import json
import socket
import time

import psutil
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sluice_helpers import KEY, Sluice, base_config, count_responses, request

pytestmark = pytest.mark.integration

ENV = {"SLUICE_TEST_PROVIDER_KEY": "sk-provider-secret"}
DEADLINE_S = 1.0  # client_header_timeout_s and client_body_timeout_s below


@pytest.fixture(scope="module")
def fuzz_sluice(stub, tmp_path_factory):
    cfg = base_config(stub.url).replace(
        "max_body_bytes = 65536",
        f"max_body_bytes = 65536\nclient_header_timeout_s = {DEADLINE_S}\nclient_body_timeout_s = {DEADLINE_S}"
        "\nmax_url_bytes = 1024\nmax_header_bytes = 4096\nmax_headers = 20")
    gw = Sluice(cfg, str(tmp_path_factory.mktemp("fuzz")), env=ENV).start()
    gw.base_rss = psutil.Process(gw.proc.pid).memory_info().rss
    yield gw
    gw.stop()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)

# content parts of every kind the budget's estimate weighs (and some it does not), in both
# dialects' spellings, "type" in another case now and then
parts = st.builds(lambda kind, type_key, extra: {type_key: kind, kind: extra},
                  st.sampled_from(["text", "image_url", "image", "file", "document", "input_audio", "video"]),
                  st.sampled_from(["type", "type", "Type", "TYPE"]), json_values)
# keys that spell a decided key in another case (U+212A and U+017F fold to k and s)
folded_keys = st.sampled_from(["Model", "MODEL", "N", "Stream", "\u017ftream", "MAX_TOKENS", "max_to\u212aens",
                               "Max_Completion_Tokens"])
bodies = st.one_of(
    st.builds(lambda d: json.dumps(d).encode(), st.fixed_dictionaries(
        {"model": st.sampled_from(["mock-model", "fast", "claude", "nope", 5, None, ""]),
         "messages": st.just([{"role": "user", "content": "hi"}])},
        optional={"max_tokens": st.integers(-5, 2**40), "stream": st.booleans(), "x": json_values})),
    st.builds(lambda d, folded, value, ascii_only: json.dumps(dict(d, **{folded: value}), ensure_ascii=ascii_only).encode(),
              st.fixed_dictionaries({"model": st.sampled_from(["mock-model", "claude"]),
                                     "messages": st.just([{"role": "user", "content": "hi"}])}),
              folded_keys, json_values, st.booleans()),
    st.builds(lambda model, content, max_tokens: json.dumps(
        {"model": model, "max_tokens": max_tokens, "messages": [{"role": "user", "content": content}]}).encode(),
              st.sampled_from(["mock-model", "claude"]), st.lists(parts, max_size=5), st.integers(1, 50)),
    st.builds(lambda d: json.dumps(d).encode(), json_values),
    st.binary(max_size=200),
    st.builds(lambda n: b"[" * n + b"]" * n, st.integers(0, 1200)),
)

header_names = st.sampled_from(["Content-Type", "Authorization", "x-api-key", "anthropic-version", "Expect",
                                "Connection", "Upgrade", "Transfer-Encoding", "Content-Length", "X-Junk",
                                "OpenAI-Organization", "Host", "TE"])
header_values = st.one_of(st.sampled_from(["application/json", "Bearer " + KEY, KEY, "2023-06-01",
                                           "Bearer sk-test-budget",
                                           "100-continue", "close", "keep-alive", "h2c", "chunked", "5", "-1",
                                           "", "upgrade"]),
                          st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=30))


@st.composite
def requests(draw):
    method = draw(st.sampled_from([b"POST", b"GET", b"HEAD", b"PUT", b"CONNECT", b"OPTIONS", b"G\x00T"]))
    path = draw(st.sampled_from([b"/v1/chat/completions", b"/v1/messages", b"/health", b"/metrics",
                                 b"/v1/models", b"/nope", b"*", b"/" + b"a" * 1100]))
    version = draw(st.sampled_from([b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTX"]))
    body = draw(bodies)
    headers = draw(st.lists(st.tuples(header_names, header_values), max_size=8))
    framing = draw(st.sampled_from(["length", "chunked", "none", "wrong-length"]))
    lines = [method + b" " + path + b" " + version]
    lines += [n.encode() + b": " + v.encode() for n, v in headers]
    if framing == "length":
        lines.append(b"content-length: %d" % len(body))
        data = body
    elif framing == "wrong-length":
        lines.append(b"content-length: %d" % (len(body) + draw(st.integers(-3, 3))))
        data = body
    elif framing == "chunked":
        lines.append(b"transfer-encoding: chunked")
        size = draw(st.integers(1, 64))
        data = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + size]), body[i:i + size])
                        for i in range(0, len(body), size)) + b"0\r\n\r\n"
    else:
        data = b""
    sep = draw(st.sampled_from([b"\r\n", b"\r\n", b"\n"]))
    return sep.join(lines) + sep + sep + data


TRANSFER_CODINGS = [b"chunked", b"Chunked", b"CHUNKED ", b"gzip, chunked", b"gzip,chunked", b"identity",
                    b"chunked, chunked", b"gzip", b"chunked;q=1", b",chunked", b"deflate, gzip, chunked",
                    b"chunked\r\nTransfer-Encoding: chunked", b"gzip\r\nTransfer-Encoding: chunked"]
# trailer values around and over max_header_bytes (4096 below), and many short lines
TRAILER_VALUE_SIZES = [0, 10, 3000, 4000, 4090, 4100, 9000]


@st.composite
def chunked_requests(draw):
    """A chunked request: its coding list, chunk sizes, a trailer section (around and over the
    head limits, with many lines, or bytes without CRLF), perhaps a request pipelined behind."""
    coding = draw(st.sampled_from(TRANSFER_CODINGS))
    auth = draw(st.sampled_from([b"", b"authorization: Bearer " + KEY.encode() + b"\r\n"]))
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n" + auth
            + b"transfer-encoding: " + coding + b"\r\n\r\n")
    body = draw(bodies)
    size = draw(st.integers(1, 64))
    ext = draw(st.sampled_from([b"", b";x=1", b";" + b"e" * 5000]))
    data = b"".join(b"%x%s\r\n%s\r\n" % (len(body[i:i + size]), ext, body[i:i + size])
                    for i in range(0, len(body), size))
    lines = draw(st.lists(st.tuples(st.sampled_from([b"x-t", b"x-test-tag", b"content-length", b"t"]),
                                    st.sampled_from(TRAILER_VALUE_SIZES)), max_size=30))
    many = draw(st.sampled_from([0, 0, 15, 25, 3000]))  # short distinct lines (max_headers is 20)
    trailers = b"".join(name + b": " + b"v" * n + b"\r\n" for name, n in lines)
    trailers += b"".join(b"t%d: v\r\n" % i for i in range(many))
    end = draw(st.sampled_from([b"\r\n", b"\r\n", b"", b"x-no-crlf: " + b"a" * 6000]))
    last = b"0" + draw(st.sampled_from([b"", b"000", b";ext"])) + b"\r\n"
    behind = draw(st.sampled_from([b"", b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n"]))
    return [head + data + last + trailers + end, behind] if behind else [head + data + last + trailers + end]


def _send_and_check(gw, reqs, split):
    """Send the requests (over ``split`` + 1 writes) and check the invariants."""
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    buf = b""
    try:
        data = b"".join(reqs)
        if split:  # the same bytes over several writes
            step = max(1, len(data) // (split + 1))
            for i in range(0, len(data), step):
                s.sendall(data[i:i + step])
        else:
            s.sendall(data)
        # the response(s), or a close: within the deadlines (plus the sweeper's second), never a hang
        s.settimeout(0.3)
        deadline = time.monotonic() + DEADLINE_S + 4
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                if count_responses(buf) >= len(reqs) or (buf and b"HEAD " in data):
                    break  # (a response to HEAD has a length but no body: not countable)
                continue
            except ConnectionResetError:
                break
            if not chunk:
                break
            buf += chunk
        else:
            pytest.fail(f"no end within the deadlines: {data[:300]!r} -> {buf[:300]!r}")
    finally:
        s.close()
    # never more responses than requests (100 Continue is interim, not counted); bytes past a
    # request's declared end are read as the next request: if they are not one, they get one 400
    # and the connection closes
    refused = b'"message":"malformed HTTP request' in buf and buf.rstrip().endswith(b"}")
    assert count_responses(buf) <= len(reqs) + refused, (data[:300], buf[:600])
    assert psutil.Process(gw.proc.pid).memory_info().rss - gw.base_rss < 60e6
    t = time.perf_counter()
    assert request(gw.port, "GET", "/health", timeout=5)[0] == 200
    assert time.perf_counter() - t < 2.0
    return buf


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(reqs=st.lists(requests(), min_size=1, max_size=3), split=st.integers(0, 3))
# an interim 100 Continue between two final responses: once counted as a third response
@example(reqs=[b'POST /v1/chat/completions HTTP/1.1\r\ncontent-length: 4\r\n\r\nnull',
               b'POST /v1/chat/completions HTTP/1.1\r\nExpect: 100-continue\r\ncontent-length: 72\r\n\r\n'
               b'{"model": "mock-model", "messages": [{"role": "user", "content": "hi"}]}'], split=0)
def test_random_requests_keep_the_invariants(fuzz_sluice, reqs, split):
    _send_and_check(fuzz_sluice, reqs, split)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(reqs=chunked_requests(), split=st.integers(0, 3))
def test_chunked_bodies_with_trailers_keep_the_invariants(fuzz_sluice, reqs, split):
    buf = _send_and_check(fuzz_sluice, reqs, split)
    head = reqs[0].split(b"\r\n\r\n", 1)[0].lower()
    codings = [c.strip() for c in head.split(b"transfer-encoding: ", 1)[1].split(b",") if c.strip()]
    if codings != [b"chunked"]:  # any other coding list: refused, nothing behind it answered
        assert count_responses(buf) <= 1, buf[:600]
        assert buf[:12] in (b"HTTP/1.1 501", b"HTTP/1.1 400"), buf[:300]
    # a trailer field is never forwarded: the stub would echo x-test-tag
    assert b"x-test-tag: v" not in buf
