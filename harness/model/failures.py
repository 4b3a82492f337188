"""Why a request failed, classified at the client from what the transport itself raised.

The load generator (harness/run/loadgen/rows.py) gives ``failure_class`` a failed request's
exception and status code, and writes the class into the request's row (``error_class``); the
in-flight lane counts failures by it. Standard library only: every Locust process imports it.

What Locust's FastHttpUser (geventhttpclient) raises, as tests/test_failures.py provokes it over
loopback sockets:

* nothing listening: ConnectionRefusedError (ECONNREFUSED), raised by the connect;
* no answer to the SYN, or no byte of an answer, within the timeout: geventhttpclient's
  RetriesExceeded, its ``original`` (and ``__context__``) a TimeoutError; only that error's
  traceback (the connect, or a recv) tells the two apart;
* closed before any byte of an answer: HTTPConnectionClosed("connection closed."), with a
  ConnectionResetError as its ``__context__`` when it was a reset (also when the reset broke the
  request's sending); closed part-way through the head: HTTPParseError ("Invalid EOF state"),
  reset part-way through: ConnectionResetError;
* after the head, from the body's reads: ConnectionResetError (reset), HTTPParseError
  ("Incomplete response.": closed), TimeoutError (no byte within the timeout);
* a 4xx or 5xx answer: LocustBadStatusCode; our own verdict on an answer: CatchResponseError.
"""
from __future__ import annotations

import errno

# In the order of a request's life: opening the connection, awaiting the head, reading the body,
# the answer itself.
FAILURE_CLASSES = ("client_limit", "connect_refused", "connect_timeout", "reset_before_head",
                   "closed_without_answer", "read_timeout", "reset_during_body",
                   "closed_during_body", "http_5xx", "http_4xx", "bad_body", "error_event",
                   "truncated", "other")

# The classes judged from the answer, never from what the transport raised: the stream's reader
# (an error event) and the join with the provider's log (a silent truncation) set them.
JUDGED_CLASSES = ("error_event", "truncated")

FAILURE_CLASS_MEANINGS: dict[str, str] = {
    "client_limit": "the load generator could not open a connection: out of descriptors "
                    "(EMFILE, ENFILE), local ports (EADDRNOTAVAIL) or buffers (ENOBUFS); the "
                    "instruments' limit, not the system's",
    "connect_refused": "the connection was refused (ECONNREFUSED): nothing listening, or a "
                       "full accept queue answered with a reset",
    "connect_timeout": "the connection was not established within the connect timeout (a full "
                       "accept queue drops the SYN)",
    "reset_before_head": "the connection was reset (ECONNRESET, EPIPE, ECONNABORTED) while the "
                         "request was sent or its answer awaited, before a whole response head",
    "closed_without_answer": "the system closed the connection before a whole response head",
    "read_timeout": "no byte arrived within the network timeout on an open connection, before "
                    "the head or during the body",
    "reset_during_body": "the connection was reset after the response head, before the body "
                         "ended (a stream cut short by a reset)",
    "closed_during_body": "the system closed the connection after the response head, before the "
                          "body ended",
    "http_5xx": "the system answered 500-599",
    "http_4xx": "the system answered 400-499",
    "bad_body": "a 2xx answer whose whole body was not a chat completion, or a stream without a "
                "content frame",
    "error_event": "a 200 stream that ended with its dialect's error event: the clean error of "
                   "a stream already started, as a client SDK raises it",
    "truncated": "a 200 answer cut short without an error: a stream without its dialect's "
                 "terminal event, or content shorter than the provider sent on the attempt that "
                 "answered (judged when the run's rows are joined with the provider's log)",
    "other": "anything else (a response head that does not parse, an error of the client's own)",
}

# The frames of a connection being opened: a timeout raised under one is the connect's.
CONNECT_FRAMES = frozenset({"get_socket", "_create_socket", "_connect_socket",
                            "create_connection", "connect", "connect_ex", "_internal_connect"})
