"""The request as a provider gets it: the body with only the model's bytes patched (an alias),
or translated into the provider's dialect; the provider's request head in front of it."""
import re
from typing import TYPE_CHECKING

import orjson

from sluice.bytescan import first_model_span, scan_keys
from sluice.chat_body import asking_usage
from sluice.dialects import ANTHROPIC_TO_OPENAI, OPENAI_TO_ANTHROPIC, SAME_DIALECT

if TYPE_CHECKING:
    from sluice.pool import Provider  # noqa: F401 (type comments)
    from sluice.request import Request, Route  # noqa: F401 (type comments)
    from sluice.translate.common import JSONObject  # noqa: F401 (type comments)

loads = orjson.loads
dumps = orjson.dumps

ANY_MODEL = re.compile(rb'"model"\s*:\s*"([^"\\]*)"')


def patch_model(body, obj, model, span, route):
    # type: (bytes, JSONObject | None, str, tuple[int, int] | None, Route) -> bytes | None
    """Replace only the model value's bytes; re-serialize only if it cannot be located safely.
    None when the body is nested too deeply to serialize again."""
    if span is None:
        model_bytes = model.encode()
        # located in the bytes only when "model" is spelled once, literally: spelled twice, or
        # once beside an escape that may spell it again, the key the parser read may not be the
        # one spelled literally (which may be a nested one). The keys are read only when the
        # body has an escape: a look for two bytes, not a scan of every key, on the usual body
        once = body.count(b'"model"') == 1
        if once and body.find(b"\\u") >= 0:
            keys = scan_keys(body)
            once = keys is not None and keys.count(b"model") == 1
        first = first_model_span(body) if once else None
        if first is not None and body[first[0]:first[1]] == model_bytes:
            span = first
        else:
            found = [m for m in ANY_MODEL.finditer(body) if m.group(1) == model_bytes] if once else []
            if len(found) == 1:
                span = found[0].span(1)
            else:
                obj["model"] = route.upstream  # type: ignore[index]  # parsed: its span was not read
                try:
                    return dumps(obj)
                except orjson.JSONEncodeError:  # deeper than orjson serializes
                    return None
    start, end = span
    return body[:start] + route.upstream_bytes + body[end:]


def translated_body(r, target, obj):
    # type: (Request, Route, JSONObject) -> bytes
    """The request body in ``target``'s provider dialect; ``r`` learns how to translate the
    answer back. Raises what the translation refuses."""
    from sluice import translate  # loaded on first use: workers that never translate stay smaller
    if r.dialect == "anthropic":
        new, r.stream = translate.anthropic_request_to_openai(obj, target.upstream)
        r.translation = ANTHROPIC_TO_OPENAI
    else:
        new, r.stream, r.include_usage = translate.openai_request_to_anthropic(
            obj, target.upstream, target.max_output)
        r.translation = OPENAI_TO_ANTHROPIC
    return dumps(new)


def payload(r, provider, body):
    # type: (Request, Provider, bytes) -> bytes
    """The request as sent to ``provider``: its head and ``body`` (kept for another attempt)."""
    forward = r.forward_headers
    if r.translation != SAME_DIALECT:
        forward = b"".join([ln + b"\r\n" for ln in forward.split(b"\r\n")[:-1]
                            if not ln.lower().startswith((b"anthropic-", b"content-type:"))])
        forward += b"content-type: application/json\r\n"
        if provider.dialect == "anthropic":
            forward += provider.anthropic_version
    elif not r.has_anthropic_version and provider.dialect == "anthropic":
        forward += provider.anthropic_version
    elif r.strip_usage:  # its usage is asked for, and taken out of the stream (relay_same_dialect)
        body = asking_usage(body)
    return b"".join((provider.head_prefix, forward, b"content-length: %d\r\n\r\n" % len(body), body))


def retarget(r, target):
    # type: (Request, Route) -> bool
    """Make ``r`` ready for another attempt at ``target`` (a deployment's Route): its body
    translated or its model patched for that provider. False when it cannot be."""
    provider = target.provider
    body = r.body
    model = r.client_model
    r.translation = SAME_DIALECT
    r.include_usage = False
    r.stream = False
    try:
        if provider.dialect != r.dialect:
            body = translated_body(r, target, loads(body))
        elif target.upstream != model:
            body = patch_model(body, loads(body), model, None, target)  # type: ignore[assignment]  # None: refused below
            if body is None:
                return False
    except Exception:  # what the first attempt's checks let through but this target refuses
        return False
    r.payload = payload(r, provider, body)
    return True
