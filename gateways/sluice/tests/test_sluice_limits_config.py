"""The configuration refuses what would silently disable a limit, hides a provider URL's password,
and says so at start when a setting is accepted but probably not meant: a real Sluice started on
each, a real client where it serves."""
import re
import subprocess

import pytest
from sluice_helpers import ENV, MSG, SLUICE_CMD, Sluice, base_config, chat, request, server_config, sluice_env
from sluice_stub import free_port

pytestmark = pytest.mark.integration


def _refused(stub, tmp_path, config):
    """The output of a Sluice started on ``config``, which must refuse it (exit 2)."""
    gw = Sluice(config, str(tmp_path), env=ENV)
    try:
        gw.start()
    except RuntimeError as e:
        assert gw.proc.returncode == 2, str(e)
        return gw.output()
    gw.stop()
    pytest.fail(f"Sluice started and served /health on {config!r}")


@pytest.mark.parametrize("table, line", [
    ("[server]", "request_timeout_s = nan"),         # nan passes every bound: no deadline at all
    ("[server]", "client_send_timeout_s = -nan"),
    ("[server]", "client_idle_timeout_s = inf"),     # a bound with no maximum
    ("[providers.stub]", "response_timeout_s = +inf"),
    ("[models.mock-model]", "request_timeout_s = nan"),
    ("[retry_budget]", "min_retries_per_s = nan"),
])
def test_nan_and_inf_are_refused(stub, tmp_path, table, line):
    text = server_config(stub.url)
    if table == "[retry_budget]":
        text += f"\n[retry_budget]\n{line}\n"
    else:
        assert table + "\n" in text
        text = text.replace(table + "\n", f"{table}\n{line}\n", 1)
    out = _refused(stub, tmp_path, text)
    key = line.split(" =")[0]
    assert re.search(rf"{re.escape(key)} must be a finite number", out), out


def test_a_provider_url_password_is_never_echoed(stub, tmp_path):
    port = free_port()
    for url in (f"http://user:s3cret-pw@127.0.0.1:{port}/v1", f"user:s3cret-pw@127.0.0.1:{port}/v1",
                f"ftp://user:s3cret-pw@127.0.0.1:{port}/v1"):
        text = server_config(stub.url).replace(f'base_url = "{stub.url}/v1"\ndialect = "anthropic"',
                                               f'base_url = "{url}"\ndialect = "anthropic"')
        assert url in text
        out = _refused(stub, tmp_path, text)
        assert "s3cret-pw" not in out, out
        assert "[providers.anth].base_url" in out, out
        assert f"***@127.0.0.1:{port}" in out, out


def test_a_listen_without_host_and_auth_off_with_keys_are_warned_about(stub, tmp_path):
    text = server_config(stub.url, "require_auth = false").replace(
        'listen = "127.0.0.1:{port}"', 'listen = ":{port}"')
    gw = Sluice(text, str(tmp_path), env=ENV).start()
    try:
        # what is warned about, as it behaves: every address, and a request without a key served
        assert request(gw.port, "GET", "/health")[0] == 200
        assert chat(gw.port, {"model": "mock-model", "messages": MSG}, key=None)[0] == 200
        out = gw.output()
        assert re.search(rf"warning: \[server\]\.listen = ':{gw.port}' names no host: Sluice "
                         rf"listens on every address \(0\.0\.0\.0\)", out), out
        assert re.search(r"warning: \[server\]\.require_auth = false with 5 key\(s\) configured: a "
                         r"request that leaves its key out skips every key's rpm, token_budget and "
                         r"models checks", out), out
    finally:
        gw.stop()
    # neither is said of what is meant: a host, auth on by default with keys
    gw = Sluice(server_config(stub.url), str(tmp_path), env=ENV).start()
    try:
        assert chat(gw.port, {"model": "mock-model", "messages": MSG}, key=None)[0] == 401
        assert "warning: [server]" not in gw.output()
    finally:
        gw.stop()


@pytest.mark.parametrize("name", ["Transfer-Encoding", "content-length", "HOST", "Authorization",
                                  "x-api-key", "anthropic-version", "Connection", "upgrade", "Expect"])
def test_provider_headers_that_sluice_writes_itself_are_refused_by_check(stub, tmp_path, name):
    # Sluice frames the request (host, length), authenticates it (api_key) and owns the
    # connection: a second value beside its own would reach the provider as a duplicate
    # (request smuggling with the framing ones, the wrong account with the key ones)
    text = base_config(stub.url).replace("{port}", "0").replace(
        "[providers.anth]\n", f'[providers.anth]\nheaders = {{ "x-ok" = "1", "{name}" = "v" }}\n', 1)
    path = tmp_path / "headers.toml"
    path.write_text(text)
    out = subprocess.run([*SLUICE_CMD, "--config", str(path), "--check"], capture_output=True,
                         text=True, timeout=60, env=sluice_env(ENV))
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert f"[providers.anth].headers: {name!r} is written by Sluice itself" in lines[0], lines[0]
    # an ordinary extra header is accepted
    path.write_text(text.replace(f', "{name}" = "v"', ""))
    out = subprocess.run([*SLUICE_CMD, "--config", str(path), "--check"], capture_output=True,
                         text=True, timeout=60, env=sluice_env(ENV))
    assert out.returncode == 0, out.stderr
