"""Provider faults for the mock: the schedule, its validation, which request gets which
fault, the per-request header, and the providers' real error bodies.

Importing this module starts nothing and does not import aiohttp.

Schedule (``--faults``: a JSON list, inline or in a file): one object per fault::

    [{"kind": "status", "status": 500, "share": 0.2, "start_s": 10, "duration_s": 30},
     {"kind": "status", "status": 429, "retry_after_s": 1, "share": 0.3},
     {"kind": "overloaded", "share": 0.5, "start_s": 10, "duration_s": 3},
     {"kind": "slow", "hold_ms": 2000, "share": 0.1, "start_s": 5, "duration_s": 20},
     {"kind": "reset", "share": 0.05},
     {"kind": "stall", "after_frames": 3, "stall_s": 5, "share": 0.1},
     {"kind": "malformed", "share": 0.02},
     {"kind": "mid_stream_error", "after_frames": 3, "mode": "split", "share": 0.2},
     {"kind": "stream_cut", "share": 0.2},
     {"kind": "no_response", "share": 0.2, "start_s": 10, "duration_s": 10},
     {"kind": "non_retriable", "share": 0.2},
     {"kind": "down", "start_s": 40, "duration_s": 10}]

Keys of every kind: ``kind``; ``start_s`` (default 0) and ``duration_s`` (default: until
the mock stops), seconds after the fault epoch (``--fault-epoch-unix-s``, default the
mock's start; or the one in ``--fault-arm-file`` when it appears); ``share`` in [0, 1] (default 1) of the generation requests whose whole
body arrived inside ``[start, start + duration)``.  Kind-specific keys:

``status``     ``status`` (400-599, required), ``retry_after_s`` (whole seconds, sent as
               ``Retry-After``; default 1 for 429, none otherwise), ``hold_ms`` (wait
               before the error, default 0).  The body is the dialect's real error shape,
               also for stream requests: OpenAI ``{"error": {"message", "type", "param",
               "code"}}`` (429: type ``requests``, code ``rate_limit_exceeded``; 5xx:
               type ``server_error``), Anthropic ``{"type": "error", "error": {"type",
               "message"}, "request_id"}`` (429 ``rate_limit_error``, 500 ``api_error``,
               529 ``overloaded_error``).
``overloaded`` ``hold_ms`` (wait before the error, default 0): the provider's own overload
               answer, in the dialect of the path: 529 with Anthropic's ``{"type": "error",
               "error": {"type": "overloaded_error", "message": "Overloaded"}, "request_id"}``
               on ``/v1/messages``, 503 with the OpenAI error body (type ``server_error``) on
               ``/v1/chat/completions``.
``slow``       ``hold_ms`` (required): the hold before the head instead of the latency.
``reset``      after the normal hold, the head (with the whole body's Content-Length) and
               ``after_bytes`` body bytes (unary; default half the body, at most all but
               one byte) or the opening frame and ``after_frames`` content frames (stream,
               on the normal frame schedule; default half of them) are written, then the
               connection is aborted with a TCP RST (SO_LINGER 0).
``stall``      as ``reset`` up to the cut, then nothing more is sent until the client
               leaves or ``stall_s`` (default 30) passes; then the connection is closed
               (FIN) without the rest of the body.
``malformed``  a 200 whose body is not valid JSON: the unary body cut in half (with a
               matching Content-Length), or content frame ``after_frames`` (default 0) of a
               stream with its JSON cut in half (the other frames are normal).
``mid_stream_error``  streams only: after the normal hold, the opening frame and
               ``after_frames`` content frames (default half of them) on the normal frame
               schedule, then, by ``mode``: ``event`` (default) the dialect's error event
               and the end of the body (a whole chunked body): OpenAI ``data: {"error":
               {"message", "type", "param", "code"}}`` with no ``event:`` line (what the
               official SDK raises ``APIError`` for), Anthropic ``event: error`` with
               ``{"type": "error", "error": {"type", "message"}}``; ``reset`` a TCP RST, as
               ``reset``; ``split`` one or the other, a seeded exact half each over every
               100 faulted streams.  ``status`` (400-599) picks the error's kind as for
               ``status`` (default: OpenAI 500 ``server_error``, Anthropic 529
               ``overloaded_error``, the examples each provider documents).
``stream_cut`` streams only: as ``mid_stream_error`` up to the cut (``after_frames``,
               default half), then the body ends cleanly at the HTTP level (its last chunk
               sent) without the closing frames: no finish frame or ``[DONE]`` (OpenAI), no
               ``content_block_stop``/``message_delta``/``message_stop`` (Anthropic).
``no_response``  the request is read whole and never answered: no head, no byte, until the
               client closes its connection or the mock stops (its shutdown grace bounds it)
               or a ``down`` window closes the connection.
``non_retriable``  ``hold_ms`` (wait before the error, default 0): 400 with the dialect's
               context-length error, also for stream requests: OpenAI ``{"error":
               {"message", "type": "invalid_request_error", "param": "messages", "code":
               "context_length_exceeded"}}``, Anthropic ``invalid_request_error`` "prompt is
               too long: ...".
``down``       ``duration_s`` required, no ``share``: every worker closes its listener and
               its open connections at the start (connects are refused) and listens again
               at the end.  ``down`` windows may not overlap.

Unknown keys, keys of another kind and bad values are rejected with a one-line error
naming the key (``faults[i].key``).  A stream-only kind (``mid_stream_error``, ``stream_cut``)
leaves a unary request it picks alone: answered normally and logged without a fault (the
lane runs those scenarios with streamed requests only).

Retry-After and flapping need no kind of their own: ``status`` 429 with ``retry_after_s``
sends ``Retry-After``, and windows of ``status`` 503 placed 2 s on, 2 s off alternate
healthy and failing (``harness.model.fault_scenarios`` renders such bursts).

Which request gets a fault: specs are tried in list order, the first that picks a request
wins.  Each spec numbers the requests it is asked about (per worker, from 0); in every
block of 100 consecutive numbers it picks a seeded random set whose size makes the share
exact over each block (``floor(100·share·(b+1)) − floor(100·share·b)`` in block b), so a
run is reproducible from ``--fault-seed`` and the share is exact over any 100 requests.

Per-request header (tests): ``x-mock-fault: KIND[=VALUE][;key=value]...`` with the kind's
keys above (no ``share``/``start_s``/``duration_s``, no ``down``); ``status=503`` and
``slow=2000`` (ms) are shorthands.  E.g. ``status=429;retry_after_s=2``, ``overloaded``, ``reset``,
``reset;after_bytes=10``, ``stall;after_frames=2;stall_s=1``, ``malformed``,
``mid_stream_error;after_frames=3;mode=reset``, ``stream_cut``, ``no_response``,
``non_retriable``.  The header
takes precedence over the schedule; an invalid one is a 400.
"""

