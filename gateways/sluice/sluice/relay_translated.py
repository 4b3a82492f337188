"""Relaying a translated response (the client's dialect is not the provider's): a stream
translated event by event, anything else buffered whole and translated at its end. The
translation itself is in sluice.translate, loaded on first use: workers that never translate
stay smaller."""
from time import perf_counter
from typing import TYPE_CHECKING

import orjson
from httptools import HttpParserError

from sluice import provider_errors
from sluice.dialects import ANTHROPIC_TO_OPENAI
from sluice.http import chunk, error_body, response
from sluice.relay_same_dialect import stream_failed_event
from sluice.resilience import attempt_unusable
from sluice.usage import believed, openai_usage, weighed

if TYPE_CHECKING:
    from sluice.client import ClientConn  # noqa: F401 (type comments)
    from sluice.request import Request  # noqa: F401 (type comments)
    from sluice.upstream import UpstreamConn  # noqa: F401 (type comments)
    from sluice.usage import Charged, Weights  # noqa: F401 (type comments)

MAX_BUFFERED_BODY = 64 * 1024 * 1024


def start_stream(u, client, req):
    # type: (UpstreamConn, ClientConn, Request) -> None
    """A 200 event stream answering a streamed request: the translators are made and the
    client's head goes out now."""
    from sluice import translate
    u.sse_parser = translate.SSEParser(u.app.max_sse_frame)
    if req.translation == ANTHROPIC_TO_OPENAI:   # anthropic client, openai provider
        u.stream_translator = translate.OpenAIToAnthropicStream(req.client_model)
    else:
        u.stream_translator = translate.AnthropicToOpenAIStream(req.client_model, req.include_usage)
    req.keep_alive = req.keep_alive and not u.app.stopping
    us = (req.own_time + (perf_counter() - u.t_rx)) * 1e6
    req.overhead_us = us
    lines = [b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"]
    if req.http11:
        lines.append(b"transfer-encoding: chunked\r\n")
        u.chunked_to_client = True
    else:
        u.chunked_to_client = False
        req.keep_alive = False
    if u.app.overhead_header:
        lines.append(b"x-gateway-overhead-us: %d\r\n" % us)
    lines.append(b"\r\n" if req.keep_alive else b"connection: close\r\n\r\n")
    u.client_head_sent = True
    client.write(b"".join(lines))


def start_buffered(u, head, low):
    # type: (UpstreamConn, bytes, bytes) -> None
    """Any other response below 400 (a unary answer): buffered, its Retry-After kept."""
    u.buffered = []
    u.buffered_bytes = 0
    i = low.find(b"\nretry-after:")
    u.retry_after_line = head[i + 1:head.find(b"\r\n", i + 1) + 2] if i >= 0 else b""


def relay_stream(u, client, body):
    # type: (UpstreamConn, ClientConn, bytes) -> None
    """Body bytes of a translated stream: the events they complete, translated, go out."""
    try:
        events = u.sse_parser.feed(body)
    except ValueError:  # the parser's only error: translate.FrameTooLarge
        events = None
    if events is None:  # raised here, not in the except: a limit met, not a bug to log
        u.app.metrics.upstream_error(u.provider.name, "sse_frame_too_large")
        raise HttpParserError(f"provider {u.provider.name} sent an SSE event over "
                              f"{u.app.max_sse_frame} bytes")
    failed = None
    try:
        out = u.stream_translator.feed(events)
    except Exception as e:  # events of a shape the translation cannot take (a provider's nonsense)
        failed = f"its stream could not be translated: {e!r}"
    if failed is not None:  # raised here, not in the except: one log line, not a traceback
        raise HttpParserError(failed)
    if out:
        client.write(chunk(out) if u.chunked_to_client else out)


def buffer(u, body):
    # type: (UpstreamConn, bytes) -> None
    """A piece of a response translated at its end: held by the worker (max_held_body_bytes,
    with the request bodies) until the exchange ends (UpstreamConn.release_buffered)."""
    n = len(body)
    app = u.app
    u.buffered_bytes += n
    app.body_bytes_held += n
    if u.buffered_bytes > MAX_BUFFERED_BODY:
        raise HttpParserError("provider response too large to translate")
    if app.body_bytes_held > app.max_held_body:
        raise HttpParserError(f"request bodies and buffered responses held by this worker exceed "
                              f"{app.max_held_body} bytes")
    u.buffered.append(body)  # type: ignore[union-attr]  # made by start_buffered


def stream_usage(u):
    # type: (UpstreamConn) -> Charged
    """(prompt side, completion) charged for the stream's final usage, or (None, None) if it
    reported none (yet) or none believable: the whole reservation is charged."""
    prompt, completion, cache_write, cache_read, seen = u.stream_translator.usage()
    if not seen:
        return None, None
    # (in an exchange)
    return _charged(u.req, u.app.token_weights, prompt, completion, cache_write, cache_read)  # type: ignore[arg-type]


def _charged(req, weights, prompt, completion, cache_write, cache_read):
    # type: (Request, Weights, object, object, object, object) -> Charged
    """What the provider's billed counts cost (see usage.weighed), or (None, None) when they
    cannot be true."""
    if not believed(prompt, completion, cache_write, cache_read):
        return None, None
    if req.translation == ANTHROPIC_TO_OPENAI:  # an OpenAI provider: cached tokens are in prompt_tokens
        return openai_usage(weights, prompt, completion, cache_read)  # type: ignore[arg-type]  # believed: ints
    return weighed(weights, prompt, completion, cache_write, cache_read)  # type: ignore[arg-type]  # believed: ints


def finish_stream(u, client):
    # type: (UpstreamConn, ClientConn) -> Charged
    """The provider's stream ended: the translated stream is closed (with an error event when
    the provider's ended without its last event: a truncated answer). Returns its usage."""
    t = u.stream_translator
    out = t.finish() if t.done else stream_failed_event(u.req.dialect)  # type: ignore[union-attr]  # in an exchange
    if u.chunked_to_client:
        client.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(out), out) if out else b"0\r\n\r\n")
    elif out:
        client.write(out)
    return stream_usage(u)


