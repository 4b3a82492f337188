"""A provider's error answer in Sluice's own words, and the log of what providers say and do.

A provider's error body can name its account (OpenAI's 429 names the organisation and its
limits), and a provider 401 or 403 refuses Sluice's credentials, not the client's. So an error
status (400 or more) is read to its end, its first MAX_LOGGED_BODY_BYTES kept for the log, and
the client gets Sluice's body in its own dialect: the provider's status (401 and 403 become 502,
``provider_auth``), its Retry-After, a short generic message.

What providers say and do wrong goes to stderr as one line per event (never a traceback), at most
one line per provider and kind of event every LOG_INTERVAL_S: a provider failing every request
cannot fill the log. The lines left out are counted in the next one.

Pure Python: it runs only for error statuses and misbehaving providers.
"""
from __future__ import annotations

import math
import sys
import time
from time import perf_counter
from typing import TYPE_CHECKING

from orjson import dumps, loads

from sluice.http import error_body, response

if TYPE_CHECKING:
    from sluice.client import ClientConn
    from sluice.request import Request
    from sluice.upstream import UpstreamConn

MAX_LOGGED_BODY_BYTES = 1024
LOG_INTERVAL_S = 10.0
MAX_WORD = 64  # the longest provider error type or code passed on to the client

# (provider, event) -> [monotonic time of its last line, events left out since]; bounded by the
# providers times the events (statuses are three digits)
_logged: dict[tuple[str, str], list[float]] = {}


def log(provider: str, event: str, detail: str = "") -> None:
    """One line about ``provider``: ``event`` (what it did), ``detail`` (text, written escaped as a
    JSON string so that a provider's bytes cannot start lines of their own)."""
    now = time.monotonic()
    key = (provider, event)
    last = _logged.get(key)
    if last is not None and now - last[0] < LOG_INTERVAL_S:
        last[1] += 1
        return
    more = f" ({last[1]} more since its last line, not logged)" if last is not None and last[1] else ""
    _logged[key] = [now, 0]
    detail = f": {dumps(detail).decode()}" if detail else ""
    sys.stderr.write(f"sluice: provider {provider} {event}{more}{detail}\n")


def start(u: UpstreamConn, head: bytes, low: bytes) -> None:
    """An error status answered ``u``'s request: its body is kept (up to MAX_LOGGED_BODY_BYTES) as
    it is read, its Retry-After line kept for the client. Its length is counted apart from
    ``buffered_bytes``: that counts what the worker holds of a response to translate, and an error
    body is held only up to MAX_LOGGED_BODY_BYTES."""
    u.buffered = []
    u.error_body_bytes = 0
    i = low.find(b"\nretry-after:")
    u.retry_after_line = head[i + 1:head.find(b"\r\n", i + 1) + 2] if i >= 0 else b""


def keep(u: UpstreamConn, body: bytes) -> None:
    room = MAX_LOGGED_BODY_BYTES - u.error_body_bytes
    if room > 0:
        assert u.buffered is not None  # made by start
        u.buffered.append(body if len(body) <= room else body[:room])
    u.error_body_bytes += len(body)


def _message(name: str, status: int) -> str:
    if status == 429:
        return f"provider {name} is rate limiting requests"
    if status == 503 or status == 529:
        return f"provider {name} is overloaded"
    if status >= 500:
        return f"provider {name} failed (status {status})"
    return f"provider {name} refused the request (status {status})"


def _word(obj: object, name: str) -> str | None:
    """A field of a provider's error object, when it is a short identifier (a type or a code such
    as ``context_length_exceeded``, never free text a provider could fill with its account)."""
    v = obj.get(name) if isinstance(obj, dict) else None
    if isinstance(v, str) and 0 < len(v) <= MAX_WORD and v.replace("_", "").isalnum() and v.isascii():
        return v
    return None


def _refusal_body(dialect: str, provider_dialect: str, status: int, message: str,
                  kept: str) -> bytes | None:
    """The client's error body for a provider's refusal of its request (a 4xx: too long a context,
    a content filter), in the client's dialect with the provider's error type and code kept: the
    type as it is when both speak the same dialect, the word in the message otherwise. None when
    the provider's body names neither."""
    try:
        obj = loads(kept)
    except ValueError:
        return None
    err = obj.get("error") if isinstance(obj, dict) else None
    etype, code = _word(err, "type"), _word(err, "code")
    if etype is None and code is None:
        return None
    message = f"{message}: {code or etype}"
    same = dialect == provider_dialect
    if dialect == "anthropic":
        body = loads(error_body(dialect, status, message))
        if same and etype is not None:
            body["error"]["type"] = etype
        return dumps(body)
    body = loads(error_body(dialect, status, message, code if same else None))
    if same and etype is not None:
        body["error"]["type"] = etype
    return dumps(body)


def _retry_after_kept(u: UpstreamConn, req: Request) -> None:
    """A 429 relayed after attempts that were given a Retry-After says to wait at least the
    shortest of them, even when this one gave none."""
    state = req.retry_state
    if state is not None and state.retry_after >= 0 and not u.retry_after_line:
        u.retry_after_line = b"retry-after: %d\r\n" % math.ceil(state.retry_after)


def write(u: UpstreamConn, client: ClientConn, req: Request) -> None:
    """The provider's error body is logged, and the client gets Sluice's in its dialect."""
    status = u.status
    name = u.provider.name
    assert u.buffered is not None  # made by start
    kept = b"".join(u.buffered).decode("utf-8", "replace")
    u.buffered = None
    if u.error_body_bytes > MAX_LOGGED_BODY_BYTES:
        kept += f" ... (the first {MAX_LOGGED_BODY_BYTES} of {u.error_body_bytes} bytes)"
    log(name, f"answered {status}", kept)
    app = u.app
    code = None
    if status == 401 or status == 403:  # the provider refused Sluice's credentials
        app.metrics.upstream_error(name, "provider_auth")
        seen = 502
        code = "provider_auth"
        message = f"provider {name} refused the gateway's credentials"
    else:
        seen = 503 if status == 529 and req.dialect == "openai" else status  # OpenAI has no 529
        message = _message(name, status)
        if 400 <= status < 500 and status != 429:  # the client's request was refused: say why
            body = _refusal_body(req.dialect, u.provider.dialect, seen, message, kept)
            if body is not None:
                u.status = seen
                u.client_head_sent = True
                overhead = (req.own_time + (perf_counter() - u.t_rx)) * 1e6
                req.overhead_us = overhead
                keep_alive = req.keep_alive and not app.stopping
                req.keep_alive = keep_alive
                extra = b"x-gateway-overhead-us: %d\r\n" % overhead if app.overhead_header else b""
                client.write(response(seen, body, extra=extra + u.retry_after_line,
                                      close=not keep_alive))
                return
    overhead = (req.own_time + (perf_counter() - u.t_rx)) * 1e6
    req.overhead_us = overhead
    keep_alive = req.keep_alive and not app.stopping
    req.keep_alive = keep_alive
    extra = b"x-gateway-overhead-us: %d\r\n" % overhead if app.overhead_header else b""
    u.status = seen
    u.client_head_sent = True
    if status == 429:
        _retry_after_kept(u, req)
    client.write(response(seen, error_body(req.dialect, seen, message, code),
                          extra=extra + u.retry_after_line, close=not keep_alive))
