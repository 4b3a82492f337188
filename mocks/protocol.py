"""The mock's HTTP vocabulary and request reading: header names, limits, the checks of a
generation request (its JSON body's common shape, the per-request override headers), the
load generator's id, and the 400 bodies of both dialects.

Importing this module starts nothing and does not import aiohttp.
"""

from __future__ import annotations

import re

import orjson
from multidict import istr

from mocks.faults import FaultError, parse_header

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError

RID = "x-mock-request-id"
CT = "Content-Type"
JSON_CT = "application/json"
SSE_CT = "text/event-stream"

H_LATENCY = "x-mock-latency-ms"
H_CHUNKS = "x-mock-chunks"
H_DELAY = "x-mock-chunk-delay-ms"
H_TOKENS = "x-mock-response-tokens"
H_CLIENT_RID = "x-request-id"
H_FAULT = "x-mock-fault"
# looked up as istr: a plain str key is lowercased into a new string on every lookup
_K_LATENCY, _K_CHUNKS, _K_DELAY, _K_TOKENS, _K_CLIENT_RID, _K_FAULT = map(
    istr, (H_LATENCY, H_CHUNKS, H_DELAY, H_TOKENS, H_CLIENT_RID, H_FAULT))

_RID_MARK = b"[rid:"
_RID_IN_BODY = re.compile(rb"\[rid:([A-Za-z0-9._:-]{1,64})\]")
_RID_VALID = re.compile(r"[A-Za-z0-9._:-]{1,64}\Z")

MAX_MS = 3_600_000.0
MAX_CHUNKS = 100_000
MAX_TOKENS = 1_000_000


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


def openai_invalid_request(error: BadRequest) -> bytes:
    return orjson.dumps({"error": {"message": error.message, "type": "invalid_request_error",
                                   "param": error.param, "code": error.code}})


def anthropic_invalid_request(error: BadRequest) -> bytes:
    return orjson.dumps({"type": "error", "error": {"type": "invalid_request_error",
                                                     "message": error.message}})


def request_id_of(headers, body: bytes) -> str:
    """The load generator's id: the last ``[rid:<id>]`` in the body, else ``x-request-id``."""
    mark_at = body.rfind(_RID_MARK)
    if mark_at >= 0:
        marker = _RID_IN_BODY.match(body, mark_at)
        if marker is not None:
            return marker.group(1).decode()
    header = headers.get(_K_CLIENT_RID)
    if header is not None and _RID_VALID.match(header):
        return header
    return ""


def _ms_header(value: str, name: str) -> int:
    try:
        ms = float(value)
    except ValueError:
        raise BadRequest(f"Invalid header {name}: {value!r} is not a number", name, "invalid_value") from None
    if not (0.0 <= ms <= MAX_MS):  # also rejects NaN
        raise BadRequest(f"Invalid header {name}: must be between 0 and {MAX_MS:g}", name, "invalid_value")
    return int(round(ms * 1_000_000))


def _int_header(value: str, name: str, lo: int, hi: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise BadRequest(f"Invalid header {name}: {value!r} is not an integer", name, "invalid_value") from None
    if not (lo <= number <= hi):
        raise BadRequest(f"Invalid header {name}: must be between {lo} and {hi}", name, "invalid_value")
    return number


def read_overrides(headers, latency_ns: int, tokens: int, chunks: int, delay_ns: int):
    """The request's settings: the given defaults, each replaced by its ``x-mock-*`` header
    when sent; returns (latency_ns, tokens, chunks, delay_ns, forced fault or None)."""
    value = headers.get(_K_LATENCY)
    if value is not None:
        latency_ns = _ms_header(value, H_LATENCY)
    value = headers.get(_K_TOKENS)
    if value is not None:
        tokens = _int_header(value, H_TOKENS, 0, MAX_TOKENS)
    value = headers.get(_K_CHUNKS)
    if value is not None:
        chunks = _int_header(value, H_CHUNKS, 1, MAX_CHUNKS)
    value = headers.get(_K_DELAY)
    if value is not None:
        delay_ns = _ms_header(value, H_DELAY)
    value = headers.get(_K_FAULT)
    if value is not None:
        try:
            return latency_ns, tokens, chunks, delay_ns, parse_header(value)
        except FaultError as e:
            raise BadRequest(f"Invalid header {H_FAULT}: {e}", H_FAULT, "invalid_value") from None
    return latency_ns, tokens, chunks, delay_ns, None


def parse_body(body: bytes):
    """Validate the common shape; returns (req, model, messages)."""
    try:
        req = _loads(body)
    except _JSONDecodeError:
        raise BadRequest("We could not parse the JSON body of your request. The body must be valid JSON.",
                         None, "invalid_json") from None
    if type(req) is not dict:
        raise BadRequest("The request body must be a JSON object.", None, "invalid_type")
    model = req.get("model")
    if model is None:
        raise BadRequest("Missing required parameter: 'model'.", "model", "missing_required_parameter")
    if type(model) is not str:
        raise BadRequest("Invalid type for 'model': expected a string.", "model", "invalid_type")
    messages = req.get("messages")
    if messages is None:
        raise BadRequest("Missing required parameter: 'messages'.", "messages", "missing_required_parameter")
    if type(messages) is not list:
        raise BadRequest("Invalid type for 'messages': expected an array of messages.", "messages",
                         "invalid_type")
    if not messages:
        raise BadRequest("Invalid 'messages': empty array. Expected an array with minimum length 1.",
                         "messages", "empty_array")
    return req, model, messages