def stream_failed(u, client, req):
    # type: (UpstreamConn, ClientConn, Request) -> None
    """The provider failed mid-stream: the client gets an error event and the stream's end (a
    whole response: its SDK raises the error, nothing looks truncated), then the close."""
    event = stream_failed_event(req.dialect)
    client.write(chunk(event) + b"0\r\n\r\n" if u.chunked_to_client else event)


def write_buffered(u, client, req):
    # type: (UpstreamConn, ClientConn, Request) -> tuple[int | None, int | None]
    """The buffered response, translated (or its error in the client's dialect), in one write.
    Returns its usage."""
    body = b"".join(u.buffered)  # type: ignore[arg-type]  # made by start_buffered
    u.buffered = None
    status = u.status
    prompt = completion = None
    if status == 204 or status == 304:  # nothing to translate, and these never carry a body
        status = u.status = 502
        payload = error_body(req.dialect, 502, f"provider {u.provider.name} returned a response "
                                               "that could not be translated")  # type: bytes | None
    elif status == 200:
        payload, prompt, completion = _translated_answer(req, body, u.app.token_weights)
        if payload is None:
            provider_errors.log(u.provider.name, "sent an answer that could not be translated")
            if req.deployment is not None:  # a failure of its deployment, though a 200
                attempt_unusable(u.app, req, perf_counter())
            status = u.status = 502
            payload = error_body(req.dialect, 502, f"provider {u.provider.name} returned a "
                                                   "response that could not be translated")
    else:  # another 2xx, or a 3xx (error statuses are provider_errors.py's)
        from sluice import translate
        payload = error_body(req.dialect, status, translate.upstream_error_message(body))
    overhead = (req.own_time + (perf_counter() - u.t_rx)) * 1e6
    req.overhead_us = overhead
    keep = req.keep_alive and not u.app.stopping
    req.keep_alive = keep
    extra = b"x-gateway-overhead-us: %d\r\n" % overhead if u.app.overhead_header else b""
    if status != 200 and u.retry_after_line:
        extra += u.retry_after_line
    u.client_head_sent = True
    # (None was replaced above)
    client.write(response(status, payload, extra=extra, close=not keep))  # type: ignore[arg-type]
    return prompt, completion


def _translated_answer(req, body, weights):
    # type: (Request, bytes, Weights) -> tuple[bytes | None, int | None, int | None]
    """(the translated body, or None when it cannot be translated; prompt side; completion
    charged, or None when the provider's usage is missing or cannot be true)."""
    from sluice import translate
    try:
        obj = orjson.loads(body)
        if not isinstance(obj, dict):
            raise ValueError("not an object")
        usage = obj.get("usage")
        if not isinstance(usage, dict):
            usage = {}
        if req.translation == ANTHROPIC_TO_OPENAI:
            out = translate.openai_response_to_anthropic(obj, req.client_model)
            details = usage.get("prompt_tokens_details")
            cached = details.get("cached_tokens") or 0 if isinstance(details, dict) else 0
            prompt, completion = _charged(req, weights, usage.get("prompt_tokens"),
                                          usage.get("completion_tokens"), 0, cached)
        else:
            out = translate.anthropic_response_to_openai(obj, req.client_model)
            prompt, completion = _charged(req, weights, usage.get("input_tokens"), usage.get("output_tokens"),
                                          usage.get("cache_creation_input_tokens") or 0,
                                          usage.get("cache_read_input_tokens") or 0)
        return orjson.dumps(out), prompt, completion
    except (ValueError, TypeError, AttributeError, KeyError):
        return None, None, None