from __future__ import annotations

import itertools
import math
import os
import random

import orjson

KINDS = ("status", "overloaded", "slow", "reset", "stall", "malformed", "mid_stream_error", "stream_cut",
         "no_response", "non_retriable", "down")  # down last: no header
_COMMON = ("kind", "share", "start_s", "duration_s")
_KEYS = {
    "status": _COMMON + ("status", "retry_after_s", "hold_ms"),
    "overloaded": _COMMON + ("hold_ms",),
    "slow": _COMMON + ("hold_ms",),
    "reset": _COMMON + ("after_bytes", "after_frames"),
    "stall": _COMMON + ("after_bytes", "after_frames", "stall_s"),
    "malformed": _COMMON + ("after_frames",),
    "mid_stream_error": _COMMON + ("after_frames", "mode", "status"),
    "stream_cut": _COMMON + ("after_frames",),
    "no_response": _COMMON,
    "non_retriable": _COMMON + ("hold_ms",),
    "down": ("kind", "start_s", "duration_s"),
}
STREAM_ONLY = ("mid_stream_error", "stream_cut")
MODES = ("event", "reset", "split")  # mid_stream_error's; split: a seeded half each
_REQUIRED = {"status": ("status",), "slow": ("hold_ms",), "down": ("duration_s",)}
_SHORTHAND = {"status": "status", "slow": "hold_ms"}  # header: KIND=VALUE sets this key
OVERLOADED_STATUS = {"openai": 503, "anthropic": 529}  # each provider's "overloaded", by dialect

