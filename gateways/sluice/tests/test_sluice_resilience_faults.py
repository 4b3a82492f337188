"""Providers failing the ways gateway users report: attempts bounded by the deadline whichever
deployment they go to, garbage answers counted as failures, a stream failing after its first
relayed frame ended with an error event in the client's dialect, a non-retriable error sent once
with its type kept. Against a real Sluice, two stub providers and a scripted one."""
import json
import socket
import threading

import anthropic
import openai
import pytest
from sluice_helpers import Sluice, metric_sum, post_model
from sluice_scripted_provider import ScriptedProvider

pytestmark = pytest.mark.integration

MSG = [{"role": "user", "content": "hi"}]

CONFIG = """
[server]
listen = "127.0.0.1:{port}"
workers = 1
forward_request_headers = ["content-type", "x-test-*"]

[providers.a]
base_url = "A/v1"

[providers.b]
base_url = "B/v1"

[providers.garbage]
base_url = "G/v1"

[providers.script]
base_url = "S/v1"

[providers.script-anth]
base_url = "S/v1"
dialect = "anthropic"

[models.alternating]
deployments = [{ provider = "a", weight = 1 }, { provider = "b", weight = 1 }]
outlier = { min_requests = 0 }
retry = { on = ["5xx"], deadline_s = 1, backoff_base_ms = 25, backoff_max_ms = 1000 }

[models.garbage]
deployments = [{ provider = "garbage", weight = 1 }, { provider = "b", weight = 1 }]
outlier = { min_requests = 3, failure_margin = 0.3, ejection_s = 30, max_ejection_s = 30 }
retry = { on = ["5xx"] }

[models.scripted]
provider = "script"

[models.scripted-anth]
provider = "script-anth"
upstream_model = "claude-x"

[models.guarded]
deployments = [{ provider = "script", weight = 1 }, { provider = "b", weight = 0 }]
retry = { on = ["5xx", "429", "overloaded", "connect", "timeout", "reset"], retry_after_send = true }
fallbacks = ["back"]
fallback_on = ["5xx", "429", "overloaded", "connect"]

[models.back]
provider = "b"
"""

LIMITED = """
[server]
listen = "127.0.0.1:{port}"
workers = 2

[providers.a]
base_url = "A/v1"

[providers.b]
base_url = "B/v1"

[models.limited]
deployments = [{ provider = "a", weight = 1 }, { provider = "b", weight = 0 }]
retry = { max_attempts = 2, on = ["429"] }

[models.standby-first]
deployments = [{ provider = "b", weight = 1 }, { provider = "a", weight = 0 }]
retry = { max_attempts = 2, on = ["429"] }
"""


def _garbage(p, c, head, body):
    c.sendall(b"HELLO this is not HTTP\r\n\r\n")


def _sse_head(c):
    c.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")


def _chunk(c, data):
    c.sendall(b"%x\r\n%s\r\n" % (len(data), data))


def _openai_frame(i):
    return (b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":'
            b'[{"index":0,"delta":{"content":"tok%d "},"finish_reason":null}]}\n\n' % i)


def _anthropic_frames():
    start = {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 1}}}
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "tok0 "}}
    return b"".join(f"event: {o['type']}\ndata: {json.dumps(o)}\n\n".encode()
                    for o in (start, block, delta))


def cut_mid_event(p, c, head, body):
    """Two whole OpenAI frames and the start of a third, then the connection closes."""
    _sse_head(c)
    f = _openai_frame(0) + _openai_frame(1)
    _chunk(c, f + _openai_frame(2)[:30])


def ended_without_done(p, c, head, body):
    """Whole OpenAI frames and a complete chunked body, but no ``data: [DONE]``."""
    _sse_head(c)
    _chunk(c, _openai_frame(0) + _openai_frame(1))
    c.sendall(b"0\r\n\r\n")


def anthropic_ended_without_stop(p, c, head, body):
    """Anthropic events and a complete chunked body, but no ``message_stop``."""
    _sse_head(c)
    _chunk(c, _anthropic_frames())
    c.sendall(b"0\r\n\r\n")


