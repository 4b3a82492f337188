"""Client-side framing, hardened, over raw sockets to a running Sluice: a chunked body's trailer
section counts against the head limits and is never kept; request bodies read ahead of their
turn are bounded per connection (reading pauses, every request is still answered in order); a
transfer coding other than chunked is refused with 501 and nothing behind it is answered."""
import json
import socket
import threading
import time

import pytest
from sluice_helpers import AUTH, ENV, MSG, count_responses, health_ms, raw_exchange, rss, server_config

from sluice.config import Config, ConfigError
from sluice.framing import ChunkedFraming

pytestmark = pytest.mark.integration

CHUNKED_HEAD = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n" + AUTH
                + b"transfer-encoding: chunked\r\n\r\n")
BODY = json.dumps({"model": "fast", "messages": MSG}).encode()
FIRST_CHUNK = b"%x\r\n%s\r\n" % (len(BODY), BODY)


def _read_until_closed(s, limit):
    """Everything until the peer closes, or ``limit`` seconds pass."""
    buf = b""
    deadline = time.monotonic() + limit
    s.settimeout(0.5)
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            break
        if not chunk:
            break
        buf += chunk
    return buf


# ------------------------------------------------------------------ chunk trailers
def test_endless_trailer_value_is_refused_431(make_sluice, stub):
    gw = make_sluice(server_config(stub.url), env=ENV)
    base = rss(gw.proc.pid)
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    try:
        s.sendall(CHUNKED_HEAD + FIRST_CHUNK + b"0\r\nx-trailer: ")
        sent = 0
        try:
            while sent < 16 << 20:  # no CRLF, ever: one trailer value growing
                s.sendall(b"a" * 65536)
                sent += 65536
        except (BrokenPipeError, ConnectionResetError):
            pass
        buf = _read_until_closed(s, 5)
    finally:
        s.close()
    assert buf.startswith(b"HTTP/1.1 431"), buf[:200]
    assert b"connection: close" in buf
    assert rss(gw.proc.pid) - base < 10e6
    assert health_ms(gw.port) < 1000


def test_many_trailer_lines_are_refused_431(sluice):
    lines = b"".join(b"t%d: v\r\n" % i for i in range(100000))
    buf = raw_exchange(sluice.port, CHUNKED_HEAD + FIRST_CHUNK + b"0\r\n" + lines + b"\r\n",
                       until_closed=True)
    assert buf.startswith(b"HTTP/1.1 431"), buf[:200]
    assert count_responses(buf) == 1


def test_trailer_fields_count_against_max_headers(sluice):
    # 150 short fields: 1.6 KB, well within max_header_bytes, over max_headers (100)
    lines = b"".join(b"t%d: v\r\n" % i for i in range(150))
    buf = raw_exchange(sluice.port, CHUNKED_HEAD + FIRST_CHUNK + b"0\r\n" + lines + b"\r\n",
                       until_closed=True)
    assert buf.startswith(b"HTTP/1.1 431"), buf[:200]
    assert b"header fields" in buf


def test_trailers_within_the_limits_are_dropped(sluice, stub):
    # a trailer section just under max_header_bytes (32 KiB) is read, and never forwarded
    filler = b"x-pad: " + b"p" * 30000 + b"\r\n"
    trailers = b"x-test-tag: from-trailer\r\n" + filler + b"\r\n"
    before = len(stub.requests)
    data = CHUNKED_HEAD + FIRST_CHUNK + b"0\r\n" + trailers
    buf = raw_exchange(sluice.port, data + b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n",
                       expect_responses=2)
    assert buf.startswith(b"HTTP/1.1 200"), buf[:300]
    assert count_responses(buf) == 2
    sent = stub.requests[before]
    assert json.loads(sent["body"])["model"] == "mock-model"
    assert not any(k.lower() in ("x-test-tag", "x-pad") for k in sent["headers"]), sent["headers"]


