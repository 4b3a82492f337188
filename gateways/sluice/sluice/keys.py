"""Virtual keys: bearer token -> allowed models, requests-per-minute limit, token budget.

State lives in shared memory (shared.py), one slot per (key, worker):
  0 rpm window id   1 requests in that window   2 requests in the window before
  3 budget period   4 tokens spent in period    5 tokens reserved (in flight)
A worker writes only its own slot and reads everyone's, so the checks need no
lock. Two workers admitting at the same instant can overshoot a limit by at
most one request (or one reservation) per worker; that is the price of a
lock-free hot path and is documented.

RPM uses a sliding-window counter (current minute plus the previous minute
weighted by how much of it still overlaps the last 60 s).
"""
import math
import time

from sluice.shared import SLOT_FIELDS

WINDOW = 60.0


class KeyRecord:
    __slots__ = ("name", "index", "all_models", "models", "rpm", "budget", "period")

    def __init__(self, cfg, index):
        self.name = cfg.name
        self.index = index
        self.all_models = "*" in cfg.models
        self.models = frozenset(m for m in cfg.models if m != "*")
        self.rpm = cfg.rpm
        self.budget = cfg.token_budget
        self.period = cfg.budget_period_s

    def allows(self, requested, canonical):
        return self.all_models or canonical in self.models or requested in self.models


class KeyStore:
    def __init__(self, key_cfgs, shared, worker, n_workers):
        self.shared = shared
        self.q = shared.q
        self.worker = worker
        self.n_workers = n_workers
        self.records = []
        self.by_token = {}
        self.by_digest = {}
        for i, kc in enumerate(key_cfgs.values()):
            rec = KeyRecord(kc, i)
            self.records.append(rec)
            if kc.key is not None:
                self.by_token[kc.key.encode()] = rec
            else:
                self.by_digest[kc.key_sha256] = rec
            # this worker's in-flight reservations died with its predecessor
            self.q[self._base(rec) + 5] = 0

    def _base(self, rec, worker=None):
        w = self.worker if worker is None else worker
        return (rec.index * self.n_workers + w) * SLOT_FIELDS

    def lookup(self, token):
        rec = self.by_token.get(token)
        if rec is None and self.by_digest and token:
            import hashlib  # only with key_sha256 keys
            rec = self.by_digest.get(hashlib.sha256(token).hexdigest())
            if rec is not None:
                self.by_token[token] = rec  # bounded: one entry per configured key
        return rec

    # -- requests per minute --
    def take_request(self, rec, now):
        """Count one request; return 0 when allowed, else seconds to wait."""
        q = self.q
        wid = int(now // WINDOW)
        n = self.n_workers
        b = (rec.index * n + self.worker) * SLOT_FIELDS
        ow = q[b]
        if ow != wid:  # roll this worker's window
            q[b + 2] = q[b + 1] if ow == wid - 1 else 0
            q[b + 1] = 0
            q[b] = wid
        if n == 1:
            cur = q[b + 1]
            prev = q[b + 2]
        else:
            cur = prev = 0
            base0 = rec.index * n * SLOT_FIELDS
            for w in range(n):
                bw = base0 + w * SLOT_FIELDS
                ow = q[bw]
                if ow == wid:
                    cur += q[bw + 1]
                    prev += q[bw + 2]
                elif ow == wid - 1:
                    prev += q[bw + 1]
        elapsed = now - wid * WINDOW
        limit = rec.rpm
        if prev * (1.0 - elapsed / WINDOW) + cur + 1 > limit:
            return self._rpm_retry(limit, cur, prev, elapsed)
        q[b + 1] += 1
        return 0

    @staticmethod
    def _rpm_retry(limit, cur, prev, elapsed):
        rest = WINDOW - elapsed
        need = limit - 1 - cur  # room the decaying previous window must leave
        if need >= 0 and prev > 0:
            t = WINDOW * (1.0 - need / prev) - elapsed
            if t <= rest:
                return max(1, math.ceil(t))
        # wait for the next window, where this window's count decays instead
        t2 = WINDOW * (1.0 - (limit - 1) / cur) if cur > 0 else 0.0
        return max(1, math.ceil(rest + max(0.0, t2)))

    # -- token budget --
    def _period(self, rec, wall):
        return int(wall // rec.period) if rec.period else 0

    def budget_state(self, rec, wall=None):
        """(spent in the current period, reserved in flight), summed over workers."""
        q = self.q
        pid = int((time.time() if wall is None else wall) // rec.period) if rec.period else 0
        spent = reserved = 0
        b = rec.index * self.n_workers * SLOT_FIELDS
        for _ in range(self.n_workers):
            if q[b + 3] == pid:
                spent += q[b + 4]
            reserved += q[b + 5]
            b += SLOT_FIELDS
        return spent, reserved

    def reserve(self, rec, tokens):
        """Reserve ``tokens``; return 0 when granted, else seconds to wait."""
        wall = time.time()
        spent, reserved = self.budget_state(rec, wall)
        if spent + reserved + tokens > rec.budget:
            if spent + tokens <= rec.budget:
                return 1  # in-flight reservations may settle lower
            if rec.period:
                return max(1, math.ceil((self._period(rec, wall) + 1) * rec.period - wall))
            return 86400
        self.q[(rec.index * self.n_workers + self.worker) * SLOT_FIELDS + 5] += tokens
        return 0

    def settle(self, rec, reserved, actual):
        q = self.q
        b = (rec.index * self.n_workers + self.worker) * SLOT_FIELDS
        pid = int(time.time() // rec.period) if rec.period else 0
        if q[b + 3] != pid:
            q[b + 3] = pid
            q[b + 4] = 0
        q[b + 5] -= reserved
        q[b + 4] += max(0, int(actual))
