"""Request bodies of the feature-cost lane: sizes, dialects, reproducibility; and how the load
generator judges an error body against the client's dialect."""
import json
import re

import pytest

from harness.model.dialects import (
    DIALECTS,
    ERROR_BODY_CLASSES,
    ERROR_BODY_PREFIX_BYTES,
    error_body_dialect,
)
from harness.run.bodies import chat_body
from sluice import translate


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
@pytest.mark.parametrize("request_bytes", [32 * 1024, 300 * 1024])
def test_long_bodies_land_on_the_requested_size(dialect, request_bytes):
    body = chat_body(dialect, "mock-model", 16, False, request_bytes, seed=3)
    assert abs(len(body) - request_bytes) <= max(64, request_bytes // 100)
    obj = json.loads(body)
    assert obj["model"] == "mock-model" and obj["tools"]
    assert len(obj["messages"]) > 5  # a conversation, not one padded message


def test_same_seed_same_body_and_another_seed_another():
    a = chat_body("openai", "m", 16, False, 32768, seed=1)
    assert a == chat_body("openai", "m", 16, False, 32768, seed=1)
    assert a != chat_body("openai", "m", 16, False, 32768, seed=2)


def test_anthropic_turns_alternate_and_end_with_the_user():
    obj = json.loads(chat_body("anthropic", "m", 16, True, 32768))
    roles = [m["role"] for m in obj["messages"]]
    assert all(a != b for a, b in zip(roles, roles[1:])) and roles[-1] == "user"
    assert obj["stream"] is True and obj["system"]


def test_small_body_is_the_default_chat():
    obj = json.loads(chat_body("openai", "m", 16, False))
    assert [m["role"] for m in obj["messages"]] == ["system", "user"]
    with pytest.raises(ValueError, match="unknown dialect"):
        chat_body("gemini", "m", 16, False)


def test_sluice_translates_the_long_anthropic_conversation():
    """The body exercises translation for real: tool use and tool results survive it."""
    obj = json.loads(chat_body("anthropic", "mock-alias", 16, False, 32768))
    new, stream = translate.anthropic_request_to_openai(obj, "mock-model")
    roles = [m["role"] for m in new["messages"]]
    assert roles[0] == "system" and "tool" in roles and not stream
    assert any(m.get("tool_calls") for m in new["messages"])


@pytest.mark.parametrize("dialect,content,done", [
    ("openai", b'data: {"choices":[{"delta":{"content":"Hi"}}]}', b"data: [DONE]"),
    ("anthropic", b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}',
     b'data: {"type":"message_stop"}'),
])
def test_dialect_frame_patterns(dialect, content, done):
    d = DIALECTS[dialect]
    assert re.search(d.content_frame.encode(), content) and not re.search(d.content_frame.encode(), done)
    assert re.search(d.done_frame.encode(), done) and not re.search(d.done_frame.encode(), content)


# --- error bodies in the client's dialect ----------------------------------------------------------

def test_error_bodies_of_the_clients_dialect():
    from mocks.faults import anthropic_error_body, openai_error_body
    for status in (429, 500, 503):
        openai, anthropic = openai_error_body(status), anthropic_error_body(status, "req_1")
        assert error_body_dialect("openai", openai) == "client"
        assert error_body_dialect("anthropic", anthropic) == "client"
        # the other provider's error shape is not the client's dialect
        assert error_body_dialect("openai", anthropic) == "other"
        assert error_body_dialect("anthropic", openai) == "other"


@pytest.mark.parametrize("body,expected", [
    (b'{"error": {"message": "upstream failed", "type": null}}', "client"),
    (b'{"error": "upstream failed"}', "other"),                  # a string, not an error object
    (b'{"error": {"message": "no type"}}', "other"),
    (b'{"detail": "Internal Server Error"}', "other"),
    (b'[1, 2]', "other"),
    (b"", "none"), (None, "none"),
    (b"<html><body>502 Bad Gateway</body></html>", "none"),
    (b"upstream connect error", "none"),
    (b"\xff\xfe{", "none"),
])
def test_error_body_shapes_for_an_openai_client(body, expected):
    assert error_body_dialect("openai", body) == expected


def test_only_a_bounded_prefix_of_an_error_body_is_read():
    padded = json.dumps({"error": {"message": "x" * ERROR_BODY_PREFIX_BYTES, "type": "server_error"}})
    assert error_body_dialect("openai", padded.encode()) == "other"   # cut there: too long to judge
    small = json.dumps({"error": {"message": "x", "type": "server_error"}}).encode()
    assert error_body_dialect("openai", small + b" " * (2 * ERROR_BODY_PREFIX_BYTES)) == "client"
    assert error_body_dialect("openai", b"x" * (4 * ERROR_BODY_PREFIX_BYTES)) == "none"
    assert set(ERROR_BODY_CLASSES) == {"client", "other", "none"}
