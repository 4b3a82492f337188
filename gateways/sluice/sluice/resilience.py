"""Riding out provider faults: retries under a retry budget, fallbacks, weighted deployments
with passive health (outlier ejection). See README.md, "Retries, fallbacks and deployments".

Nothing here runs for a model that configures none of it (its route has no Policy), and for
one that does, nothing runs on a successful response but its deployment's recent record and a
retry-budget deposit.
A failed attempt (an error status in a retry class, a connect failure, a timeout or reset when
allowed) reaches ``on_failure`` before any byte of it went to the client; it answers how long
to wait before the next attempt (which may go to another deployment or a fallback model), or
-1: relay the failure as it is.

State is per worker process (as the connection pools are): budgets, recent records and
ejections are each worker's own view. A deployment's Retry-After is the exception: every worker
publishes the ones it is given (shared.py), and none retries that deployment before the longest
still running has elapsed.
"""
from __future__ import annotations

import random
from collections.abc import Iterable
from time import perf_counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sluice.config import ModelConfig, RetryBudgetConfig, RetryConfig
    from sluice.metrics import Metrics
    from sluice.request import Request, Route
    from sluice.server import App

# failure classes (config.RETRY_CLASSES); "timeout" and "reset" may have been acted on
UNSAFE = ("timeout", "reset")
# a Retry-After wait is the provider's time plus up to this share of it
RETRY_AFTER_JITTER = 0.2
# a backoff's ceiling doubles with each attempt up to this many times (then its maximum holds)
MAX_DOUBLINGS = 30


def classify(status: int) -> str | None:
    """The retry class of an error status, or None (not a provider fault: relayed, no retry)."""
    if status == 429:
        return "429"
    if status == 503 or status == 529:
        return "overloaded"
    if 500 <= status <= 599 and status != 501 and status != 505:
        return "5xx"
    return None


def _expand(classes: Iterable[str]) -> frozenset[str]:
    """'5xx' covers the overloaded statuses (503, 529) too."""
    s = set(classes)
    if "5xx" in s:
        s.add("overloaded")
    return frozenset(s)


def parse_retry_after(head: bytes, low: bytes) -> float:
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
    """One provider serving a model: a weight, its recent attempts and failures, an ejection
    deadline."""
    __slots__ = ("target", "provider", "name", "upstream", "weight", "n", "bad", "prev_n",
                 "prev_bad", "since", "ejected_until", "ejections", "back_at", "retry_after",
                 "retry_after_at", "retry_after_n", "retry_after_own")

    def __init__(self, target: Route, weight: float) -> None:
        self.target = target        # a request.Route bound to this provider and upstream model
        self.provider = target.provider
        self.name = target.provider.name
        self.upstream = target.upstream
        self.weight = weight
        self.ejected_until = 0.0    # perf_counter deadline, 0 when admitted
        self.ejections = 0          # ejections in a row, none ended by a healthy probation
        self.back_at = 0.0          # when it came back from its last ejection; 0: not probing
        # the workers' Retry-After deadlines for it: a row of the shared memory (share_retry_after)
        self.retry_after: memoryview[float] | list[float] = [0.0]
        self.retry_after_at = 0     # its row: [retry_after_at, retry_after_at + workers)
        self.retry_after_n = 1      # workers
        self.retry_after_own = 0    # this worker's place in it
        self.forget(0.0)

    def asked_to_wait(self, seconds: float, now: float) -> None:
        """The deployment answered 429 with Retry-After ``seconds``: published to every worker."""
        until = now + seconds
        if until > self.retry_after[self.retry_after_own]:
            self.retry_after[self.retry_after_own] = until

    def wait_left(self, now: float) -> float:
        """Seconds until every Retry-After any worker was given for this deployment has elapsed."""
        at = self.retry_after_at
        until = max(self.retry_after[at:at + self.retry_after_n])
        return until - now if until > now else 0.0

    def forget(self, now: float) -> None:
        self.n = self.bad = 0           # attempts and failures in this window
        self.prev_n = self.prev_bad = 0  # ... and in the one before
        self.since = now

    def record(self, failed: bool, now: float, window_s: float) -> None:
        if now - self.since >= window_s:
            if now - self.since >= 2 * window_s:
                self.prev_n = self.prev_bad = 0
            else:
                self.prev_n, self.prev_bad = self.n, self.bad
            self.n = self.bad = 0
            self.since = now
        self.n += 1
        if failed:
            self.bad += 1