def context_length_exceeded(p, c, head, body):
    err = json.dumps({"error": {"message": "This model's maximum context length is 8192 tokens.",
                                "type": "invalid_request_error", "param": "messages",
                                "code": "context_length_exceeded"}}).encode()
    # says it closes (the provider closes after one answer): else Sluice might pool the connection
    # and, before it saw the close, send the next request on it, a reset it may retry elsewhere
    c.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nconnection: close\r\n"
              b"content-length: %d\r\n\r\n%s" % (len(err), err))


@pytest.fixture(scope="module")
def script():
    p = ScriptedProvider(_garbage)
    yield p
    p.stopped.set()
    p.close()


@pytest.fixture(scope="module")
def garbage():
    p = ScriptedProvider(_garbage)
    yield p
    p.close()


@pytest.fixture(scope="module")
def gw(stubs, script, garbage, tmp_path_factory):
    a, b = stubs
    text = (CONFIG.replace("A/v1", a.url + "/v1").replace("B/v1", b.url + "/v1")
            .replace("G/v1", garbage.url + "/v1").replace("S/v1", script.url + "/v1"))
    g = Sluice(text, str(tmp_path_factory.mktemp("faults"))).start()
    yield g
    g.stop()


@pytest.fixture(autouse=True)
def reset(stubs, script):
    for s in stubs:
        s.plan = []
        s.fail_status = 0
        s.fail_share = 0.0
        s.retry_after = None
        s.requests.clear()
    script.requests.clear()
    yield


def _raw_stream(port, model, path="/v1/chat/completions"):
    """A streamed chat over a raw socket: the whole response, read to the connection's close."""
    body = json.dumps({"model": model, "messages": MSG, "stream": True, "max_tokens": 10}).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nconnection: close\r\n"
              b"content-length: %d\r\n\r\n%s" % (path.encode(), len(body), body))
    data = b""
    while True:
        piece = s.recv(65536)
        if not piece:
            break
        data += piece
    s.close()
    return data


def _dechunked(data):
    """The body of a chunked response, and whether its last chunk came."""
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    body = b""
    while rest:
        size_line, sep, rest = rest.partition(b"\r\n")
        if not sep:
            return body, False
        size = int(size_line, 16)
        if size == 0:
            return body, True
        body += rest[:size]
        rest = rest[size + 2:]
    return body, False


# ----------------------------------------------------------------- attempts within the deadline

def test_attempts_on_other_deployments_stay_within_the_deadline(gw, stubs):
    """Both deployments fail after 300 ms: a deadline of 1 s allows a few attempts, whichever
    deployment each goes to, never one alternating until the client's timeout."""
    a, b = stubs
    a.fail_status = b.fail_status = 500
    status, _, _ = post_model(gw, "alternating", headers={"x-test-delay-ms": "300"})
    assert status == 500
    # attempts start at most every 300 ms, none after the deadline: 1 s / 0.3 s + the first
    assert len(a.requests) + len(b.requests) <= 5


def test_fast_failing_deployments_do_not_drain_the_retry_budget(gw, stubs):
    """Two deployments failing at once: after each was tried once, the next attempts back off,
    so one request cannot spend the worker's retry budget (100 tokens) in milliseconds."""
    a, b = stubs
    a.fail_status = b.fail_status = 500
    before = metric_sum(gw, "sluice_retry_budget_exhausted_total")
    status, _, _ = post_model(gw, "alternating")
    assert status == 500
    assert len(a.requests) + len(b.requests) <= 30
    assert metric_sum(gw, "sluice_retry_budget_exhausted_total") == before


# ----------------------------------------------------------------- garbage counts as a failure

def test_a_deployment_answering_garbage_is_retried_and_ejected(gw, stubs, garbage):
    """An answer that is not HTTP is a failed attempt: retried on the other deployment, and it
    counts toward ejecting the deployment that sent it."""
    for _ in range(12):
        status, _, data = post_model(gw, "garbage")
        assert status == 200, data
    assert metric_sum(gw, 'sluice_ejections_total{model="garbage",provider="garbage"}') >= 1


# ----------------------------------------------------------------- a stream failing midway