BLOCK = 100
MAX_S = 86_400.0
MAX_HOLD_MS = 3_600_000.0
MAX_COUNT = 1 << 40
DEFAULT_STALL_S = 30.0
DEFAULT_429_RETRY_AFTER_S = 1


class FaultError(ValueError):
    """A schedule or header that cannot be used; the message names the key."""


class ExactShare:
    """Yes for ``share`` of the calls, exactly per block of ``BLOCK`` (a seeded random set of
    ``floor(100·share·(b+1)) − floor(100·share·b)`` in block b): reproducible from ``key``."""

    __slots__ = ("share", "key", "_asked", "_block", "_chosen")

    def __init__(self, share: float, key: str):
        self.share = share
        self.key = key
        self._asked = 0
        self._block = -1
        self._chosen: frozenset = frozenset()

    def next(self) -> bool:
        asked = self._asked
        self._asked = asked + 1
        block, position = divmod(asked, BLOCK)
        if block != self._block:
            self._block = block
            scaled = self.share * BLOCK
            chosen_count = math.floor(scaled * (block + 1) + 1e-9) - math.floor(scaled * block + 1e-9)
            chooser = random.Random(f"{self.key}:{block}")  # str seeds are stable across runs
            self._chosen = frozenset(chooser.sample(range(BLOCK), chosen_count))
        return position in self._chosen


class Fault:
    """One validated fault spec; times in monotonic ns once :meth:`place` ran."""

    __slots__ = ("index", "kind", "share", "start_s", "duration_s", "status", "retry_after_s",
                 "hold_ns", "after_bytes", "after_frames", "stall_s", "mode", "label",
                 "start_ns", "end_ns", "_picks", "_resets")

    def __init__(self, index: int, spec: dict):
        self.index = index
        self.kind = spec["kind"]
        self.share = spec.get("share", 1.0)
        self.start_s = spec.get("start_s", 0.0)
        self.duration_s = spec.get("duration_s")
        self.status = spec.get("status")    # None: the kind's own (mid_stream_error)
        retry = spec.get("retry_after_s")
        if retry is None and self.status == 429:
            retry = DEFAULT_429_RETRY_AFTER_S
        self.retry_after_s = retry
        self.hold_ns = round(spec.get("hold_ms", 0) * 1_000_000)
        self.after_bytes = spec.get("after_bytes")    # None: the kind's default
        self.after_frames = spec.get("after_frames")
        self.stall_s = spec.get("stall_s", DEFAULT_STALL_S)
        self.mode = spec.get("mode", "event") if self.kind == "mid_stream_error" else None
        self.label = f"status:{self.status}" if self.kind == "status" else self.kind
        self.start_ns = 0
        self.end_ns = 0
        self._seed(0)

    def _seed(self, seed: int) -> None:
        self._picks = ExactShare(self.share, f"{seed}:{self.index}")
        self._resets = ExactShare(0.5, f"{seed}:{self.index}:mode")

    def place(self, epoch_mono_ns: int, seed: int) -> None:
        self.start_ns = epoch_mono_ns + int(self.start_s * 1e9)
        self.end_ns = (self.start_ns + int(self.duration_s * 1e9) if self.duration_s is not None
                       else 1 << 62)
        self._seed(seed)

    def picks(self) -> bool:
        """Whether the next request asked about gets this fault (exact share per block)."""
        return self._picks.next()

    def resets(self) -> bool:
        """mid_stream_error: whether the next faulted stream is reset (else it gets the error
        event); ``split`` draws a seeded exact half over every 100 faulted streams."""
        if self.mode == "split":
            return self._resets.next()
        return self.mode == "reset"

    def record(self) -> dict:
        """The spec as given (defaults filled in), for the stats file."""
        record = {"kind": self.kind, "start_s": self.start_s, "duration_s": self.duration_s}
        if self.kind != "down":
            record["share"] = self.share
        for key in ("status", "retry_after_s", "after_bytes", "after_frames", "mode"):
            if key in _KEYS[self.kind] and getattr(self, key) is not None:
                record[key] = getattr(self, key)
        if "hold_ms" in _KEYS[self.kind]:
            record["hold_ms"] = self.hold_ns / 1e6
        if self.kind == "stall":
            record["stall_s"] = self.stall_s
        return record