class Policy:
    """What one model does about faults."""

    def __init__(self, model_cfg: ModelConfig, targets: list[Route]) -> None:
        self.name = model_cfg.name
        self.deployments = [Deployment(t, d.weight) for t, d in zip(targets, model_cfg.deployments)]
        self.single = self.deployments[0] if len(self.deployments) == 1 else None
        self.retry = r = model_cfg.retry
        self.retry_on = _expand(r.on) if r is not None else frozenset()
        self.fallbacks: list[Route] = []  # Routes, filled in once every route exists
        self.fallback_on = _expand(model_cfg.fallback_on)
        self.retry_after_send = r.retry_after_send if r is not None else False
        o = model_cfg.outlier
        self.min_requests = o.min_requests
        self.failure_margin = o.failure_margin
        self.window_s = o.window_s
        # how many may be ejected at once: never all of them
        most = int(len(self.deployments) * o.max_ejection_percent / 100.0 + 1e-9)
        self.max_ejected = most if most < len(self.deployments) else len(self.deployments) - 1
        self.ejection_s = o.ejection_s
        self.max_ejection_s = o.max_ejection_s
        self.probe_share = o.probe_share

    def pick(self, now: float, avoid: Deployment | None = None) -> Deployment:
        """A deployment by weight among the admitted ones (not ``avoid`` if another is admitted;
        weight-0 deployments only when no weighted one is). One back from an ejection counts
        ``probe_share`` of its weight; when every weighted one is, the weight-0 ones take the
        rest."""
        single = self.single
        if single is not None:
            return single
        weighted: list[Deployment] = []
        standby: list[Deployment] = []
        for d in self.deployments:
            if d.ejected_until:
                if d.ejected_until > now:
                    continue
                # the cool-down is over: re-admitted with a clean record, on probation
                d.ejected_until = 0.0
                d.forget(now)
                d.back_at = now
            if d is avoid:
                continue
            if d.weight > 0:
                weighted.append(d)
            else:
                standby.append(d)
        if weighted and standby and all(d.back_at for d in weighted) and \
                random.random() >= self.probe_share:
            weighted = []   # only probes go to the deployments on probation
        pool = weighted or standby
        if not pool:
            return avoid if avoid is not None else self.deployments[0]
        if len(pool) == 1:
            return pool[0]
        share = self.probe_share
        x = random.random() * sum(d.weight * share if d.back_at else d.weight for d in pool)
        for d in pool:
            x -= d.weight * share if d.back_at else d.weight
            if x < 0:
                return d
        return pool[-1]

    def success(self, d: Deployment, now: float) -> None:
        if self.single is None:
            d.record(False, now, self.window_s)
            if d.back_at and now - d.back_at >= self.ejection_s:
                d.back_at = 0.0     # healthy for a whole ejection time: its weight again
                d.ejections = 0

    def failure(self, failed: Deployment, now: float, metrics: Metrics) -> None:
        """Passive health: eject a deployment whose recent failure share exceeds its admitted
        peers' by ``failure_margin`` (over ``min_requests`` recent attempts at least), while
        fewer than ``max_ejected`` are ejected, for ``ejection_s`` times its ejections in a row
        (at most ``max_ejection_s``). A single deployment is never ejected."""
        if self.single is not None:
            return
        failed.record(True, now, self.window_s)
        if self.min_requests == 0 or failed.ejected_until:
            return
        volume = failed.n + failed.prev_n
        if volume < self.min_requests:
            return
        share = (failed.bad + failed.prev_bad) / volume
        if share < self.failure_margin:
            return
        peers_n = peers_bad = 0
        ejected = 0
        for d in self.deployments:
            if d.ejected_until > now:
                ejected += 1
            elif d is not failed:
                if d.since and now - d.since >= 2 * self.window_s:
                    continue  # nothing recent: no evidence either way
                peers_n += d.n + d.prev_n
                peers_bad += d.bad + d.prev_bad
        if ejected >= self.max_ejected or peers_n < self.min_requests:
            return  # the most are out already, or too little is known of the peers
        peers_share = peers_bad / peers_n if peers_n else 0.0
        if share - peers_share < self.failure_margin:
            return  # failing no more than its peers: the provider, not this deployment
        failed.ejections += 1
        ejection_s = self.ejection_s * failed.ejections
        failed.ejected_until = now + (ejection_s if ejection_s < self.max_ejection_s
                                      else self.max_ejection_s)
        failed.back_at = 0.0
        failed.forget(now)
        k = (self.name, failed.name)
        metrics.ejections[k] = metrics.ejections.get(k, 0) + 1

    def ejected(self, now: float) -> list[Deployment]:
        return [d for d in self.deployments if d.ejected_until > now]


