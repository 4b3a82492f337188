"""Request bodies of the feature-cost lane: sizes, dialects, reproducibility."""
import json
import re

import pytest
from sluice import translate

from harness.run.bodies import DIALECTS, chat_body


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
