"""The reader of a run's wire capture (wire.pcap, written by tcpdump: harness.run.capture): its
TCP segments that carry payload, grouped by flow. harness.run.wire pairs them into requests."""
from __future__ import annotations

import socket

import dpkt


def _ts_ns(ts) -> int:
    # dpkt gives a Decimal for nanosecond pcaps (exact) and a float for microsecond ones
    if isinstance(ts, float):
        return round(ts * 1e6) * 1000
    return int(ts * 1_000_000_000)


def _ip_of(buf: bytes, linktype: int):
    if linktype == dpkt.pcap.DLT_EN10MB:
        eth = dpkt.ethernet.Ethernet(buf)
        return eth.data
    if linktype == dpkt.pcap.DLT_LINUX_SLL:
        return dpkt.sll.SLL(buf).data
    if linktype in (dpkt.pcap.DLT_RAW, 101):  # LINKTYPE_RAW
        return dpkt.ip.IP(buf)
    raise ValueError(f"unsupported pcap link type {linktype}")


def read_segments(pcap_path: str) -> dict:
    """``{(src, sport, dst, dport): [(seq, payload_len, t_ns, captured_bytes), ...]}``
    for every IPv4 TCP segment carrying payload, in capture order."""
    flows: dict = {}
    for t_ns, ip, tcp in _tcp_segments(pcap_path):
        length = ip.len - ip.hl * 4 - tcp.off * 4  # the real length: the capture is cut
        if length <= 0:
            continue
        key = (socket.inet_ntoa(ip.src), tcp.sport, socket.inet_ntoa(ip.dst), tcp.dport)
        flows.setdefault(key, []).append((tcp.seq, length, t_ns, bytes(tcp.data)))
    return flows


def _tcp_segments(pcap_path: str):
    """(t_ns, ip, tcp) of every IPv4 TCP segment of a capture, in capture order."""
    with open(pcap_path, "rb") as f:
        reader = dpkt.pcap.Reader(f)
        linktype = reader.datalink()
        for ts, buf in reader:
            try:
                ip = _ip_of(buf, linktype)
            except (dpkt.UnpackError, ValueError):
                continue
            if isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.tcp.TCP):
                yield _ts_ns(ts), ip, ip.data


# The capture of connection attempts at a refusing provider (provider_down only), in a run dir.
SYN_PCAP = "syn.pcap"


def refused_syns(pcap_path: str) -> list[int]:
    """The times (ns) of the SYNs in a capture of one provider's port (harness.run.capture.
    syn_filter) that were answered with a reset: each a connection attempt the provider refused
    (what its own log never sees). A retransmitted SYN counts once; a SYN answered by a SYN-ACK
    was accepted, and a later reset of that connection is not a refusal."""
    syns: dict = {}          # (client, cport, server, sport) -> t_ns of its first SYN
    refused: list[int] = []
    for t_ns, ip, tcp in _tcp_segments(pcap_path):
        syn, ack, rst = (bool(tcp.flags & flag) for flag in
                         (dpkt.tcp.TH_SYN, dpkt.tcp.TH_ACK, dpkt.tcp.TH_RST))
        if syn and not ack:
            syns.setdefault((ip.src, tcp.sport, ip.dst, tcp.dport), t_ns)
            continue
        answered = syns.pop((ip.dst, tcp.dport, ip.src, tcp.sport), None)
        if answered is not None and rst and not syn:
            refused.append(answered)
    return sorted(refused)
