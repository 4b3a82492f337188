"""Getting an admitted request onto a provider connection, and its attempts after the first: a
pooled connection now, or a wait for one; another attempt (resilience) or the error when an
attempt fails before its response head reached the client."""
import os
from time import perf_counter
from typing import TYPE_CHECKING

from sluice import rewrite
from sluice.http import error_body
from sluice.resilience import HELD, attempt_sending, hold, hold_first, on_failure

if TYPE_CHECKING:
    from sluice.client import ClientConn  # noqa: F401 (type comments)
    from sluice.pool import Pool, Provider  # noqa: F401 (type comments)
    from sluice.request import Request  # noqa: F401 (type comments)
    from sluice.server import App  # noqa: F401 (type comments)
    from sluice.upstream import UpstreamConn  # noqa: F401 (type comments)

# Only for the performance gate's own test: a Sluice slowed on purpose, by this many
# milliseconds before each request goes upstream, must be caught by the gate. Never set in use.
TEST_DELAY_S = float(os.environ.get("SLUICE_TEST_DELAY_MS", "0") or 0) / 1000.0
# ... and, for the same reason, by this much CPU per request (a busy wait, microseconds),
# by a fixed number of loop iterations (the counting gate: the same work on every machine),
# and by one more write system call per request (to /dev/null).
TEST_CPU_BURN_S = float(os.environ.get("SLUICE_TEST_CPU_BURN_US", "0") or 0) / 1e6
TEST_BURN_ITERATIONS = int(os.environ.get("SLUICE_TEST_BURN_ITERATIONS", "0") or 0)
TEST_EXTRA_WRITE_FD = (os.open(os.devnull, os.O_WRONLY)
                       if os.environ.get("SLUICE_TEST_EXTRA_WRITE") == "1" else -1)


def _burn_cpu(seconds):
    # type: (float) -> None
    end = perf_counter() + seconds
    while perf_counter() < end:
        pass


def _burn_iterations(n):
    # type: (int) -> int
    x = 0
    for i in range(n):
        x ^= i
    return x


def send_first(app, conn, r, provider, body):
    # type: (App, ClientConn, Request, Provider, bytes) -> None
    """The request is admitted: from now on it is in flight until ``App.request_finished``."""
    payload = rewrite.payload(r, provider, body)
    r.body_bytes = len(r.body)
    if r.route.policy is None:
        r.body = b""  # the payload holds the body now; only another attempt would need the client's
    app.metrics.in_flight += 1
    key = r.key
    if key is not None and key.max_in_flight:
        app.keys.start_request(key)
    r.payload = payload  # kept for another attempt
    if TEST_CPU_BURN_S:
        _burn_cpu(TEST_CPU_BURN_S)
    if TEST_BURN_ITERATIONS:
        _burn_iterations(TEST_BURN_ITERATIONS)
    if TEST_EXTRA_WRITE_FD >= 0:
        os.write(TEST_EXTRA_WRITE_FD, b"x")
    d = r.deployment
    if d is not None and d.down and hold_first(app, conn, r):
        return  # its model's providers all refuse connections: it waits for them (resilience)
    if TEST_DELAY_S:
        app.loop.call_later(TEST_DELAY_S, send, conn, r, provider.pool)
    else:
        send(conn, r, provider.pool)


def send(conn, r, pool):
    # type: (ClientConn, Request, Pool) -> None
    """The first attempt: on an idle pooled connection, else once the pool has one."""
    up = pool.acquire()
    if up is not None:
        r.t_resume = r.t0
        _start(conn, r, up)
    else:
        t = perf_counter()
        r.own_time = t - r.t0
        _wait(conn, pool, t)


def _start(conn, r, up):
    # type: (ClientConn, Request, UpstreamConn) -> None
    conn.upstream = up
    up.start(conn, r, r.payload)  # type: ignore[arg-type]  # set by send_first


def _wait(conn, pool, now):
    # type: (ClientConn, Pool, float) -> None
    conn.waiting_on = pool
    conn.wait_since = now
    pool.wait(conn)


def start_exchange(conn, up):
    # type: (ClientConn, UpstreamConn) -> None
    """The pool has a connection for the request ``conn`` was waiting with."""
    conn.waiting_on = None
    r = conn.active  # type: Request  # type: ignore[assignment]  # the request it waited with
    r.t_resume = perf_counter()
    _start(conn, r, up)


def attempt_failed(conn, status, message, kind=""):
    # type: (ClientConn, int, str, str) -> None
    """The attempt failed before any of its response reached the client: another attempt when
    the model's policy allows one for this ``kind`` of failure, else the error."""
    r = conn.active
    conn.waiting_on = None
    conn.upstream = None
    if r is None or conn.closed:
        return
    if r.deployment is not None and kind:
        delay = on_failure(conn.app, r, kind, -1.0, perf_counter())
        if delay >= 0:
            r.retry_state.delay = delay  # type: ignore[union-attr]  # made by on_failure
            resend(conn, r)
            return
        if delay == HELD:
            hold(conn.app, conn, r)
            return
    give_up(conn, r, status, message)


def give_up(conn, r, status, message):
    # type: (ClientConn, Request, int, str) -> None
    """No attempt answered ``r``: the client gets the error."""
    # the overhead is our own time only: the request path before waiting on the provider
    conn.respond(r, status, error_body(r.dialect, status, message), b"", b"application/json",
                 r.own_time * 1e6)
    conn.app.request_finished(conn, r, status, None, None)


def cancel(conn):
    # type: (ClientConn) -> None
    """The provider side of the request ``conn`` answers stops: its connection is aborted (never
    reused), or its wait for one forgotten."""
    up = conn.upstream
    if up is not None:
        conn.upstream = None
        up.client = None
        up.req = None
        up.abort()
        up.pool.discard(up)
    if conn.waiting_on is not None:
        conn.waiting_on.forget(conn)
        conn.waiting_on = None


def resend(conn, r):
    # type: (ClientConn, Request) -> None
    """Another attempt for ``r`` (resilience), after ``r.retry_state.delay`` seconds."""
    conn.upstream = None
    if r.sent:  # the attempt given up on may have been acted on: the key pays for it
        r.sent = False
        r.lost_attempts += 1
    delay = r.retry_state.delay  # type: ignore[union-attr]  # made by on_failure, which decided this attempt
    if delay > 0:
        conn.app.loop.call_later(delay, resend_now, conn, r)
    else:
        resend_now(conn, r)


def resend_now(conn, r):
    # type: (ClientConn, Request) -> None
    if conn.closed or conn.active is not r:
        return  # the client went away meanwhile (its request was accounted for then)
    # (another attempt: a model with a policy has its deployment)
    pool = r.deployment.provider.pool  # type: ignore[union-attr]
    now = perf_counter()
    attempt_sending(conn.app, r, now)
    r.t_resume = now
    up = pool.acquire()
    if up is not None:
        _start(conn, r, up)
    else:
        _wait(conn, pool, now)

