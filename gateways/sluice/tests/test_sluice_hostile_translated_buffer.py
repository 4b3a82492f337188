"""A translated unary answer is buffered whole before it is translated: its bytes count against
the worker's max_held_body_bytes with the request bodies, so lying providers sending huge
answers cannot take a worker past it; the answer that would pass it gets 502, and its bytes are
released."""
import pytest
from sluice_helpers import chat
from sluice_scripted_provider import ScriptedProvider
from sluice_spend_provider import client_request, config
from sluice_stub import wait_until

pytestmark = pytest.mark.integration

CAP = 1 << 20


def test_a_buffered_translated_answer_counts_against_the_worker_s_cap(make_sluice):
    def script(p, c, request_head, body):
        # an answer said to be 3 MiB long: 2 MiB of it, then nothing (the provider lingers). The
        # gateway lets go once it holds more than the cap, perhaps before all of it is out.
        try:
            c.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                      b"content-length: %d\r\n\r\n" % (3 * CAP) + b'{"pad":"' + b"x" * (2 * CAP))
        except OSError:
            return
        p.hold(c, 30)
    provider = ScriptedProvider(script)
    try:
        gw = make_sluice(config(provider.url).replace(
            "workers = 1", f"workers = 1\nmax_body_bytes = 65536\nmax_held_body_bytes = {CAP}"))
        _, body, _ = client_request("openai", "an", False)  # translated: OpenAI client, Anthropic provider
        status, _, answer = chat(gw.port, body, timeout=20)
        assert status == 502, answer[:300]
        # the cap answered it, nothing else: the provider line names it
        assert wait_until(lambda: f"exceed {CAP} bytes" in gw.output(), 5), gw.output()
        assert wait_until(lambda: gw.state()["body_bytes_held"] == 0, 5)
    finally:
        provider.close()
