"""The access log: entries kept in memory as tuples and written as JSON lines in batches (never
a write per request)."""
import os
import sys
import time

from orjson import dumps


class AccessLog:
    def __init__(self, target):
        self.entries = []
        if target == "-":
            self.fd = sys.stderr.fileno()
            self.owned = False
        else:
            self.fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self.owned = True

    def flush(self):
        entries = self.entries
        if not entries:
            return
        self.entries = []
        out = []
        for ts, peer, method, path, status, model, key, dur, ov, stream, attempts, fallback in entries:
            out.append(dumps({
                "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + (".%03dZ" % int(ts % 1 * 1000)),
                "client": peer, "method": method, "path": path, "status": status, "model": model,
                "key": key, "duration_ms": round(dur * 1000, 3), "overhead_us": int(ov),
                "stream": stream, "attempts": attempts, "fallback": fallback}))
            out.append(b"\n")
        data = b"".join(out)
        try:
            while data:
                n = os.write(self.fd, data)
                data = data[n:]
        except OSError:
            pass

    def close(self):
        self.flush()
        if self.owned:
            os.close(self.fd)