def test_stream_cut_mid_event_ends_with_an_openai_error_event(gw, script):
    script.script = cut_mid_event
    body, _ = _dechunked(_raw_stream(gw.port, "scripted"))
    events = [e for e in body.split(b"\n\n") if e]
    assert events[:2] == [_openai_frame(0)[:-2], _openai_frame(1)[:-2]]
    assert json.loads(events[-1][len(b"data: "):])["error"]["type"] == "api_error"
    assert len(events) == 3  # the partial frame never reached the client
    with pytest.raises(openai.APIError):
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{gw.port}/v1", api_key="x", max_retries=0,
                               timeout=10)
        for _ in client.chat.completions.create(model="scripted", messages=MSG, stream=True):
            pass


def test_stream_ended_without_done_is_not_a_clean_end(gw, script):
    """A complete chunked body without ``[DONE]`` is a truncated stream: the client is told."""
    script.script = ended_without_done
    body, _ = _dechunked(_raw_stream(gw.port, "scripted"))
    events = [e for e in body.split(b"\n\n") if e]
    assert events[:2] == [_openai_frame(0)[:-2], _openai_frame(1)[:-2]]
    assert b'"error"' in events[-1] and len(events) == 3


def test_translated_stream_ended_without_stop_is_an_error_event(gw, script):
    """An Anthropic provider's stream ending without ``message_stop``, to an OpenAI client: an
    error event, not a synthesised ``finish_reason`` and ``[DONE]``."""
    script.script = anthropic_ended_without_stop
    body, _ = _dechunked(_raw_stream(gw.port, "scripted-anth"))
    assert b"[DONE]" not in body and b'"finish_reason":"stop"' not in body
    assert b'"error"' in [e for e in body.split(b"\n\n") if e][-1]


def test_anthropic_client_gets_an_error_event(gw, script):
    script.script = anthropic_ended_without_stop
    body, _ = _dechunked(_raw_stream(gw.port, "scripted-anth", path="/v1/messages"))
    events = [e for e in body.split(b"\n\n") if e]
    assert events[-1].startswith(b"event: error\n")
    assert b"message_stop" not in body
    client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{gw.port}", api_key="x", max_retries=0,
                                 timeout=10)
    with pytest.raises(anthropic.APIError):
        with client.messages.stream(model="scripted-anth", max_tokens=10, messages=MSG) as s:
            for _ in s:
                pass


# ----------------------------------------------------------------- non-retriable errors

def test_context_length_exceeded_is_sent_once_with_its_type(gw, script, stubs):
    script.script = context_length_exceeded
    status, _, data = post_model(gw, "guarded")
    assert status == 400
    err = json.loads(data)["error"]
    assert err["type"] == "invalid_request_error" and err["code"] == "context_length_exceeded"
    assert len(script.requests) == 1
    assert not stubs[1].requests  # neither the standby deployment nor the fallback
    # an Anthropic client: the type in its dialect
    from sluice_helpers import chat
    status, _, data = chat(gw.port, {"model": "guarded", "messages": MSG, "max_tokens": 10},
                           key=None, path="/v1/messages")
    assert status == 400
    err = json.loads(data)["error"]
    assert err["type"] == "invalid_request_error" and "context_length_exceeded" in err["message"]
    assert len(script.requests) == 2 and not stubs[1].requests


# ----------------------------------------------------------------- every deployment rate limited

@pytest.fixture(scope="module")
def limited(stubs, tmp_path_factory):
    a, b = stubs
    text = LIMITED.replace("A/v1", a.url + "/v1").replace("B/v1", b.url + "/v1")
    g = Sluice(text, str(tmp_path_factory.mktemp("limited"))).start()
    yield g
    g.stop()


def test_all_rate_limited_answers_429_with_the_shortest_retry_after(limited, stubs):
    """The primary asks for 1 s, the standby gives no Retry-After: the client's 429 still says 1."""
    a, b = stubs
    a.fail_status = b.fail_status = 429
    a.retry_after = 1
    status, headers, _ = post_model(limited, "limited")
    assert status == 429
    assert len(a.requests) == 1 and len(b.requests) == 1
    assert float(headers.get("retry-after", "0")) >= 1


