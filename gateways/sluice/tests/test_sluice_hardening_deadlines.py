"""What a provider or a client can make Sluice hold, and who may read its metrics: a provider SSE
frame that never ends, a request that never finishes (a trickling provider, a client that drains
slowly or not at all), and /metrics' per-key detail. Raw sockets on both sides."""
import json
import re
import socket
import subprocess
import time

import pytest
from sluice_helpers import KEY, MSG, SLUICE_CMD, raw_post, request, sluice_env
from sluice_scripted_provider import SSE_HEAD, ScriptedProvider, chunk, read_until_closed
from sluice_stub import wait_until

pytestmark = pytest.mark.integration

METRICS_TOKEN = "sk-scrape-test"


def _config(url, dialect="openai", server_extra="", model_extra="", provider_extra=""):
    return f"""
[server]
listen = "127.0.0.1:{{port}}"
workers = 1
debug_endpoints = true
metrics_token = "{METRICS_TOKEN}"
{server_extra}

[providers.p]
base_url = "{url}/v1"
dialect = "{dialect}"
response_timeout_s = 30
stream_idle_timeout_s = 60
{provider_extra}

[models.m]
provider = "p"
{model_extra}

[keys.k]
key = "{KEY}"
token_budget = 10000000
"""


def _metrics(gw):
    return gw.metrics()  # the config's metrics_token; rendered after what came before


def _released(gw):
    """Nothing of the request is held any more: in flight, pool slot, reservation."""
    state = gw.state()
    reserved = re.search(r'sluice_key_tokens_reserved\{key="k"\} (\d+)', _metrics(gw))
    return (state["in_flight"] == 0 and state["upstream"]["p"]["busy"] == 0
            and reserved is not None and reserved.group(1) == "0")


def _stream_request(gw, body, path=b"/v1/chat/completions", rcvbuf=None):
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", gw.port))
    headers = b"anthropic-version: 2023-06-01\r\n" if path == b"/v1/messages" else b""
    s.sendall(raw_post(body, path=path, headers=headers))
    return s


# ------------------------------------------------------------------ an SSE frame without an end
def test_endless_sse_frame_fails_the_translated_stream(make_sluice):
    """An Anthropic provider sends ``data: `` and then 8 MiB without a blank line."""
    def endless_frame(provider, c, head, body):
        c.sendall(SSE_HEAD + chunk(b"event: message_start\ndata: "))
        piece = chunk(b"x" * 65536)
        for _ in range(128):
            c.sendall(piece)
        provider.hold(c, 30)

    liar = ScriptedProvider(endless_frame)
    try:
        gw = make_sluice(_config(liar.url, dialect="anthropic"))
        s = _stream_request(gw, {"model": "m", "messages": MSG, "stream": True})
        buf, closed = read_until_closed(s, 20)
        s.close()
        assert buf.startswith(b"HTTP/1.1 200"), buf[:200]
        assert closed, f"the stream was not ended: {buf[-300:]!r}"
        assert b'"error"' in buf and b"api_error" in buf, buf[-300:]
        assert wait_until(lambda: liar.closed_by_sluice == 1, timeout=5), "provider connection kept"
        assert wait_until(lambda: _released(gw), timeout=5)
        assert 'kind="sse_frame_too_large"' in _metrics(gw)
        assert request(gw.port, "GET", "/health")[0] == 200
    finally:
        liar.close()


# ------------------------------------------------------------------ the request deadline
def _trickle_openai(provider, c, head, body):
    """A 200 stream that never ends: an OpenAI chunk every 0.3 s for up to 40 s."""
    frame = (b'data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,'
             b'"delta":{"content":"a"},"finish_reason":null}]}\n\n')
    c.sendall(SSE_HEAD)
    end = time.monotonic() + 40
    while time.monotonic() < end:
        c.sendall(chunk(frame))
        time.sleep(0.3)


