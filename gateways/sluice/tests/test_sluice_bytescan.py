"""The byte layer's two builds give the same answers: ``_bytescan.pyx`` (C loops) against
``bytescan.py`` (regexes and bytes methods, the reference), on random bytes, JSON-shaped token
soup, real JSON bodies, request heads and the hostile bodies of the hardening tests.

The fast lane draws a bounded number of examples per function; the integration lane draws many
more. On the pure-Python lane the extension is loaded from its build beside the package (it is
not what Sluice runs there, only what these tests compare against)."""
import importlib.util
import json
import os
from importlib.machinery import EXTENSION_SUFFIXES

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sluice_helpers import SLUICE_DIR

import sluice
from sluice import bytescan

REF = bytescan.REFERENCE
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LONG = settings(max_examples=6000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _extension():
    if sluice.compiled:
        from sluice import _bytescan
        return _bytescan
    path = os.path.join(SLUICE_DIR, "sluice", "_compiled", "_bytescan" + EXTENSION_SUFFIXES[0])
    if not os.path.exists(path):
        pytest.skip("the byte layer is not built (python gateways/sluice/build.py)")
    spec = importlib.util.spec_from_file_location("sluice._bytescan", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


C = _extension()

FRAGMENTS = [b'"model"', b'"max_tokens"', b'"max_completion_tokens"', b'"n"', b'"stream"',
             b'"prompt_tokens"', b'"completion_tokens"', b'"input_tokens"', b'"output_tokens"',
             b'"usage"', b'"cached_tokens"', b'"cache_creation_input_tokens"', b'"cache_read_input_tokens"',
             b'cache_read_input_tokens"', b'"cache', b'model"', b'n"', b'stream"', b'prompt_tokens"',
             b'"', b'"x"', b'"gpt-4o"', b'mod', b'el', b'max_', b'tokens', b':', b',',
             b' ', b'\t', b'\n', b'\r', b'\x0b', b'\x0c', b'{', b'}', b'[', b']', b'\\', b'\\"',
             b'\\u006d', b'\\u005F', b'\\u005f', b'\\u007A', b'\\u00e9', b'\\u00', b'\\u007', b'u00',
             b'0', b'1', b'7', b'12', b'00012', b'123456789012', b'1234567890123', b'-1', b'1.5',
             b'null', b'true', b'\x00', b'\xff', b'\xc3\xa9', b'\r\n', b'\r\n\r\n',
             # keys in another case, and the letters that fold to k and s (U+212A, U+017F)
             b'"Model"', b'"MAX_TOKENS"', b'"N"', b'"Stream"', b'"max_to\xe2\x84\xaaens"', b'"\xc5\xbftream"',
             b'\xe2\x84\xaa', b'\xe2\x84', b'\xc5\xbf', b'\xc5', b'M', b'N', b'S', b'TOKENS"', b'\\u004d', b'\\u004D',
             b'\\u0040', b'\\u003f', b'\\u212a', b'\\u212A', b'\\u212b', b'\\u017f', b'\\u017F', b'\\u017e']
soup = st.lists(st.sampled_from(FRAGMENTS), max_size=40).map(b"".join)
KEYS = [b"model", b"max_tokens", b"max_completion_tokens", b"n", b"stream", b"prompt_tokens",
        b"completion_tokens", b"input_tokens", b"output_tokens", b"cached_tokens", b"cache_creation_input_tokens",
        b"cache_read_input_tokens", b"usage", b"x_1", b"", b"m-x", b"n\\",
        b"Model", b"N", b"STREAM", b"Max_Completion_Tokens", b"max_to\xe2\x84\xaaens", b"\xc5\xbftream", b"mODEL\xc5"]
spaces = st.sampled_from([b"", b" ", b"\t\n", b"\r\x0b\x0c "])


@st.composite
def member(draw):
    """A key, a colon and a count, each part nearly right: the scans' edges (a backslash before
    the quote, 0 to 14 digits, an unclosed quote, a key run into the next)."""
    key = draw(st.sampled_from(KEYS))
    size = draw(st.integers(0, 14))
    digits = draw(st.text("0123456789", min_size=size, max_size=size)).encode()
    return b"".join([draw(st.sampled_from([b"", b"\\", b"x"])), b'"', key, draw(st.sampled_from([b'"', b'"', b""])),
                     draw(spaces), draw(st.sampled_from([b":", b":", b";"])), draw(spaces), digits,
                     draw(spaces), draw(st.sampled_from([b",", b"}", b"]", b"", b"x", b'"']))])


members = st.lists(st.one_of(member(), st.sampled_from(FRAGMENTS)), max_size=12).map(b"".join)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["model", "max_tokens", "n", "usage", "prompt_tokens", "x", "stream", "Model", "N",
                         "max_to\u212aens", "\u017ftream"]) | st.text(max_size=6),
        inner, max_size=3),
    max_leaves=8)


