"""What Sluice reads in a chat request's body: the model, the output limits and ``n`` (for the
token budget), and that every key it decides on occurs once in the top-level object. Read from
the bytes when they make the answer certain (validate_json = false), else from the body parsed
once with orjson; and the model's cap written into a body that sets no output limit."""
import json
import re
from typing import TYPE_CHECKING

import orjson

from sluice.bytescan import first_model_span, top_level_count

if TYPE_CHECKING:
    from sluice.translate.common import JSONObject  # noqa: F401 (type comments)

loads = orjson.loads
dumps = orjson.dumps
JSONDecodeError = orjson.JSONDecodeError

# The keys Sluice decides on. A top-level object that repeats one, or spells one in another case,
# is refused: Sluice and the provider's parser could read different values (most parsers keep the
# last, a scan the first; Go's encoding/json matches keys case-insensitively, folding U+212A to k
# and U+017F to s). ``scan_keys`` finds them spelled literally and says when an escape could
# spell one (\u0040-\u007f, \u212a, \u017f) or a key spells one in another case; the common body
# spells each at most once and does neither, so it is never parsed a second time for repeats.
DECIDED_KEYS = ("model", "max_tokens", "max_completion_tokens", "n", "stream")
# That second parse (Python's json, keeping every object's pairs) costs ~45 ms and ~25 MB per MiB
# of tiny objects, on the loop: a larger body that needs it is refused instead.
MAX_REPEAT_CHECK_BYTES = 1 << 20
OUTPUT_LIMITS = ("max_tokens", "max_completion_tokens")
MAX_TOKENS_RESERVED = 1 << 32   # the output part of a reservation, whatever a body asks
TEXT_BYTES_PER_TOKEN = 4  # the prompt's bytes as reserved: about 4 bytes a token of English text
# A content part that the provider counts apart from its bytes (an image URL of 60 bytes costs
# it about 1,600 tokens), by the kind its "type" names, anywhere in the body (tool results carry
# parts too). "type" in any ASCII case: a provider on Go's encoding/json reads "Type" as "type".
_PART = re.compile(rb'"[tT][yY][pP][eE]"\s*:\s*"(image_url|image|input_audio|file|document)"')


class ChatBody:
    """What admission learns from a chat request's body."""
    __slots__ = ("data", "parsed", "model", "model_span", "output_limit", "max_tokens_set", "choices",
                 "unchecked")

    def __init__(self, data):
        # type: (bytes) -> None
        self.data = data          # the body as the provider will get it
        self.parsed = None  # type: JSONObject | None  # the client's body parsed, when it had to be
        self.model = None  # type: str | None  # the model the client asked for
        self.model_span = None  # type: tuple[int, int] | None  # where its value is in ``data``, when found without parsing
        self.output_limit = None  # type: int | None  # the largest output limit the body sets, when it sets one
        self.max_tokens_set = False  # max_tokens among them: the one limit Anthropic reads
        self.choices = 1          # ``n``: how many answers it asks for
        self.unchecked = False    # parsed, but not checked for repeated keys yet (``check_repeats``)


def read_fast(body, found, limits):
    # type: (ChatBody, list[bytes], bool) -> bool
    """Read ``body`` from its bytes, without parsing, when they make it certain (True); else
    False and it is parsed. Certain: no decided key spelled with an escape (``found`` is not
    None) and each spelled once, so none is repeated; the model the first key; and, when the
    output ``limits`` are wanted, each of them and ``n`` a plain count surely at the top level."""
    if _spelled_twice(found):
        return False
    data = body.data
    span = first_model_span(data)
    if span is None:
        return False
    if limits:
        for key in found:
            if key == b"model" or key == b"stream":
                continue
            count = top_level_count(data, data.find(b'"%s"' % key))
            if count is None:
                return False
            if key == b"n":
                body.choices = count
                continue
            if key == b"max_tokens":
                body.max_tokens_set = True
            if body.output_limit is None or count > body.output_limit:
                body.output_limit = count
    try:
        body.model = data[span[0]:span[1]].decode()
    except UnicodeDecodeError:
        return False  # the parse refuses it
    body.model_span = span
    return True


def read_parsed(body, found, limits):
    # type: (ChatBody, list[bytes] | None, bool) -> str | None
    """Read ``body`` parsed (orjson, once). Returns why it is refused (a 400), or None. Whether
    a key is repeated is left to ``check_repeats``, once the key's limits allow the request."""
    try:
        obj = loads(body.data)
    except JSONDecodeError as e:
        return f"request body is not valid JSON: {e}"
    if type(obj) is not dict:
        return "request body must be a JSON object"
    body.unchecked = found is None or _spelled_twice(found)
    model = obj.get("model")
    if type(model) is not str or not model:
        return "model: a model name (string) is required"
    body.parsed = obj
    body.model = model
    return _read_limits(body, obj) if limits else None


def check_repeats(body):
    # type: (ChatBody) -> str | None
    """Why a parsed body whose bytes show a decided key twice, an escape that could spell one, or
    a key that folds onto one, is refused: a repeated decided key, one in another case, or over
    MAX_REPEAT_CHECK_BYTES to check; else None."""
    if len(body.data) > MAX_REPEAT_CHECK_BYTES:
        return (f"request body over {MAX_REPEAT_CHECK_BYTES} bytes that spells a decided key twice, "
                "in another case or escapes a letter cannot be checked for repeated keys")
    return _repeated_key(body.data)


