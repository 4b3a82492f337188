"""A key's reservation counts each content part the provider counts apart from its bytes: an
image (OpenAI image_url, Anthropic image), a document (OpenAI file, Anthropic document), audio
(OpenAI input_audio), by the weights of [prompt_estimate], on top of the body's bytes / 4. A
part of 60 bytes that costs the provider thousands of tokens can no longer slip under a budget;
the reservation is settled on the provider's count. Over real sockets, with validate_json on and
off, against the stub provider (both dialects)."""
import json

import pytest
from sluice_helpers import ENV, Sluice, base_config, chat

pytestmark = pytest.mark.integration

PART_TOKENS = 3000     # every kind's weight in the config below
BUDGET = 4000          # each key's budget: one part fits, two do not
KEYS = ["image-url", "file", "input-audio", "anth-image", "anth-document", "type-case", "escaped",
        "quoted", "settled"]
WEIGHTS = f"""
[prompt_estimate]
image_tokens = {PART_TOKENS}
document_tokens = {PART_TOKENS}
audio_tokens = {PART_TOKENS}
""" + "".join(f'\n[keys.{k}]\nkey = "sk-{k}"\ntoken_budget = {BUDGET}\n' for k in KEYS)

URL = "https://example.com/pictures/a-picture-of-sixty-bytes.png"
PARTS = {
    "image-url": ("openai", {"type": "image_url", "image_url": {"url": URL}}),
    "file": ("openai", {"type": "file", "file": {"file_id": "file-abc123"}}),
    "input-audio": ("openai", {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}),
    "anth-image": ("anthropic", {"type": "image", "source": {"type": "url", "url": URL}}),
    "anth-document": ("anthropic", {"type": "document", "source": {"type": "url", "url": URL + ".pdf"}}),
}


@pytest.fixture(scope="module", params=["validate_json = true", "validate_json = false"])
def gw(request, stub, tmp_path_factory):
    cfg = base_config(stub.url, WEIGHTS).replace("max_body_bytes = 65536",
                                                 "max_body_bytes = 65536\n" + request.param)
    g = Sluice(cfg, str(tmp_path_factory.mktemp("parts")), env=ENV).start()
    yield g
    g.stop()


def _body(dialect, parts):
    content = [{"type": "text", "text": "what is in these?"}] + parts
    model = "claude" if dialect == "anthropic" else "mock-model"
    return json.dumps({"model": model, "max_tokens": 10,
                       "messages": [{"role": "user", "content": content}]}).encode()


def _send(gw, key, dialect, body):
    path = "/v1/messages" if dialect == "anthropic" else "/v1/chat/completions"
    status, _, answer = chat(gw.port, body, key=f"sk-{key}", path=path)
    return status, answer


def _over_budget(status, answer):
    return status == 429 and b"token budget" in answer


@pytest.mark.parametrize("key", list(PARTS))
def test_each_kind_of_part_is_reserved_at_its_weight(gw, stub, key):
    dialect, part = PARTS[key]
    sent = len(stub.requests)
    # two parts: 6000 tokens and more, over the budget of 4000 (bytes / 4 alone: about 100)
    status, answer = _send(gw, key, dialect, _body(dialect, [part, part]))
    assert _over_budget(status, answer), (status, answer[:300])
    assert len(stub.requests) == sent
    # one part fits
    status, answer = _send(gw, key, dialect, _body(dialect, [part]))
    assert status == 200, answer[:300]


@pytest.mark.parametrize("key,spelled", [
    ("type-case", b'{"Type":"image_url","image_url":{"url":"%s"}}' % URL.encode()),
    ("escaped", b'{"type":"im\\u0061ge_url","image_url":{"url":"%s"}}' % URL.encode()),
])
def test_a_part_type_spelled_otherwise_is_counted(gw, stub, key, spelled):
    # a provider on Go's encoding/json reads "Type" as "type"; every JSON parser undoes escapes
    body = _body("openai", [])
    body = body.replace(b'"what is in these?"}', b'"what is in these?"},' + spelled + b"," + spelled)
    json.loads(body)
    status, answer = _send(gw, key, "openai", body)
    assert _over_budget(status, answer), (status, answer[:300])


def test_text_that_quotes_a_part_type_is_not_a_part(gw, stub):
    part = PARTS["image-url"][1]
    text = {"type": "text", "text": '{"type": "image_url"} and "type":"document"'}
    status, answer = _send(gw, "quoted", "openai", _body("openai", [text, part]))
    assert status == 200, answer[:300]


def test_the_reservation_is_settled_on_the_providers_count(gw, stub):
    # each request reserves over 3000 of the 4000; the stub counts a few tokens, and that is
    # what is charged: the next request fits again
    part = PARTS["image-url"][1]
    for _ in range(3):
        status, answer = _send(gw, "settled", "openai", _body("openai", [part]))
        assert status == 200, answer[:300]


def test_the_documented_default_weights(make_sluice, stub):
    # image_tokens = 1600 by default: two images (3200) over a budget of 3000, one within it
    gw = make_sluice(base_config(stub.url, '\n[keys.dflt]\nkey = "sk-dflt"\ntoken_budget = 3000\n'), env=ENV)
    part = PARTS["image-url"][1]
    status, answer = _send(gw, "dflt", "openai", _body("openai", [part, part]))
    assert _over_budget(status, answer), (status, answer[:300])
    status, answer = _send(gw, "dflt", "openai", _body("openai", [part]))
    assert status == 200, answer[:300]


@pytest.mark.parametrize("line, message", [
    ("image_tokens = -1", "image_tokens must be >= 0"),
    ("document_tokens = 10000001", "document_tokens must be <="),
    ("audio_tokens = 1.5", "audio_tokens must be an integer"),
    ("video_tokens = 5", "video_tokens"),
])
def test_the_weights_are_checked_at_start(stub, tmp_path, line, message):
    gw = Sluice(base_config(stub.url, f"\n[prompt_estimate]\n{line}\n"), str(tmp_path), env=ENV)
    with pytest.raises(RuntimeError):
        gw.start()
    assert gw.proc.returncode == 2
    assert "[prompt_estimate]" in gw.output() and message in gw.output(), gw.output()
