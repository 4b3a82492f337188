"""Every failed request classified at the client by its cause (harness/model/failures.py), on
synthetic exceptions of each class (chained, wrapped, errno only); the real ones Locust raises:
test_failures_integration.py."""
from __future__ import annotations

import errno
import http.client

import pytest

from harness.model.failures import (
    FAILURE_CLASS_MEANINGS,
    FAILURE_CLASSES,
    JUDGED_CLASSES,
    failure_class,
)


# Stand-ins named as geventhttpclient and Locust name theirs: the classifier reads type names,
# never imports them.
class HTTPParseError(Exception):
    pass


class HTTPConnectionClosed(HTTPParseError):
    pass


class RetriesExceeded(Exception):
    def __init__(self, original):
        super().__init__(f"0, original={original}")
        self.original = original


class CatchResponseError(Exception):
    pass


class LocustBadStatusCode(Exception):
    pass


class Timeout(BaseException):  # gevent.Timeout is a BaseException
    pass


def _errno_only(number: int) -> OSError:
    """An OSError that says its cause by errno alone (OSError(n, ...) would pick a subclass)."""
    e = OSError("socket error")
    e.errno = number
    return e


def _raised(make, within: str = "recv") -> BaseException:
    """The exception ``make()`` gives, raised under a frame named ``within`` (the classifier
    tells a connect from a read by the frames)."""
    def recv():
        raise make()

    def connect():
        raise make()

    try:
        {"recv": recv, "connect": connect}[within]()
    except BaseException as e:  # noqa: BLE001 - whatever it is, it is the case under test
        return e
    raise AssertionError("not raised")


def _chained(*errors: BaseException) -> BaseException:
    """The first of ``errors``, each raised while handling the next (its __context__)."""
    for e, handled in zip(errors, errors[1:]):
        e.__context__ = handled
    return errors[0]


def _caused_by(cause: BaseException, make) -> BaseException:
    try:
        raise make() from cause
    except BaseException as e:  # noqa: BLE001
        return e


CASES = [
    # (case, the exception, status code, class)
    ("refused", lambda: _raised(ConnectionRefusedError, "connect"), 0, "connect_refused"),
    ("refused by errno", lambda: _errno_only(errno.ECONNREFUSED), 0, "connect_refused"),
    ("connect timeout", lambda: _raised(TimeoutError, "connect"), 0, "connect_timeout"),
    ("connect timeout, wrapped", lambda: RetriesExceeded(_raised(TimeoutError, "connect")), 0,
     "connect_timeout"),
    ("connect ETIMEDOUT", lambda: _raised(lambda: _errno_only(errno.ETIMEDOUT), "connect"), 0,
     "connect_timeout"),
    ("read timeout, wrapped", lambda: _chained(RetriesExceeded(None), _raised(TimeoutError)), 0,
     "read_timeout"),
    ("read timeout in the body", lambda: _raised(TimeoutError), 200, "read_timeout"),
    ("gevent's Timeout", lambda: _raised(Timeout), 0, "read_timeout"),
    ("closed", lambda: HTTPConnectionClosed("connection closed."), 0, "closed_without_answer"),
    ("closed mid-head", lambda: HTTPParseError("('Invalid EOF state', 14)"), 0,
     "closed_without_answer"),
    ("http.client's closed", lambda: http.client.RemoteDisconnected("closed"), 0,
     "closed_without_answer"),
    ("reset, as closed", lambda: _chained(HTTPConnectionClosed("connection closed."),
                                          ConnectionResetError(104, "reset")),
     0, "reset_before_head"),
    ("reset while sending", lambda: _chained(HTTPConnectionClosed("closed"),
                                             ConnectionResetError(104, "reset"),
                                             _errno_only(errno.EAGAIN)),
     0, "reset_before_head"),
    ("broken pipe", lambda: BrokenPipeError(errno.EPIPE, "pipe"), 0, "reset_before_head"),
    ("EPIPE by errno", lambda: _errno_only(errno.EPIPE), 0, "reset_before_head"),
    ("reset, as the cause", lambda: _caused_by(_errno_only(errno.ECONNRESET),
                                               lambda: RuntimeError("wrapped")),
     0, "reset_before_head"),
    ("reset in the body", lambda: _chained(ConnectionResetError(104, "reset"),
                                           AttributeError("_cached_content")),
     200, "reset_during_body"),
    ("aborted in the body", lambda: _errno_only(errno.ECONNABORTED), 200, "reset_during_body"),
    ("closed in the body", lambda: HTTPParseError("Incomplete response."), 200,
     "closed_during_body"),
    ("out of descriptors", lambda: _errno_only(errno.EMFILE), 0, "client_limit"),
    ("out of ports", lambda: _raised(lambda: _errno_only(errno.EADDRNOTAVAIL), "connect"), 0,
     "client_limit"),
    ("5xx", lambda: LocustBadStatusCode("code=503"), 503, "http_5xx"),
    ("5xx, our verdict", lambda: CatchResponseError("HTTP 500"), 500, "http_5xx"),
    ("4xx", lambda: CatchResponseError("HTTP 429"), 429, "http_4xx"),
    ("200 without a completion", lambda: CatchResponseError("HTTP 200 without a body"), 200,
     "bad_body"),
    ("no exception at all", lambda: None, 200, "bad_body"),
    ("our verdict on no answer", lambda: CatchResponseError("HTTP 0"), 0, "other"),
    ("not HTTP", lambda: HTTPParseError("('Expected HTTP/, RTSP/ or ICE/', 8)"), 0, "other"),
    ("a client bug", lambda: ValueError("x"), 200, "other"),
]


@pytest.mark.parametrize("make, status, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_synthetic_failure_gets_its_class(make, status, expected):
    assert failure_class(make(), status) == expected


def test_every_class_is_defined_and_a_looping_chain_ends():
    assert tuple(FAILURE_CLASS_MEANINGS) == FAILURE_CLASSES
    assert {c[3] for c in CASES} == set(FAILURE_CLASSES) - set(JUDGED_CLASSES)
    a, b = ValueError("a"), ValueError("b")
    assert failure_class(_chained(a, b, a), 0) == "other"
