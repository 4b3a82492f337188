"""Wire timing for real: the mock, a gateway (nginx from the study's template; Sluice from
its study config), a small keep-alive client on 127.0.0.1 sending requests with ids, a
tcpdump capture on ``lo`` (harness/run/capture.py), parsed afterwards (harness/run/wire.py)
and joined with the mock's own request log."""
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from wire_summary import summarize

from harness.host.processes import free_port
from harness.model.gateway_spec import render
from harness.run.capture import Capture, CaptureError
from harness.run.wire import wire_times
from mocks.request_log import read_request_log

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

NGINX = "/usr/sbin/nginx"
TCPDUMP = shutil.which("tcpdump") or "/usr/bin/tcpdump"
SLUICE_DIR = os.path.join(REPO_DIR, "gateways", "sluice")   # its package, run from source

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.integration,  # real mock, nginx, Sluice and tcpdump
    pytest.mark.skipif(not os.path.exists(TCPDUMP) or os.geteuid() != 0,
                       reason="needs tcpdump (scripts/install-test-deps.sh) and root to capture"),
]



def _wait_http(port, proc, what, timeout_s=30.0, path="/health"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", path)
            if c.getresponse().status == 200:
                c.close()
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{what} not ready on {port}")


def _stop(proc, sig=signal.SIGTERM, timeout_s=15.0):
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _render(template_path, out_path, **values):
    with open(template_path) as f:   # the harness's renderer: sections and placeholders
        text = render(f.read(), {"counted": False, "standby": False, **values})
    with open(out_path, "w") as f:
        f.write(text)
    return out_path


@pytest.fixture
def mock(tmp_path):
    stats_dir = tmp_path / "mock-stats"
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mocks.server", "--port", str(port), "--latency-ms", "5",
                             "--stats-dir", str(stats_dir)], cwd=REPO_DIR, stdout=subprocess.DEVNULL)
    try:
        _wait_http(port, proc, "mock")
        yield port, str(stats_dir), proc
    finally:
        _stop(proc)


