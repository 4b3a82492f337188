"""Worker processes (SO_REUSEPORT), supervision, signals, graceful shutdown, config errors."""
import os
import re
import signal
import subprocess
import threading
import tomllib

import psutil
import pytest
from sluice_helpers import SLUICE_CMD, base_config, chat, live_children, request, sluice_env
from sluice_stub import wait_until

pytestmark = pytest.mark.integration

ENV = {"SLUICE_TEST_PROVIDER_KEY": "sk-provider-secret"}
MSG = [{"role": "user", "content": "hi"}]


def _workers_config(stub_url, n):
    return base_config(stub_url).replace("workers = 1", f"workers = {n}")


def test_two_workers_share_the_port_and_are_supervised(make_sluice, stub):
    gw = make_sluice(_workers_config(stub.url, 2), env=ENV)
    parent = psutil.Process(gw.proc.pid)
    assert wait_until(lambda: len(parent.children()) == 2)
    children = parent.children()
    assert all(os.getpgid(c.pid) == os.getpgid(parent.pid) for c in children)

    pids = set()
    for _ in range(40):
        status, _, _ = chat(gw.port, {"model": "fast", "messages": MSG})
        assert status == 200
        pids.add(gw.state()["pid"])
    assert pids <= {c.pid for c in children}  # the supervisor serves nothing

    # /metrics sums every worker (snapshots are published about once a second)
    def total():
        text = gw.metrics()
        return sum(int(v) for v in re.findall(r'sluice_requests_total\{model="mock-model",status="200"\} (\d+)',
                                              text))
    assert wait_until(lambda: total() == 40 and "sluice_workers 2" in gw.metrics(), timeout=5)

    # a worker that dies is replaced
    child = children[0]
    os.kill(child.pid, signal.SIGKILL)
    assert wait_until(lambda: len(set(live_children(parent)) - {child.pid}) == 2, timeout=10)
    for _ in range(10):
        assert chat(gw.port, {"model": "fast", "messages": MSG})[0] == 200

    # SIGTERM to the supervisor takes everyone down, cleanly
    assert gw.stop() == 0
    assert not parent.is_running() or parent.status() == psutil.STATUS_ZOMBIE


def test_workers_stop_when_the_supervisor_is_killed(make_sluice, stub):
    gw = make_sluice(_workers_config(stub.url, 2), env=ENV)
    parent = psutil.Process(gw.proc.pid)
    assert wait_until(lambda: len(parent.children()) == 2)
    children = parent.children()
    os.kill(parent.pid, signal.SIGKILL)
    gw.proc.wait()
    assert wait_until(lambda: not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children),
                      timeout=10)


def test_sigterm_finishes_in_flight_requests(make_sluice, stub):
    gw = make_sluice(base_config(stub.url), env=ENV)
    result = {}

    def slow():
        result["r"] = chat(gw.port, {"model": "fast", "messages": MSG}, headers={"x-test-delay-ms": "600"})

    t = threading.Thread(target=slow)
    t.start()
    assert wait_until(lambda: gw.state()["in_flight"] == 1)
    gw.proc.send_signal(signal.SIGTERM)
    t.join(10)
    assert result["r"][0] == 200
    assert result["r"][1].get("connection") == "close"
    assert gw.proc.wait(10) == 0


def test_access_log_is_written_in_batches(make_sluice, stub, tmp_path):
    log = tmp_path / "access.log"
    cfg = base_config(stub.url).replace("debug_endpoints = true", f'debug_endpoints = true\naccess_log = "{log}"')
    gw = make_sluice(cfg, env=ENV)
    for _ in range(3):
        assert chat(gw.port, {"model": "fast", "messages": MSG})[0] == 200
    assert chat(gw.port, {"model": "nope", "messages": MSG})[0] == 404
    gw.stop()
    lines = log.read_text().splitlines()
    assert len(lines) == 4  # chat requests that went to a provider, and the refusal
    import json
    entry = json.loads(lines[0])
    assert entry["status"] == 200 and entry["model"] == "mock-model" and entry["key"] == "main"
    assert entry["path"] == "/v1/chat/completions" and entry["overhead_us"] >= 0
    assert json.loads(lines[3])["status"] == 404


def test_bad_config_is_reported(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[server]\nlisten = "127.0.0.1:1"\n[providers.p]\nbase_url = "ftp://x"\n'
                   '[models.m]\nprovider = "p"\n')
    out = subprocess.run([*SLUICE_CMD, "--config", str(bad), "--check"], capture_output=True,
                         text=True, timeout=30, env=sluice_env())
    assert out.returncode == 2
    assert "base_url" in out.stderr
    bad.write_text('[server]\nlisten = "127.0.0.1:1"\nwokers = 2\n')
    out = subprocess.run([*SLUICE_CMD, "--config", str(bad)], capture_output=True, text=True,
                         timeout=30, env=sluice_env())
    assert out.returncode == 2 and "wokers" in out.stderr


def test_config_check_ok(tmp_path, stub):
    good = tmp_path / "good.toml"
    text = base_config(stub.url).replace("{port}", "0")
    good.write_text(text)
    out = subprocess.run([*SLUICE_CMD, "--config", str(good), "--check"], capture_output=True,
                         text=True, timeout=30, env=sluice_env(ENV))
    assert out.returncode == 0, out.stderr
    # "<path>: ok (P provider(s), M model(s), K key(s), W worker(s))", the counts of the file's tables
    m = re.fullmatch(r"(.+): ok \((\d+) provider\(s\), (\d+) model\(s\), (\d+) key\(s\), "
                     r"(\d+) worker\(s\)\)\n", out.stdout)
    assert m is not None, out.stdout
    cfg = tomllib.loads(text)
    assert m.group(1) == str(good)
    assert [int(n) for n in m.groups()[1:]] == [len(cfg["providers"]), len(cfg["models"]),
                                                 len(cfg["keys"]), cfg["server"]["workers"]]


def test_port_in_use_fails_fast(tmp_path, stub):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        cfg = tmp_path / "c.toml"
        cfg.write_text(base_config(stub.url).replace("{port}", str(s.getsockname()[1])))
        out = subprocess.run([*SLUICE_CMD, "--config", str(cfg)], capture_output=True, text=True,
                             timeout=30, env=sluice_env(ENV))
        assert out.returncode == 1 and "cannot listen" in out.stderr
    finally:
        s.close()


def test_metrics_and_health_need_no_key_but_chat_does(sluice):
    assert request(sluice.port, "GET", "/health")[0] == 200
    assert "sluice_requests_in_flight" in sluice.metrics()  # its scrape token, no virtual key
    assert chat(sluice.port, {"model": "fast", "messages": MSG}, key=None)[0] == 401
