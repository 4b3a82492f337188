"""The SYN capture of provider_down for real: tcpdump on the loopback with the capture's filter,
connections refused by a port nobody listens on, then accepted (and one of them reset by the
server after it was accepted); only the refused ones count as attempts."""
from __future__ import annotations

import os
import shutil
import socket
import struct

import pytest

from harness.files.pcap import refused_syns
from harness.run.capture import LINK_HEADERS_BYTES, Capture, syn_filter

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("tcpdump") is None or os.geteuid() != 0,
                       reason="needs tcpdump and root (as the wire capture)"),
]
REFUSED = 3


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_each_refused_connection_is_one_attempt_and_an_accepted_one_none(tmp_path):
    port = _port()
    cap = Capture(str(tmp_path / "syn.pcap"), [port], filter_text=syn_filter(port),
                  snaplen_bytes=LINK_HEADERS_BYTES, max_duration_s=30.0).start()
    try:
        for _ in range(REFUSED):
            with socket.socket() as c, pytest.raises(ConnectionRefusedError):
                c.connect(("127.0.0.1", port))
        with socket.socket() as server:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("127.0.0.1", port))
            server.listen()
            for _ in range(2):
                with socket.create_connection(("127.0.0.1", port)) as c:
                    conn, _ = server.accept()
                    # the server resets a connection it had accepted: not a refusal
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    conn.close()
    finally:
        cap.stop()
    times = refused_syns(str(tmp_path / "syn.pcap"))
    assert len(times) == REFUSED and times == sorted(times)