LIMIT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.EADDRNOTAVAIL, errno.ENOBUFS})
RESET_ERRNOS = frozenset({errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED})
# gevent's own timeout, and the exceptions that mean the peer closed the connection cleanly
# (geventhttpclient's, and http.client's, whose RemoteDisconnected is also a ConnectionResetError).
TIMEOUT_TYPES = frozenset({"Timeout"})
CLOSED_TYPES = frozenset({"HTTPConnectionClosed", "RemoteDisconnected", "IncompleteRead"})
# An HTTPParseError saying the bytes ended mid-message (llhttp's "Invalid EOF state",
# geventhttpclient's "Incomplete response." and "connection closed before ..."), not that they
# were not HTTP.
PARSE_ERROR_TYPES = frozenset({"HTTPParseError"})
ENDED_WORDS = ("eof", "incomplete", "closed")
# Verdicts on an answer that arrived (ours, Locust's status check): nothing of the transport.
VERDICT_TYPES = frozenset({"CatchResponseError", "ResponseError", "LocustBadStatusCode",
                           "BadStatusCode"})
# Exceptions looked at per request: a chain is a few long; a cycle or a runaway one stops here.
MAX_CHAIN = 32


def failure_class(error: BaseException | None, status_code: int = 0) -> str:
    """The class (FAILURE_CLASSES) of a failed request. ``error``: what the transport raised, or
    our verdict on the answer when it raised nothing; ``status_code``: the response's, 0 when no
    whole response head arrived. The transport's errors are found anywhere in the chain
    (``original``, ``__cause__``, ``__context__``): a reset or a timeout there outweighs the
    "connection closed" wrapped around it."""
    if status_code >= 500:
        return "http_5xx"
    if status_code >= 400:
        return "http_4xx"
    head = status_code > 0
    chain = _chain(error)
    signals = [(signal, e) for e in chain if (signal := _signal(e))]
    chosen = [(signal, e) for signal, e in signals if signal != "closed"] or signals
    if chosen:
        signal, source = chosen[0]
        if signal == "timeout":
            return "connect_timeout" if _in_connect(source) else "read_timeout"
        return {"limit": "client_limit", "refused": "connect_refused",
                "reset": "reset_during_body" if head else "reset_before_head",
                "closed": "closed_during_body" if head else "closed_without_answer"}[signal]
    if head and all(type(e).__name__ in VERDICT_TYPES for e in chain):
        return "bad_body"
    return "other"


def _chain(error: BaseException | None) -> list[BaseException]:
    """``error`` and every exception behind it, depth first: its ``original`` (geventhttpclient's
    RetriesExceeded keeps the error it gave up on), ``__cause__``, ``__context__``."""
    out: list[BaseException] = []
    todo = [error]
    while todo and len(out) < MAX_CHAIN:
        e = todo.pop()
        if not isinstance(e, BaseException) or any(e is seen for seen in out):
            continue
        out.append(e)
        todo += [e.__context__, e.__cause__, getattr(e, "original", None)]
    return out


def _signal(e: BaseException) -> str:
    """What one exception says of the connection: limit, refused, timeout, closed, reset, or ""."""
    name = type(e).__name__
    number = getattr(e, "errno", None)
    if number in LIMIT_ERRNOS:
        return "limit"
    if isinstance(e, ConnectionRefusedError) or number == errno.ECONNREFUSED:
        return "refused"
    if isinstance(e, TimeoutError) or name in TIMEOUT_TYPES or number == errno.ETIMEDOUT:
        return "timeout"
    if name in CLOSED_TYPES or (name in PARSE_ERROR_TYPES
                                and any(w in str(e).lower() for w in ENDED_WORDS)):
        return "closed"
    if isinstance(e, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)) \
            or number in RESET_ERRNOS:
        return "reset"
    return ""


def _in_connect(e: BaseException) -> bool:
    """Whether ``e`` was raised while a connection was being opened (by its traceback's frames)."""
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_name in CONNECT_FRAMES:
            return True
        tb = tb.tb_next
    return False
