"""Sluice as the study runs it: installed and started from its gateway.toml (sluice.toml.tmpl) in
front of the study's mock provider, every declared feature answered; and the fault lane's
resilient.toml.tmpl riding out a failing primary (Sluice's own test stubs as the two providers,
which count what they are sent)."""
import json
import re
import time

import pytest
from mock_helpers import Mock
from sluice_helpers import Sluice, metric_sum, post_model, request
from sluice_stub import Stub

from harness.model.gateway_spec import load_gateway_spec, render
from harness.run.systems import install, read_version, start_system

pytestmark = pytest.mark.integration


def test_study_config_against_the_mock(tmp_path):
    spec = load_gateway_spec("sluice")
    installed = install(spec, tmp_path / "install.log")   # instant when the install is current
    assert installed.ok, installed.message
    assert re.fullmatch(r"0\.1\.0 compiled", read_version(spec))   # what the study measures
    mock = Mock(tmp_path / "mock-stats", "--latency-ms", "5", "--stream-chunks", "4",
                "--chunk-delay-ms", "1")
    started = None
    try:
        started = start_system(spec, tmp_path, f"http://127.0.0.1:{mock.port}", mock.port,
                               workers=2, ready_timeout_s=20)
        port = int(started.target.base_url.rsplit(":", 1)[1])
        chat_path = started.target.chat_path
        headers = {"content-type": "application/json", **started.target.headers}
        body = {"model": started.target.model, "messages": [{"role": "user", "content": "Say hello."}],
                "max_tokens": 16}
        status, h, data = request(port, "POST", chat_path, body, headers)
        assert status == 200, data
        assert json.loads(data)["choices"][0]["message"]["content"]
        assert h["x-mock-request-id"]
        assert float(h[spec.self_overhead_header]) * spec.self_overhead_scale_ms >= 0
        status, h, data = request(port, "POST", chat_path, dict(body, stream=True), headers)
        assert status == 200 and h["content-type"].startswith("text/event-stream")
        assert data.rstrip().endswith(b"data: [DONE]")
        # every request needs a key: the feature-cost lane's features present one without limits
        status, _, _ = request(port, "POST", chat_path, dict(body, model="mock-model"),
                               {"content-type": "application/json"})
        assert status == 401
        for name in spec.features:
            if name not in ("refused", "rate_limited"):
                plan = spec.request_plan(name)
                status, _, data = request(port, "POST", plan.chat_path, dict(body, model=plan.model),
                                          {"content-type": "application/json", **plan.headers})
                assert status == 200, (name, data)
        status, _, _ = request(port, "POST", chat_path, body,
                               {"content-type": "application/json", "authorization": "Bearer sk-wrong"})
        assert status == 401
        # both translations: an Anthropic client through the OpenAI provider, and an OpenAI
        # client through the mock's Anthropic dialect
        status, _, data = request(port, "POST", "/v1/messages", dict(body, max_tokens=16),
                                  {"x-api-key": "sk-sluice-study", "content-type": "application/json"})
        assert status == 200 and json.loads(data)["type"] == "message"
        status, _, data = request(port, "POST", chat_path, dict(body, model="mock-model-via-anthropic"),
                                  headers)
        assert status == 200 and json.loads(data)["choices"][0]["message"]["content"]
    finally:
        if started is not None:
            started.process.stop()
        mock.stop()


@pytest.fixture
def stubs():
    a, b = Stub().start(), Stub().start()
    yield a, b
    a.stop()
    b.stop()


STUDY_KEY = {"authorization": "Bearer sk-sluice-study"}  # the template requires a key: the study's


def test_resilient_template_rides_out_a_failing_primary(stubs, tmp_path):
    """resilient.toml.tmpl as the fault lane renders it: the primary answering 500, every
    request still succeeds (a retry to the standby, then the primary ejected)."""
    a, b = stubs
    spec = load_gateway_spec("sluice")
    text = render((spec.directory / "resilient.toml.tmpl").read_text(),
                  {"listen_host": "127.0.0.1", "port": "{port}", "workers": 1, "upstream_url": a.url,
                   "standby_url": b.url, "standby": True})   # a standby runs
    g = Sluice(text, str(tmp_path), env={"SLUICE_MOCK_API_KEY": "sk-mock"}).start()
    try:
        a.fail_status = 500
        for _ in range(20):
            assert post_model(g, "mock-alias", STUDY_KEY)[0] == 200
        # min_requests = 5 on both sides: the primary's 6th failure (its retry on the standby
        # made the standby's 5th success before it) ejects it for 1 s (its first ejection)
        assert len(a.requests) == 6
        assert len(b.requests) == 20
        assert metric_sum(g, 'sluice_ejected_deployments{model="mock-model",provider="mock"}') == 1
        a.fail_status = 0
        time.sleep(1.2)
        for _ in range(200):  # back on probation: a tenth of the requests, the rest the standby's
            assert post_model(g, "mock-alias", STUDY_KEY)[0] == 200
            if len(a.requests) > 6:
                break
        assert len(a.requests) == 7
        time.sleep(1.1)       # healthy for ejection_s: its next success ends the probation
        for _ in range(200):
            assert post_model(g, "mock-alias", STUDY_KEY)[0] == 200
            if len(a.requests) > 7:
                break
        on_standby = len(b.requests)
        for _ in range(5):
            assert post_model(g, "mock-alias", STUDY_KEY)[0] == 200
        assert len(a.requests) == 13 and len(b.requests) == on_standby  # its whole weight again
    finally:
        g.stop()
