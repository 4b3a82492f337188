"""A provider for the spend tests: answers in either dialect, unary or streamed, with the usage a
test chooses (cache counts included), framed by Content-Length or chunked, split where a test
says; and a Sluice with a budget key in front of it, whose settled spend a test reads back."""
import json
import re
import time

from sluice_helpers import KEY, METRICS_TOKEN_LINE, Sluice, tokens_spent
from sluice_scripted_provider import chunk

MAX_TOKENS = 1000
BUDGET = 10 ** 9
# the prompt's padding: the reservation (body bytes / 4 + max_tokens) covers the prompt counts used here
PAD = "x" * 16000


def config(url, extra=""):
    """One provider per dialect at ``url``: models "oa" (OpenAI) and "an" (Anthropic), key "k"."""
    return f"""
[server]
listen = "127.0.0.1:{{port}}"
workers = 1
debug_endpoints = true
{METRICS_TOKEN_LINE}

[providers.oai]
base_url = "{url}/v1"
response_timeout_s = 10
stream_idle_timeout_s = 30

[providers.ant]
base_url = "{url}/v1"
dialect = "anthropic"
response_timeout_s = 10
stream_idle_timeout_s = 30

[models.oa]
provider = "oai"

[models.an]
provider = "ant"

[keys.k]
key = "{KEY}"
token_budget = {BUDGET}
{extra}"""


def start(provider, tmp_path, extra=""):
    return Sluice(config(provider.url, extra), str(tmp_path)).start()


def settled(gw, before):
    """The tokens key "k" was charged since it had spent ``before``, once nothing is in flight."""
    deadline = time.monotonic() + 10
    while gw.state()["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.02)
    return tokens_spent(gw, "k") - before


def client_request(client_dialect, model, stream, include_usage=None):
    """(path, body bytes, the reservation Sluice makes for it)."""
    body = {"model": model, "max_tokens": MAX_TOKENS, "messages": [{"role": "user", "content": PAD}]}
    if stream:
        body["stream"] = True
    if include_usage is not None:
        body["stream_options"] = {"include_usage": include_usage}
    data = json.dumps(body).encode()
    path = b"/v1/messages" if client_dialect == "anthropic" else b"/v1/chat/completions"
    return path, data, len(data) // 4 + MAX_TOKENS


# ------------------------------------------------------------------ the provider's answers
def openai_unary(usage):
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "oa",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
    if usage is not None:
        body["usage"] = usage
    return json.dumps(body).encode()


def anthropic_unary(usage):
    body = {"id": "msg_1", "type": "message", "role": "assistant", "model": "an",
            "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn", "stop_sequence": None}
    if usage is not None:
        body["usage"] = usage
    return json.dumps(body).encode()


def openai_events(usage, asked):
    """An OpenAI stream's events; the usage chunk only when the request ``asked`` for it."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "oa"}
    events = [dict(base, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])]
    events += [dict(base, choices=[{"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": None}])
               for i in range(3)]
    events.append(dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}]))
    if asked and usage is not None:
        events.append(dict(base, choices=[], usage=usage))
    return [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


def anthropic_events(usage):
    """An Anthropic stream's events: message_start says output_tokens 1, message_delta the rest
    (``usage`` None: neither says anything)."""
    start = {"id": "msg_1", "type": "message", "role": "assistant", "model": "an", "content": [],
             "stop_reason": None, "stop_sequence": None}
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}}
    if usage is not None:
        start["usage"] = dict({k: v for k, v in usage.items() if k != "output_tokens"}, output_tokens=1)
        delta["usage"] = {"output_tokens": usage["output_tokens"]}
    events = [("message_start", {"type": "message_start", "message": start}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}})]
    events += [("content_block_delta", {"type": "content_block_delta", "index": 0,
                                        "delta": {"type": "text_delta", "text": f"tok{i} "}}) for i in range(3)]
    events += [("content_block_stop", {"type": "content_block_stop", "index": 0}),
               ("message_delta", delta),
               ("message_stop", {"type": "message_stop"})]
    return [f"event: {k}\ndata: {json.dumps(v)}\n\n".encode() for k, v in events]


def asked_usage(request_body):
    opts = json.loads(request_body).get("stream_options")
    return isinstance(opts, dict) and opts.get("include_usage") is True


def is_stream(request_body):
    return json.loads(request_body).get("stream") is True


def head(content_type, length=None):
    framing = b"content-length: %d" % length if length is not None else b"transfer-encoding: chunked"
    return (b"HTTP/1.1 200 OK\r\ncontent-type: " + content_type + b"\r\nconnection: close\r\n"
            + framing + b"\r\n\r\n")


def send_chunked(c, pieces, pause_s=0.02):
    """``pieces`` as chunks of their own, each in a write of its own: the pause lets Sluice read
    them apart (a read that joins them changes nothing an assertion depends on)."""
    for piece in pieces:
        c.sendall(chunk(piece))
        time.sleep(pause_s)
    c.sendall(b"0\r\n\r\n")


def usage_of(dialect, prompt_side, completion, cached):
    """A usage object of ``dialect`` whose billed counts charge ``prompt_side + completion`` at
    weight 1: OpenAI's cached tokens are part of prompt_tokens; Anthropic's are not in input_tokens."""
    if dialect == "openai":
        return {"prompt_tokens": prompt_side, "completion_tokens": completion,
                "total_tokens": prompt_side + completion, "prompt_tokens_details": {"cached_tokens": cached}}
    write = cached // 3
    return {"input_tokens": prompt_side - cached, "cache_creation_input_tokens": write,
            "cache_read_input_tokens": cached - write, "output_tokens": completion}


def split_digits(data, name):
    """Where ``data`` splits the count of usage field ``name`` between its digits."""
    m = re.search(rb'"%s"\s*:\s*(\d+)' % name.encode(), data)
    return m.start(1) + 1
