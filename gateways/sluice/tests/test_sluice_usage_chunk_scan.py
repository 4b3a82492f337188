"""Taking the usage chunk out of a stream looks through each byte of an event about once for its
end, however the provider's reads cut the event: a 1 MiB event trickled in 64-byte reads costs
about what it costs in one read. Counted, not timed: the bytes handed to the search for an
event's end, in-process (a real App and provider connection, no socket), on either build."""
import os

import pytest

EVENT = b"data: " + b"x" * (1 << 20) + b"\n\n"
CONFIG = """
[server]
listen = "127.0.0.1:1"
max_sse_frame_bytes = 4194304

[providers.p]
base_url = "http://127.0.0.1:1/v1"
api_key = "sk-p"

[models.m]
provider = "p"
"""


@pytest.fixture
def conn(tmp_path):
    import uvloop

    from sluice.config import load
    from sluice.server import App
    from sluice.shared import Shared
    from sluice.upstream import UpstreamConn
    path = os.path.join(tmp_path, "s.toml")
    with open(path, "w") as f:
        f.write(CONFIG)
    cfg = load(path)
    loop = uvloop.new_event_loop()
    app = App(cfg, loop, Shared(len(cfg.keys), 1), 0, 1)
    yield UpstreamConn(app.providers["p"].pool)
    loop.close()


def _scanned(monkeypatch, u, event, read_bytes):
    """Bytes looked through for an event's end while ``event`` arrives in reads of ``read_bytes``."""
    from sluice import relay_same_dialect
    scanned = [0]
    search = relay_same_dialect._events_end

    def counted(data, before):
        scanned[0] += before
        return search(data, before)
    monkeypatch.setattr(relay_same_dialect, "_events_end", counted)
    u.held = type(u.held)()
    out = [relay_same_dialect._without_usage_chunk(u, event[i:i + read_bytes], False)
           for i in range(0, len(event), read_bytes)]
    assert b"".join(out) == event  # relayed whole, once it ended
    return scanned[0]


def test_an_event_trickled_in_small_reads_is_scanned_about_once(monkeypatch, conn):
    whole = _scanned(monkeypatch, conn, EVENT, len(EVENT))  # (0: a read that ends an event ends there)
    trickled = _scanned(monkeypatch, conn, EVENT, 64)
    # each byte about once (a read's first bytes again with the last of the one before: an
    # event's end may straddle two reads)
    assert whole <= trickled <= 2 * len(EVENT), (trickled, whole)
    # and linear in the event's size
    half = _scanned(monkeypatch, conn, EVENT[:len(EVENT) // 2] + b"\n\n", 64)
    assert trickled <= 2.2 * half, (trickled, half)