def share_retry_after(app: App, policies: Iterable[Policy]) -> None:
    """Each deployment's row of Retry-After deadlines in the shared memory: the rows in the config's
    order of models and deployments, as every worker reads it (shared.deployment_slots)."""
    rows: dict[str, int] = {}
    at = 0
    for m in app.cfg.models.values():
        rows[m.name] = at
        at += len(m.deployments)
    shared = app.shared.retry_after
    n = app.n_workers
    for p in policies:
        for i, d in enumerate(p.deployments):
            d.retry_after = shared
            d.retry_after_n = n
            d.retry_after_at = (rows[p.name] + i) * n
            d.retry_after_own = d.retry_after_at + app.worker


class RetryBudget:
    """The retry budget of a worker, a token bucket (the shape of the AWS SDKs' retry quota and
    Finagle's RetryBudget): a retry or fallback withdraws a token when it is decided (a request
    then waiting for its backoff or Retry-After has paid already, so the next decision sees the
    bucket as it really is), each successful attempt deposits ``deposit_per_success``, and
    ``min_retries_per_s`` flow in every second, up to ``capacity``. When nothing succeeds,
    retries fall to ``min_retries_per_s`` once the bucket is empty."""

    def __init__(self, cfg: RetryBudgetConfig) -> None:
        self.capacity = cfg.capacity
        self.deposit = cfg.deposit_per_success
        self.per_s = cfg.min_retries_per_s
        self.fallbacks = cfg.fallbacks
        self.tokens = cfg.capacity
        self.t = perf_counter()

    def _refill(self, now: float) -> None:
        if now > self.t:
            if self.per_s:
                tokens = self.tokens + (now - self.t) * self.per_s
                self.tokens = tokens if tokens < self.capacity else self.capacity
            self.t = now

    def allows(self, now: float) -> bool:
        self._refill(now)
        return self.tokens >= 1.0

    def withdraw(self, now: float) -> None:
        """A retry was decided (``allows`` said a token is there): one token."""
        self._refill(now)
        self.tokens -= 1.0

    def succeeded(self) -> None:
        tokens = self.tokens + self.deposit
        self.tokens = tokens if tokens < self.capacity else self.capacity


class RetryState:
    """A request's attempts, made when its first attempt fails."""
    __slots__ = ("primary", "model_attempts", "attempts", "fallbacks_tried", "waiting", "delay",
                 "fallback", "retry_after")

    def __init__(self, primary: Policy) -> None:
        self.primary = primary      # the Policy of the model the client asked for
        self.model_attempts = 1     # attempts on the current model
        self.attempts = 1           # attempts in all
        self.fallbacks_tried = 0    # fallbacks of the primary used so far
        self.waiting = False        # counted in metrics.retries_in_flight (waiting to be sent)
        self.delay = 0.0            # before the next attempt
        self.fallback: str | None = None        # the fallback model name now answering
        self.retry_after = -1.0     # the shortest Retry-After its attempts were given (-1: none)


def _budget(app: App, now: float) -> bool:
    """Whether one more retry fits the budget (a token is there now)."""
    return app.retry_budget.allows(now)


def _take(app: App, now: float) -> None:
    """A retry or fallback is decided: it pays its token now."""
    app.retry_budget.withdraw(now)


