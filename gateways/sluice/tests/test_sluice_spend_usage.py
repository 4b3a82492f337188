"""A key's budget is an upper bound on what it can cost: per dialect and mode (unary, stream,
translated, a cached prompt), the spend Sluice settles, read from its /metrics, is never below
what the provider's own usage says, and never above the reservation when the provider honours
the request's limits. Usage that is missing is charged as the reservation, cache counts at their
weights, and a count split between two provider reads is read whole."""
import pytest
from sluice_helpers import chat, tokens_spent
from sluice_scripted_provider import ScriptedProvider
from sluice_spend_provider import (
    anthropic_events,
    anthropic_unary,
    asked_usage,
    client_request,
    head,
    is_stream,
    openai_events,
    openai_unary,
    send_chunked,
    settled,
    split_digits,
    start,
    usage_of,
)

pytestmark = pytest.mark.integration

PROMPT_SIDE = 3000   # prompt tokens billed, 2400 of them cached
CACHED = 2400
COMPLETION = 700
# (client dialect, model): same-dialect both ways, then translated both ways
ROUTES = [("openai", "oa"), ("anthropic", "an"), ("openai", "an"), ("anthropic", "oa")]


def _answer(usage, split=None, length_framed=False):
    """A script answering in the provider's dialect (read from the request line), unary or
    streamed as asked, with ``usage`` (by dialect; None: none at all). ``split(data, dialect)``
    says where the body is cut into two provider chunks."""
    def script(p, c, request_head, body):
        dialect = "anthropic" if b"/messages " in request_head.split(b"\r\n", 1)[0] else "openai"
        u = usage[dialect] if usage is not None else None
        if is_stream(body):
            events = openai_events(u, asked_usage(body)) if dialect == "openai" else anthropic_events(u)
            data, content_type = b"".join(events), b"text/event-stream"
        else:
            data = openai_unary(u) if dialect == "openai" else anthropic_unary(u)
            content_type = b"application/json"
        if length_framed:
            c.sendall(head(content_type, len(data)) + data)
            return
        c.sendall(head(content_type))
        at = split(data, dialect) if split is not None else len(data)
        send_chunked(c, [piece for piece in (data[:at], data[at:]) if piece])
    return script


CACHED_USAGE = {d: usage_of(d, PROMPT_SIDE, COMPLETION, CACHED) for d in ("openai", "anthropic")}


@pytest.fixture(scope="module")
def provider():
    p = ScriptedProvider(None)
    yield p
    p.close()


@pytest.fixture(scope="module")
def gw(provider, tmp_path_factory):
    g = start(provider, tmp_path_factory.mktemp("spend-usage"))
    yield g
    g.stop()


def _spend(gw, client_dialect, model, stream, include_usage=None):
    """(status, the client's body, tokens charged, the reservation) of one request."""
    path, body, reserved = client_request(client_dialect, model, stream, include_usage)
    before = tokens_spent(gw, "k")
    status, _, answer = chat(gw.port, body, path=path.decode())
    return status, answer, settled(gw, before), reserved


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
@pytest.mark.parametrize("client_dialect,model", ROUTES)
def test_a_cached_prompt_is_charged_every_billed_token(gw, provider, client_dialect, model, stream):
    # the provider's usage charges PROMPT_SIDE + COMPLETION (OpenAI's cached tokens are inside
    # prompt_tokens: not charged twice); Anthropic's cache counts were never charged
    provider.script = _answer(CACHED_USAGE)
    status, answer, charged, reserved = _spend(gw, client_dialect, model, stream)
    assert status == 200, answer[:300]
    assert charged == PROMPT_SIDE + COMPLETION <= reserved, (charged, reserved)


def test_each_kind_of_token_is_charged_at_its_weight(provider, tmp_path):
    weights = "\n[token_weights]\nprompt = 1\ncompletion = 4\ncache_write = 1.25\ncache_read = 0.1\n"
    g = start(provider, tmp_path, weights)
    try:
        provider.script = _answer(CACHED_USAGE)
        write = CACHED // 3
        read = CACHED - write
        anthropic = (PROMPT_SIDE - CACHED) + write * 1.25 + read * 0.1 + COMPLETION * 4
        assert _spend(g, "anthropic", "an", False)[2] == anthropic
        # OpenAI bills every cached token as a cache read: none as a cache write
        openai = (PROMPT_SIDE - CACHED) + CACHED * 0.1 + COMPLETION * 4
        assert _spend(g, "openai", "oa", False)[2] == openai
        assert _spend(g, "openai", "an", True)[2] == anthropic  # translated, streamed
    finally:
        g.stop()


def test_a_weight_that_is_not_a_number_of_at_least_0_is_refused(provider, tmp_path):
    with pytest.raises(RuntimeError, match=r"\[token_weights\]\.cache_read must be >= 0"):
        start(provider, tmp_path, "\n[token_weights]\ncache_read = -1\n")
    with pytest.raises(RuntimeError, match=r"unknown.*cache_miss|cache_miss.*unknown"):
        start(provider, tmp_path, "\n[token_weights]\ncache_miss = 1\n")


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
@pytest.mark.parametrize("client_dialect,model", ROUTES)
def test_missing_usage_is_charged_the_reservation(gw, provider, client_dialect, model, stream):
    # no usage at all (an OpenAI provider that ignores include_usage, too): unknown, not zero,
    # nor an estimate from the bytes or one token a frame
    provider.script = _answer(None)
    status, answer, charged, reserved = _spend(gw, client_dialect, model, stream)
    assert status == 200, answer[:300]
    assert charged == reserved


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
@pytest.mark.parametrize("client_dialect,model", ROUTES[:2])
@pytest.mark.parametrize("field", ["prompt", "completion"])
def test_a_count_split_between_two_provider_chunks_is_read_whole(gw, provider, client_dialect, model,
                                                                 stream, field):
    # Sluice re-frames a chunked body: its usage scan must read the provider's bytes, not
    # "%x\r\n" + bytes + "\r\n", which cut "completion_tokens": 70|0 into 70
    names = {("openai", "prompt"): "prompt_tokens", ("openai", "completion"): "completion_tokens",
             ("anthropic", "prompt"): "cache_read_input_tokens", ("anthropic", "completion"): "output_tokens"}

    def split(data, dialect):
        name = names[dialect, field]
        at = data.rfind(b'"%s"' % name.encode())  # the final usage's (a stream's last one)
        return at + split_digits(data[at:], name)

    provider.script = _answer(CACHED_USAGE, split)
    status, answer, charged, reserved = _spend(gw, client_dialect, model, stream)
    assert status == 200, answer[:300]
    assert charged == PROMPT_SIDE + COMPLETION, charged


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_a_content_length_answer_is_charged_its_usage(gw, provider, stream):
    provider.script = _answer(CACHED_USAGE, length_framed=True)
    for client_dialect, model in ROUTES:
        status, answer, charged, reserved = _spend(gw, client_dialect, model, stream)
        assert status == 200, answer[:300]
        assert charged == PROMPT_SIDE + COMPLETION <= reserved, (client_dialect, model, charged)
