"""Refusals leave a trace: each request Sluice refuses itself (a bad key, a model the key may not
use, a key's rpm, a malformed request) gets an access-log line, from a real client over a real
socket, with the access log in a file; a flood of refusals from one source address is logged up
to its rate, and the refusals left out are counted in a line of their own."""
import json
import os
import socket

import pytest
from sluice_helpers import KEY, MSG, chat, raw_exchange, raw_post, server_config
from sluice_stub import wait_until

pytestmark = pytest.mark.integration

FLOOD = 60
LINES_PER_WINDOW = 10   # access_log.REFUSAL_LINES_PER_ADDRESS


def _log_lines(path):
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        return [json.loads(ln) for ln in f.read().splitlines()]


def _gateway(make_sluice, stub, tmp_path):
    log = str(tmp_path / "access.log")
    gw = make_sluice(server_config(stub.url, f'access_log = "{log}"\naccess_log_flush_s = 0.1'),
                     env={"SLUICE_TEST_PROVIDER_KEY": "sk-provider-secret"})
    return gw, log


def test_each_refusal_has_an_access_log_line(make_sluice, stub, tmp_path):
    gw, log = _gateway(make_sluice, stub, tmp_path)
    guessed = "sk-guess-0123456789"
    assert chat(gw.port, {"model": "mock-model", "messages": MSG}, key=guessed)[0] == 401
    assert chat(gw.port, {"model": "mock-model", "messages": MSG}, key="sk-test-limited")[0] == 403
    statuses = [chat(gw.port, {"model": "mock-model", "messages": MSG}, key="sk-test-rpm")[0] for _ in range(3)]
    assert statuses == [200, 200, 429]
    assert chat(gw.port, b'{"model": "mock-model", "messages": [', key=KEY)[0] == 400
    # a protocol error: answered 400, the connection closed
    got = raw_exchange(gw.port, raw_post({"model": "mock-model", "messages": MSG}).replace(
        b"content-length", b"content-length: 5\r\ncontent-length"), until_closed=True, timeout=5)
    assert got.startswith(b"HTTP/1.1 400")

    def refusals():
        return [e for e in _log_lines(log) if e.get("status", 200) >= 400]
    assert wait_until(lambda: len(refusals()) >= 5, timeout=5), _log_lines(log)
    lines = refusals()
    assert [e["status"] for e in lines] == [401, 403, 429, 400, 400], lines
    bad_key, not_allowed, rpm, bad_body, protocol = lines
    assert bad_key["client"] == "127.0.0.1" and bad_key["key"] == "-" and bad_key["path"] == "/v1/chat/completions"
    assert bad_key["method"] == "POST" and bad_key["refused"] == "invalid API key"
    assert not_allowed["key"] == "limited" and not_allowed["model"] == "mock-model"
    assert rpm["key"] == "rpm" and "rate limit" in rpm["refused"]
    assert "JSON" in bad_body["refused"]
    assert "malformed HTTP request" in protocol["refused"]
    assert guessed not in open(log).read()   # a guessed key is never written down
    # the two requests that went through are logged as before
    assert len([e for e in _log_lines(log) if e.get("status") == 200]) == 2


def test_a_flood_of_refusals_from_one_address_is_rate_limited_and_counted(make_sluice, stub, tmp_path):
    gw, log = _gateway(make_sluice, stub, tmp_path)
    # one key guessed after another, a connection each: an unknown key is refused from the
    # request's head, and the connection closed (its body is never read)
    for i in range(FLOOD):
        s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
        try:
            s.sendall(raw_post({"model": "mock-model", "messages": MSG}, auth=b"authorization: Bearer sk-%d\r\n" % i))
            got = b""
            while b"invalid API key" not in got:
                piece = s.recv(65536)
                assert piece, got
                got += piece
            assert got.startswith(b"HTTP/1.1 401")
        finally:
            s.close()

    def counted():
        entries = _log_lines(log)
        logged = len([e for e in entries if e.get("status") == 401])
        return logged, sum(e["refusals_not_logged"] for e in entries if "refusals_not_logged" in e)
    # the refusals left out are written when the window ends
    assert wait_until(lambda: sum(counted()) == FLOOD, timeout=30), counted()
    logged, not_logged = counted()
    # the flood may straddle two windows
    assert LINES_PER_WINDOW <= logged <= 2 * LINES_PER_WINDOW, counted()
    summary = [e for e in _log_lines(log) if "refusals_not_logged" in e]
    assert all(e["client"] == "127.0.0.1" and e["window_s"] == 10 for e in summary), summary
