"""Sluice as the official SDKs see it: the OpenAI and Anthropic Python clients (pinned in the
test extra) against a running Sluice in front of the stub provider, in both dialects and
translated both ways (OpenAI client -> Anthropic provider, Anthropic client -> OpenAI provider).

Every answer must parse into the SDK's own types, and every error must arrive as the SDK's
typed exception: a client library is the real judge of "in the client's dialect". The SDKs do
not retry here (max_retries=0), so each exception is Sluice's first answer.

Models of the base config: "mock-model" is served by the OpenAI-dialect stub provider,
"claude" (upstream "claude-x") by the Anthropic-dialect one."""
import json

import anthropic
import openai
import pytest
from sluice_helpers import ENV, KEY, base_config
from sluice_stub import TOOL_ARGS, TOOL_CALL_ID, TOOL_USE_ID

pytestmark = pytest.mark.integration

OPENAI_MODEL = "mock-model"      # an OpenAI-dialect provider
ANTHROPIC_MODEL = "claude"       # an Anthropic-dialect provider
# the model each test asks for decides the provider, and so whether the request is translated
PROVIDERS = [pytest.param(OPENAI_MODEL, id="openai-provider"),
             pytest.param(ANTHROPIC_MODEL, id="anthropic-provider")]
MESSAGES = [{"role": "user", "content": "hi"}]
TOOL = "get_weather"
TOOL_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"},
                                                 "unit": {"type": "string"}}}
# the stub's usage figures: (prompt, completion) per provider dialect, unary and streamed
# (3 chunks by default)
UNARY_USAGE = {OPENAI_MODEL: (11, 5), ANTHROPIC_MODEL: (13, 4)}
STREAM_USAGE = {OPENAI_MODEL: (11, 3), ANTHROPIC_MODEL: (13, 3)}
STREAM_TEXT = "tok0 tok1 tok2 "
TOOL_HEADER = {"x-test-tool": TOOL}


def openai_client(port, key=KEY):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0, timeout=10)


def anthropic_client(port, key=KEY):
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key=key, max_retries=0, timeout=10)


def openai_tools():
    return [{"type": "function", "function": {"name": TOOL, "description": "the weather",
                                              "parameters": TOOL_SCHEMA}}]


def anthropic_tools():
    return [{"name": TOOL, "description": "the weather", "input_schema": TOOL_SCHEMA}]


# ------------------------------------------------------------------ OpenAI client
@pytest.mark.parametrize("model", PROVIDERS)
def test_openai_sdk_unary_chat(sluice, model):
    done = openai_client(sluice.port).chat.completions.create(model=model, messages=MESSAGES)
    assert done.object == "chat.completion"
    assert done.model == model
    assert done.choices[0].message.role == "assistant"
    assert done.choices[0].message.content == "Hello from stub"
    assert done.choices[0].finish_reason == "stop"
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == UNARY_USAGE[model]
    assert done.usage.total_tokens == sum(UNARY_USAGE[model])