def _number(where: str, value, lo: float, hi: float, integer: bool = False):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FaultError(f"{where}: must be a number (got {value!r})")
    if integer and value != int(value):
        raise FaultError(f"{where}: must be a whole number (got {value!r})")
    if not (lo <= value <= hi):  # also rejects NaN
        raise FaultError(f"{where}: must be between {lo:g} and {hi:g} (got {value!r})")
    return int(value) if integer else float(value)


def _check_value(where: str, key: str, value):
    if key == "share":
        return _number(where, value, 0.0, 1.0)
    if key == "start_s":
        return _number(where, value, 0.0, MAX_S)
    if key == "duration_s":
        value = _number(where, value, 0.0, MAX_S)
        if value <= 0:
            raise FaultError(f"{where}: must be greater than 0 (got {value!r})")
        return value
    if key == "status":
        return _number(where, value, 400, 599, integer=True)
    if key == "mode":
        if value not in MODES:
            raise FaultError(f"{where}: must be one of {', '.join(MODES)} (got {value!r})")
        return value
    if key == "retry_after_s":
        return _number(where, value, 0, 86_400, integer=True)
    if key == "hold_ms":
        return _number(where, value, 0.0, MAX_HOLD_MS)
    if key in ("after_bytes", "after_frames"):
        return _number(where, value, 0, MAX_COUNT, integer=True)
    if key == "stall_s":
        return _number(where, value, 0.0, MAX_S)
    raise AssertionError(key)  # pragma: no cover (keys are checked against _KEYS first)


def _check_spec(where: str, spec, allowed_kinds=KINDS) -> dict:
    if not isinstance(spec, dict):
        raise FaultError(f"{where}: must be an object (got {type(spec).__name__})")
    kind = spec.get("kind")
    if kind not in allowed_kinds:
        raise FaultError(f"{where}.kind: must be one of {', '.join(allowed_kinds)} (got {kind!r})")
    out = {"kind": kind}
    for key, value in spec.items():
        if key == "kind":
            continue
        if key not in _KEYS[kind]:
            raise FaultError(f"{where}.{key}: unknown key for kind {kind!r} "
                             f"(allowed: {', '.join(_KEYS[kind][1:])})")
        out[key] = _check_value(f"{where}.{key}", key, value)
    for key in _REQUIRED.get(kind, ()):
        if key not in out:
            raise FaultError(f"{where}.{key}: required for kind {kind!r}")
    return out