def test_trailer_section_is_found_wherever_the_reads_split():
    # chunk data that looks like a last chunk, an extension, a size with leading zeros
    body = (b"b\r\nab\r\n0\r\n\r\nxy\r\n" + b"0003;name=\"v\"\r\nabc\r\n"
            + b"10\r\n" + b"z" * 16 + b"\r\n")
    trailer = b"000;ext\r\n"
    section = b"x-a: 1\r\nx-b: " + b"v" * 50 + b"\r\n\r\n"
    data = body + trailer + section
    for cut in range(len(data) + 1):
        for cut2 in (cut, min(len(data), cut + 7)):
            f = ChunkedFraming()
            counted = sum(f.trailer_share(data, a, b)
                          for a, b in ((0, cut), (cut, cut2), (cut2, len(data))))
            assert counted == len(section), (cut, cut2)


def test_chunk_data_like_a_last_chunk_is_not_a_trailer(sluice):
    # JSON allows CR LF as whitespace: the body holds "\r\n0\r\n\r\n" and then 40 KB (over
    # max_header_bytes) of spaces, in one chunk
    body = BODY[:-1] + b',"n":\r\n0\r\n\r\n' + b" " * 40000 + b"}"
    data = CHUNKED_HEAD + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    buf = raw_exchange(sluice.port, data)
    assert buf.startswith(b"HTTP/1.1 200"), buf[:300]


# ------------------------------------------------------------------ queued bytes per connection
def test_max_queued_bytes_per_connection_is_checked_at_load():
    base = {"providers": {"p": {"base_url": "http://127.0.0.1:9/v1"}}, "models": {"m": {"provider": "p"}}}
    assert Config(base).server.max_queued_bytes_per_connection == 2 * 1024 * 1024
    zero = Config(dict(base, server={"max_queued_bytes_per_connection": 0}))
    assert zero.server.max_queued_bytes_per_connection == 0
    for bad in (-1, 1.5, "1"):
        with pytest.raises(ConfigError, match="max_queued_bytes_per_connection"):
            Config(dict(base, server={"max_queued_bytes_per_connection": bad}))


def _peak_growth(pid, base, seconds):
    peak = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        peak = max(peak, rss(pid) - base)
        time.sleep(0.05)
    return peak


def test_pipelined_large_bodies_are_bounded_and_answered_in_order(make_sluice, stub):
    gw = make_sluice(server_config(stub.url).replace("max_body_bytes = 65536", "max_body_bytes = 4194304"),
                     env=ENV)
    slow = _tagged_post("slow", b"x-test-delay-ms: 4000\r\n", "")
    # 16 bodies just under max_body_bytes, pipelined behind the slow one: 64 MB
    big = [_tagged_post(f"big{i}", b"", "p" * ((4 << 20) - 200)) for i in range(16)]
    base = rss(gw.proc.pid)
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=30)
    sender = threading.Thread(target=s.sendall, args=(slow + b"".join(big),), daemon=True)
    try:
        sender.start()
        # while the slow request is answered, the 16 bodies behind it (64 MB) are not all read
        grown = _peak_growth(gw.proc.pid, base, 3.0)
        assert grown < 24e6, f"{grown / 1e6:.0f} MB held for bodies queued behind a slow request"
        assert health_ms(gw.port) < 1000
        buf = b""
        s.settimeout(5)
        deadline = time.monotonic() + 60
        while count_responses(buf) < 17 and time.monotonic() < deadline:
            chunk = s.recv(1 << 20)
            assert chunk, (count_responses(buf), buf[-300:])
            buf += chunk
    finally:
        s.close()
        sender.join(5)
    assert count_responses(buf) == 17, buf[-300:]
    tags = [line.split(b":", 1)[1].strip() for line in buf.split(b"\r\n")
            if line.lower().startswith(b"x-test-tag:")]
    assert tags == [b"slow"] + [b"big%d" % i for i in range(16)]
    assert buf.count(b"HTTP/1.1 200") == 17
    del stub.requests[:]