@pytest.mark.parametrize("model", PROVIDERS)
def test_openai_sdk_stream_with_include_usage(sluice, model):
    stream = openai_client(sluice.port).chat.completions.create(
        model=model, messages=MESSAGES, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == STREAM_TEXT
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    # the usage chunk is the last one, with no choices, as OpenAI sends it
    assert chunks[-1].choices == []
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == STREAM_USAGE[model]
    assert all(c.usage is None for c in chunks[:-1])


@pytest.mark.parametrize("model", PROVIDERS)
def test_openai_sdk_stream_without_include_usage_has_no_usage_chunk(sluice, model):
    chunks = list(openai_client(sluice.port).chat.completions.create(
        model=model, messages=MESSAGES, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == STREAM_TEXT
    assert all(c.choices and c.usage is None for c in chunks)


@pytest.mark.parametrize("model", PROVIDERS)
def test_openai_sdk_stream_helper_final_completion(sluice, model):
    with openai_client(sluice.port).chat.completions.stream(
            model=model, messages=MESSAGES, stream_options={"include_usage": True}) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content == STREAM_TEXT
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == STREAM_USAGE[model]


@pytest.mark.parametrize("model", PROVIDERS)
def test_openai_sdk_unary_tool_call(sluice, model):
    done = openai_client(sluice.port).chat.completions.create(
        model=model, messages=MESSAGES, tools=openai_tools(), tool_choice="auto",
        extra_headers=TOOL_HEADER)
    choice = done.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == TOOL
    assert json.loads(call.function.arguments) == TOOL_ARGS
    assert call.id == (TOOL_CALL_ID if model == OPENAI_MODEL else TOOL_USE_ID)


@pytest.mark.parametrize("model", PROVIDERS)
def test_openai_sdk_streamed_tool_call(sluice, model):
    with openai_client(sluice.port).chat.completions.stream(
            model=model, messages=MESSAGES, tools=openai_tools(), extra_headers=TOOL_HEADER) as stream:
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == TOOL
    assert json.loads(call.function.arguments) == TOOL_ARGS


def test_openai_sdk_tool_request_translated_for_anthropic_provider(sluice, stub):
    """What the Anthropic provider got for an OpenAI client's tools and tool_choice."""
    openai_client(sluice.port).chat.completions.create(
        model=ANTHROPIC_MODEL, messages=MESSAGES, tools=openai_tools(),
        tool_choice={"type": "function", "function": {"name": TOOL}},
        extra_headers={"x-test-tag": "sdk-tools-sent"})
    sent = next(json.loads(r["body"]) for r in reversed(stub.requests)
                if r["headers"].get("x-test-tag") == "sdk-tools-sent")
    assert sent["tools"] == [{"name": TOOL, "description": "the weather", "input_schema": TOOL_SCHEMA}]
    assert sent["tool_choice"] == {"type": "tool", "name": TOOL}


def test_openai_sdk_lists_models(sluice):
    ids = {m.id for m in openai_client(sluice.port).models.list()}
    assert {OPENAI_MODEL, ANTHROPIC_MODEL} <= ids


# ------------------------------------------------------------------ Anthropic client
@pytest.mark.parametrize("model", PROVIDERS)
def test_anthropic_sdk_unary_message(sluice, model):
    msg = anthropic_client(sluice.port).messages.create(model=model, max_tokens=64, messages=MESSAGES)
    assert msg.type == "message" and msg.role == "assistant"
    # same dialect: the provider's bytes, so its own model name; translated: the client's
    assert msg.model == ("claude-x" if model == ANTHROPIC_MODEL else model)
    assert [b.type for b in msg.content] == ["text"]
    assert msg.content[0].text == "Hello from stub"
    assert msg.stop_reason == "end_turn"
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == UNARY_USAGE[model]


@pytest.mark.parametrize("model", PROVIDERS)
def test_anthropic_sdk_stream_helper_final_message(sluice, model):
    with anthropic_client(sluice.port).messages.stream(model=model, max_tokens=64, messages=MESSAGES) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(texts) == STREAM_TEXT
    assert final.content[0].type == "text" and final.content[0].text == STREAM_TEXT
    assert final.stop_reason == "end_turn"
    # an OpenAI provider is asked for include_usage, so the counts are the provider's own
    assert (final.usage.input_tokens, final.usage.output_tokens) == STREAM_USAGE[model]


@pytest.mark.parametrize("model", PROVIDERS)
def test_anthropic_sdk_raw_stream_events(sluice, model):
    events = list(anthropic_client(sluice.port).messages.create(
        model=model, max_tokens=64, messages=MESSAGES, stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds[-2] == "message_delta"
    assert {"content_block_start", "content_block_delta", "content_block_stop"} <= set(kinds)


@pytest.mark.parametrize("model", PROVIDERS)
def test_anthropic_sdk_unary_tool_use(sluice, model):
    msg = anthropic_client(sluice.port).messages.create(
        model=model, max_tokens=64, messages=MESSAGES, tools=anthropic_tools(),
        tool_choice={"type": "auto"}, extra_headers=TOOL_HEADER)
    assert msg.stop_reason == "tool_use"
    (use,) = [b for b in msg.content if b.type == "tool_use"]
    assert use.name == TOOL and use.input == TOOL_ARGS
    assert use.id == (TOOL_USE_ID if model == ANTHROPIC_MODEL else TOOL_CALL_ID)


@pytest.mark.parametrize("model", PROVIDERS)
def test_anthropic_sdk_streamed_tool_use_final_message(sluice, model):
    with anthropic_client(sluice.port).messages.stream(
            model=model, max_tokens=64, messages=MESSAGES, tools=anthropic_tools(),
            extra_headers=TOOL_HEADER) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[0].text == STREAM_TEXT
    use = final.content[1]
    assert use.name == TOOL and use.input == TOOL_ARGS


def test_anthropic_sdk_tool_result_translated_for_openai_provider(sluice, stub):
    """A tool round trip in Anthropic's words reaches an OpenAI provider as OpenAI's."""
    anthropic_client(sluice.port).messages.create(
        model=OPENAI_MODEL, max_tokens=64, tools=anthropic_tools(),
        tool_choice={"type": "tool", "name": TOOL}, extra_headers={"x-test-tag": "sdk-tool-result"},
        messages=[{"role": "user", "content": "weather?"},
                  {"role": "assistant", "content": [
                      {"type": "tool_use", "id": TOOL_USE_ID, "name": TOOL, "input": TOOL_ARGS}]},
                  {"role": "user", "content": [
                      {"type": "tool_result", "tool_use_id": TOOL_USE_ID, "content": "sunny"}]}])
    sent = next(json.loads(r["body"]) for r in reversed(stub.requests)
                if r["headers"].get("x-test-tag") == "sdk-tool-result")
    assert sent["tool_choice"] == {"type": "function", "function": {"name": TOOL}}
    assert sent["messages"][1]["tool_calls"][0]["id"] == TOOL_USE_ID
    assert json.loads(sent["messages"][1]["tool_calls"][0]["function"]["arguments"]) == TOOL_ARGS
    assert sent["messages"][2] == {"role": "tool", "tool_call_id": TOOL_USE_ID, "content": "sunny"}


def test_anthropic_sdk_lists_models(sluice):
    ids = {m.id for m in anthropic_client(sluice.port).models.list()}
    assert {OPENAI_MODEL, ANTHROPIC_MODEL} <= ids


# ------------------------------------------------------------------ errors, as typed exceptions
def openai_call(port, model=OPENAI_MODEL, key=KEY, stream=False, **kw):
    kw.setdefault("messages", MESSAGES)
    result = openai_client(port, key).chat.completions.create(model=model, stream=stream, **kw)
    if stream:
        list(result)


def anthropic_call(port, model=ANTHROPIC_MODEL, key=KEY, stream=False, **kw):
    kw.setdefault("messages", MESSAGES)
    result = anthropic_client(port, key).messages.create(model=model, max_tokens=64, stream=stream, **kw)
    if stream:
        list(result)


CALLS = [pytest.param(openai_call, openai, id="openai-sdk"),
         pytest.param(anthropic_call, anthropic, id="anthropic-sdk")]


def error_kind(e):
    """What the SDK read from the error body: OpenAI's (type, code), Anthropic's error type."""
    if isinstance(e, openai.APIError):
        return e.type, e.code
    return e.body["error"]["type"]

STREAMS = pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])


@STREAMS
@pytest.mark.parametrize("call, sdk", CALLS)
def test_bad_key_is_authentication_error(sluice, call, sdk, stream):
    with pytest.raises(sdk.AuthenticationError) as e:
        call(sluice.port, key="sk-not-a-key", stream=stream)
    assert e.value.status_code == 401
    assert error_kind(e.value) in (("authentication_error", "invalid_api_key"), "authentication_error")


@STREAMS
@pytest.mark.parametrize("call, sdk", CALLS)
def test_unknown_model_is_not_found_error(sluice, call, sdk, stream):
    with pytest.raises(sdk.NotFoundError) as e:
        call(sluice.port, model="no-such-model", stream=stream)
    assert e.value.status_code == 404
    assert "no-such-model" in str(e.value)
    assert error_kind(e.value) in (("invalid_request_error", "model_not_found"), "not_found_error")


@pytest.mark.parametrize("call, sdk", CALLS)
def test_model_not_allowed_for_key_is_permission_denied(sluice, call, sdk):
    with pytest.raises(sdk.PermissionDeniedError) as e:
        call(sluice.port, model=OPENAI_MODEL, key="sk-test-limited")
    assert e.value.status_code == 403
    assert error_kind(e.value) in (("permission_error", "model_not_allowed"), "permission_error")


@pytest.mark.parametrize("call, sdk", CALLS)
def test_key_rate_limit_is_rate_limit_error_with_retry_after(sluice, call, sdk):
    """The "rpm" key allows 2 requests a minute: the third (or the first, when another test
    spent them) is refused, and the SDK sees Retry-After (a sliding window: up to two minutes)."""
    with pytest.raises(sdk.RateLimitError) as e:
        for _ in range(3):
            call(sluice.port, key="sk-test-rpm")
    assert e.value.status_code == 429
    assert 1 <= int(e.value.response.headers["retry-after"]) <= 120
    assert error_kind(e.value) in (("rate_limit_error", "rate_limit_exceeded"), "rate_limit_error")


@pytest.fixture
def provider_retry_after(stub):
    """The stub sends Retry-After: 7 with its error statuses, for one test."""
    stub.retry_after = 7
    yield "7"
    stub.retry_after = None


@STREAMS
@pytest.mark.parametrize("model", PROVIDERS)
def test_provider_overload_reaches_openai_sdk_as_server_error(sluice, model, stream, provider_retry_after):
    """OpenAI's SDK has one class for 5xx; a 529 (an Anthropic provider's overload) is answered
    503, a status OpenAI clients know. The provider's Retry-After reaches the SDK."""
    status = 503 if model == OPENAI_MODEL else 529
    with pytest.raises(openai.InternalServerError) as e:
        openai_call(sluice.port, model=model, stream=stream, extra_headers={"x-test-status": str(status)})
    assert e.value.status_code == 503
    assert e.value.body["message"] == f"provider {'stub' if model == OPENAI_MODEL else 'anth'} is overloaded"
    assert e.value.response.headers["retry-after"] == provider_retry_after


@STREAMS
@pytest.mark.parametrize("model, status, error_class", [
    pytest.param(ANTHROPIC_MODEL, 529, "OverloadedError", id="anthropic-provider-529"),
    pytest.param(OPENAI_MODEL, 503, "ServiceUnavailableError", id="openai-provider-503"),
])
def test_provider_overload_reaches_anthropic_sdk_typed(sluice, model, status, error_class, stream,
                                                       provider_retry_after):
    with pytest.raises(getattr(anthropic, error_class)) as e:
        anthropic_call(sluice.port, model=model, stream=stream, extra_headers={"x-test-status": str(status)})
    assert e.value.status_code == status
    assert e.value.body["error"]["type"] == "overloaded_error"
    assert e.value.response.headers["retry-after"] == provider_retry_after


@STREAMS
@pytest.mark.parametrize("call, sdk", CALLS)
@pytest.mark.parametrize("model", PROVIDERS)
def test_provider_rate_limit_is_rate_limit_error_with_retry_after(sluice, call, sdk, model, stream,
                                                                  provider_retry_after):
    with pytest.raises(sdk.RateLimitError) as e:
        call(sluice.port, model=model, stream=stream, extra_headers={"x-test-status": "429"})
    assert e.value.status_code == 429
    assert e.value.response.headers["retry-after"] == provider_retry_after


@pytest.mark.parametrize("call, sdk", CALLS)
@pytest.mark.parametrize("model", PROVIDERS)
def test_provider_bad_request_is_bad_request_error(sluice, call, sdk, model):
    with pytest.raises(sdk.BadRequestError) as e:
        call(sluice.port, model=model, extra_headers={"x-test-status": "400"})
    assert e.value.status_code == 400
    assert "refused the request (status 400)" in str(e.value)


@pytest.mark.parametrize("call, sdk", CALLS)
def test_missing_model_is_bad_request_error(sluice, call, sdk):
    with pytest.raises(sdk.BadRequestError) as e:
        call(sluice.port, model="")
    assert e.value.status_code == 400


def test_untranslatable_openai_request_is_bad_request_error(sluice):
    with pytest.raises(openai.BadRequestError) as e:
        openai_call(sluice.port, model=ANTHROPIC_MODEL, n=2)
    assert "n > 1" in str(e.value)


def test_untranslatable_anthropic_request_is_bad_request_error(sluice):
    content = [{"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}]
    with pytest.raises(anthropic.BadRequestError) as e:
        anthropic_call(sluice.port, model=OPENAI_MODEL, messages=[{"role": "user", "content": content}])
    assert "document" in str(e.value)


@pytest.mark.parametrize("call, error_class", [
    pytest.param(openai_call, openai.APIStatusError, id="openai-sdk"),   # no class for 413
    pytest.param(anthropic_call, anthropic.RequestTooLargeError, id="anthropic-sdk"),
])
def test_oversized_body_is_a_413_status_error(sluice, call, error_class):
    """Over max_body_bytes (64 KiB in the base config): 413, closed before the body is read."""
    with pytest.raises(error_class) as e:
        call(sluice.port, messages=[{"role": "user", "content": "x" * 70000}])
    assert e.value.status_code == 413


@pytest.mark.parametrize("call, sdk", CALLS)
def test_unreachable_provider_is_a_server_error(sluice, call, sdk):
    with pytest.raises(sdk.InternalServerError) as e:
        call(sluice.port, model="down-model")
    assert e.value.status_code == 502


def test_provider_timeout_is_gateway_timeout(sluice):
    """No response head within response_timeout_s (0.5 s for "slow-model"): 504, a server error
    to OpenAI's SDK and a GatewayTimeoutError to Anthropic's."""
    slow = {"x-test-delay-ms": "1500"}
    with pytest.raises(openai.InternalServerError) as e:
        openai_call(sluice.port, model="slow-model", extra_headers=slow)
    assert e.value.status_code == 504
    with pytest.raises(anthropic.GatewayTimeoutError) as e:
        anthropic_call(sluice.port, model="slow-model", extra_headers=slow)
    assert e.value.status_code == 504


@pytest.mark.parametrize("call, error_class", [
    # same dialect: the relayed stream stopped between two events, so Sluice adds an error event
    # of the client's dialect before the close, which the SDK raises as its own error
    pytest.param(openai_call, openai.APIError, id="openai-sdk"),
    # translated: Sluice ends the stream with an error event, which the SDK raises
    pytest.param(anthropic_call, anthropic.APIStatusError, id="anthropic-sdk"),
])
def test_stream_cut_by_the_provider_raises(sluice, call, error_class):
    """A provider that goes silent mid-stream ("slow-model": 0.5 s of silence cuts it) must not
    look like a complete stream to the SDK."""
    with pytest.raises(error_class) as e:
        call(sluice.port, model="slow-model", stream=True, extra_headers={"x-test-hang": "1"})
    assert "provider stream failed" in str(e.value)


SLOW_ANTHROPIC = """
[providers.slow-anth]
base_url = "STUB/v1"
dialect = "anthropic"
api_key = "sk-ant-provider"
stream_idle_timeout_s = 0.5
[models.slow-claude]
provider = "slow-anth"
"""


@pytest.mark.parametrize("call, error_class", [
    # translated: Sluice ends the stream with an OpenAI error frame, which the SDK raises
    pytest.param(openai_call, openai.APIError, id="openai-sdk"),
    # same dialect: the relayed stream stopped between two events, so Sluice adds an error event
    # of the client's dialect before the close, which the SDK raises as its own error
    pytest.param(anthropic_call, anthropic.APIError, id="anthropic-sdk"),
])
def test_stream_cut_by_an_anthropic_provider_raises(make_sluice, stub, call, error_class):
    gw = make_sluice(base_config(stub.url, SLOW_ANTHROPIC.replace("STUB", stub.url)), env=ENV)
    with pytest.raises(error_class) as e:
        call(gw.port, model="slow-claude", stream=True, extra_headers={"x-test-hang": "1"})
    assert "provider stream failed" in str(e.value)


# ------------------------------------------------------------------ one client, many calls
@pytest.mark.parametrize("model", PROVIDERS)
def test_one_openai_client_survives_errors_and_abandoned_streams(sluice, model):
    """The SDK pools its connections: answers that close the connection (413), keep it (404),
    and a stream the client walks away from must leave the next call on the same client fine."""
    client = openai_client(sluice.port)
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x" * 70000}])
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=MESSAGES)
    stream = client.chat.completions.create(model=model, messages=MESSAGES, stream=True,
                                            extra_headers={"x-test-chunks": "50"})
    next(iter(stream))
    stream.close()
    for _ in range(3):
        done = client.chat.completions.create(model=model, messages=MESSAGES)
        assert done.choices[0].message.content == "Hello from stub"


@pytest.mark.parametrize("model", PROVIDERS)
def test_one_anthropic_client_survives_errors_and_abandoned_streams(sluice, model):
    client = anthropic_client(sluice.port)
    with pytest.raises(anthropic.RequestTooLargeError):
        client.messages.create(model=model, max_tokens=64, messages=[{"role": "user", "content": "x" * 70000}])
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="no-such-model", max_tokens=64, messages=MESSAGES)
    with client.messages.stream(model=model, max_tokens=64, messages=MESSAGES,
                                extra_headers={"x-test-chunks": "50"}) as stream:
        next(iter(stream))
    for _ in range(3):
        msg = client.messages.create(model=model, max_tokens=64, messages=MESSAGES)
        assert msg.content[0].text == "Hello from stub"