def test_a_retry_after_is_honoured_by_every_worker(limited, stubs):
    """Deployment ``a`` asked for 2 s: no request reaches it again before they elapsed, whichever
    worker sends it (the requests go to both workers on fresh connections)."""
    a, b = stubs
    a.fail_status = b.fail_status = 429
    a.retry_after = 2
    status, _, _ = post_model(limited, "standby-first")   # b, then a: a's Retry-After is learnt
    assert status == 429 and len(a.requests) == 1
    first = a.requests[0]["t_s"]
    results = []
    threads = [threading.Thread(target=lambda: results.append(post_model(limited, "standby-first")))
               for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r[0] for r in results] == [429] * 10
    assert all(r["t_s"] - first >= 2.0 for r in a.requests[1:])
    assert all(float(r[1].get("retry-after", "0")) >= 1 for r in results)


# ----------------------------------------------------------------- an outage held and released

OUTAGE = """
[server]
listen = "127.0.0.1:{port}"
workers = 1
access_log = "ACCESS"
access_log_flush_s = 0.05
metrics = true

[providers.late]
base_url = "L/v1"
connect_timeout_s = 2

[providers.never]
base_url = "http://127.0.0.1:NEVER/v1"
connect_timeout_s = 2

[models.late]
provider = "late"
retry = { on = ["5xx", "connect"], deadline_s = 25 }

[models.never]
provider = "never"
retry = { on = ["5xx", "connect"], deadline_s = 1 }
"""


def _access_lines(path, model):
    try:
        with open(path) as f:
            lines = [json.loads(ln) for ln in f if ln.strip()]
    except FileNotFoundError:
        return []
    return [ln for ln in lines if ln.get("model") == model]


def _held(gw, model):
    return metric_sum(gw, 'sluice_requests_held{model="%s"}' % model)


def _held_then_released(gw, late, n=30):
    """``n`` requests to model "late" while its provider refuses connections, each held, then
    the provider listens; the clients' answers once every one has ended."""
    from sluice_stub import wait_until
    results = []
    threads = [threading.Thread(target=lambda: results.append(post_model_timeout(gw, "late")))
               for _ in range(n)]
    for t in threads:
        t.start()
    assert wait_until(lambda: _held(gw, "late") == n, timeout=20)
    late.start()
    for t in threads:
        t.join()
    return results


def test_an_outage_is_held_probed_and_released(tmp_path):
    """The provider refuses connections while 30 requests arrive: they are held (in /metrics),
    probed one at a time with the oldest of them, and once the provider listens every one is
    answered, each sent to it once, with few attempts beyond one a request (the failed probes)."""
    from sluice_stub import Stub, free_port, wait_until
    late = Stub()  # its port is known, nothing listens on it yet
    access = str(tmp_path / "access.log")
    text = (OUTAGE.replace("L/v1", late.url + "/v1").replace("ACCESS", access)
            .replace("NEVER", str(free_port())))
    gw = Sluice(text, str(tmp_path)).start()
    try:
        results = _held_then_released(gw, late)
        assert [r[0] for r in results] == [200] * 30
        assert len(late.requests) == 30          # each sent to the provider once
        assert wait_until(lambda: len(_access_lines(access, "late")) == 30, timeout=5)
        lines = _access_lines(access, "late")
        assert all(ln["held_ms"] > 0 for ln in lines)
        # one attempt a request, and the probes that found the provider still refusing (one at
        # a time, their gap doubling from 100 ms up to 2 s while the 30 arrived)
        assert sum(ln["attempts"] for ln in lines) <= 30 + 15
        assert _held(gw, "late") == 0
    finally:
        gw.stop()
        late.stop()


