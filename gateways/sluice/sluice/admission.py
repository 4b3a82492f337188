"""Admitting a chat request, step by step: its key, its model and route, the key's limits, the
body its provider gets, the key's token budget. The first step that refuses the request answers
it (in the client's dialect); an admitted one goes to dispatch."""
import re

import orjson

from sluice import dispatch, rewrite
from sluice.http import error_body

loads = orjson.loads
JSONDecodeError = orjson.JSONDecodeError

_MAX_TOKENS = re.compile(rb'"max(?:_completion)?_tokens"\s*:\s*(\d+)')
MAX_TOKENS_RESERVED = 1 << 32   # a reservation's max_tokens part, whatever a body asks


class ChatBody:
    """What admission learns from a chat request's body."""
    __slots__ = ("data", "parsed", "model", "model_span")

    def __init__(self, data):
        self.data = data          # the body as the provider will get it
        self.parsed = None        # the client's body parsed, when it had to be
        self.model = None         # the model the client asked for
        self.model_span = None    # where its value is in ``data``, when found without parsing


def chat(app, conn, r):
    """POST /v1/chat/completions or /v1/messages."""
    if not _authenticate(app, conn, r):
        return
    body = ChatBody(r.body)
    if not _read_model(app, conn, r, body) or not _route(app, conn, r, body.model):
        return
    key = r.key
    if key is not None and not _within_key_limits(app, conn, r, key):
        return
    target = _target(r)
    if not _body_for_provider(conn, r, body, target):
        return
    if key is not None and key.budget and not _reserve_budget(app, conn, r, body, target):
        return
    dispatch.send_first(app, conn, r, target.provider, body.data)


def reject(app, conn, r, status, message, extra=b""):
    """Refused by Sluice before any provider was involved."""
    m = app.metrics
    m.count_request(r.model_label, status)
    conn.respond(r, status, error_body(r.dialect, status, message), extra)
    m.overhead.observe(r.overhead_us / 1e6)


def _authenticate(app, conn, r):
    """The key the request presents, when auth is on or a key is presented (``r.key``)."""
    token = r.token
    if token is not None or app.require_auth:
        key = app.keys.lookup(token) if token else None
        if key is None and (app.require_auth or token):
            reject(app, conn, r, 401, "missing API key" if not token else "invalid API key")
            return False
        r.key = key
    return True


def _read_model(app, conn, r, body):
    """The model the client asks for: found without parsing when validate_json is off and the
    body starts with it, else from the parsed body."""
    if not app.validate_json:
        m = rewrite.first_model(body.data)
        if m is not None:
            try:
                body.model = m.group(1).decode()
            except UnicodeDecodeError:
                reject(app, conn, r, 400, "model: not valid UTF-8")
                return False
            body.model_span = m.span(1)
            return True
    try:
        obj = loads(body.data)
    except JSONDecodeError as e:
        reject(app, conn, r, 400, f"request body is not valid JSON: {e}")
        return False
    if type(obj) is not dict:
        reject(app, conn, r, 400, "request body must be a JSON object")
        return False
    model = obj.get("model")
    if type(model) is not str or not model:
        reject(app, conn, r, 400, "model: a model name (string) is required")
        return False
    body.parsed = obj
    body.model = model
    return True


def _route(app, conn, r, model):
    route = app.routes.get(model)
    if route is None:
        reject(app, conn, r, 404, f"model {model[:200]!r} not found")
        return False
    r.route = route
    r.model_label = route.name
    r.client_model = model
    return True


def _within_key_limits(app, conn, r, key):
    """The key may use the model, and its requests per minute allow one more."""
    model = r.client_model
    if model not in key.allowed:
        reject(app, conn, r, 403, f"key {key.name!r} may not use model {model!r}")
        return False
    if key.rpm:
        wait = app.keys.take_request(key, r.t0)
        if wait:
            reject(app, conn, r, 429, f"rate limit of {key.rpm} requests per minute exceeded "
                                      f"for key {key.name!r}", b"retry-after: %d\r\n" % wait)
            return False
    return True


def _target(r):
    """The Route the first attempt goes to: the route's own, or a deployment its policy picks."""
    route = r.route
    if route.policy is None:
        return route
    r.deployment = route.policy.pick(r.t0)
    return r.deployment.target


def _body_for_provider(conn, r, body, target):
    """``body.data`` as ``target``'s provider takes it: translated, or the model patched."""
    if target.provider.dialect != r.dialect:
        from sluice import translate  # loaded on first use: workers that never translate stay smaller
        if body.parsed is None:
            body.parsed = loads(body.data)
        try:
            body.data = rewrite.translated_body(r, target, body.parsed)
        except (translate.TranslationError, TypeError, ValueError, AttributeError, RecursionError) as e:
            reject(conn.app, conn, r, 400, f"cannot translate request: {e}")
            return False
    elif target.upstream != body.model:
        patched = rewrite.patch_model(body.data, body.parsed, body.model, body.model_span, target)
        if patched is None:
            reject(conn.app, conn, r, 400, "request body is nested too deeply to rewrite its model")
            return False
        body.data = patched
    return True


def _reserve_budget(app, conn, r, body, target):
    """Tokens reserved from the key's budget: the prompt's estimate and the most the answer may
    take (``max_tokens``, or the model's max_output_tokens)."""
    obj = body.parsed
    max_tokens = None
    if obj is None:
        m = _MAX_TOKENS.search(body.data)
        if m is not None and _MAX_TOKENS.search(body.data, m.end()) is None:
            max_tokens = int(m.group(1))
        elif m is not None:  # a repeated key: read it as the provider's parser would
            obj = loads(body.data)
    if obj is not None:
        max_tokens = obj.get("max_completion_tokens") or obj.get("max_tokens")
    if type(max_tokens) is not int or max_tokens <= 0:
        max_tokens = target.max_output
    estimate = len(r.body) // 4 + (max_tokens if max_tokens < MAX_TOKENS_RESERVED else MAX_TOKENS_RESERVED)
    wait = app.keys.reserve(r.key, estimate)
    if wait:
        reject(app, conn, r, 429, f"token budget of key {r.key.name!r} exhausted",
               b"retry-after: %d\r\n" % wait)
        return False
    r.reserved = estimate
    return True
