"""Virtual keys: bearer token -> allowed models, requests-per-minute limit, token budget.

State lives in shared memory (shared.py), one slot per (key, worker):
  0 rpm window id   1 requests counted in that window   2 requests in the window before
  3 budget period   4 tokens spent in period   5 tokens reserved (in flight)   6 tokens leased
  7 requests in flight (a key with max_in_flight)   8 requests leased, still unused   9 tokens leased, still unused
A worker writes only its own slot and reads everyone's, so the checks need no
lock. Two workers admitting at the same instant can overshoot a limit by at
most one request (or one reservation) per worker; that is the price of a
lock-free hot path and is documented.

RPM uses a sliding-window counter (current minute plus the previous minute
weighted by how much of it still overlaps the last 60 s).

Leases keep the shared memory off the hot path. When a worker admits a request
after reading every worker's slot, it also claims a lease: a share of what is
still free (at most 1/(2 x workers) of it), published at once as counted
(requests) or leased (tokens). Later requests are admitted from the lease with
a local subtraction, until it is spent or its window or period ends. Others
see a lease as used, so leases never let a limit be exceeded: concurrent
claims each take at most 1/(2 x workers) of the free room they saw, together
at most half of it. Near a limit the free room is small and the lease is
zero, so every request reads the shared slots exactly as without leases.
Unused leases are given back every second (``return_leases``), so another
worker is refused for a lease it cannot use for at most a second.

Token accounting keeps spent + reserved + leased constant when a request
settles (the difference to its reservation goes back to, or comes out of, the
lease), so a settle only changes this worker's numbers; they are published
with the next claim or the next second.

A worker can die (kill -9, the OOM killer) between two publications, so what is
left of its leases (fields 8 and 9) is written with every request taken from
them, one store each: from these the supervisor knows exactly what the dead
worker counted and spent (``release_worker``).
"""
import math
import time
from time import perf_counter
from typing import TYPE_CHECKING

from sluice.shared import SLOT_FIELDS

if TYPE_CHECKING:
    from collections.abc import Sequence  # noqa: F401 (type comments)

    from sluice.config import KeyConfig  # noqa: F401 (type comments)
    from sluice.shared import Shared  # noqa: F401 (type comments)

WINDOW = 60.0
INF = float("inf")