@pytest.fixture
def nginx(tmp_path, mock):
    if not os.path.exists(NGINX):
        pytest.skip("nginx not installed (scripts/install-test-deps.sh)")
    run_dir = tmp_path / "nginx"
    run_dir.mkdir()
    port = free_port()
    conf = _render(os.path.join(REPO_DIR, "gateways", "nginx", "nginx.conf.tmpl"), run_dir / "nginx.conf",
                   workers=1, run_dir=run_dir, upstream_host="127.0.0.1", upstream_port=mock[0],
                   listen_host="127.0.0.1", port=port)
    proc = subprocess.Popen([NGINX, "-p", str(run_dir), "-c", str(conf), "-g", "daemon off;"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_http(port, proc, "nginx")
        yield port
    finally:
        _stop(proc, signal.SIGQUIT)  # graceful: workers finish and exit with the master


def _sluice(tmp_path, mock_port, delay_ms):
    port = free_port()
    conf = _render(os.path.join(SLUICE_DIR, "sluice.toml.tmpl"),
                   tmp_path / f"sluice-{delay_ms}.toml", listen_host="127.0.0.1", port=port, workers=1,
                   upstream_url=f"http://127.0.0.1:{mock_port}")
    env = dict(os.environ, SLUICE_MOCK_API_KEY="sk-mock", SLUICE_TEST_DELAY_MS=str(delay_ms),
               PYTHONPATH=SLUICE_DIR)
    proc = subprocess.Popen([sys.executable, "-m", "sluice", "--config", str(conf)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_http(port, proc, "sluice")
    except BaseException:
        _stop(proc)
        raise
    return port, proc


def drive(port, prefix, connections=4, per_connection=25, model="mock-model"):
    """Requests with ids on keep-alive connections: x-request-id first among our headers,
    the ``[rid:]`` marker at the start of the user message.  Returns the ids answered 200."""
    def one_connection(k):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        ok = []
        try:
            for i in range(per_connection):
                rid = f"{prefix}-{k}-{i}"
                body = json.dumps({"model": model, "max_tokens": 16,
                                   "messages": [{"role": "user", "content": f"[rid:{rid}] Say hello."}]})
                c.request("POST", "/v1/chat/completions", body=body,
                          headers={"x-request-id": rid, "Content-Type": "application/json",
                                   "Authorization": "Bearer sk-sluice-study"})
                r = c.getresponse()
                r.read()
                if r.status == 200:
                    ok.append(rid)
        finally:
            c.close()
        return ok

    with ThreadPoolExecutor(connections) as ex:
        return [rid for ids in ex.map(one_connection, range(connections)) for rid in ids]


def captured_run(tmp_path, name, gateway_port, mock_port, **drive_args):
    cap = Capture(str(tmp_path / f"{name}.pcap"), [gateway_port, mock_port], interface="lo",
                  snaplen_bytes=512, max_duration_s=60, tcpdump=TCPDUMP).start()
    try:
        ids = drive(gateway_port, name, **drive_args)
    finally:
        result = cap.stop()
    df, summary = wire_times(result.pcap_path, mock_port=mock_port, gateway_port=gateway_port)
    return ids, df, summary, result


def test_capture_reports_missing_tcpdump(tmp_path):
    with pytest.raises(CaptureError, match="not found"):
        Capture(str(tmp_path / "x.pcap"), [1], tcpdump="no-such-tcpdump-here").start()


def test_nginx_wire_times(tmp_path, mock, nginx):
    mock_port, stats_dir, _ = mock
    drive(nginx, "warm", connections=2, per_connection=5)  # connections and pools open
    ids, df, s, cap = captured_run(tmp_path, "ngx", nginx, mock_port)
    assert len(ids) == 100
    assert cap.packets_dropped_by_kernel == 0 and cap.packets_captured > 0 and cap.cpu_s is not None
    seen = df[df["request_id"].isin(ids)]
    assert len(seen) == 100 and s["join_rate"] >= 0.95
    w = summarize(seen)
    print(f"\nnginx wire (µs): in_gateway {w['in_gateway_us']}, request_path {w['request_path_us']}, "
          f"response_path {w['response_path_us']}; join {s}; tcpdump cpu_s {cap.cpu_s:.3f} "
          f"for {cap.packets_captured} packets")
    assert (seen["in_gateway_us"].dropna() > 0).all()
    assert w["in_gateway_us"]["p50"] < 2000.0  # generous: nginx adds tens of µs
    # the mock's time on the wire covers its hold, and its log has every request once
    assert w["mock_wire_us"]["p50"] >= 5000.0
    log = read_request_log(stats_dir)
    assert set(ids) <= set(log["request_id"]) and not log["request_id"].duplicated().any()


def test_sluice_test_delay_shows_on_the_request_path(tmp_path, mock):
    """A Sluice slowed by SLUICE_TEST_DELAY_MS=2 shows its wire request path rising by
    1 to 2 ms over the same run without the delay: the event loop's timers count whole
    milliseconds of a clock read once a loop turn, so another event waking the loop first can
    fire a 2 ms timer up to 1 ms early."""
    mock_port = mock[0]
    p50 = {}
    for delay_ms in (0, 2):
        port, proc = _sluice(tmp_path, mock_port, delay_ms)
        try:
            drive(port, f"warm{delay_ms}", connections=2, per_connection=5, model="mock-alias")
            ids, df, s, _ = captured_run(tmp_path, f"sl{delay_ms}", port, mock_port, model="mock-alias")
        finally:
            _stop(proc)
        assert len(ids) == 100 and s["join_rate"] >= 0.95, s
        seen = df[df["request_id"].isin(ids)]
        w = summarize(seen)
        p50[delay_ms] = w["request_path_us"]["p50"]
        print(f"\nsluice delay {delay_ms} ms wire (µs): request_path {w['request_path_us']}, "
              f"response_path {w['response_path_us']}")
    rise_ms = (p50[2] - p50[0]) / 1000.0
    print(f"request path p50 rise with SLUICE_TEST_DELAY_MS=2: {rise_ms:.3f} ms")
    assert 1.0 <= rise_ms <= 4.0  # the top generous: a loaded machine fires a timer late