def _spelled_twice(found):
    # type: (list[bytes]) -> bool
    return len(found) > 1 and len(set(found)) < len(found)


def _repeated_key(data):
    # type: (bytes) -> str | None
    """Why the top-level object is refused when it repeats a decided key or spells one in another
    case (keys unescaped), else None. A second parse, keeping every object's pairs: only for the
    bodies whose bytes show a decided key twice, an escape that could spell one, or a key that
    folds onto one."""
    try:
        pairs = json.loads(data, object_pairs_hook=list)  # every object as its (key, value) list
    except (ValueError, RecursionError):  # what orjson took but Python's parser does not
        return "request body cannot be checked for repeated keys"
    seen = set()  # type: set[str]
    for key, _ in pairs:
        folded = key.lower().replace("\u017f", "s")  # str.lower folds U+212A to k already
        if folded in DECIDED_KEYS:
            if key != folded:
                return (f"{key[:40]!r}: a key spelled as {folded!r} in another case (providers that "
                        f"match keys case-insensitively read it as {folded!r})")
            if key in seen:
                return f"{key}: the key appears more than once"
            seen.add(key)
    return None


def _read_limits(body, obj):
    # type: (ChatBody, JSONObject) -> str | None
    """The output limits of both dialects and ``n``, from the top level. Returns why they are
    refused, or None."""
    limit = None
    for key in OUTPUT_LIMITS:
        if key in obj:
            value = obj[key]
            if type(value) is not int or value < 1:
                return f"{key}: a positive integer is required"
            if limit is None or value > limit:
                limit = value
    body.output_limit = limit
    body.max_tokens_set = "max_tokens" in obj
    n = obj.get("n")
    if n is None:  # absent or null: one answer
        n = 1
    elif type(n) is not int or n < 1:
        return "n: a positive integer is required"
    body.choices = n
    return None


def needs_output_cap(body, dialect):
    # type: (ChatBody, str) -> bool
    """The body sets no output limit its own dialect reads (Anthropic reads only max_tokens)."""
    return body.output_limit is None or (dialect == "anthropic" and not body.max_tokens_set)


def write_output_cap(body, dialect, cap):
    # type: (ChatBody, str, int) -> None
    """``cap`` written into a body that ``needs_output_cap``, as its first key, so the provider
    stops where the reservation does (and so does any other attempt)."""
    key = "max_tokens" if dialect == "anthropic" else "max_completion_tokens"
    data = body.data
    at = data.find(b"{") + 1  # the body's opening brace: it is an object with a model key
    added = b'"%s":%d,' % (key.encode(), cap)
    body.data = data[:at] + added + data[at:]
    if body.model_span is not None:
        start, end = body.model_span
        body.model_span = (start + len(added), end + len(added))
    if body.parsed is not None:
        body.parsed[key] = cap
    if body.output_limit is None or cap > body.output_limit:
        body.output_limit = cap


def prompt_tokens(body, data, part_tokens):
    # type: (ChatBody, bytes, dict[bytes, int]) -> int
    """The prompt's tokens as reserved: the client's body ``data`` at TEXT_BYTES_PER_TOKEN, plus
    ``part_tokens[kind]`` for each content part of a kind the provider counts apart."""
    tokens = len(data) // TEXT_BYTES_PER_TOKEN
    if body.unchecked:  # an escape may spell a part's type: its object, written without escapes
        data = dumps(body.parsed)
    for kind in _PART.findall(data):
        tokens += part_tokens[kind]
    return tokens


def streams_without_usage(body):
    # type: (ChatBody) -> bool
    """An OpenAI body that streams (``stream`` true) without asking for the usage chunk
    (``stream_options.include_usage``). Parsed only when it spells ``"stream"``."""
    data = body.data
    if data.find(b'"stream"') < 0:
        return False
    obj = body.parsed
    if obj is None:
        try:
            obj = loads(data)
        except JSONDecodeError:  # read from its bytes: the provider refuses it
            return False
    if type(obj) is not dict or obj.get("stream") is not True:
        return False
    opts = obj.get("stream_options")
    return not (type(opts) is dict and opts.get("include_usage") is True)


def asking_usage(data):
    # type: (bytes) -> bytes
    """An OpenAI streamed body (``streams_without_usage``) that asks for the usage chunk:
    ``stream_options`` added as its first key, or set in the body parsed when it has one (a
    second one would be a repeated key)."""
    if data.find(b'"stream_options"') < 0:
        at = data.find(b"{") + 1
        return data[:at] + b'"stream_options":{"include_usage":true},' + data[at:]
    obj = loads(data)
    opts = obj.get("stream_options")
    obj["stream_options"] = dict(opts, include_usage=True) if type(opts) is dict else {"include_usage": True}
    try:
        return orjson.dumps(obj)
    except orjson.JSONEncodeError:  # deeper than orjson serializes: asked for nothing
        return data


def most_tokens(body):
    # type: (ChatBody) -> int
    """The most output tokens the body can cost: its largest limit for each of ``n`` answers."""
    # (a budget's body has its output limit: written in by write_output_cap when it set none)
    limit = min(body.output_limit, MAX_TOKENS_RESERVED)  # type: int  # type: ignore[type-var, assignment]
    return min(limit * min(body.choices, MAX_TOKENS_RESERVED), MAX_TOKENS_RESERVED)
