"""Anthropic Messages <-> OpenAI Chat Completions: requests, responses and SSE streams.

Only used when the client's dialect differs from the provider's; same-dialect traffic never
reaches this package (its bytes are relayed as they are), and it is loaded on first use.

- ``anthropic_to_openai``: an Anthropic client, an OpenAI provider (the request to OpenAI, the
  response and its stream back to Anthropic);
- ``openai_to_anthropic``: an OpenAI client, an Anthropic provider;
- ``sse``: the event-stream parser both streams read with;
- ``common``: what both directions share (content text, stop reasons, ids, error messages).
"""
from sluice.translate.anthropic_to_openai import (
    OpenAIToAnthropicStream,
    anthropic_request_to_openai,
    openai_response_to_anthropic,
)
from sluice.translate.common import TranslationError, upstream_error_message
from sluice.translate.openai_to_anthropic import (
    AnthropicToOpenAIStream,
    anthropic_response_to_openai,
    openai_request_to_anthropic,
)
from sluice.translate.sse import FrameTooLarge, SSEParser

__all__ = [
    "AnthropicToOpenAIStream", "FrameTooLarge", "OpenAIToAnthropicStream", "SSEParser", "TranslationError",
    "anthropic_request_to_openai", "anthropic_response_to_openai", "openai_request_to_anthropic",
    "openai_response_to_anthropic", "upstream_error_message",
]
