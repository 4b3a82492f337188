"""Wire timing (harness/run/wire.py) on synthetic pcaps written with dpkt: known times in,
exact microseconds out."""
import json
import os
import socket
from decimal import Decimal

import dpkt
import pytest
from wire_summary import summarize

from harness.run.wire import COLUMNS, wire_times

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GW, MOCK = 8000, 9000
T0_NS = 1_800_000_000_000_000_000
US = 1000
LO = socket.inet_aton("127.0.0.1")


class Pcap:
    """Segments of several connections, written as an Ethernet (lo-like) nanosecond pcap."""

    def __init__(self, snaplen=65535):
        self.snaplen = snaplen
        self.packets = []  # (t_ns, frame bytes)
        self.seq = {}

    def send(self, sport, dport, t_us, payload: bytes):
        """One segment from sport to dport, ``t_us`` after T0; returns its seq."""
        seq = self.seq.get((sport, dport), 1000 + sport)
        self.seq[(sport, dport)] = seq + len(payload)
        self.raw(sport, dport, t_us, payload, seq)
        return seq

    def raw(self, sport, dport, t_us, payload, seq):
        tcp = dpkt.tcp.TCP(sport=sport, dport=dport, seq=seq, flags=dpkt.tcp.TH_ACK | dpkt.tcp.TH_PUSH,
                           data=payload)
        ip = dpkt.ip.IP(src=LO, dst=LO, p=dpkt.ip.IP_PROTO_TCP, data=tcp)
        ip.len = len(ip)
        eth = dpkt.ethernet.Ethernet(type=dpkt.ethernet.ETH_TYPE_IP, data=ip)
        self.packets.append((T0_NS + int(t_us * US), bytes(eth)[:self.snaplen]))

    def write(self, path):
        with open(path, "wb") as f:
            w = dpkt.pcap.Writer(f, snaplen=self.snaplen, nano=True)
            for t, frame in sorted(self.packets, key=lambda p: p[0]):
                w.writepkt(frame, ts=Decimal(t) / Decimal(10**9))
        return str(path)


def post(rid, header=True, pad=0, path="/v1/chat/completions"):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * pad + f" [rid:{rid}]"}]}).encode()
    head = f"POST {path} HTTP/1.1\r\nHost: h\r\n"
    if header:
        head += f"x-request-id: {rid}\r\n"
    head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def unary_response(body=b'{"ok":true}'):
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body


def exchange(p, cport, uport, rid, t_us, req_path_us=30, hold_us=60_000, resp_path_us=20, split=False):
    """One unary request through the gateway; returns the expected times."""
    req = post(rid)
    if split:  # the body in three segments: the last byte arrives 10 µs after the first
        p.send(cport, GW, t_us, req[:100])
        p.send(cport, GW, t_us + 5, req[100:150])
        p.send(cport, GW, t_us + 10, req[150:])
        last = t_us + 10
    else:
        p.send(cport, GW, t_us, req)
        last = t_us
    up = last + req_path_us
    p.send(uport, MOCK, up, post(rid))
    p.send(MOCK, uport, up + hold_us, unary_response())
    p.send(GW, cport, up + hold_us + resp_path_us, unary_response())
    return {"last": last, "up": up, "mock_resp": up + hold_us}


def test_unary_split_body_and_keep_alive_order(tmp_path):
    p = Pcap()
    e1 = exchange(p, 50001, 50101, "a1", 0, split=True)
    e2 = exchange(p, 50001, 50101, "a2", 70_000, req_path_us=40, resp_path_us=25)  # same connections
    e3 = exchange(p, 50002, 50102, "b1", 500, req_path_us=35)  # another pair, overlapping in time
    df, s = wire_times(p.write(tmp_path / "w.pcap"), mock_port=MOCK, gateway_port=GW)
    assert list(df.columns) == list(COLUMNS)
    assert list(df["request_id"]) == ["a1", "b1", "a2"]  # by client request time
    got = df.set_index("request_id")
    assert got.loc["a1", "client_request_last_t_unix_ns"] == T0_NS + e1["last"] * US
    assert got.loc["a1", "request_path_us"] == 30.0 and got.loc["a1", "response_path_us"] == 20.0
    assert got.loc["a1", "in_gateway_us"] == 50.0 and got.loc["a1", "mock_wire_us"] == 60_000.0
    assert got.loc["a2", "request_path_us"] == 40.0 and got.loc["a2", "response_path_us"] == 25.0
    assert got.loc["b1", "request_path_us"] == 35.0
    assert got.loc["a2", "upstream_request_first_t_unix_ns"] == T0_NS + e2["up"] * US
    assert got.loc["b1", "upstream_response_first_t_unix_ns"] == T0_NS + e3["mock_resp"] * US
    assert got.loc["a1", "client_port"] == 50001 and got.loc["a1", "upstream_port"] == 50101
    assert s["client_requests"] == 3 and s["upstream_requests"] == 3
    assert s["joined"] == 3 and s["join_rate"] == 1.0 and s["responses_paired"] == 3
    assert summarize(df)["in_gateway_us"]["p50"] == 55.0  # of 50, 55 and 65


