"""Admitting a chat request, step by step: its key, its body read (model, output limits), its
model and route, the key's limits, the body its provider gets, the key's token budget. The first
step that refuses the request answers it (in the client's dialect); an admitted one goes to
dispatch."""
import sys
from typing import TYPE_CHECKING

import orjson

from sluice import chat_body, dispatch, rewrite
from sluice.bytescan import scan_keys
from sluice.chat_body import ChatBody
from sluice.http import error_body

if TYPE_CHECKING:
    from sluice.client import ClientConn  # noqa: F401 (type comments)
    from sluice.keys import KeyRecord  # noqa: F401 (type comments)
    from sluice.request import Request, Route  # noqa: F401 (type comments)
    from sluice.server import App  # noqa: F401 (type comments)

loads = orjson.loads
JSONDecodeError = orjson.JSONDecodeError

_body_refusal_logged = False  # the first body refused is logged (per worker), the others counted


def chat(app, conn, r):
    # type: (App, ClientConn, Request) -> None
    """POST /v1/chat/completions or /v1/messages."""
    if not _authenticate(app, conn, r):
        return
    key = r.key
    # the key's open requests and rate before any work on the body (open requests first: a
    # request refused for them is not counted in the rate), its allow-list before any second parse
    if key is not None:
        if key.max_in_flight and app.keys.in_flight_full(key):
            reject(app, conn, r, 429, f"key {key.name!r} has {key.max_in_flight} requests in "
                                      f"flight already", b"retry-after: 1\r\n")
            return
        if key.rpm and not _within_rpm(app, conn, r, key):
            return
    budget = key is not None and key.budget != 0
    body = ChatBody(r.body)
    # (a body read has its model)
    if not _read_body(app, conn, r, body, budget) or not _route(app, conn, r, body.model):  # type: ignore[arg-type]
        return
    if key is not None and not _model_allowed(app, conn, r, key):
        return
    if body.unchecked:
        refused = chat_body.check_repeats(body)
        if refused is not None:
            _refuse_body(app, conn, r, refused)
            return
    target = _target(r)
    if budget and chat_body.needs_output_cap(body, r.dialect):
        # the provider stops where the reservation does; r.body too, for any other attempt
        chat_body.write_output_cap(body, r.dialect, target.max_output)
        r.body = body.data
    if budget and r.dialect == "openai":  # a stream cut before its usage would be charged blind
        r.strip_usage = chat_body.streams_without_usage(body)
    if not _body_for_provider(conn, r, body, target):
        return
    if budget and not _reserve_budget(app, conn, r, body):
        return
    dispatch.send_first(app, conn, r, target.provider, body.data)


def reject(app, conn, r, status, message, extra=b""):
    # type: (App, ClientConn, Request, int, str, bytes) -> None
    """Refused by Sluice before any provider was involved."""
    m = app.metrics
    m.count_request(r.model_label, status)
    conn.respond(r, status, error_body(r.dialect, status, message), extra)
    m.overhead.observe(r.overhead_us / 1e6)


def _authenticate(app, conn, r):
    # type: (App, ClientConn, Request) -> bool
    """The key the request presents, when auth is on or a key is presented (``r.key``)."""
    token = r.token
    if token is not None or app.require_auth:
        key = app.keys.lookup(token) if token else None
        if key is None and (app.require_auth or token):
            reject(app, conn, r, 401, "missing API key" if not token else "invalid API key")
            return False
        r.key = key
    return True


def _read_body(app, conn, r, body, budget):
    # type: (App, ClientConn, Request, ChatBody, bool) -> bool
    """The body's model (and, for a key with a budget, its output limits): read from its bytes
    when validate_json is off and they make it certain, else from the body parsed."""
    found = scan_keys(body.data)
    if not app.validate_json and found is not None and chat_body.read_fast(body, found, budget):
        return True
    refused = chat_body.read_parsed(body, found, budget)
    if refused is not None:
        _refuse_body(app, conn, r, refused)
        return False
    return True


