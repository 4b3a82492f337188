"""A top-level key that spells a key Sluice decides on (model, max_tokens, max_completion_tokens,
n, stream) in another case is refused: a provider built on Go's encoding/json matches keys
case-insensitively (folding U+212A KELVIN SIGN to k and U+017F LONG S to s) and keeps the last,
so it would read a model or a limit Sluice never checked. Over real sockets, against Sluice with
validate_json on (the parsed path) and off (the byte scan's path); nested keys and string values
that happen to spell a decided key are the client's own."""
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sluice_helpers import ENV, Sluice, base_config, raw_exchange, raw_post

pytestmark = pytest.mark.integration

LIMITED = b"authorization: Bearer sk-test-limited\r\n"   # may call "claude" only
BUDGET = b"authorization: Bearer sk-test-budget\r\n"     # a token budget of 200
MSGS = b'"messages":[{"role":"user","content":"hi"}]'
MAX_REPEAT_CHECK_BYTES = 1 << 20   # README "Limits": a body parsed a second time for repeated keys
DECIDED = ["model", "max_tokens", "max_completion_tokens", "n", "stream"]


@pytest.fixture(scope="module", params=["validate_json = true", "validate_json = false"])
def gw(request, stub, tmp_path_factory):
    cfg = base_config(stub.url).replace("max_body_bytes = 65536",
                                        "max_body_bytes = 4194304\n" + request.param)
    g = Sluice(cfg, str(tmp_path_factory.mktemp("folded")), env=ENV).start()
    yield g
    g.stop()


def _post(gw, body, auth=None):
    buf = raw_exchange(gw.port, raw_post(body) if auth is None else raw_post(body, auth=auth), timeout=30)
    head, _, answer = buf.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), answer


def _refused_as_folded(gw, stub, body, auth=None):
    sent = len(stub.requests)
    status, answer = _post(gw, body, auth)
    assert status == 400, (body, answer[:300])
    message = json.loads(answer)["error"]["message"]
    assert "in another case" in message, message
    assert len(stub.requests) == sent


def test_a_model_in_another_case_cannot_get_past_the_allow_list(gw, stub):
    # the allow-list sees "claude"; a Go provider would serve "mock-model"
    _refused_as_folded(gw, stub, b'{"model":"claude","Model":"mock-model",' + MSGS + b'}', LIMITED)


def test_an_output_limit_in_another_case_cannot_shrink_the_reservation(gw, stub):
    # the reservation would be 10 tokens; a Go provider would let the answer run to 100000
    _refused_as_folded(gw, stub, b'{"model":"mock-model","max_tokens":10,"MAX_TOKENS":100000,' + MSGS + b'}',
                       BUDGET)


@pytest.mark.parametrize("key", [
    rb'"\u004dodel"',                       # an escaped capital letter
    b'"max_to\xe2\x84\xaaens"',             # U+212A KELVIN SIGN, folding to k
    rb'"max_to\u212Aens"',                  # the same, escaped
    b'"\xc5\xbftream"',                     # U+017F LONG S, folding to s
    rb'"\u017ftream"',
    b'"N"',
    b'"Max_Completion_Tokens"',
], ids=["escaped-M", "kelvin", "kelvin-escaped", "long-s", "long-s-escaped", "N", "mixed"])
def test_every_spelling_that_folds_onto_a_decided_key_is_refused(gw, stub, key):
    value = b"true" if b"tream" in key else b"1000" if b"oken" in key or b"OKEN" in key else b'"x"'
    if key == b'"N"':
        value = b"5"
    _refused_as_folded(gw, stub, b'{"model":"mock-model",' + MSGS + b',' + key + b':' + value + b'}', BUDGET)


def test_nested_keys_and_values_that_spell_a_decided_key_pass(gw, stub):
    for body in [b'{"model":"mock-model","messages":[{"role":"user","content":"Model"}]}',
                 b'{"model":"mock-model","metadata":{"Model":"x","N":"y"},' + MSGS + b'}',
                 b'{"model":"mock-model","tools":[{"type":"function","function":{"name":"f","parameters":'
                 b'{"type":"object","properties":{"STREAM":{"type":"string"}}}}}],' + MSGS + b'}']:
        status, answer = _post(gw, body)
        assert status == 200, (body, answer[:300])
        assert stub.requests[-1]["body"] == body


def test_a_large_body_whose_values_spell_a_decided_key_is_not_parsed_twice(gw, stub):
    # a body over the second parse's limit is refused when it needs that parse: one whose only
    # such spellings are string values (no colon after them) does not need it
    filler = b'{"role":"user","content":"' + b"x" * 1000 + b'"},{"role":"user","content":"Model"},'
    body = (b'{"model":"mock-model","messages":[' + filler * (MAX_REPEAT_CHECK_BYTES // len(filler) + 1)
            + b'{"role":"user","content":"N"}]}')
    assert len(body) > MAX_REPEAT_CHECK_BYTES
    status, answer = _post(gw, body)
    assert status == 200, answer[:300]


def _fold_spelling(draw, word):
    """``word`` with one letter (at least) in another case or as the letter that folds to it (k:
    U+212A, s: U+017F), the others at random, and some characters escaped (\\uXXXX, hex in
    either case): a spelling that folds onto ``word`` but is not it."""
    forced = draw(st.sampled_from([i for i, ch in enumerate(word) if ch.isalpha()]))
    out = []
    for i, ch in enumerate(word):
        if ch.isalpha() and (i == forced or draw(st.booleans())):
            ch = draw(st.sampled_from([ch.upper()] + {"k": ["\u212a"], "s": ["\u017f"]}.get(ch, [])))
        if draw(st.integers(0, 4)) == 0:
            hexa = "%04x" % ord(ch)
            out.append("\\u" + (hexa.upper() if draw(st.booleans()) else hexa))
        else:
            out.append(json.dumps(ch, ensure_ascii=False)[1:-1])
    return "".join(out)


@st.composite
def folded_bodies(draw):
    """An ordinary body with a decided key added at its top level, spelled so that it folds onto
    that key but not as it is (first, last or between the other keys)."""
    spelled = _fold_spelling(draw, draw(st.sampled_from(DECIDED)))
    value = draw(st.sampled_from(['"mock-model"', "1", "100000", "true", "null"]))
    members = [b'"model":"mock-model"', MSGS, b'"temperature":0.5']
    members.insert(draw(st.integers(0, len(members))), b'"' + spelled.encode() + b'":' + value.encode())
    space = draw(st.sampled_from([b"", b" "]))
    return b"{" + (b"," + space).join(members) + b"}"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(body=folded_bodies())
def test_generated_folded_keys_are_refused(gw, stub, body):
    status, answer = _post(gw, body, BUDGET)
    assert status == 400, (body, answer[:300])