def test_a_body_held_back_is_not_timed_out(make_sluice, stub):
    # the body behind the slow request is read only in its turn: its deadline (1 s) waits too
    gw = make_sluice(server_config(stub.url, "client_body_timeout_s = 1").replace(
        "max_body_bytes = 65536", "max_body_bytes = 4194304"), env=ENV)
    data = (_tagged_post("slow", b"x-test-delay-ms: 3000\r\n", "")
            + _tagged_post("held", b"", "p" * (3 << 20)))
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=30)
    sender = threading.Thread(target=s.sendall, args=(data,), daemon=True)
    try:
        sender.start()
        buf = b""
        deadline = time.monotonic() + 30
        while count_responses(buf) < 2 and time.monotonic() < deadline:
            chunk = s.recv(65536)
            assert chunk, buf[-300:]
            buf += chunk
    finally:
        s.close()
        sender.join(5)
    assert buf.count(b"HTTP/1.1 200") == 2, buf[-400:]


def _tagged_post(tag, headers, pad):
    body = json.dumps({"model": "fast", "messages": MSG, "pad": pad}).encode()
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n" + AUTH + headers
            + b"x-test-tag: " + tag.encode() + b"\r\ncontent-length: %d\r\n\r\n" % len(body) + body)


# ------------------------------------------------------------------ transfer codings
GET_BEHIND = b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n"


def _with_coding(coding_lines, path=b"/v1/chat/completions"):
    return (b"POST " + path + b" HTTP/1.1\r\nhost: x\r\n" + AUTH + coding_lines
            + b"\r\n" + FIRST_CHUNK + b"0\r\n\r\n" + GET_BEHIND)


@pytest.mark.parametrize("coding_lines", [
    b"transfer-encoding: gzip, chunked\r\n",
    b"Transfer-Encoding: GZIP,Chunked\r\n",
    b"transfer-encoding: gzip\r\n",
    b"transfer-encoding: identity\r\n",
    b"transfer-encoding: chunked;q=1\r\n",
    # the same coding list over two lines (a repeated header keeps only its last value)
    b"transfer-encoding: gzip\r\ntransfer-encoding: chunked\r\n",
    b"Transfer-Encoding: gzip\r\ntransfer-encoding: chunked\r\n",
], ids=["gzip-chunked", "upper-case", "gzip", "identity", "parameter", "two-lines", "two-spellings"])
def test_unknown_transfer_coding_is_refused_501(sluice, coding_lines):
    buf = raw_exchange(sluice.port, _with_coding(coding_lines), until_closed=True, timeout=5)
    assert buf.startswith(b"HTTP/1.1 501"), buf[:300]
    assert b"connection: close" in buf.lower()
    assert count_responses(buf) == 1, buf  # nothing pipelined behind it is answered
    assert b'"code":"not_implemented"' in buf, buf


def test_unknown_transfer_coding_is_refused_in_the_clients_dialect(sluice):
    buf = raw_exchange(sluice.port, _with_coding(b"transfer-encoding: gzip, chunked\r\n", b"/v1/messages"),
                       until_closed=True, timeout=5)
    assert buf.startswith(b"HTTP/1.1 501"), buf[:300]
    body = json.loads(buf.split(b"\r\n\r\n", 1)[1])
    assert body["type"] == "error" and "transfer coding" in body["error"]["message"], body


@pytest.mark.parametrize("coding_lines", [b"transfer-encoding: chunked\r\n",
                                         b"Transfer-Encoding: CHUNKED \r\n"])
def test_chunked_alone_is_read(sluice, coding_lines):
    buf = raw_exchange(sluice.port, _with_coding(coding_lines), expect_responses=2)
    assert buf.startswith(b"HTTP/1.1 200"), buf[:300]
    assert count_responses(buf) == 2


@pytest.mark.parametrize("coding_lines", [
    b"transfer-encoding: chunked, chunked\r\n",
    b"transfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n",
])
def test_chunked_twice_is_malformed_400(sluice, coding_lines):
    # chunked applied twice: the parser refuses the head as malformed (RFC 9112 6.3: 400, close)
    buf = raw_exchange(sluice.port, _with_coding(coding_lines), until_closed=True, timeout=5)
    assert buf.startswith(b"HTTP/1.1 400"), buf[:300]
    assert count_responses(buf) == 1