def parse_schedule(text: str) -> list[Fault]:
    """A schedule from JSON text; raises FaultError naming the bad key."""
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise FaultError(f"faults: not valid JSON ({exc})") from None
    if not isinstance(data, list):
        raise FaultError(f"faults: must be a JSON list of fault objects (got {type(data).__name__})")
    faults = [Fault(i, _check_spec(f"faults[{i}]", spec)) for i, spec in enumerate(data)]
    downs = sorted((fault for fault in faults if fault.kind == "down"), key=lambda fault: fault.start_s)
    for earlier, later in itertools.pairwise(downs):
        if later.start_s < earlier.start_s + earlier.duration_s:
            raise FaultError(f"faults[{later.index}].start_s: down windows may not overlap "
                             f"(faults[{earlier.index}] lasts until {earlier.start_s + earlier.duration_s:g} s)")
    return faults


def load_schedule(arg: str) -> list[Fault]:
    """``--faults``: inline JSON (starting with ``[``) or the path of a JSON file."""
    if arg.lstrip().startswith("["):
        return parse_schedule(arg)
    try:
        with open(os.path.expanduser(arg), "rb") as f:
            text = f.read()
    except OSError as exc:
        raise FaultError(f"faults: cannot read {arg}: {exc.strerror}") from None
    return parse_schedule(text)


class FaultPlan:
    """The per-request faults of one worker (``down`` windows are run by each worker: ``mocks.worker``)."""

    __slots__ = ("faults",)

    def __init__(self, faults: list[Fault], seed: int, epoch_unix_s: float, now_unix_s: float,
                 now_mono_ns: int):
        epoch_mono_ns = now_mono_ns + int((epoch_unix_s - now_unix_s) * 1e9)
        for fault in faults:
            fault.place(epoch_mono_ns, seed)
        self.faults = [fault for fault in faults if fault.kind != "down"]

    def pick(self, t_mono_ns: int) -> Fault | None:
        for fault in self.faults:
            if fault.start_ns <= t_mono_ns < fault.end_ns and fault.picks():
                return fault
        return None


def parse_header(value: str) -> Fault:
    """``x-mock-fault`` → a Fault (share 1, no window); raises FaultError."""
    parts = [part.strip() for part in value.split(";")]
    kind, eq, first = parts[0].partition("=")
    kind = kind.strip()
    spec: dict = {"kind": kind}
    if kind not in KINDS or kind == "down":
        raise FaultError(f"kind must be one of {', '.join(KINDS[:-1])} (got {kind!r})")
    if eq:
        if kind not in _SHORTHAND:
            raise FaultError(f"{kind!r} takes no value; use {kind};key=value")
        parts[0:1] = [kind, f"{_SHORTHAND[kind]}={first}"]
    for part in parts[1:]:
        key, eq, raw = part.partition("=")
        key = key.strip()
        if not eq or key in _COMMON:
            raise FaultError(f"{part!r}: expected key=value with a key of kind {kind!r} "
                             f"({', '.join(_KEYS[kind][4:])})")
        if key == "mode":
            spec[key] = raw.strip()
            continue
        try:
            spec[key] = float(raw) if any(c in raw for c in ".eE") else int(raw)
        except ValueError:
            raise FaultError(f"{key}: {raw.strip()!r} is not a number") from None
    return Fault(-1, _check_spec("x-mock-fault", spec, KINDS[:-1]))


# ----------------------------------------------------------------------------- error bodies

_OPENAI_ERRORS = {  # status -> (type, code, message) as OpenAI sends them
    429: ("requests", "rate_limit_exceeded",
          "Rate limit reached for requests. Please try again in {retry}."),
    500: ("server_error", None, "The server had an error while processing your request. Sorry about that!"),
    502: ("server_error", None, "Bad gateway."),
    503: ("server_error", None, "The engine is currently overloaded, please try again later."),
    504: ("server_error", None, "Gateway timeout."),
}
_ANTHROPIC_ERRORS = {  # status -> (type, message) as Anthropic sends them
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    403: ("permission_error", "Your API key does not have permission to use the specified resource."),
    404: ("not_found_error", "The requested resource could not be found."),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", ("This request would exceed the rate limit for your organization. "
                               "Please try again in {retry}.")),
    500: ("api_error", "Internal server error"),
    503: ("api_error", "Service unavailable"),
    504: ("timeout_error", "Request timed out"),
    529: ("overloaded_error", "Overloaded"),
}


