"""Fixtures for Sluice's tests: a stub provider (in-process thread) and Sluice itself
(a real subprocess started from gateways/sluice/run.py, stopped with SIGTERM)."""
import pytest
from sluice_helpers import Sluice, base_config
from sluice_stub import Stub


@pytest.fixture(scope="module")
def stub():
    s = Stub().start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def sluice(stub, tmp_path_factory):
    gw = Sluice(base_config(stub.url), str(tmp_path_factory.mktemp("sluice")),
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