@st.composite
def json_bodies(draw):
    obj = {}
    for key in draw(st.permutations(["model", "messages", "max_tokens", "max_completion_tokens", "n", "stream",
                                     "usage", "tools", "MAX_TOKENS", "Model", "\u017ftream"]))[:draw(st.integers(0, 11))]:
        obj[key] = draw(json_values)
    if draw(st.booleans()):
        obj = {"model": draw(st.text(max_size=10)), **obj}
    separators = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")]))
    text = json.dumps(obj, separators=separators, ensure_ascii=draw(st.booleans()), indent=draw(
        st.sampled_from([None, 1])))
    return draw(st.sampled_from(["", " ", "\n\t"])).encode() + text.encode()


HOSTILE_BODIES = [
    b'{"model":"a","model":"b"}', b'{"mod\\u0065l":"x","model":"y"}', b'{"model":"m","max_tokens":100000,'
    b'"max_completion_tokens":1}', b'{"model":"m","tools":[{"max_tokens":1}],"max_tokens":5}',
    b'{"model":"m","max_tokens":' + b"9" * 5000 + b'}', b'{"model":"m","n":0}', b'{"model":"m","n":-3}',
    b'[' * 1200 + b']' * 1200, b'{"model":"m\\"x"}', b'{"model":"m"} trailing', b'{"model":"m","x":"\\"n\\": 5,"}',
    b'{"model":"m","usage":{"prompt_tokens":1234567890123,"completion_tokens":12}}', b'\xff\xfe{"model":"m"}',
    b' \x0b\x0c{ "model" : "m" , "n" : 3 }  \n', b'{"model":"m","stream":true,"stream":false}', b'{}', b'',
    b'{"model":"\xc3\xa9"}', b'{"model":"m","max_tokens":12 }', b'{"model":"m","max_tokens":1e3}',
]

# each on one edge of a scan: where a regex and a C loop written from it could part
EDGE_BODIES = [
    b'"n"n"', b'"n"model"', b'"model""model"', b'"max_tokens"max_completion_tokens"', b'"stream',
    b'{"prompt_tokens":123456789012}', b'{"prompt_tokens":1234567890123}', b'"input_tokens" :\t\n7x',
    b'"output_tokens":"7"', b'"completion_tokens":,1', b'"cached_tokens":4"cache_read_input_tokens" : 12}',
    b'"cache_creation_input_tokens":1234567890123', b'"cached_tokens_x":3', b'\\u005f', b'\\u006', b'\\u0060', b'\\u007G',
    b'\\u005e"model"', b'{"n":5}', b'\\"n":5}', b'"n":5,\\', b'{"n":000}', b'{"n":123456789012}',
    b'{"n":1234567890123}', b'{"":5}', b'{"a-b":5}', b'{"n":5 ,"x":[1]}', b'[{"n":5}', b'{"n":5}]',
    b'{"n":5}  \x0b', b'{"n":5} x', b'{"n":5,', b'x"n":5,', b' \t{"model":"a\\b"}', b'{"model":"',
    b'{"model":"a"', b'{ "model"\n:\r"a"}', b'{"model" "a"}', b'{"models":"a"}',
    b'{"Model" :1}', b'{"Model" x:1}', b'"Model"', b'"N"\t\n:', b'"max_to\xe2\x84\xaa', b'"max_to\xe2\x84\xaaens":',
    b'"max_to\xe2\x84ens":', b'"\xc5\xbftream":', b'"\xc5tream":', b'"model""Model":', b'"n""N":', b'\\u004', b'\\u0040',
    b'\\u212', b'\\u212a', b'\\u017', b'\\u017F', b'\\\\u004d',
]