def test_request_deadline_ends_a_trickling_same_dialect_stream(make_sluice):
    liar = ScriptedProvider(_trickle_openai)
    try:
        gw = make_sluice(_config(liar.url, server_extra="request_timeout_s = 3"))
        s = _stream_request(gw, {"model": "m", "messages": MSG, "stream": True})
        buf, closed = read_until_closed(s, 15)
        s.close()
        assert buf.startswith(b"HTTP/1.1 200"), buf[:200]
        assert closed, f"a stream past request_timeout_s was not ended ({buf.count(b'data:')} frames)"
        assert wait_until(lambda: liar.closed_by_sluice == 1, timeout=5), "provider connection kept"
        assert wait_until(lambda: _released(gw), timeout=5)
    finally:
        liar.close()


def test_request_deadline_ends_a_translated_stream_with_an_error_event(make_sluice):
    liar = ScriptedProvider(_trickle_openai)
    try:
        gw = make_sluice(_config(liar.url, server_extra="request_timeout_s = 3"))
        s = _stream_request(gw, {"model": "m", "messages": MSG, "stream": True, "max_tokens": 10},
                            path=b"/v1/messages")
        buf, closed = read_until_closed(s, 15)
        s.close()
        assert buf.startswith(b"HTTP/1.1 200"), buf[:200]
        assert closed, "a translated stream past request_timeout_s was not ended"
        assert b"event: error" in buf, buf[-300:]
        assert wait_until(lambda: _released(gw), timeout=5)
    finally:
        liar.close()


def test_request_deadline_before_the_head_is_504_in_the_clients_dialect(make_sluice):
    """The model's own request_timeout_s (2 s) before the provider's response_timeout_s (30 s)."""
    def silent(provider, c, head, body):
        provider.hold(c, 40)

    liar = ScriptedProvider(silent)
    try:
        gw = make_sluice(_config(liar.url, model_extra="request_timeout_s = 2"))
        s = _stream_request(gw, {"model": "m", "messages": MSG, "max_tokens": 10}, path=b"/v1/messages")
        buf, _ = read_until_closed(s, 12)
        s.close()
        assert buf.startswith(b"HTTP/1.1 504"), buf[:300] or "no answer within 12 s"
        err = json.loads(buf.split(b"\r\n\r\n", 1)[1])
        assert err["type"] == "error" and err["error"]["type"] == "timeout_error", err
        assert wait_until(lambda: liar.closed_by_sluice == 1, timeout=5), "provider connection kept"
        assert wait_until(lambda: _released(gw), timeout=5)
    finally:
        liar.close()


def _flood(provider, c, head, body):
    """A fast 200 stream of 32 MiB: far more than a slow client takes in the test's time."""
    frame = chunk(b"data: " + b"y" * 16000 + b"\n\n")
    c.sendall(SSE_HEAD)
    for _ in range(2000):
        c.sendall(frame)
    provider.hold(c, 5)


def test_slowly_draining_client_is_cut_at_the_request_deadline(make_sluice):
    liar = ScriptedProvider(_flood)
    try:
        gw = make_sluice(_config(liar.url, server_extra="request_timeout_s = 3"))
        s = _stream_request(gw, {"model": "m", "messages": MSG, "stream": True}, rcvbuf=8192)
        s.settimeout(0.5)
        end = time.monotonic() + 15
        let_go = False
        try:
            while time.monotonic() < end and not let_go:  # 4 KB every 0.2 s: always some progress
                try:
                    if s.recv(4096) == b"":
                        break
                except socket.timeout:
                    pass
                except ConnectionResetError:
                    break
                time.sleep(0.2)
                # what the kernel accepted before the close may still be arriving: Sluice itself
                # must hold nothing of it (the request, its connection, the provider's)
                state = gw.state()
                let_go = state["in_flight"] == 0 and state["client_connections"] == 1  # this /debug one
            assert let_go, "a client draining slowly held its request past request_timeout_s"
        finally:
            s.close()
        assert wait_until(lambda: _released(gw), timeout=5)
        assert wait_until(lambda: liar.closed_by_sluice == 1, timeout=5), "provider connection kept"
    finally:
        liar.close()


