"""Wire-timed in-gateway time, from a pcap of the client->gateway and gateway->mock
connections (written by :mod:`harness.run.capture`).  Run after the run, never during it.

Per request (tied across the two connections by its id):

``request_path_us``
    last byte of the gateway's request to the mock - last byte of the client's request
    to the gateway: what the gateway adds before the mock has the whole request (and
    starts its hold);
``request_first_path_us``
    first byte of the gateway's request to the mock - last byte of the client's request.
    The same as ``request_path_us`` for a gateway that forwards a request in one write
    once it has all of it; negative for one that streams the body (nginx with
    ``proxy_request_buffering off`` sends the head on before a client's separately sent
    body has arrived), which is why ``request_path_us`` is measured to the last byte;
``response_path_us``
    first byte of the gateway's response to the client - first byte of the mock's
    response to the gateway;
``in_gateway_us``
    ``request_path_us + response_path_us``: the time the gateway adds;
``frame_path_p50_us`` / ``frame_path_max_us``
    for streams, the same as ``response_path_us`` for every body-carrying segment
    ("frame"), paired by order within the response;
``mock_wire_us``
    the mock's time on the wire: first byte of its response - last byte of the request
    it got (for the floor (direct), with no gateway, this is the only figure).

How: segments are grouped into one-directional TCP flows by 4-tuple and ordered by
sequence number (first transmission kept, retransmissions dropped).  An HTTP message
starts where a segment (or, for pipelined messages, the end of the previous message's
Content-Length body) begins with a request line or ``HTTP/1.``; it ends at its
Content-Length, else where the next message starts.  The request id is the last
``[rid:<id>]`` among the captured bytes of the request, else its ``x-request-id``
header (the mock's own rule; see ``mocks.protocol.request_id_of``).  A response belongs to the oldest
unanswered request that started before it on the same connection (HTTP/1.1 keep-alive
order); a response whose request was before the capture window has none and is
skipped.  Only the first ``snaplen`` bytes of each segment are in the capture: an id
beyond them is not found and that request cannot be joined (counted, not guessed).

Which connection is which comes from the ports: the client->gateway flows are those to
``gateway_port``, the gateway->mock flows those to ``mock_port``.  With
``gateway_port=None`` (the floor (direct)) the flows to ``mock_port`` are the client's
and only mock-side figures come back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pandas as pd

from harness.files.pcap import read_segments

_METHODS = (b"POST ", b"GET ", b"PUT ", b"HEAD ", b"DELETE ", b"PATCH ", b"OPTIONS ")
_RESPONSE_START = b"HTTP/1."
_RID_IN_BODY = re.compile(rb"\[rid:([A-Za-z0-9._:-]{1,64})\]")
_RID_HEADER = re.compile(rb"\r\nx-request-id:[ \t]*([A-Za-z0-9._:-]{1,64})[ \t]*\r\n", re.IGNORECASE)
_CLEN = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.IGNORECASE)
_SEQ_MOD = 1 << 32

COLUMNS = (
    "request_id", "client_port", "upstream_port",
    "client_request_last_t_unix_ns", "upstream_request_first_t_unix_ns",
    "upstream_request_last_t_unix_ns", "upstream_response_first_t_unix_ns",
    "client_response_first_t_unix_ns",
    "request_path_us", "request_first_path_us", "response_path_us", "in_gateway_us", "mock_wire_us",
    "frames_paired", "frame_path_p50_us", "frame_path_max_us",
)


@dataclass
class Message:
    """One HTTP message on one flow, as far as the capture shows it."""
    start_off: int
    first_t_ns: int
    last_t_ns: int
    head: bytes                      # captured bytes of its first segment, from its start
    end_off: int | None              # known from Content-Length, else None
    captured: list = field(default_factory=list)   # (offset, captured bytes), in order
    frame_t_ns: list = field(default_factory=list)  # times of segments carrying body bytes
    request_id: str = ""


def _ordered(segments: list) -> list:
    """(offset from the first seen byte, length, t_ns, captured) in stream order; the
    first transmission of each offset kept."""
    base = segments[0][0]
    seen = set()
    out = []
    for seq, length, t, data in segments:
        off = (seq - base) % _SEQ_MOD
        if off >= _SEQ_MOD // 2:
            off -= _SEQ_MOD  # a segment from before the first seen one (reordered)
        if off in seen:
            continue  # retransmission
        seen.add(off)
        out.append((off, length, t, data))
    out.sort(key=lambda s: (s[0], s[2]))
    return out


def _starts_message(data: bytes, is_request: bool) -> bool:
    if is_request:
        return data.startswith(_METHODS)
    return data.startswith(_RESPONSE_START)


def _new_message(pos: int, t: int, data: bytes) -> Message:
    end = None
    head_end = data.find(b"\r\n\r\n")
    if head_end >= 0:
        m = _CLEN.search(data, 0, head_end + 2)
        if m:
            end = pos + head_end + 4 + int(m.group(1))
    return Message(start_off=pos, first_t_ns=t, last_t_ns=t, head=data, end_off=end)


def split_messages(segments: list, is_request: bool) -> list[Message]:
    """HTTP messages of one flow (see the module docstring)."""
    msgs: list[Message] = []
    cur: Message | None = None
    for off, length, t, data in _ordered(segments):
        pos = off
        end_seg = off + length
        while pos < end_seg:
            rel = pos - off
            piece = data[rel:] if rel < len(data) else b""
            at_boundary = cur is None or (cur.end_off is not None and pos >= cur.end_off) or \
                (cur.end_off is None and rel == 0)
            if at_boundary and piece and _starts_message(piece, is_request):
                cur = _new_message(pos, t, piece)
                msgs.append(cur)
            elif cur is None or (cur.end_off is not None and pos >= cur.end_off):
                cur = None  # bytes of a message that started before the capture
                break
            # this segment's bytes up to the message's end belong to it
            stop = end_seg if cur.end_off is None else min(end_seg, cur.end_off)
            cur.last_t_ns = t
            if piece:
                cur.captured.append((pos, piece[:stop - pos]))
            body_from = cur.start_off + cur.head.find(b"\r\n\r\n") + 4 if b"\r\n\r\n" in cur.head else None
            if body_from is None or stop > body_from:
                cur.frame_t_ns.append(t)
            pos = stop
    for m in msgs:
        m.request_id = find_request_id(m)
    return msgs


def find_request_id(msg: Message) -> str:
    """The last ``[rid:<id>]`` in the captured bytes, else the ``x-request-id`` header."""
    # contiguous pieces are joined (a marker may span segments); a gap (bytes cut by the
    # snap length) becomes a NUL, which no id contains
    parts = []
    next_off = None
    for off, piece in msg.captured:
        if next_off is not None and off != next_off:
            parts.append(b"\0")
        parts.append(piece)
        next_off = off + len(piece)
    found = None
    for m in _RID_IN_BODY.finditer(b"".join(parts)):
        found = m.group(1)
    if found is None:
        m = _RID_HEADER.search(msg.head)
        if m is None:
            return ""
        found = m.group(1)
    return found.decode()


def pair_responses(requests: list[Message], responses: list[Message]) -> list[tuple[Message, Message]]:
    """(request, response) by keep-alive order: each response goes to the oldest
    unanswered request that started before it."""
    pairs = []
    i = 0
    for resp in responses:
        # a response before the oldest unanswered request answers one sent before the capture
        if i < len(requests) and requests[i].first_t_ns <= resp.first_t_ns:
            pairs.append((requests[i], resp))
            i += 1
    return pairs


def _exchanges(flows: dict, server_port: int) -> list[dict]:
    """Request/response exchanges on the connections to ``server_port``."""
    out = []
    for (src, sport, dst, dport), segs in flows.items():
        if dport != server_port:
            continue
        reqs = split_messages(segs, True)
        back = flows.get((dst, dport, src, sport), [])
        resps = split_messages(back, False) if back else []
        answered = {id(q): r for q, r in pair_responses(reqs, resps)}
        for q in reqs:
            r = answered.get(id(q))
            out.append({"request_id": q.request_id, "port": sport, "req": q, "resp": r})
    out.sort(key=lambda e: e["req"].first_t_ns)
    return out


def _us(a, b):
    return (a - b) / 1000.0 if a is not None and b is not None else None


def _upstream_times(row: dict, u: dict, gateway_port: int | None) -> int:
    """Fill ``row`` from the upstream exchange ``u`` (the last attempt); returns 1 when the two
    sides of a stream had different frame counts."""
    uq, ur = u["req"], u["resp"]
    row["upstream_port"] = u["port"]
    if row["upstream_request_first_t_unix_ns"] is None:
        row["upstream_request_first_t_unix_ns"] = uq.first_t_ns
    row["upstream_request_last_t_unix_ns"] = uq.last_t_ns
    row["upstream_response_first_t_unix_ns"] = ur.first_t_ns if ur else None
    row["mock_wire_us"] = _us(row["upstream_response_first_t_unix_ns"], uq.last_t_ns)
    if gateway_port is None:
        return 0
    row["response_path_us"] = _us(row["client_response_first_t_unix_ns"],
                                  row["upstream_response_first_t_unix_ns"])
    if row["request_path_us"] is not None and row["response_path_us"] is not None:
        row["in_gateway_us"] = row["request_path_us"] + row["response_path_us"]
    r = row.pop("_client_response")
    if r is None or ur is None:
        return 0
    a, b = r.frame_t_ns, ur.frame_t_ns
    n = min(len(a), len(b))
    if n:
        paths = pd.Series([(a[i] - b[i]) / 1000.0 for i in range(n)])
        row["frames_paired"] = n
        row["frame_path_p50_us"] = float(paths.median())
        row["frame_path_max_us"] = float(paths.max())
    return int(len(a) != len(b))


def _client_row(c: dict, by_id: dict) -> tuple[dict, dict | None]:
    """A client-side request's row with its request path to the first upstream attempt, and
    the upstream exchange that answered it (the last attempt; None when unseen)."""
    q, r, rid = c["req"], c["resp"], c["request_id"]
    row = dict.fromkeys(COLUMNS)
    row.update(request_id=rid, client_port=c["port"], client_request_last_t_unix_ns=q.last_t_ns,
               client_response_first_t_unix_ns=r.first_t_ns if r else None, _client_response=r)
    attempts = by_id.get(rid) if rid else None
    if attempts:  # the request path runs to the first attempt
        first = attempts[0]["req"]
        row["upstream_request_first_t_unix_ns"] = first.first_t_ns
        row["request_path_us"] = _us(first.last_t_ns, q.last_t_ns)
        row["request_first_path_us"] = _us(first.first_t_ns, q.last_t_ns)
    return row, (attempts[-1] if attempts else None)


def _typed(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    for col in COLUMNS:
        if col.endswith("_t_unix_ns") or col.endswith("_port") or col == "frames_paired":
            df[col] = df[col].astype("Int64")
        elif col.endswith("_us"):
            df[col] = df[col].astype("Float64")
    df["request_id"] = df["request_id"].astype("string")
    return df


def wire_times(pcap_path: str, mock_port: int, gateway_port: int | None = None) -> tuple[pd.DataFrame, dict]:
    """Per-request wire times from a capture; see the module docstring.

    Returns ``(per_request, summary)``: ``per_request`` has ``COLUMNS`` (times in
    ``*_t_unix_ns``, durations in ``*_us``; NA where not seen), one row per request on
    the client side (per request to the mock for the floor (direct)).  ``summary``:
    ``client_requests``, ``client_requests_without_id``, ``upstream_requests``,
    ``upstream_requests_without_id``, ``upstream_ids_seen_more_than_once`` (gateway
    retries), ``joined`` (client requests found on the upstream side), ``join_rate``
    (joined / client requests with an id), ``responses_paired`` (client side) and
    ``frame_count_mismatches`` (streams whose two sides had different frame counts).
    """
    flows = read_segments(pcap_path)
    upstream = _exchanges(flows, mock_port)
    client = upstream if gateway_port is None else _exchanges(flows, gateway_port)
    by_id: dict = {}
    for e in upstream if gateway_port is not None else ():
        if e["request_id"]:
            by_id.setdefault(e["request_id"], []).append(e)
    rows = []
    joined = mismatches = 0
    for c in client:
        if gateway_port is None:   # the floor (direct): the client's exchange is the mock's
            row, answered = dict.fromkeys(COLUMNS), c
            row["request_id"] = c["request_id"]
        else:
            row, answered = _client_row(c, by_id)
            joined += answered is not None
        if answered is not None:
            mismatches += _upstream_times(row, answered, gateway_port)
        row.pop("_client_response", None)
        rows.append(row)
    with_id = sum(1 for c in client if c["request_id"])
    up_ids = [e["request_id"] for e in upstream if e["request_id"]]
    joined = joined if gateway_port is not None else with_id
    summary = {
        "client_requests": len(client),
        "client_requests_without_id": len(client) - with_id,
        "upstream_requests": len(upstream),
        "upstream_requests_without_id": len(upstream) - len(up_ids),
        "upstream_ids_seen_more_than_once": len(up_ids) - len(set(up_ids)),
        "joined": joined,
        "join_rate": (joined / with_id) if with_id else None,
        "responses_paired": sum(1 for c in client if c["resp"] is not None),
        "frame_count_mismatches": mismatches,
    }
    return _typed(rows), summary

