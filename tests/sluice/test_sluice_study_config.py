"""Sluice started the way the study starts it (gateway.toml + sluice.toml.tmpl) in front of
the project's mock provider (mocks.server), when that mock is available."""
import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib

import pytest
from sluice_helpers import PURE, REPO, SLUICE_DIR, request
from sluice_stub import free_port


def _render(text, values):
    def sub(m):
        return str(values[m.group(1)])
    return re.sub(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", sub, text)


def _wait(port, proc, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            if request(port, "GET", "/health", timeout=1)[0] == 200:
                return True
        except OSError:
            time.sleep(0.1)
    return False


def _stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_study_config_against_the_mock(tmp_path):
    if not os.path.exists(os.path.join(REPO, "mocks", "server.py")):
        pytest.skip("mocks/server.py is not there")
    with open(os.path.join(SLUICE_DIR, "gateway.toml"), "rb") as f:
        spec = tomllib.load(f)
    mock_port, port = free_port(), free_port()
    values = {"port": port, "listen_host": "127.0.0.1",
              "upstream_url": f"http://127.0.0.1:{mock_port}", "upstream_host": "127.0.0.1",
              "upstream_port": mock_port, "run_dir": str(tmp_path), "gateway_dir": SLUICE_DIR,
              "cache_dir": str(tmp_path), "repo_dir": REPO, "python": sys.executable, "workers": 2}
    for f in spec["start"]["files"]:
        with open(os.path.join(SLUICE_DIR, f["template"])) as src:
            (tmp_path / f["output"]).write_text(_render(src.read(), values))
    mock = subprocess.Popen([sys.executable, "-m", "mocks.server", "--port", str(mock_port), "--latency-ms", "5",
                             "--stream-chunks", "4", "--chunk-delay-ms", "1"], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    gw = None
    try:
        if not _wait(mock_port, mock):
            pytest.skip("mocks.server did not start")
        version = subprocess.run([_render(c, values) for c in spec["version"]["command"]], capture_output=True,
                                 text=True, timeout=30)
        mode = "pure-python" if PURE else "compiled"
        assert re.search(spec["version"]["pattern"], version.stdout).group(1) == f"0.1.0 {mode}"
        env = dict(os.environ, **spec["start"].get("env", {}))
        gw = subprocess.Popen([_render(c, values) for c in spec["start"]["command"]], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert _wait(port, gw), "sluice did not become ready"
        req = spec["request"]
        headers = {"content-type": "application/json", **req["headers"]}
        body = {"model": req["model"], "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16}
        status, h, data = request(port, "POST", req["chat_path"], body, headers)
        assert status == 200, data
        assert json.loads(data)["choices"][0]["message"]["content"]
        assert h["x-mock-request-id"]
        overhead_ms = float(h[req["self_overhead_header"]]) * req["self_overhead_scale_ms"]
        assert 0 <= overhead_ms
        status, h, data = request(port, "POST", req["chat_path"], dict(body, stream=True), headers)
        assert status == 200 and h["content-type"].startswith("text/event-stream")
        assert data.rstrip().endswith(b"data: [DONE]")
        # every request needs a key: the feature-cost lane's features present one without limits
        status, _, _ = request(port, "POST", req["chat_path"], dict(body, model="mock-model"),
                               {"content-type": "application/json"})
        assert status == 401
        for name, feature in spec["features"].items():
            if name not in ("refused", "rate_limited"):
                status, _, data = request(port, "POST", feature.get("chat_path", "/v1/messages" if feature.get("dialect") == "anthropic"
                                                                     else req["chat_path"]),
                                          dict(body, model=feature["model"]),
                                          {"content-type": "application/json", **feature["headers"]})
                assert status == 200, (name, data)
        status, _, _ = request(port, "POST", req["chat_path"], body,
                               {"content-type": "application/json", "authorization": "Bearer sk-wrong"})
        assert status == 401
        # both translations: an Anthropic client through the OpenAI provider, and an OpenAI
        # client through the mock's Anthropic dialect
        status, _, data = request(port, "POST", "/v1/messages", dict(body, max_tokens=16),
                                  {"x-api-key": "sk-sluice-study", "content-type": "application/json"})
        assert status == 200 and json.loads(data)["type"] == "message"
        status, _, data = request(port, "POST", req["chat_path"],
                                  dict(body, model="mock-model-via-anthropic"),
                                  {"content-type": "application/json", **req["headers"]})
        assert status == 200 and json.loads(data)["choices"][0]["message"]["content"]
    finally:
        if gw is not None:
            _stop(gw)
        _stop(mock)
