"""Riding out provider faults: retries under a retry budget, fallbacks, weighted deployments
with passive health (outlier ejection). See README.md, "Retries, fallbacks and deployments".

Nothing here runs for a model that configures none of it (its route has no Policy), and for
one that does, nothing runs on a successful response but a deployment's failure counter reset.
A failed attempt (an error status in a retry class, a connect failure, a timeout or reset when
allowed) reaches ``on_failure`` before any byte of it went to the client; it answers how long
to wait before the next attempt (which may go to another deployment or a fallback model), or
-1: relay the failure as it is.

State is per worker process (as the connection pools are): budgets, failure counters and
ejections are each worker's own view.
"""
import random

# failure classes (config.RETRY_CLASSES); "timeout" and "reset" may have been acted on
UNSAFE = ("timeout", "reset")


def classify(status):
    """The retry class of an error status, or None (not a provider fault: relayed, no retry)."""
    if status == 429:
        return "429"
    if status == 503 or status == 529:
        return "overloaded"
    if 500 <= status <= 599 and status != 501 and status != 505:
        return "5xx"
    return None


def _expand(classes):
    """'5xx' covers the overloaded statuses (503, 529) too."""
    s = set(classes)
    if "5xx" in s:
        s.add("overloaded")
    return frozenset(s)


def parse_retry_after(head, low):
    """Seconds from a Retry-After header in delta-seconds form (or retry-after-ms), else -1."""
    i = low.find(b"\nretry-after-ms:")
    if i >= 0:
        try:
            return float(head[i + 16:head.find(b"\r", i + 1)].strip()) / 1000
        except ValueError:
            pass
    i = low.find(b"\nretry-after:")
    if i < 0:
        return -1.0
    try:
        v = float(head[i + 13:head.find(b"\r", i + 1)].strip())
    except ValueError:
        return -1.0  # an HTTP date: not honoured (backoff instead)
    return v if v >= 0 else -1.0


class Deployment:
    """One provider serving a model: a weight, a failure counter, an ejection deadline."""
    __slots__ = ("target", "provider", "name", "upstream", "weight", "fails", "ejected_until")

    def __init__(self, target, weight):
        self.target = target        # a server.Route bound to this provider and upstream model
        self.provider = target.provider
        self.name = target.provider.name
        self.upstream = target.upstream
        self.weight = weight
        self.fails = 0              # consecutive failures
        self.ejected_until = 0.0    # perf_counter deadline, 0 when admitted


class Policy:
    """What one model does about faults."""

    def __init__(self, model_cfg, targets):
        self.name = model_cfg.name
        self.deps = [Deployment(t, d.weight) for t, d in zip(targets, model_cfg.deployments)]
        self.single = self.deps[0] if len(self.deps) == 1 else None
        self.retry = r = model_cfg.retry
        self.retry_on = _expand(r.on) if r is not None else frozenset()
        self.fallbacks = []  # Routes, filled in once every route exists
        self.fallback_on = _expand(model_cfg.fallback_on)
        self.retry_after_send = r.retry_after_send if r is not None else False
        self.consecutive = model_cfg.outlier.consecutive_failures
        self.ejection_s = model_cfg.outlier.ejection_s

    def pick(self, now, avoid=None):
        """A deployment by weight among the admitted ones (not ``avoid`` if another is admitted;
        weight-0 deployments only when no weighted one is)."""
        single = self.single
        if single is not None:
            return single
        weighted = []
        standby = []
        for d in self.deps:
            if d.ejected_until:
                if d.ejected_until > now:
                    continue
                # the cool-down is over: re-admitted on probation (one more failure ejects again)
                d.ejected_until = 0.0
                d.fails = self.consecutive - 1 if self.consecutive > 1 else 0
            if d is avoid:
                continue
            if d.weight > 0:
                weighted.append(d)
            else:
                standby.append(d)
        pool = weighted or standby
        if not pool:
            return avoid if avoid is not None else self.deps[0]
        if len(pool) == 1:
            return pool[0]
        x = random.random() * sum(d.weight for d in pool)
        for d in pool:
            x -= d.weight
            if x < 0:
                return d
        return pool[-1]

    def failure(self, dep, now, metrics):
        """Passive health: eject a deployment after ``consecutive`` failures in a row, unless it
        is the last admitted one."""
        if self.consecutive == 0 or self.single is not None:
            return
        dep.fails += 1
        if dep.fails < self.consecutive or dep.ejected_until:
            return
        for d in self.deps:
            if d is not dep and (not d.ejected_until or d.ejected_until <= now):
                dep.ejected_until = now + self.ejection_s
                dep.fails = 0
                k = (self.name, dep.name)
                metrics.ejections[k] = metrics.ejections.get(k, 0) + 1
                return

    def ejected(self, now):
        return [d for d in self.deps if d.ejected_until > now]


