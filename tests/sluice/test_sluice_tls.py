"""An HTTPS provider: verified against a CA file, and refused when the certificate is not trusted."""
import json
import shutil
import ssl
import subprocess

import pytest
from sluice_helpers import chat
from sluice_stub import Stub


@pytest.fixture(scope="module")
def tls_stub(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("tls")
    key, cert = d / "key.pem", d / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=60)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert), str(key))
    s = Stub(ssl_context=ctx).start()
    s.cert = str(cert)
    yield s
    s.stop()


def _config(url, ca_line):
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


def test_https_provider(make_sluice, tls_stub):
    gw = make_sluice(_config(tls_stub.url, f'ca_file = "{tls_stub.cert}"'))
    status, _, data = chat(gw.port, {"model": "m", "messages": [{"role": "user", "content": "hi"}]}, key=None)
    assert status == 200, data
    assert json.loads(data)["choices"][0]["message"]["content"] == "Hello from stub"
    status, _, data = chat(gw.port, {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
                           key=None)
    assert status == 200 and data.rstrip().endswith(b"data: [DONE]")
    assert tls_stub.requests[-1]["headers"]["Authorization"] == "Bearer sk-tls"


def test_https_provider_with_untrusted_certificate_502(make_sluice, tls_stub):
    gw = make_sluice(_config(tls_stub.url, ""))
    status, _, data = chat(gw.port, {"model": "m", "messages": [{"role": "user", "content": "hi"}]}, key=None)
    assert status == 502
    assert 'kind="connect_error"' in gw.metrics()
