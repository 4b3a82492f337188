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

import sys
import time
from time import perf_counter
from typing import TYPE_CHECKING

from orjson import dumps

from sluice.http import error_body, response

if TYPE_CHECKING:
    from sluice.client import ClientConn
    from sluice.request import Request
    from sluice.upstream import UpstreamConn

MAX_LOGGED_BODY_BYTES = 1024
LOG_INTERVAL_S = 10.0

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
    it is read, its Retry-After line kept for the client."""
    u.buffered = []
    u.buffered_bytes = 0
    i = low.find(b"\nretry-after:")
    u.retry_after_line = head[i + 1:head.find(b"\r\n", i + 1) + 2] if i >= 0 else b""


def keep(u: UpstreamConn, body: bytes) -> None:
    room = MAX_LOGGED_BODY_BYTES - u.buffered_bytes
    if room > 0:
        assert u.buffered is not None  # made by start
        u.buffered.append(body if len(body) <= room else body[:room])
    u.buffered_bytes += len(body)


def _message(name: str, status: int) -> str:
    if status == 429:
        return f"provider {name} is rate limiting requests"
    if status == 503 or status == 529:
        return f"provider {name} is overloaded"
    if status >= 500:
        return f"provider {name} failed (status {status})"
    return f"provider {name} refused the request (status {status})"


def write(u: UpstreamConn, client: ClientConn, req: Request) -> None:
    """The provider's error body is logged, and the client gets Sluice's in its dialect."""
    status = u.status
    name = u.provider.name
    assert u.buffered is not None  # made by start
    kept = b"".join(u.buffered).decode("utf-8", "replace")
    u.buffered = None
    if u.buffered_bytes > MAX_LOGGED_BODY_BYTES:
        kept += f" ... (the first {MAX_LOGGED_BODY_BYTES} of {u.buffered_bytes} bytes)"
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
    overhead = (req.own_time + (perf_counter() - u.t_rx)) * 1e6
    req.overhead_us = overhead
    keep_alive = req.keep_alive and not app.stopping
    req.keep_alive = keep_alive
    extra = b"x-gateway-overhead-us: %d\r\n" % overhead if app.overhead_header else b""
    u.status = seen
    u.client_head_sent = True
    client.write(response(seen, error_body(req.dialect, seen, message, code),
                          extra=extra + u.retry_after_line, close=not keep_alive))