def _retry_text(retry_after_s) -> str:
    return f"{retry_after_s}s" if retry_after_s is not None else "a moment"


def openai_error_body(status: int, retry_after_s=None) -> bytes:
    """``{"error": {"message", "type", "param", "code"}}`` as OpenAI answers ``status``."""
    kind, code, message = _OPENAI_ERRORS.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None,
                 f"The server answered {status}."))
    return orjson.dumps({"error": {"message": message.format(retry=_retry_text(retry_after_s)),
                                   "type": kind, "param": None, "code": code}})


def anthropic_error_body(status: int, request_id: str, retry_after_s=None) -> bytes:
    """``{"type": "error", "error": {"type", "message"}, "request_id"}`` as Anthropic
    answers ``status`` (529: ``overloaded_error``)."""
    kind, message = _ANTHROPIC_ERRORS.get(
        status, ("api_error" if status >= 500 else "invalid_request_error", f"The server answered {status}."))
    return orjson.dumps({"type": "error", "error": {"type": kind,
                                                     "message": message.format(retry=_retry_text(retry_after_s))},
                         "request_id": "req_" + request_id})


MID_STREAM_ERROR_STATUS = {"openai": 500, "anthropic": 529}  # mid_stream_error without a status
NON_RETRIABLE_STATUS = 400
OPENAI_CONTEXT_LENGTH_MESSAGE = (
    "This model's maximum context length is 128000 tokens. However, your messages resulted in "
    "131072 tokens. Please reduce the length of the messages.")
ANTHROPIC_CONTEXT_LENGTH_MESSAGE = "prompt is too long: 210000 tokens > 200000 maximum"


def openai_error_event(status: int) -> bytes:
    """The frame an OpenAI stream fails with: ``data: {"error": {...}}`` and no ``event:``
    line (the official SDK raises ``APIError`` on a data object with an ``error``)."""
    return b"data: " + openai_error_body(status) + b"\n\n"


def anthropic_error_event(status: int) -> bytes:
    """The event an Anthropic stream fails with: ``event: error`` and ``{"type": "error",
    "error": {"type", "message"}}`` (its documented example: ``overloaded_error``)."""
    kind, message = _ANTHROPIC_ERRORS.get(
        status, ("api_error" if status >= 500 else "invalid_request_error", f"The server answered {status}."))
    return (b"event: error\ndata: " + orjson.dumps(
        {"type": "error", "error": {"type": kind, "message": message.format(retry=_retry_text(None))}})
        + b"\n\n")


def openai_context_length_body() -> bytes:
    """OpenAI's 400 for a prompt beyond the model's context window."""
    return orjson.dumps({"error": {"message": OPENAI_CONTEXT_LENGTH_MESSAGE, "type": "invalid_request_error",
                                   "param": "messages", "code": "context_length_exceeded"}})


def anthropic_context_length_body(request_id: str) -> bytes:
    """Anthropic's 400 for a prompt beyond the model's context window."""
    return orjson.dumps({"type": "error", "error": {"type": "invalid_request_error",
                                                     "message": ANTHROPIC_CONTEXT_LENGTH_MESSAGE},
                         "request_id": "req_" + request_id})


def broken_json(body: bytes) -> bytes:
    """``body`` (a JSON document) cut in half: never valid JSON."""
    return body[:max(1, len(body) // 2)]


def broken_frame(frame: bytes) -> bytes:
    """An SSE frame whose ``data:`` JSON is cut in half; still a well-formed frame."""
    data_at = frame.rfind(b"data: ")
    if data_at < 0:
        return frame
    data = frame[data_at + 6:].rstrip(b"\n")
    return frame[:data_at + 6] + broken_json(data) + b"\n\n"
