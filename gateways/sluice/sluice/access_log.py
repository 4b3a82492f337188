"""The access log: entries kept in memory as tuples and written as JSON lines in batches (never
a write per request).

Requests Sluice refuses itself (4xx: a bad key, a model the key may not use, a key's limits, a
malformed request) get a line too, so that key guessing leaves a trace; but a flood of them
must not fill the disk, so each source address gets at most REFUSAL_LINES_PER_ADDRESS lines a
REFUSAL_WINDOW_S window. The refusals left out are counted, and the count written as one line
per address when the window ends."""
from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, cast

from orjson import JSONDecodeError, dumps, loads

if TYPE_CHECKING:
    from sluice.request import Request

REFUSAL_LINES_PER_ADDRESS = 10
REFUSAL_WINDOW_S = 10.0
# source addresses followed in a window (each one a small list); refusals from more addresses
# than this are counted together, under the address "*"
MAX_REFUSAL_ADDRESSES = 4096

# The entries, by their length. (time, address, refusals left out in the window that ended):
WindowEntry = tuple[float, str, int]
# (time, address, method, path, status, model, key, seconds, overhead us, the refusal's message
# or the error body that holds it):
RefusalEntry = tuple[float, str, str, str, int, str, str, float, float, str | bytes]
# (time, address, method, path, status, model, key, seconds, overhead us, streamed, attempts,
# the fallback model that answered or None, seconds held through an outage):
RequestEntry = tuple[float, str, str, str, int, str, str, float, float, bool, int, str | None, float]
Entry = WindowEntry | RefusalEntry | RequestEntry


def _reason(reason: str | bytes) -> str | None:
    """The message of a refusal: given, or read from Sluice's error body (either dialect)."""
    if isinstance(reason, str):
        return reason
    try:
        message: str = loads(reason)["error"]["message"]  # Sluice's own error body
        return message
    except (JSONDecodeError, KeyError, TypeError):
        return None


class AccessLog:
    def __init__(self, target: str) -> None:
        self.entries: list[Entry] = []
        self.refusals: dict[str, list[int]] = {}  # source address -> [lines written, refusals not logged] in this window
        self.window_start = time.monotonic()
        if target == "-":
            self.fd = sys.stderr.fileno()
            self.owned = False
        else:
            self.fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self.owned = True

    def refusal(self, peer: str, r: Request | None, status: int, reason: str | bytes) -> None:
        """A request refused by Sluice (``r``: None when its head was not read), ``reason``: the
        message (or the error body that holds it, read only when the line is written)."""
        now = time.monotonic()
        if now - self.window_start >= REFUSAL_WINDOW_S:
            self._end_window(now)
        seen = self.refusals.get(peer)
        if seen is None:
            if len(self.refusals) >= MAX_REFUSAL_ADDRESSES:
                peer = "*"
                seen = self.refusals.setdefault(peer, [REFUSAL_LINES_PER_ADDRESS, 0])
            else:
                seen = self.refusals[peer] = [0, 0]
        if seen[0] >= REFUSAL_LINES_PER_ADDRESS:
            seen[1] += 1
            return
        seen[0] += 1
        entry: RefusalEntry
        if r is None:
            entry = (time.time(), peer, "-", "-", status, "-", "-", 0.0, 0.0, reason)
        else:
            entry = (time.time(), peer, r.method.decode("latin-1") or "-", r.url.decode("latin-1") or "-",
                     status, r.model_label, r.key.name if r.key is not None else "-",
                     time.perf_counter() - r.t0, r.overhead_us, reason)
        self.entries.append(entry)

    def _end_window(self, now: float) -> None:
        """The counts of the refusals left out in the window that ends, one entry per address."""
        at = time.time()
        for peer, (_, not_logged) in self.refusals.items():
            if not_logged:
                self.entries.append((at, peer, not_logged))
        self.refusals = {}
        self.window_start = now

    def flush(self) -> None:
        if self.refusals and time.monotonic() - self.window_start >= REFUSAL_WINDOW_S:
            self._end_window(time.monotonic())
        entries = self.entries
        if not entries:
            return
        self.entries = []
        out = []
        for entry in entries:
            ts = entry[0]
            line: dict[str, object] = {
                "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + (".%03dZ" % int(ts % 1 * 1000)),
                "client": entry[1]}
            if len(entry) == 3:  # refusals not logged in a window
                line["refusals_not_logged"] = entry[2]
                line["window_s"] = REFUSAL_WINDOW_S
            else:
                _, _, method, path, status, model, key, dur, ov = entry[:9]
                line.update({"method": method, "path": path, "status": status, "model": model,
                             "key": key, "duration_ms": round(dur * 1000, 3), "overhead_us": int(ov)})
                # (cast: mypy tells tuples apart by their length only up to 8 items)
                if len(entry) == 10:  # a refusal
                    line["refused"] = _reason(cast(RefusalEntry, entry)[9])
                else:
                    request = cast(RequestEntry, entry)
                    line.update({"stream": request[9], "attempts": request[10], "fallback": request[11],
                                 "held_ms": round(request[12] * 1000, 3)})
            out.append(dumps(line))
            out.append(b"\n")
        data = b"".join(out)
        try:
            while data:
                n = os.write(self.fd, data)
                data = data[n:]
        except OSError:
            pass

    def close(self) -> None:
        self._end_window(time.monotonic())
        self.flush()
        if self.owned:
            os.close(self.fd)
