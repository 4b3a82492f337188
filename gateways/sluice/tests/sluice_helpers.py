"""Helpers for Sluice's tests: run Sluice as a real subprocess, talk HTTP to it."""
import http.client
import json
import math
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time

import psutil
import pytest
from sluice_stub import Stub, free_port

SLUICE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Sluice as a process: this folder's package, wherever the tests run from (sluice_env)
SLUICE_CMD = [sys.executable, "-m", "sluice"]

KEY = "sk-test-main"
# per-key series in /metrics need a scrape token: the configs that read them set this one
METRICS_TOKEN_LINE = 'metrics_token = "sk-test-metrics"'
# the whole suite runs against the compiled modules, or with SLUICE_PURE_PYTHON=1 against the
# pure-Python ones: every Sluice the tests start inherits it
PURE = os.environ.get("SLUICE_PURE_PYTHON") == "1"
# a worker renders /metrics at most once a second and serves that render meanwhile (server.py)
METRICS_CACHE_S = 1.0


def sluice_env(extra=None):
    """This process's environment with this folder first on PYTHONPATH, and ``extra`` over it."""
    path = os.pathsep.join(p for p in (SLUICE_DIR, os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path, **(extra or {}))


class Sluice:
    def __init__(self, config_text, tmp_dir, env=None):
        self.port = free_port()
        self.path = os.path.join(tmp_dir, f"sluice-{self.port}.toml")
        with open(self.path, "w") as f:
            f.write(config_text.replace("{port}", str(self.port)))
        self.log_path = self.path + ".log"
        self.env = sluice_env(env)
        self.proc = None
        self.scraped_at = -math.inf   # when metrics() last had its answer (time.monotonic)

    def start(self, timeout=15):
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([*SLUICE_CMD, "--config", self.path],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sluice exited early:\n{self.output()}")
            try:
                status, _, _ = request(self.port, "GET", "/health", timeout=1)
                if status == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"sluice did not become ready:\n{self.output()}")

    def output(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self, timeout=10):
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def state(self):
        status, _, body = request(self.port, "GET", "/debug/state")
        assert status == 200
        return json.loads(body)

    def metrics(self):
        """/metrics, with the config's metrics_token when it sets one, as rendered after every
        request before this call: without a token a worker renders it at most once a second
        (METRICS_CACHE_S), so a scrape then comes more than that after this helper's last one."""
        with open(self.path) as f:
            token = re.search(r'^metrics_token = "(.*)"', f.read(), re.M)
        headers = {"authorization": f"Bearer {token.group(1)}"} if token else {}
        wait_s = self.scraped_at + METRICS_CACHE_S + 0.05 - time.monotonic()
        if wait_s > 0 and token is None:
            time.sleep(wait_s)
        status, _, body = request(self.port, "GET", "/metrics", headers=headers)
        self.scraped_at = time.monotonic()
        assert status == 200
        return body.decode()


def request(port, method, path, body=None, headers=None, timeout=10):
    """One request on a fresh connection; returns (status, lower-cased headers, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        conn.close()


def chat(port, body, key=KEY, path="/v1/chat/completions", headers=None, timeout=10):
    h = {"content-type": "application/json"}
    if key is not None:
        h["authorization"] = f"Bearer {key}"
    h.update(headers or {})
    return request(port, "POST", path, body, h, timeout)


def raw_exchange(port, data, timeout=10, until_closed=False, expect_responses=1):
    """Send raw bytes, read until ``expect_responses`` complete responses (or close)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        buf = b""
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            buf += chunk
            if not until_closed and count_responses(buf) >= expect_responses:
                break
        return buf
    finally:
        s.close()


def count_responses(buf):
    """Complete HTTP responses in ``buf`` (Content-Length or chunked bodies)."""
    n = 0
    pos = 0
    while True:
        end = buf.find(b"\r\n\r\n", pos)
        if end < 0:
            return n
        head = buf[pos:end].lower()
        body_start = end + 4
        if head.startswith(b"http/1.1 1"):  # interim (100 Continue): no body, not counted
            pos = body_start
            continue
        if b"content-length:" in head:
            length = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
            if len(buf) < body_start + length:
                return n
            pos = body_start + length
        elif b"transfer-encoding: chunked" in head:
            term = buf.find(b"\r\n0\r\n\r\n", body_start - 2)
            if term < 0:
                return n
            pos = term + 7
        else:
            return n
        n += 1


BASE_CONFIG = """
[server]
listen = "127.0.0.1:{port}"
workers = 1
max_body_bytes = 65536
debug_endpoints = true
# the stub is steered by x-test-* request headers; some tests forward headers of their own
forward_request_headers = ["content-type", "accept", "user-agent", "anthropic-version", "x-test-*",
                           "x-custom-*", "x-other", "x-mock-*"]
forward_response_headers = ["content-type", "date", "retry-after", "x-request-id", "x-test-*"]

[providers.stub]
base_url = "STUB/v1"
api_key_env = "SLUICE_TEST_PROVIDER_KEY"

[providers.anth]
base_url = "STUB/v1"
dialect = "anthropic"
api_key = "sk-ant-provider"

[providers.down]
base_url = "http://127.0.0.1:DOWNPORT/v1"
connect_timeout_s = 2

[providers.slow]
base_url = "STUB/v1"
response_timeout_s = 0.5
stream_idle_timeout_s = 0.5

[models.mock-model]
provider = "stub"
aliases = ["fast", "gpt-4o-mini"]

[models.claude]
provider = "anth"
upstream_model = "claude-x"
aliases = ["claude-alias"]

[models.down-model]
provider = "down"

[models.slow-model]
provider = "slow"

[keys.main]
key = "sk-test-main"

[keys.limited]
key = "sk-test-limited"
models = ["claude"]

[keys.rpm]
key = "sk-test-rpm"
rpm = 2

[keys.budget]
key = "sk-test-budget"
token_budget = 200

[keys.hashed]
key_sha256 = "HASHED"
"""

HASHED_SECRET = "sk-test-hashed"


def base_config(stub_url, extra=""):
    import hashlib
    down = free_port()  # nothing listens there
    return (BASE_CONFIG.replace("STUB", stub_url).replace("DOWNPORT", str(down))
            .replace("HASHED", hashlib.sha256(HASHED_SECRET.encode()).hexdigest()) + extra)


def server_config(stub_url, server_extra="", extra=""):
    """``base_config`` with the lines ``server_extra`` added to its [server] table."""
    return base_config(stub_url, extra).replace("max_body_bytes = 65536",
                                                "max_body_bytes = 65536\n" + server_extra)


def start_tls_stub(directory, host, alt_name):
    """A stub provider over HTTPS, with a self-signed certificate for ``host`` (``alt_name`` its
    subjectAltName, such as "IP:127.0.0.1") made in ``directory``; ``stub.cert`` is its path.
    Skips the test when openssl is not installed."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    key, cert = os.path.join(directory, "key.pem"), os.path.join(directory, "cert.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "2", "-subj", f"/CN={host}",
                    "-addext", f"subjectAltName={alt_name}"], check=True, capture_output=True, timeout=60)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    stub = Stub(ssl_context=ctx).start()
    stub.cert = cert
    return stub


def tls_provider_config(url, ca_line):
    """A Sluice with one model, "m", on the HTTPS provider "secure" at ``url`` (``ca_line``: its
    ca_file setting, or nothing)."""
    return f"""
[server]
listen = "127.0.0.1:{{port}}"
[providers.secure]
base_url = "{url}/v1"
api_key = "sk-tls"
{ca_line}
[models.m]
provider = "secure"
"""


# ------------------------------------------------------------------ raw clients, hostile ones
ENV = {"SLUICE_TEST_PROVIDER_KEY": "sk-provider-secret"}
MSG = [{"role": "user", "content": "hi"}]
AUTH = b"authorization: Bearer " + KEY.encode() + b"\r\n"


def raw_post(body, path=b"/v1/chat/completions", headers=b"", auth=AUTH):
    """A POST's raw bytes (``body`` as JSON when a dict or list), with the main key by default."""
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    return (b"POST " + path + b" HTTP/1.1\r\nhost: x\r\n" + auth + headers
            + b"content-length: %d\r\n\r\n" % len(body) + body)


def rss(pid):
    return psutil.Process(pid).memory_info().rss


def live_children(proc):
    """The pids of ``proc``'s children that run (not zombies, not gone while asked)."""
    pids = []
    for c in proc.children():
        try:
            if c.status() != psutil.STATUS_ZOMBIE:
                pids.append(c.pid)
        except psutil.NoSuchProcess:
            pass
    return pids


def health_ms(port):
    """How long a /health request takes, in ms (asserting it is answered 200)."""
    t = time.perf_counter()
    assert request(port, "GET", "/health", timeout=5)[0] == 200
    return (time.perf_counter() - t) * 1000


def tokens_spent(gw, key):
    """The tokens key ``key`` has spent, as Sluice ``gw`` reports it in /metrics (0 if absent)."""
    m = re.search(r'sluice_key_tokens_spent\{key="%s"\} (\d+)' % key, gw.metrics())
    return int(m.group(1)) if m else 0


def post_model(gw, model, headers=None, **extra):
    """A chat to ``model`` through a started gateway, without a key."""
    return chat(gw.port, dict({"model": model, "messages": MSG}, **extra), key=None, headers=headers)


def metric_sum(gw, line_prefix):
    """The sum of a gateway's /metrics lines starting with ``line_prefix``."""
    total = 0
    for line in gw.metrics().splitlines():
        if line.startswith(line_prefix):
            total += float(line.rsplit(" ", 1)[1])
    return total