def attempt_answered(app: App, req: Request, status: int, now: float) -> None:
    """A response head below 429 answered an attempt of ``req``: its deployment is healthy (but
    when the provider refused Sluice's credentials, 401 or 403: that deployment fails), and a
    success (2xx, 3xx) deposits into the retry budget."""
    policy, deployment = _attempt(req)
    if status == 401 or status == 403:
        policy.failure(deployment, now, app.metrics)
        return
    policy.success(deployment, now)
    if status < 400:
        app.retry_budget.succeeded()


def attempt_unusable(app: App, req: Request, now: float) -> None:
    """A 200 answered an attempt of ``req`` (counted healthy at its head) but could not be used
    (it could not be translated): a failure of its deployment all the same."""
    policy, deployment = _attempt(req)
    policy.failure(deployment, now, app.metrics)


def attempt_sending(app: App, r: Request, now: float) -> None:
    """The attempt decided by ``on_failure`` is being sent now: it waits no more."""
    state = r.retry_state
    assert state is not None  # made by on_failure
    if state.waiting:
        state.waiting = False
        app.metrics.retries_in_flight -= 1


def _past_deadline(req: Request, r: RetryConfig, delay: float, now: float) -> bool:
    """Whether an attempt ``delay`` seconds from now would start past the request's deadline
    (every attempt, whichever deployment it goes to)."""
    return now + delay > req.t0 + r.deadline_s


def attempt_replaced(app: App, req: Request, status: int, head: bytes, low: bytes, now: float) -> bool:
    """An error status (429 or more) answered an attempt of ``req``: True when another attempt
    replaces it (nothing of it is relayed; ``req.retry_state.delay`` says when). A status that is
    not a provider fault leaves the deployment healthy."""
    cls = classify(status)
    if cls is None:
        policy, deployment = _attempt(req)
        policy.success(deployment, now)
        return False
    delay = on_failure(app, req, cls, parse_retry_after(head, low), now)
    if delay < 0:
        return False
    assert req.retry_state is not None  # made by on_failure
    req.retry_state.delay = delay
    return True


def _attempt(req: Request) -> tuple[Policy, Deployment]:
    """The Policy and the Deployment of ``req``'s attempt: a request has a deployment (and its
    attempts come here) only when its model has a policy (App._build_routes)."""
    policy, deployment = req.route.policy, req.deployment
    assert policy is not None and deployment is not None
    return policy, deployment


def _retarget(req: Request, target: Route) -> bool:
    # imported at first use, on a failure: the compiled rewrite, imported as this module loads,
    # would load the compiled modules it cimports, dispatch among them, which imports this
    # module's names before they exist
    from sluice.rewrite import retarget
    return retarget(req, target)


def on_failure(app: App, req: Request, cls: str, retry_after: float, now: float) -> float:
    """An attempt of ``req`` failed with ``cls`` before anything reached the client. Returns the
    seconds to wait before the next attempt (req.deployment, req.route and req.payload are set
    for it), or -1 when the failure is to be relayed."""
    policy, deployment = _attempt(req)
    if cls != "429":  # a 429 is the provider's rate limit, not a sign of a failing deployment
        policy.failure(deployment, now, app.metrics)
    state = req.retry_state
    if state is None:
        state = req.retry_state = RetryState(policy)
    if retry_after >= 0:
        if cls == "429":
            deployment.asked_to_wait(retry_after, now)
        if state.retry_after < 0 or retry_after < state.retry_after:
            state.retry_after = retry_after
    unsafe = cls in UNSAFE
    r = policy.retry
    if r is not None and (not r.max_attempts or state.model_attempts < r.max_attempts) and \
            cls in policy.retry_on and (not unsafe or r.retry_after_send):
        delay = _retry(app, req, policy, r, state, cls, retry_after, now)
        if delay != -2.0:
            return delay
    primary = state.primary
    if primary.fallbacks and cls in primary.fallback_on and (not unsafe or primary.retry_after_send):
        return _fall_back(app, req, state, now)
    return -1.0