def _all_scans_agree(data):
    assert C.scan_keys(data) == REF.scan_keys(data)
    assert C.first_model_span(data) == REF.first_model_span(data)
    n = len(data)
    for at in range(n + 1) if n <= 300 else [i for i in range(n) if data[i] == 34][:300] + [0, n]:
        assert C.top_level_count(data, at) == REF.top_level_count(data, at), at
    for start in sorted({0, 1, n // 2, n, n + 5, data.find(b'"usage"')}):
        assert C.usage_counts(data, start) == REF.usage_counts(data, start), start


@st.composite
def request_reads(draw):
    """A known head's prefix and suffix, and a read that is that request, or nearly."""
    prefix = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length:" + draw(
        st.sampled_from([b"", b" ", b"\t "]))
    suffix = draw(st.sampled_from([b"\r\n\r\n", b"\r\nx-a: b\r\n\r\n", b"\r\n", b"", b"\n\r\n"]))
    body = draw(st.binary(max_size=40))
    digits = draw(st.one_of(st.just(b"%d" % len(body)), st.just(b"%05d" % len(body)),
                            st.integers(0, 10 ** 20).map(lambda v: b"%d" % v), st.sampled_from([b"", b"x", b"-1"])))
    sent_prefix = draw(st.sampled_from([prefix, prefix[:-1], prefix.upper(), b""]))
    sent_suffix = draw(st.sampled_from([suffix, b"\r\n\r\n", b"\r\n", b"\r", b""]))
    return draw(st.sampled_from([prefix, b""])), suffix, sent_prefix + digits + sent_suffix + body


def _heads_agree(prefix, suffix, data):
    assert C.known_head_body_start(data, prefix, suffix) == REF.known_head_body_start(data, prefix, suffix)


def test_this_process_runs_the_build_it_says():
    impl = C if sluice.compiled else REF
    for name in ("scan_keys", "first_model_span", "top_level_count", "usage_counts", "known_head_body_start"):
        assert getattr(bytescan, name) is getattr(impl, name), name
        assert getattr(C, name) is not getattr(REF, name)


@pytest.mark.parametrize("data", HOSTILE_BODIES + EDGE_BODIES, ids=range(len(HOSTILE_BODIES + EDGE_BODIES)))
def test_the_hostile_and_edge_bodies_get_the_same_answers(data):
    _all_scans_agree(data)


def test_the_scans_find_what_the_reference_documents():
    # a guard that the comparisons compare answers, not two Nones
    body = b'{"model":"gpt","max_tokens":5,"n":2,"usage":{"prompt_tokens":3,"output_tokens":4}}'
    assert C.scan_keys(body) == [b"model", b"max_tokens", b"n"]
    assert C.first_model_span(body) == (10, 13)
    assert C.top_level_count(body, body.find(b'"max_tokens"')) == 5
    assert C.usage_counts(body, 0) == [(b"prompt_tokens", b"3"), (b"output_tokens", b"4")]
    assert C.scan_keys(b'{"mod\\u0065l":1}') is None
    assert C.scan_keys(b'{"model":"a","Model":"b"}') is None
    assert C.scan_keys(b'{"model":"a","x":"Model"}') == [b"model"]  # a value, not a key
    with pytest.raises(ValueError):
        C.top_level_count(body, len(body) + 1)
    head = b"POST / HTTP/1.1\r\ncontent-length: "
    assert C.known_head_body_start(head + b"2\r\n\r\nab", head, b"\r\n\r\n") == len(head) + 5


@FAST
@given(st.one_of(st.binary(max_size=200), soup, members, json_bodies()))
def test_both_builds_scan_alike(data):
    _all_scans_agree(data)


@FAST
@given(request_reads())
def test_both_builds_take_a_known_head_alike(case):
    _heads_agree(*case)


@pytest.mark.integration
@LONG
@given(st.one_of(st.binary(max_size=600), soup, members, json_bodies()))
def test_both_builds_scan_alike_at_length(data):
    _all_scans_agree(data)


@pytest.mark.integration
@LONG
@given(request_reads())
def test_both_builds_take_a_known_head_alike_at_length(case):
    _heads_agree(*case)