def test_client_that_reads_nothing_is_cut_after_the_send_timeout(make_sluice):
    liar = ScriptedProvider(_flood)
    try:
        gw = make_sluice(_config(liar.url, server_extra="client_send_timeout_s = 2"))
        s = _stream_request(gw, {"model": "m", "messages": MSG, "stream": True}, rcvbuf=8192)
        try:
            assert wait_until(lambda: gw.state()["in_flight"] == 1, timeout=5)
            # never read: the response waits in Sluice's buffers without progress
            assert wait_until(lambda: gw.state()["in_flight"] == 0, timeout=12), \
                "a client that reads nothing still holds its request"
            assert wait_until(lambda: _released(gw), timeout=5)
            assert wait_until(lambda: gw.state()["client_connections"] == 1, timeout=5)  # this /debug one
            assert wait_until(lambda: liar.closed_by_sluice == 1, timeout=5), "provider connection kept"
        finally:
            s.close()
    finally:
        liar.close()


def test_idle_client_with_answers_it_never_took_is_reset(make_sluice, stub):
    """Pipelined requests never read, whose answers all fit in the kernel's buffers: Sluice is
    idle, but a FIN would wait behind the answers, and the client would never see the close."""
    gw = make_sluice(_config(stub.url, server_extra="client_idle_timeout_s = 1"))
    with socket.create_connection(("127.0.0.1", gw.port)) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(b"GET /nope HTTP/1.1\r\nhost: x\r\n\r\n" * 3000)
        assert wait_until(lambda: _tcp_state(s) == TCP_CLOSE, timeout=10), \
            f"the connection is still open on the client's side (TCP state {_tcp_state(s)})"


TCP_CLOSE = 7  # linux/tcp_states.h: what a reset leaves


def _tcp_state(sock):
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]


# ------------------------------------------------------------------ who may read /metrics
def test_metrics_without_a_token_show_no_key_detail(make_sluice, stub):
    cfg = _config(stub.url).replace(f'metrics_token = "{METRICS_TOKEN}"\n', "")
    gw = make_sluice(cfg, env={"SLUICE_TEST_PROVIDER_KEY": "x"})
    status, _, data = request(gw.port, "GET", "/metrics")
    assert status == 200
    text = data.decode()
    assert "sluice_requests_in_flight" in text  # what the study scrapes
    assert 'key="' not in text, [ln for ln in text.splitlines() if 'key="' in ln][:3]


def test_metrics_per_key_detail_needs_a_token(make_sluice, stub, tmp_path):
    cfg = _config(stub.url).replace(f'metrics_token = "{METRICS_TOKEN}"\n', "metrics_per_key = true\n")
    path = tmp_path / "c.toml"
    path.write_text(cfg.replace("{port}", "1"))
    out = subprocess.run([*SLUICE_CMD, "--config", str(path), "--check"], capture_output=True,
                         text=True, timeout=30, env=sluice_env({"SLUICE_TEST_PROVIDER_KEY": "x"}))
    assert out.returncode == 2 and "metrics_per_key = true needs a metrics_token" in out.stderr, out.stderr
    # with the token: the detail, to the token only (a wrong token of the same length, a prefix)
    gw = make_sluice(_config(stub.url), env={"SLUICE_TEST_PROVIDER_KEY": "x"})
    assert 'sluice_key_tokens_reserved{key="k"}' in _metrics(gw)
    for wrong in ("sk-scrape-tesT", "sk-scrape-tes", "", METRICS_TOKEN + "x"):
        status = request(gw.port, "GET", "/metrics", headers={"authorization": f"Bearer {wrong}"})[0]
        assert status == 401, wrong


def test_sse_parser_line_ends_and_frame_limit():
    from sluice.translate import FrameTooLarge, SSEParser
    p = SSEParser(max_frame=1024)
    assert p.feed(b"data: a\r") == []
    assert p.feed(b"\r\ndata: b\r\r: c\n\nevent: e\rdata: [DO") == [(None, b"a"), (None, b"b")]
    assert p.feed(b"NE]\r") == []
    assert p.feed(b"\n\r\n") == [(b"e", b"[DONE]")]
    p.feed(b"data: " + b"x" * 1000)
    p.feed(b"x" * 10)
    with pytest.raises(FrameTooLarge):  # the same frame, grown by small reads, past the limit
        p.feed(b"x" * 10)
