"""Fixtures for Sluice's tests: a stub provider (in-process thread) and Sluice itself (a real
subprocess, ``python -m sluice`` from this folder's package, stopped with SIGTERM); and the
guard that no test leaves a process behind.

The suite runs against the compiled modules, built here first if they are missing or stale
(build.py, idempotent), or with SLUICE_PURE_PYTHON=1 against the pure-Python modules: every
Sluice the tests start inherits the choice."""
import os
import signal
import subprocess
import sys

import psutil
import pytest
from sluice_helpers import METRICS_TOKEN_LINE, PURE, SLUICE_DIR, Sluice, server_config
from sluice_stub import Stub, wait_until


def pytest_configure(config):
    # before the test modules import sluice, so that they get the build too; under
    # pytest-xdist once, in the controller, before its workers start
    if not PURE and "PYTEST_XDIST_WORKER" not in os.environ:
        done = subprocess.run([sys.executable, os.path.join(SLUICE_DIR, "build.py")],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.exit(f"cannot compile Sluice (or run with SLUICE_PURE_PYTHON=1):\n"
                        f"{done.stdout[-2000:]}{done.stderr[-4000:]}", returncode=2)


def _descendants():
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


@pytest.fixture(autouse=True)
def no_orphans():
    """Fail the test if any process it started (by pid) is still alive afterwards."""
    before = {p.pid for p in _descendants()}
    yield

    def left_behind():
        return [p for p in _descendants() if p.pid not in before and p.is_running()
                and p.status() != psutil.STATUS_ZOMBIE]

    wait_until(lambda: not left_behind(), 5.0)
    left = left_behind()
    if not left:
        return
    described = [f"{p.pid} {' '.join(p.cmdline()[:4])}" for p in left]
    for p in left:
        try:
            os.kill(p.pid, signal.SIGKILL)
        except OSError:
            pass
    pytest.fail(f"processes left behind by this test: {described}")


def pytest_report_header(config):
    return f"sluice: {'pure-python' if PURE else 'compiled'} modules"


@pytest.fixture(scope="module")
def stub():
    s = Stub().start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def stubs():
    """Two stub providers (deployments, fallbacks)."""
    a, b = Stub().start(), Stub().start()
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture(scope="module")
def sluice(stub, tmp_path_factory):
    gw = Sluice(server_config(stub.url, METRICS_TOKEN_LINE), str(tmp_path_factory.mktemp("sluice")),
                env={"SLUICE_TEST_PROVIDER_KEY": "sk-provider-secret"}).start()
    yield gw
    gw.stop()


@pytest.fixture
def make_sluice(tmp_path):
    """Start extra Sluice instances with their own config; all stopped after the test."""
    started = []

    def make(config_text, env=None):
        gw = Sluice(config_text, str(tmp_path), env=env).start()
        started.append(gw)
        return gw

    yield make
    for gw in started:
        gw.stop()