class RState:
    """A request's attempts, made when its first attempt fails."""
    __slots__ = ("primary", "tries", "attempts", "fb", "budgeted", "delay", "fallback")

    def __init__(self, primary):
        self.primary = primary  # the Policy of the model the client asked for
        self.tries = 1          # attempts on the current model
        self.attempts = 1       # attempts in all
        self.fb = 0             # fallbacks of the primary used so far
        self.budgeted = False   # holds a slot of the retry budget
        self.delay = 0.0        # before the next attempt
        self.fallback = None    # the fallback model name now answering


def _budget(app, rs, m):
    """Whether one more retry fits the budget: retries in flight <= max(min_retry_concurrency,
    share x requests in flight) (a request holding a slot keeps it for its later attempts)."""
    if rs.budgeted:
        return True
    b = app.retry_budget
    allowed = b.share * m.in_flight
    if allowed < b.min_retry_concurrency:
        allowed = b.min_retry_concurrency
    return m.retries_in_flight < allowed


def _take(rs, m):
    if not rs.budgeted:
        rs.budgeted = True
        m.retries_in_flight += 1


def on_failure(app, req, cls, retry_after, now):
    """An attempt of ``req`` failed with ``cls`` before anything reached the client. Returns the
    seconds to wait before the next attempt (req.dep, req.route and req.payload are set for it),
    or -1 when the failure is to be relayed."""
    route = req.route
    pol = route.resil
    m = app.metrics
    dep = req.dep
    pol.failure(dep, now, m)
    rs = req.rs
    if rs is None:
        rs = req.rs = RState(pol)
    unsafe = cls in UNSAFE
    r = pol.retry
    if r is not None and rs.tries < r.max_attempts and cls in pol.retry_on and (
            not unsafe or r.retry_after_send):
        delay = -1.0
        if retry_after >= 0 and r.honour_retry_after:
            if retry_after <= r.retry_after_max_s:
                delay = retry_after
            # else longer than we wait: not retried here (a fallback may take it)
        else:  # exponential backoff, full jitter
            cap = r.backoff_base_s * (1 << (rs.tries - 1))
            delay = random.random() * (cap if cap < r.backoff_max_s else r.backoff_max_s)
        if delay >= 0:
            if _budget(app, rs, m):
                nxt = pol.pick(now, dep)
                if nxt is dep or app.retarget(req, nxt.target):
                    if nxt is not dep:
                        delay = 0.0  # another deployment: the failed one's backoff is not its own
                    _take(rs, m)
                    req.dep = nxt
                    rs.tries += 1
                    rs.attempts += 1
                    m.retries[cls] = m.retries.get(cls, 0) + 1
                    return delay
            else:
                m.retry_budget_exhausted += 1
                if app.retry_budget.fallbacks:
                    return -1.0
    prim = rs.primary
    if prim.fallbacks and cls in prim.fallback_on and (not unsafe or prim.retry_after_send):
        if app.retry_budget.fallbacks and not _budget(app, rs, m):
            m.retry_budget_exhausted += 1
            return -1.0
        while rs.fb < len(prim.fallbacks):
            to = prim.fallbacks[rs.fb]
            rs.fb += 1
            nxt = to.resil.pick(now)
            if app.retarget(req, nxt.target):
                if app.retry_budget.fallbacks:
                    _take(rs, m)
                k = (route.name, to.name)
                m.fallbacks[k] = m.fallbacks.get(k, 0) + 1
                req.route = to
                req.dep = nxt
                rs.fallback = to.name
                rs.tries = 1
                rs.attempts += 1
                return 0.0
    return -1.0
