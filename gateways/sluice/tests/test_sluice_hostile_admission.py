"""Work a client can put on the loop before any limit of its key applies, over raw sockets to a
running Sluice: a chunked body of a million one-byte chunks is refused at the chunk limit while
another connection is served; the key's rate limit comes before its body is read, its model
allow-list before a second parse of the body, and that parse has a size limit."""
import json
import socket
import threading
import time

import pytest
from sluice_helpers import AUTH, ENV, MSG, base_config, count_responses, raw_exchange, raw_post, request

pytestmark = pytest.mark.integration

MAX_CHUNKS = 65536                 # README "Limits": chunks in one request body
MAX_REPEAT_CHECK_BYTES = 1 << 20   # README "Limits": a body parsed a second time for repeated keys
CHUNKED_HEAD = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n" + AUTH
                + b"transfer-encoding: chunked\r\n\r\n")
ONCE = b"authorization: Bearer sk-once\r\n"
LIMITED = b"authorization: Bearer sk-test-limited\r\n"


def _config(stub):
    """The base config with the default body limit (4 MiB) and a key allowed one request a minute."""
    return base_config(stub.url, '\n[keys.once]\nkey = "sk-once"\nrpm = 1\n').replace(
        "max_body_bytes = 65536", "max_body_bytes = 4194304")


def _status_and_body(buf):
    head, _, body = buf.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def _chunked(body, chunks):
    """``body`` in ``chunks`` chunks: one byte each, the last one the rest."""
    assert len(body) >= chunks
    parts = [b"1\r\n" + body[i:i + 1] + b"\r\n" for i in range(chunks - 1)]
    rest = body[chunks - 1:]
    return b"".join(parts) + b"%x\r\n" % len(rest) + rest + b"\r\n0\r\n\r\n"


# ------------------------------------------------------------------ chunks per body
def test_a_million_one_byte_chunks_are_refused_at_the_chunk_limit(make_sluice, stub):
    gw = make_sluice(_config(stub), env=ENV)
    latencies = []  # another client's requests while the body arrives (information, not timing)
    done = threading.Event()

    def other_client():
        while not done.is_set():
            t = time.perf_counter()
            status, _, _ = request(gw.port, "GET", "/health", timeout=30)
            latencies.append((status, time.perf_counter() - t))
            time.sleep(0.02)

    def send_body(s):
        try:
            s.sendall(b"1\r\na\r\n" * 1_000_000)  # 6 MB on the wire: 1 MB of body, never ended
        except OSError:  # Sluice closed the connection after its answer
            pass

    s = socket.create_connection(("127.0.0.1", gw.port), timeout=60)
    other = threading.Thread(target=other_client, daemon=True)
    other.start()
    sender = threading.Thread(target=send_body, args=(s,), daemon=True)
    try:
        s.sendall(CHUNKED_HEAD)
        sender.start()
        buf = b""
        while count_responses(buf) < 1:
            piece = s.recv(65536)
            if not piece:
                break
            buf += piece
        sender.join(30)
    finally:
        done.set()
        s.close()
        other.join(30)
    status, body = _status_and_body(buf)
    print(f"other connection during the upload: {len(latencies)} requests, latencies (s): "
          f"{[round(t, 3) for _, t in latencies]}")
    assert status == 413, buf[:300]
    assert f"more than {MAX_CHUNKS} chunks".encode() in body, body
    assert b"connection: close" in buf.split(b"\r\n\r\n", 1)[0]
    assert latencies and all(st == 200 and t < 2.0 for st, t in latencies), latencies
    assert request(gw.port, "GET", "/health", timeout=5)[0] == 200


def test_the_chunk_limit_is_a_count(make_sluice, stub):
    gw = make_sluice(_config(stub), env=ENV)
    body = json.dumps({"model": "mock-model", "messages": MSG, "pad": "p" * MAX_CHUNKS}).encode()
    buf = raw_exchange(gw.port, CHUNKED_HEAD + _chunked(body, MAX_CHUNKS), timeout=60)
    assert buf.startswith(b"HTTP/1.1 200"), buf[:300]
    assert stub.requests[-1]["body"] == body
    buf = raw_exchange(gw.port, CHUNKED_HEAD + _chunked(body, MAX_CHUNKS + 1), timeout=60)
    status, answer = _status_and_body(buf)
    assert status == 413, buf[:300]
    assert f"more than {MAX_CHUNKS} chunks".encode() in answer


# ------------------------------------------------------------------ the key's limits first
def test_the_rate_limit_comes_before_the_body_is_read(make_sluice, stub):
    gw = make_sluice(_config(stub), env=ENV)
    buf = raw_exchange(gw.port, raw_post({"model": "mock-model", "messages": MSG}, auth=ONCE))
    assert buf.startswith(b"HTTP/1.1 200"), buf[:300]
    # over the key's rate: refused as such, whatever its body (never read, not even parsed)
    for body in (b'{"model": "mock-model", "messages": [', b"[" + b"{}," * 100000 + b"{}]"):
        buf = raw_exchange(gw.port, raw_post(body, auth=ONCE))
        assert buf.startswith(b"HTTP/1.1 429"), buf[:300]
        assert b"retry-after:" in buf.lower()


def test_the_allow_list_comes_before_a_second_parse(make_sluice, stub):
    gw = make_sluice(_config(stub), env=ENV)
    sent = len(stub.requests)
    # "n" twice: only a second parse, keeping every object's pairs, could tell; the key may not
    # use the model, so that parse is never made
    body = b'{"model":"mock-model","n":1,"messages":[{"role":"user","content":"x"}],"n":2}'
    buf = raw_exchange(gw.port, raw_post(body, auth=LIMITED))
    status, answer = _status_and_body(buf)
    assert status == 403, buf[:300]
    assert b"may not use model" in answer
    # a key allowed the model gets the repeated key's refusal
    buf = raw_exchange(gw.port, raw_post(body))
    status, answer = _status_and_body(buf)
    assert status == 400 and b"more than once" in answer, buf[:300]
    assert len(stub.requests) == sent


def test_a_second_parse_has_a_size_limit(make_sluice, stub):
    gw = make_sluice(_config(stub), env=ENV)
    # an escaped letter ("\u0061") could spell a decided key: such a body is parsed a second time,
    # up to the limit; over it, refused without that parse
    def body_of(size):
        head = b'{"model":"mock-model","messages":[{"role":"user","content":"\\u0061'
        tail = b'"}]}'
        return head + b"x" * (size - len(head) - len(tail)) + tail

    at_limit = body_of(MAX_REPEAT_CHECK_BYTES)
    buf = raw_exchange(gw.port, raw_post(at_limit), timeout=30)
    assert buf.startswith(b"HTTP/1.1 200"), buf[:300]
    assert stub.requests[-1]["body"] == at_limit
    sent = len(stub.requests)
    buf = raw_exchange(gw.port, raw_post(body_of(MAX_REPEAT_CHECK_BYTES + 1)), timeout=30)
    status, answer = _status_and_body(buf)
    assert status == 400, buf[:300]
    assert f"over {MAX_REPEAT_CHECK_BYTES} bytes".encode() in answer, answer
    assert len(stub.requests) == sent
    # the same size without an escape needs no second parse: answered
    plain = body_of(MAX_REPEAT_CHECK_BYTES + 1).replace(b"\\u0061", b"a" * 6)
    buf = raw_exchange(gw.port, raw_post(plain), timeout=30)
    assert buf.startswith(b"HTTP/1.1 200"), buf[:300]
