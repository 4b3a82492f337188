"""Random framings, header sets and JSON bodies thrown at a running Sluice (hypothesis, a bounded
number of examples). Invariants: at most one response per request and never a hang past the
configured deadlines, the worker's memory bounded, and a new connection still served."""
import json
import socket
import time

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sluice_helpers import KEY, Sluice, base_config, count_responses, request

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

bodies = st.one_of(
    st.builds(lambda d: json.dumps(d).encode(), st.fixed_dictionaries(
        {"model": st.sampled_from(["mock-model", "fast", "claude", "nope", 5, None, ""]),
         "messages": st.just([{"role": "user", "content": "hi"}])},
        optional={"max_tokens": st.integers(-5, 2**40), "stream": st.booleans(), "x": json_values})),
    st.builds(lambda d: json.dumps(d).encode(), json_values),
    st.binary(max_size=200),
    st.builds(lambda n: b"[" * n + b"]" * n, st.integers(0, 1200)),
)

header_names = st.sampled_from(["Content-Type", "Authorization", "x-api-key", "anthropic-version", "Expect",
                                "Connection", "Upgrade", "Transfer-Encoding", "Content-Length", "X-Junk",
                                "OpenAI-Organization", "Host", "TE"])
header_values = st.one_of(st.sampled_from(["application/json", "Bearer " + KEY, KEY, "2023-06-01",
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


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(reqs=st.lists(requests(), min_size=1, max_size=3), split=st.integers(0, 3))
def test_random_requests_keep_the_invariants(fuzz_sluice, reqs, split):
    gw = fuzz_sluice
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