def _retry(app: App, req: Request, policy: Policy, r: RetryConfig, state: RetryState, cls: str,
           retry_after: float, now: float) -> float:
    """Another attempt on the same model (``policy``'s, retried as ``r`` says): the seconds to
    wait before it, -1 when the failure is to be relayed, -2 when no retry was made and a
    fallback may still be tried."""
    m = app.metrics
    delay = -1.0
    doublings = state.model_attempts - 1 if state.model_attempts <= MAX_DOUBLINGS else MAX_DOUBLINGS
    if retry_after >= 0 and r.honour_retry_after:
        if retry_after <= r.retry_after_max_s:
            # never before the provider asked; jittered, so the requests it asked together
            # do not all come back in the same instant
            delay = retry_after * (1.0 + RETRY_AFTER_JITTER * random.random())
        # else longer than we wait: not retried here (a fallback may take it)
    else:  # exponential backoff, full jitter
        cap = r.backoff_base_s * (1 << doublings)
        delay = random.random() * (cap if cap < r.backoff_max_s else r.backoff_max_s)
    if cls == "overloaded":  # never at once on the same deployment: full jitter in [min, ceiling]
        lo = r.overload_backoff_min_s
        cap = lo * (2 << doublings)
        if cap > r.overload_backoff_max_s:
            cap = r.overload_backoff_max_s
        backoff = lo + random.random() * (cap - lo)
        if delay < backoff and (delay >= 0 or retry_after < 0 or not r.honour_retry_after):
            delay = backoff
    if delay < 0:
        return -2.0
    failed = req.deployment
    following = policy.pick(now, failed)
    if following is failed and cls == "429" and _can_fall_back(req, state, cls):
        return -2.0  # rate limited and no other deployment: a fallback at once, not a wait
    if following is not failed and state.model_attempts < len(policy.deployments):
        # another deployment, while some have not been tried: the failed one's backoff is not its
        # own; once each had its attempt, the backoff holds whichever comes next, so deployments
        # failing fast cannot take a request round and round, spending the retry budget
        delay = 0.0
    wait = following.wait_left(now)  # a Retry-After it gave any worker is honoured
    if wait > delay:
        if r.honour_retry_after and wait > r.retry_after_max_s:
            return -2.0  # longer than we wait: not retried here (a fallback may take it)
        delay = wait * (1.0 + RETRY_AFTER_JITTER * random.random())
    if _past_deadline(req, r, delay, now):
        return -2.0  # the deadline would pass first: the failure now (or a fallback)
    if not _budget(app, now):
        m.retry_budget_exhausted += 1
        return -1.0 if app.retry_budget.fallbacks else -2.0
    if following is not failed and not _retarget(req, following.target):
        return -2.0
    _take(app, now)
    if delay > 0:
        state.waiting = True
        m.retries_in_flight += 1
    req.deployment = following
    state.model_attempts += 1
    state.attempts += 1
    m.retries[cls] = m.retries.get(cls, 0) + 1
    return delay


def _can_fall_back(req: Request, state: RetryState, cls: str) -> bool:
    primary = state.primary
    return cls in primary.fallback_on and any(
        _key_may_use(req, to) for to in primary.fallbacks[state.fallbacks_tried:])


def _key_may_use(req: Request, to: Route) -> bool:
    """The request's key may call fallback ``to``: a fallback is no way around its model list."""
    key = req.key
    return key is None or to.name in key.allowed


def _fall_back(app: App, req: Request, state: RetryState, now: float) -> float:
    """The next fallback model of the primary that can take ``req``: 0 (no wait), or -1."""
    m = app.metrics
    primary = state.primary
    if app.retry_budget.fallbacks and not _budget(app, now):
        m.retry_budget_exhausted += 1
        return -1.0
    while state.fallbacks_tried < len(primary.fallbacks):
        to = primary.fallbacks[state.fallbacks_tried]
        state.fallbacks_tried += 1
        if not _key_may_use(req, to):
            continue
        assert to.policy is not None  # a fallback model has one (App._build_routes)
        deployment = to.policy.pick(now)
        if _retarget(req, deployment.target):
            if app.retry_budget.fallbacks:
                _take(app, now)
            k = (req.route.name, to.name)
            m.fallbacks[k] = m.fallbacks.get(k, 0) + 1
            req.route = to
            req.deployment = deployment
            state.fallback = to.name
            state.model_attempts = 1
            state.attempts += 1
            return 0.0
    return -1.0