def _period_index(rec, wall):
    # type: (KeyRecord, float) -> int
    """The budget period ``wall`` (Unix seconds) falls in; 0 for a budget that never resets."""
    return int(wall // rec.period_s) if rec.period_s else 0


class KeyRecord:
    __slots__ = ("name", "index", "all_models", "models", "allowed", "rpm", "budget", "period_s", "base",
                 # requests per minute, this worker: window, count (lease included), lease, lease end
                 "rpm_window", "rpm_count", "rpm_previous_count", "rpm_lease", "rpm_until",
                 # token budget, this worker: period, spent, reserved, lease, period end (perf_counter)
                 "budget_period_index", "spent", "reserved", "budget_lease", "budget_until",
                 "prompt_tokens", "completion_tokens", "max_in_flight", "in_flight")

    def __init__(self, cfg, index, base):
        # type: (KeyConfig, int, int) -> None
        self.name = cfg.name
        self.index = index
        self.base = base  # this worker's slot
        self.all_models = "*" in cfg.models
        self.models = frozenset(m for m in cfg.models if m != "*")
        self.allowed = frozenset()  # type: frozenset[str]  # every name (aliases included) it may call: set by the App
        self.rpm = cfg.rpm
        self.budget = cfg.token_budget
        self.period_s = cfg.budget_period_s  # the budget's period, 0: it never resets
        self.rpm_window = self.rpm_count = self.rpm_previous_count = self.rpm_lease = 0
        self.rpm_until = -INF
        self.budget_period_index = self.spent = self.reserved = self.budget_lease = 0
        self.budget_until = -INF
        self.prompt_tokens = self.completion_tokens = 0
        self.max_in_flight = cfg.max_in_flight  # over all workers; 0: no limit
        self.in_flight = 0  # this worker's

    def allows(self, requested, canonical):
        # type: (str, str) -> bool
        return self.all_models or canonical in self.models or requested in self.models


class KeyStore:
    def __init__(self, key_cfgs, shared, worker, n_workers):
        # type: (dict[str, KeyConfig], Shared, int, int) -> None
        self.shared = shared
        self.slots = shared.q
        self.worker = worker
        self.n_workers = n_workers
        self.records = []  # type: list[KeyRecord]
        self.by_token = {}  # type: dict[bytes, KeyRecord]
        self.by_digest = {}  # type: dict[str | None, KeyRecord]
        for i, kc in enumerate(key_cfgs.values()):
            rec = KeyRecord(kc, i, (i * n_workers + worker) * SLOT_FIELDS)
            self.records.append(rec)
            if kc.key is not None:
                self.by_token[kc.key.encode()] = rec
            else:
                self.by_digest[kc.key_sha256] = rec
            # a restarted worker goes on from what its predecessor counted (requests this window,
            # tokens spent this period), which the supervisor made true (release_worker)
            q = self.slots
            b = rec.base
            rec.rpm_window, rec.rpm_count, rec.rpm_previous_count = q[b], q[b + 1], q[b + 2]
            rec.budget_period_index, rec.spent = q[b + 3], q[b + 4]

    def lookup(self, token):
        # type: (bytes) -> KeyRecord | None
        rec = self.by_token.get(token)
        if rec is None and self.by_digest and token:
            import hashlib  # only with key_sha256 keys
            rec = self.by_digest.get(hashlib.sha256(token).hexdigest())
            if rec is not None:
                self.by_token[token] = rec  # bounded: one entry per configured key
        return rec

    # -- requests in flight --
    def in_flight_full(self, rec):
        # type: (KeyRecord) -> bool
        """Whether ``rec`` has max_in_flight requests in flight already, summed over workers."""
        total = rec.in_flight
        n = self.n_workers
        if n > 1:
            q = self.slots
            b = rec.index * n * SLOT_FIELDS + 7
            for w in range(n):
                if w != self.worker:
                    total += q[b]
                b += SLOT_FIELDS
        return total >= rec.max_in_flight

    def start_request(self, rec):
        # type: (KeyRecord) -> None
        rec.in_flight += 1
        self.slots[rec.base + 7] = rec.in_flight

    def end_request(self, rec):
        # type: (KeyRecord) -> None
        rec.in_flight -= 1
        self.slots[rec.base + 7] = rec.in_flight

    # -- requests per minute --
    def take_request(self, rec, now):
        # type: (KeyRecord, float) -> int
        """Count one request at ``now`` (perf_counter); return 0 when allowed, else seconds to wait."""
        if rec.rpm_lease and now < rec.rpm_until:
            rec.rpm_lease -= 1
            self.slots[rec.base + 8] = rec.rpm_lease
            return 0
        q = self.slots
        window = int(now // WINDOW)
        if rec.rpm_window != window:  # roll this worker's window; an unused lease was never a request
            rec.rpm_previous_count = rec.rpm_count - rec.rpm_lease if rec.rpm_window == window - 1 else 0
            rec.rpm_count = 0
            rec.rpm_window = window
        elif rec.rpm_lease:  # a lease from before ``now``: not requests either
            rec.rpm_count -= rec.rpm_lease
        rec.rpm_lease = 0
        cur = rec.rpm_count
        prev = rec.rpm_previous_count
        n = self.n_workers
        if n > 1:
            b0 = rec.index * n * SLOT_FIELDS
            for w in range(n):
                if w == self.worker:
                    continue
                bw = b0 + w * SLOT_FIELDS
                other_window = q[bw]
                if other_window == window:
                    cur += q[bw + 1]
                    prev += q[bw + 2]
                elif other_window == window - 1:
                    prev += q[bw + 1]
        elapsed = now - window * WINDOW
        limit = rec.rpm
        free = limit - (prev * (1.0 - elapsed / WINDOW) + cur + 1)
        if free < 0:
            self._publish_rpm(rec)
            return self._rpm_retry(limit, cur, prev, elapsed)
        # the sliding window only frees room as the minute goes on, so a lease stays valid to its end
        lease = int(free) // (2 * n) if n > 1 else int(free)
        rec.rpm_count += 1 + lease
        rec.rpm_lease = lease
        rec.rpm_until = (window + 1) * WINDOW
        self._publish_rpm(rec)
        return 0

    def _publish_rpm(self, rec):
        # type: (KeyRecord) -> None
        q = self.slots
        b = rec.base
        q[b] = rec.rpm_window
        q[b + 1] = rec.rpm_count
        q[b + 2] = rec.rpm_previous_count
        q[b + 8] = rec.rpm_lease

    @staticmethod
    def _rpm_retry(limit, cur, prev, elapsed):
        # type: (int, int, int, float) -> int
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
    def budget_state(self, rec, wall=None):
        # type: (KeyRecord, float | None) -> tuple[int, int]
        """(spent in the current period, reserved in flight), summed over workers; leases excluded."""
        spent, reserved, _ = self._budget_totals(rec, time.time() if wall is None else wall)
        return spent, reserved

    def _budget_totals(self, rec, wall):
        # type: (KeyRecord, float) -> tuple[int, int, int]
        """(spent, reserved, other workers' leases): this worker's own numbers, the others' published."""
        q = self.slots
        period_index = _period_index(rec, wall)
        self._roll_period(rec, period_index, wall)
        spent, reserved, leased = rec.spent, rec.reserved, 0
        b = rec.index * self.n_workers * SLOT_FIELDS
        for w in range(self.n_workers):
            if w != self.worker:
                if q[b + 3] == period_index:
                    spent += q[b + 4]
                reserved += q[b + 5]
                leased += q[b + 6]
            b += SLOT_FIELDS
        return spent, reserved, leased

    def _roll_period(self, rec, period_index, wall):
        # type: (KeyRecord, int, float) -> None
        rec.budget_until = (perf_counter() + (period_index + 1) * rec.period_s - wall) if rec.period_s else INF
        if rec.budget_period_index != period_index:
            rec.budget_period_index = period_index
            rec.spent = 0
            rec.budget_lease = 0
            self._publish_budget(rec)

    def reserve(self, rec, tokens):
        # type: (KeyRecord, int) -> int
        """Reserve ``tokens``; return 0 when granted, else seconds to wait."""
        if rec.budget_lease >= tokens and perf_counter() < rec.budget_until:
            rec.budget_lease -= tokens
            rec.reserved += tokens
            self.slots[rec.base + 9] = rec.budget_lease
            return 0
        wall = time.time()
        rec.budget_lease = 0  # claimed again below from what is free now
        spent, reserved, leased = self._budget_totals(rec, wall)
        budget = rec.budget
        if spent + reserved + leased + tokens > budget:
            self._publish_budget(rec)
            if spent + tokens <= budget:
                return 1  # in-flight reservations may settle lower, other workers' leases come back
            if rec.period_s:
                return max(1, math.ceil((rec.budget_period_index + 1) * rec.period_s - wall))
            return 86400
        n = self.n_workers
        free = budget - (spent + reserved + leased + tokens)
        rec.budget_lease = free // (2 * n) if n > 1 else free
        rec.reserved += tokens
        self._publish_budget(rec)
        return 0

    def _publish_budget(self, rec):
        # type: (KeyRecord) -> None
        q = self.slots
        b = rec.base
        q[b + 3] = rec.budget_period_index
        q[b + 4] = rec.spent
        q[b + 5] = rec.reserved
        q[b + 6] = rec.budget_lease
        q[b + 9] = rec.budget_lease

    def settle(self, rec, reserved, actual):
        # type: (KeyRecord, int, int) -> None
        actual = max(0, int(actual))
        rec.reserved -= reserved
        if perf_counter() >= rec.budget_until:
            # the period ended while the request was in flight: it counts in the new one, and the
            # reservation is not refunded into a lease, so the numbers changed: publish them
            wall = time.time()
            self._roll_period(rec, _period_index(rec, wall), wall)
            rec.spent += actual
            self._publish_budget(rec)
            return
        rec.spent += actual
        rec.budget_lease += reserved - actual  # below 0 means this worker used more than it published
        if rec.budget_lease < 0:
            rec.budget_lease = 0
            self._publish_budget(rec)
        else:
            self.slots[rec.base + 9] = rec.budget_lease

    def state(self, rec):
        # type: (KeyRecord) -> dict[str, int]
        """This key over every worker, for /debug/state: requests in the current rpm window and in
        the one before (exact), leases still unused, and tokens spent and reserved (other
        workers' as they last published them, at most a second ago)."""
        window = int(perf_counter() // WINDOW)
        q = self.slots
        n = self.n_workers
        current = previous = requests_leased = tokens_leased = 0
        for w in range(n):
            b = (rec.index * n + w) * SLOT_FIELDS
            if w == self.worker:
                at, lease, before = rec.rpm_window, rec.rpm_lease, rec.rpm_previous_count
                count = rec.rpm_count - lease
                tokens_leased += rec.budget_lease
            else:
                at, lease, before = q[b], q[b + 8], q[b + 2]
                count = q[b + 1] - lease
                tokens_leased += q[b + 9]
            requests_leased += lease
            if at == window:
                current += count
                previous += before
            elif at == window - 1:
                previous += count
        spent, reserved = self.budget_state(rec)
        return {"rpm_window": window, "requests": current, "previous_window_requests": previous,
                "requests_leased": requests_leased, "tokens_spent": spent, "tokens_reserved": reserved,
                "tokens_leased": tokens_leased}

    def return_leases(self):
        # type: () -> None
        """Give unused leases back and publish this worker's numbers (called once a second)."""
        for rec in self.records:
            if rec.rpm_lease:
                rec.rpm_count -= rec.rpm_lease
                rec.rpm_lease = 0
                self._publish_rpm(rec)
            if rec.budget:
                rec.budget_lease = 0
                self._publish_budget(rec)


def release_worker(slots, periods_s, n_workers, worker, wall):
    # type: (memoryview[int], Sequence[int], int, int, float) -> None
    """Make a dead worker's slots true, in the supervisor, before the worker is restarted (nothing
    writes them meanwhile). ``periods_s``: each key's budget period (0: none); ``wall``: now, Unix
    seconds. Its counted requests and spent tokens stay. What it had reserved becomes spent in
    the current period: the provider may have served those requests, and charging them is the
    safe side of a budget. What was left of its leases is given back. It has no request in flight."""
    for k, period_s in enumerate(periods_s):
        b = (k * n_workers + worker) * SLOT_FIELDS
        slots[b + 1] -= slots[b + 8]  # an unused rpm lease was never a request
        # spent + reserved + leased as last published is what it has spent, reserved and still
        # holds (see settle); what it still holds is field 9
        charged = slots[b + 5] + slots[b + 6] - slots[b + 9]
        period_index = int(wall // period_s) if period_s else 0
        if slots[b + 3] != period_index:  # a period it did not see begin: only the charge is in it
            slots[b + 3] = period_index
            slots[b + 4] = 0
        slots[b + 4] += charged
        for f in range(5, SLOT_FIELDS):
            slots[b + f] = 0