def _refuse_body(app, conn, r, message):
    # type: (App, ClientConn, Request, str) -> None
    """A body Sluice cannot read: 400 in the client's dialect, and one line on stderr the first
    time, so that a client sending such bodies cannot fill the log."""
    global _body_refusal_logged
    if not _body_refusal_logged:
        _body_refusal_logged = True
        sys.stderr.write(f"sluice: request bodies that cannot be read are refused with 400 (logged "
                         f"once; counted in sluice_requests_total); the first: {message[:200]}\n")
    reject(app, conn, r, 400, message)


def _route(app, conn, r, model):
    # type: (App, ClientConn, Request, str) -> bool
    route = app.routes.get(model)
    if route is None:
        reject(app, conn, r, 404, f"model {model[:200]!r} not found")
        return False
    r.route = route
    r.model_label = route.name
    r.client_model = model
    return True


def _within_rpm(app, conn, r, key):
    # type: (App, ClientConn, Request, KeyRecord) -> bool
    """The key's requests per minute allow one more."""
    wait = app.keys.take_request(key, r.t0)
    if wait:
        reject(app, conn, r, 429, f"rate limit of {key.rpm} requests per minute exceeded "
                                  f"for key {key.name!r}", b"retry-after: %d\r\n" % wait)
        return False
    return True


def _model_allowed(app, conn, r, key):
    # type: (App, ClientConn, Request, KeyRecord) -> bool
    model = r.client_model
    if model not in key.allowed:
        reject(app, conn, r, 403, f"key {key.name!r} may not use model {model!r}")
        return False
    return True


def _target(r):
    # type: (Request) -> Route
    """The Route the first attempt goes to: the route's own, or a deployment its policy picks."""
    route = r.route
    if route.policy is None:
        return route
    r.deployment = route.policy.pick(r.t0)
    return r.deployment.target


def _body_for_provider(conn, r, body, target):
    # type: (ClientConn, Request, ChatBody, Route) -> bool
    """``body.data`` as ``target``'s provider takes it: translated, or the model patched."""
    if target.provider.dialect != r.dialect:
        from sluice import translate  # loaded on first use: workers that never translate stay smaller
        if body.parsed is None:  # read from its bytes: parsed only now
            try:
                body.parsed = loads(body.data)
            except JSONDecodeError as e:
                _refuse_body(conn.app, conn, r, f"request body is not valid JSON: {e}")
                return False
        try:
            body.data = rewrite.translated_body(r, target, body.parsed)
        except (translate.TranslationError, TypeError, ValueError, AttributeError, RecursionError) as e:
            reject(conn.app, conn, r, 400, f"cannot translate request: {e}")
            return False
    elif target.upstream != body.model:
        # (a body read has its model)
        patched = rewrite.patch_model(body.data, body.parsed, body.model, body.model_span, target)  # type: ignore[arg-type]
        if patched is None:
            reject(conn.app, conn, r, 400, "request body is nested too deeply to rewrite its model")
            return False
        body.data = patched
    return True


def _reserve_budget(app, conn, r, body):
    # type: (App, ClientConn, Request, ChatBody) -> bool
    """Tokens reserved from the key's budget: the prompt's estimate (its bytes, and its content
    parts by kind) and the most the answers may take (the largest output limit, written in when
    the client set none, times ``n``)."""
    estimate = chat_body.prompt_tokens(body, r.body, app.part_tokens) + chat_body.most_tokens(body)
    wait = app.keys.reserve(r.key, estimate)  # type: ignore[arg-type]  # a budget is a key's
    if wait:
        # (a budget is a key's)
        reject(app, conn, r, 429, f"token budget of key {r.key.name!r} exhausted",  # type: ignore[union-attr]
               b"retry-after: %d\r\n" % wait)
        return False
    r.reserved = estimate
    return True