def test_gateway_streaming_the_body_measured_to_the_last_byte(tmp_path):
    """The client sends head and body apart; the gateway passes the head on at once (as
    nginx does without request buffering): to the last byte is 20 µs, first byte -680."""
    p = Pcap()
    req = post("b1")
    cut = req.index(b"\r\n\r\n") + 4
    p.send(50001, GW, 0, req[:cut])
    p.send(50101, MOCK, 20, req[:cut])
    p.send(50001, GW, 700, req[cut:])
    p.send(50101, MOCK, 720, req[cut:])
    p.send(MOCK, 50101, 5720, unary_response())
    p.send(GW, 50001, 5750, unary_response())
    df, _ = wire_times(p.write(tmp_path / "w.pcap"), mock_port=MOCK, gateway_port=GW)
    row = df.iloc[0]
    assert row["request_path_us"] == 20.0 and row["request_first_path_us"] == -680.0
    assert row["mock_wire_us"] == 5000.0 and row["in_gateway_us"] == 50.0


def test_pipelined_requests_in_one_segment(tmp_path):
    p = Pcap()
    p.send(50001, GW, 0, post("p1") + post("p2"))
    p.send(50101, MOCK, 20, post("p1") + post("p2"))
    p.send(MOCK, 50101, 1000, unary_response() + unary_response())
    p.send(GW, 50001, 1030, unary_response())
    p.send(GW, 50001, 1040, unary_response())
    df, s = wire_times(p.write(tmp_path / "w.pcap"), mock_port=MOCK, gateway_port=GW)
    got = df.set_index("request_id")
    assert list(got.index) == ["p1", "p2"]
    assert list(got["request_path_us"]) == [20.0, 20.0]
    assert list(got["response_path_us"]) == [30.0, 40.0]
    assert s["join_rate"] == 1.0


def test_capture_starting_mid_exchange_skips_the_orphans(tmp_path):
    """The window opens while a request is in flight: its response (and the tail of a body)
    arrive with no request in the capture and must not shift the keep-alive order."""
    p = Pcap()
    p.raw(50001, GW, 0, b'"tail of a body sent before the window"}', 5000)
    p.send(GW, 50001, 100, unary_response())   # answers a request from before the window
    p.send(MOCK, 50101, 90, unary_response())
    exchange(p, 50001, 50101, "c1", 200)
    df, s = wire_times(p.write(tmp_path / "w.pcap"), mock_port=MOCK, gateway_port=GW)
    assert list(df["request_id"]) == ["c1"]
    assert df.loc[0, "request_path_us"] == 30.0 and df.loc[0, "response_path_us"] == 20.0


def test_stream_frames_paired_by_order(tmp_path):
    p = Pcap()
    p.send(50001, GW, 0, post("s1"))
    p.send(50101, MOCK, 25, post("s1"))
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    frames = [b"1a\r\ndata: {\"frame\": %d}...\n\n\r\n" % i for i in range(4)]
    mock_t = [60_025 + i * 20_000 for i in range(4)]
    relay_us = [15, 12, 30, 18]
    p.send(MOCK, 50101, mock_t[0], head + frames[0])  # aiohttp sends the head with the first frame
    p.send(GW, 50001, mock_t[0] + relay_us[0], head)  # a gateway may split them
    p.send(GW, 50001, mock_t[0] + relay_us[0] + 2, frames[0])
    for i in range(1, 4):
        p.send(MOCK, 50101, mock_t[i], frames[i])
        p.send(GW, 50001, mock_t[i] + relay_us[i], frames[i])
    df, s = wire_times(p.write(tmp_path / "w.pcap"), mock_port=MOCK, gateway_port=GW)
    row = df.iloc[0]
    assert row["request_path_us"] == 25.0 and row["response_path_us"] == 15.0
    # the head-only segment is not a frame: frames pair 1:1
    assert row["frames_paired"] == 4 and s["frame_count_mismatches"] == 0
    assert row["frame_path_p50_us"] == pytest.approx((15 + 2 + 18) / 2) and row["frame_path_max_us"] == 30.0


