"""An HTTPS provider: verified against a CA file, and refused when the certificate is not trusted."""
import json

import pytest
from sluice_helpers import chat, start_tls_stub, tls_provider_config

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tls_stub(tmp_path_factory):
    s = start_tls_stub(str(tmp_path_factory.mktemp("tls")), "127.0.0.1", "IP:127.0.0.1")
    yield s
    s.stop()


def test_https_provider(make_sluice, tls_stub):
    gw = make_sluice(tls_provider_config(tls_stub.url, f'ca_file = "{tls_stub.cert}"'))
    status, _, data = chat(gw.port, {"model": "m", "messages": [{"role": "user", "content": "hi"}]}, key=None)
    assert status == 200, data
    assert json.loads(data)["choices"][0]["message"]["content"] == "Hello from stub"
    status, _, data = chat(gw.port, {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
                           key=None)
    assert status == 200 and data.rstrip().endswith(b"data: [DONE]")
    assert tls_stub.requests[-1]["headers"]["Authorization"] == "Bearer sk-tls"


def test_https_provider_with_untrusted_certificate_502(make_sluice, tls_stub):
    gw = make_sluice(tls_provider_config(tls_stub.url, ""))
    status, _, data = chat(gw.port, {"model": "m", "messages": [{"role": "user", "content": "hi"}]}, key=None)
    assert status == 502
    assert 'kind="connect_error"' in gw.metrics()