def test_held_requests_are_released_paced(tmp_path):
    """Once a probe is answered, the held requests go at the pace [outage] allows, not all at
    once: at 10 a second, doubling every second, 1 + 14.4 × (2^t − 1) may have gone t s after
    the release began (5 in its first 0.3 s, all 30 only after 1.59 s). The release begins
    after the probe reached the provider and every request reaches it after it was released,
    so both bounds hold on a machine of any speed."""
    from sluice_stub import Stub, free_port
    late = Stub()
    text = (OUTAGE.replace("L/v1", late.url + "/v1").replace("ACCESS", str(tmp_path / "a.log"))
            .replace("NEVER", str(free_port()))
            + "\n[outage]\nrelease_rate_per_s = 10\nrelease_doubling_ms = 1000\n")
    gw = Sluice(text, str(tmp_path)).start()
    try:
        results = _held_then_released(gw, late)
        assert [r[0] for r in results] == [200] * 30
        arrived = sorted(r["t_s"] for r in late.requests)
        assert len(arrived) == 30
        probe = arrived[0]
        assert sum(t <= probe + 0.3 for t in arrived) <= 1 + 5     # the probe and 5 released
        assert arrived[-1] - probe >= 1.5
    finally:
        gw.stop()
        late.stop()


def post_model_timeout(gw, model):
    from sluice_helpers import chat
    return chat(gw.port, {"model": model, "messages": MSG}, key=None, timeout=40)


def test_a_held_request_is_answered_at_its_deadline(tmp_path):
    """A provider that never comes back: the held request is answered 503 at its deadline (1 s),
    well within the client's timeout, not after retries that each found it refusing."""
    from sluice_stub import free_port
    text = (OUTAGE.replace("L/v1", "http://127.0.0.1:%d/v1" % free_port())
            .replace("ACCESS", str(tmp_path / "access.log")).replace("NEVER", str(free_port())))
    gw = Sluice(text, str(tmp_path)).start()
    try:
        status, _, data = post_model(gw, "never")
        assert status == 503, data
        assert "deadline" in json.loads(data)["error"]["message"]
    finally:
        gw.stop()


def test_outage_config_bounds():
    from sluice.config import Config, ConfigError
    base = {"providers": {"p": {"base_url": "http://127.0.0.1:1/v1"}}, "models": {"m": {"provider": "p"}}}
    for outage, key in [({"max_held_requests": -1}, "max_held_requests"),
                        ({"max_held_requests": 2_000_000}, "max_held_requests"),
                        ({"probe_backoff_min_ms": 0}, "probe_backoff_min_ms"),
                        ({"probe_backoff_min_ms": 500, "probe_backoff_max_ms": 400}, "probe_backoff_min_ms"),
                        ({"release_rate_per_s": 0}, "release_rate_per_s"),
                        ({"release_doubling_ms": 0}, "release_doubling_ms"),
                        ({"hold": True}, "hold")]:
        with pytest.raises(ConfigError, match=key):
            Config(dict(base, outage=outage))
    o = Config(base).outage
    assert (o.max_held_requests, o.probe_backoff_min_s, o.probe_backoff_max_s, o.release_rate_per_s,
            o.release_doubling_s) == (1000, 0.1, 2.0, 10, 0.1)


def test_a_deployment_back_from_refusing_takes_requests_again(tmp_path):
    """One of two deployments refuses connections: its requests go to the other; once it
    listens again, it takes requests again after its gap (never left out for good)."""
    from sluice_stub import Stub, free_port
    late, other = Stub(), Stub().start()
    text = (OUTAGE.replace("L/v1", late.url + "/v1").replace("ACCESS", str(tmp_path / "access.log"))
            .replace("NEVER", str(free_port())) + """
[providers.other]
base_url = "O/v1"

[models.pair]
deployments = [{ provider = "late", weight = 1 }, { provider = "other", weight = 1 }]
outlier = { min_requests = 0 }
retry = { on = ["5xx", "connect"], deadline_s = 25 }
""".replace("O/v1", other.url + "/v1"))
    gw = Sluice(text, str(tmp_path)).start()
    try:
        for _ in range(10):
            assert post_model(gw, "pair")[0] == 200
        assert len(other.requests) == 10
        late.start()
        for _ in range(200):
            assert post_model(gw, "pair")[0] == 200
            if late.requests:
                break
        assert late.requests
    finally:
        gw.stop()
        late.stop()
        other.stop()