def test_snaplen_cut_id_from_header_or_counted_unjoined(tmp_path):
    p = Pcap(snaplen=66 + 200)
    # the marker sits beyond the snap length; the header (early) still names the request
    p.send(50001, GW, 0, post("h1", pad=500))
    p.send(50101, MOCK, 30, post("h1", pad=500))
    p.send(MOCK, 50101, 1000, unary_response())
    p.send(GW, 50001, 1020, unary_response())
    # no header and the marker cut off: no id, counted, not guessed
    p.send(50002, GW, 0, post("n1", header=False, pad=500))
    p.send(50102, MOCK, 30, post("n1", header=False, pad=500))
    df, s = wire_times(p.write(tmp_path / "w.pcap"), mock_port=MOCK, gateway_port=GW)
    assert list(df["request_id"]) == ["h1", ""]
    assert df.loc[0, "in_gateway_us"] == 50.0 and pd_isna(df.loc[1, "request_path_us"])
    assert s["client_requests_without_id"] == 1 and s["upstream_requests_without_id"] == 1
    assert s["join_rate"] == 1.0 and s["joined"] == 1


def pd_isna(v):
    import pandas as pd
    return pd.isna(v)


def test_retransmission_and_gateway_retry(tmp_path):
    p = Pcap()
    seq = p.send(50001, GW, 0, post("r1"))
    p.raw(50001, GW, 300, post("r1"), seq)  # retransmitted: the first transmission counts
    p.send(50101, MOCK, 30, post("r1"))
    p.send(MOCK, 50101, 1000, b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
    p.send(50101, MOCK, 1100, post("r1"))   # the gateway retries on the same connection
    p.send(MOCK, 50101, 2100, unary_response())
    p.send(GW, 50001, 2150, unary_response())
    df, s = wire_times(p.write(tmp_path / "w.pcap"), mock_port=MOCK, gateway_port=GW)
    row = df.iloc[0]
    assert row["request_path_us"] == 30.0  # to the first attempt
    assert row["response_path_us"] == 50.0  # from the answered (last) attempt
    assert s["upstream_ids_seen_more_than_once"] == 1 and s["upstream_requests"] == 2


def test_the_floor_mock_side_only(tmp_path):
    p = Pcap()
    p.send(50001, MOCK, 0, post("d1"))
    p.send(MOCK, 50001, 60_100, unary_response())
    p.send(50001, MOCK, 70_000, post("d2"))
    p.send(MOCK, 50001, 130_050, unary_response())
    df, s = wire_times(p.write(tmp_path / "w.pcap"), mock_port=MOCK, gateway_port=None)
    assert list(df["mock_wire_us"]) == [60_100.0, 60_050.0]
    assert df["in_gateway_us"].isna().all() and df["request_path_us"].isna().all()
    assert s["join_rate"] == 1.0 and s["client_requests"] == 2


def test_a_capture_never_started_finishes_at_once_with_its_reason(tmp_path):
    """A run that fails before its load (a slow start, a failed pre-check) never starts the
    capture: finishing it says so instead of failing the study."""
    from harness.model.config import from_profile
    from harness.model.gateway_spec import load_gateway_spec
    from harness.model.plan import make_plan
    from harness.run.run import instruments
    from harness.run.wire_window import WireWindow
    config = from_profile("smoke", gateways=["nginx"])
    (spec,) = make_plan(config, {"nginx": load_gateway_spec("nginx")}, instruments())
    check = WireWindow(spec, tmp_path, [1, 2]).finish()
    assert not check.captured and check.reason == "not captured: the run failed before its load"
