"""Sluice as its own package, as an operator installs and runs it without the study: ``pip install
./gateways/sluice`` into a fresh venv (its Cython build included), then ``sluice --config FILE``
serving a chat completion from the study's mock provider. The venv is made once per run (a
session fixture, used by this module alone): the build is minutes of CPU. Without a C compiler
the same install gives the pure-Python modules, and says so."""
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from mock_helpers import Mock, call
from polling import wait_for

from harness.host.processes import free_port
from harness.model.config import REPO_DIR

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]

PACKAGE = REPO_DIR / "gateways" / "sluice"
INSTALL_TIMEOUT_S = 1500
# nothing of this checkout on the path: the venv's own package runs, as it would for an operator
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SLUICE_PURE_PYTHON")}
CONFIG = """
[server]
listen = "127.0.0.1:{port}"
workers = 2
forward_response_headers = ["content-type", "x-mock-*"]   # the mock's request id, to the client

[providers.mock]
base_url = "{mock_url}/v1"
api_key_env = "MOCK_API_KEY"

[models.mock-model]
provider = "mock"

[keys.operator]
key = "sk-operator"
"""


def _venv(root, source, env=ENV):
    """A fresh venv at ``root`` with the package at ``source`` pip-installed; pip's output."""
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=120)
    done = subprocess.run([str(root / "bin" / "pip"), "install", "-v", "--disable-pip-version-check",
                           "--no-input", str(source)], env=env, cwd=root, capture_output=True,
                          text=True, timeout=INSTALL_TIMEOUT_S)
    assert done.returncode == 0, f"pip install {source} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def _sluice(root, *args, cwd):
    return subprocess.run([str(root / "bin" / "sluice"), *args], env=ENV, cwd=cwd,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="session")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("sluice-venv")
    _venv(root, PACKAGE)
    return root


def test_the_installed_package_serves_a_chat_completion_from_the_mock(installed, tmp_path):
    version = _sluice(installed, "--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.strip() == "sluice 0.1.0 compiled", version
    where = subprocess.run([str(installed / "bin" / "python"), "-c", "import sluice; print(sluice.__file__)"],
                           env=ENV, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert where.stdout.startswith(str(installed)), where     # the venv's copy, not this checkout's
    mock = Mock(tmp_path / "mock-stats", "--latency-ms", "5")
    port = free_port()
    config = tmp_path / "sluice.toml"
    config.write_text(CONFIG.format(port=port, mock_url=f"http://127.0.0.1:{mock.port}"))
    log = open(tmp_path / "sluice.log", "wb")
    proc = subprocess.Popen([str(installed / "bin" / "sluice"), "--config", str(config)],
                            env=dict(ENV, MOCK_API_KEY="sk-mock"), cwd=tmp_path, stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        status = None
        while status != 200 and time.monotonic() < deadline and proc.poll() is None:
            try:
                status = call(http.client.HTTPConnection("127.0.0.1", port, timeout=2), "GET", "/health")[0]
            except OSError:
                time.sleep(0.1)
        assert status == 200, (tmp_path / "sluice.log").read_text()
        body = {"model": "mock-model", "messages": [{"role": "user", "content": "Say hello."}]}
        status, headers, raw, _ = call(http.client.HTTPConnection("127.0.0.1", port, timeout=10),
                                       "POST", "/v1/chat/completions", body,
                                       {"Authorization": "Bearer sk-operator"})
        assert status == 200, raw
        assert json.loads(raw)["choices"][0]["message"]["content"]
        assert headers["x-mock-request-id"]               # the mock answered it
        # the supervisor says so once every worker is ready, which a worker serving may precede
        assert wait_for(lambda: "(compiled) listening on" in (tmp_path / "sluice.log").read_text(), 10.0)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        log.close()
        mock.stop()
    assert code == 0, (tmp_path / "sluice.log").read_text()


def test_without_a_compiler_the_package_installs_as_pure_python(tmp_path):
    # a copy without build/ (whose modules would be reused), and a compiler that always fails
    source = tmp_path / "sluice-src"
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns(
        "build", "_compiled", "tests", "__pycache__", "*.egg-info"))
    out = _venv(tmp_path / "venv", source, env=dict(ENV, CC="false"))
    assert "Sluice runs as pure Python" in out
    version = _sluice(tmp_path / "venv", "--version", cwd=tmp_path)
    assert version.stdout.strip() == "sluice 0.1.0 pure-python", version
