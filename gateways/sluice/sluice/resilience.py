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
publishes the ones it is given (shared.py), and no worker retries a 429 on that deployment before
the longest still running has elapsed.
"""
from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable
from math import log
from time import perf_counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from asyncio import TimerHandle

    from sluice.client import ClientConn
    from sluice.config import ModelConfig, OutageConfig, RetryBudgetConfig, RetryConfig
    from sluice.metrics import Metrics
    from sluice.request import Request, Route
    from sluice.server import App

# failure classes (config.RETRY_CLASSES); "timeout" and "reset" may have been acted on
UNSAFE = ("timeout", "reset")
# a Retry-After wait is the provider's time plus up to this share of it
RETRY_AFTER_JITTER = 0.2
# a backoff's ceiling doubles with each attempt up to this many times (then its maximum holds)
MAX_DOUBLINGS = 30
# on_failure's answer for a request held through an outage (hold() takes it)
HELD = -3.0
# a probe that neither failed to connect nor was answered this long after its connect timeout
# has connected: the provider is taking connections again
PROBE_GRACE_S = 0.5
# held requests are released in ticks this far apart (the rate decides how many a tick)
RELEASE_TICK_S = 0.01


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
                 "retry_after_at", "retry_after_n", "retry_after_own", "down", "probe_sent",
                 "probe_at", "probe_gap")

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
        # refusing connections: no request goes to it before probe_at (see hold); when a held
        # request sent as its probe left (0: none), and the gap since it was last heard from
        self.down = False
        self.probe_sent = 0.0
        self.probe_at = 0.0
        self.probe_gap = 0.0
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
        # an outage (every deployment refusing connections or ejected) holds its requests when
        # failed connections are retried (see hold)
        self.holds = r is not None and "connect" in self.retry_on
        self.held: deque[tuple[ClientConn, Request]] = deque()
        self.timer: TimerHandle | None = None
        self.timer_at = 0.0
        self.release_from = 0.0     # when the held requests began to be released (0: not)
        self.released = 0

    def outage(self, now: float) -> bool:
        """Every deployment refuses connections or is ejected."""
        for d in self.deployments:
            if not d.down and d.ejected_until <= now:
                return False
        return True

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
            if d.down:
                if d.probe_sent or now < d.probe_at:
                    continue
                # its gap is over: it may take requests again (refusing, it is down for twice as
                # long; a model all of whose deployments are down probes with held requests)
                d.down = False
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
                 "fallback", "retry_after", "held_at", "held_s", "probing", "unsent")

    def __init__(self, primary: Policy) -> None:
        self.primary = primary      # the Policy of the model the client asked for
        self.model_attempts = 1     # attempts on the current model
        self.attempts = 1           # attempts in all
        self.fallbacks_tried = 0    # fallbacks of the primary used so far
        self.waiting = False        # counted in metrics.retries_in_flight (waiting to be sent)
        self.delay = 0.0            # before the next attempt
        self.fallback: str | None = None        # the fallback model name now answering
        self.retry_after = -1.0     # the shortest Retry-After its attempts were given (-1: none)
        self.held_at = 0.0          # when it was last held through an outage (0: not held now)
        self.held_s = 0.0           # seconds held in all (the access log's held_ms)
        self.probing = False        # its attempt now is its deployment's probe
        self.unsent = False         # held before its first attempt: none was made yet


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
    if deployment.probe_gap:  # down since it was last heard from
        _up(app, policy, deployment)
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
        if deployment.probe_gap:
            _up(app, policy, deployment)
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
    probe = state.probing
    state.probing = False
    if cls == "connect":
        _refused(app, deployment, now)
        if policy.holds and policy.outage(now) and not _can_fall_back(req, state, cls) and \
                _may_hold(app, req, policy, now):
            state.probing = probe  # a failed probe goes back to the head of the held requests
            return HELD
    elif deployment.down or deployment.probe_gap:
        _up(app, policy, deployment)  # it took the connection
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
    # a rate limit's Retry-After, given to any worker, is honoured by every retry of a 429
    wait = following.wait_left(now) if cls == "429" else 0.0
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


# ------------------------------------------------------------------ outages: hold, probe, release
# While every deployment of a model refuses connections (or is ejected), its requests wait here
# rather than each retrying on its own: one probe at a time per deployment, the oldest held
# request itself (never a synthetic, billed one), with a doubling gap; once a probe is answered
# the held requests go, paced (the rate doubling every release_doubling_ms), so that a provider
# back from an outage is not met by all of them at once. A held request waits at most until its
# retry deadline, and a worker holds at most [outage].max_held_requests.

class Outage:
    """A worker's held requests, over its models."""

    def __init__(self, cfg: OutageConfig) -> None:
        self.cfg = cfg
        self.held = 0


def _refused(app: App, d: Deployment, now: float) -> None:
    """``d`` refused a connection: down until its gap is over (then probed); a refusal after the
    gap (a probe's) doubles it, one of an attempt made before leaves it."""
    cfg = app.outage.cfg
    if not d.probe_gap:  # down since it was last heard from
        d.probe_gap = cfg.probe_backoff_min_s
    elif now >= d.probe_at:
        gap = d.probe_gap * 2
        d.probe_gap = gap if gap < cfg.probe_backoff_max_s else cfg.probe_backoff_max_s
    else:
        d.down = True
        return
    d.probe_sent = 0.0
    d.probe_at = now + d.probe_gap
    d.down = True


def _up(app: App, policy: Policy, d: Deployment) -> None:
    """``d`` answered (or took a connection): no longer down; held requests are released."""
    d.down = False
    d.probe_sent = 0.0
    d.probe_gap = 0.0
    if policy.held:
        _schedule(app, policy, 0.0)


def _deadline(req: Request, policy: Policy) -> float:
    r = policy.retry
    assert r is not None  # a policy that holds retries
    return req.t0 + r.deadline_s


def _may_hold(app: App, req: Request, policy: Policy, now: float) -> bool:
    return app.outage.held < app.outage.cfg.max_held_requests and now < _deadline(req, policy)


def hold(app: App, conn: ClientConn, req: Request) -> None:
    """``req`` waits for its model's outage to end (on_failure answered HELD): the oldest
    first, a failed probe back at the head."""
    policy = req.route.policy
    state = req.retry_state
    assert policy is not None and state is not None  # made by on_failure
    _hold(app, policy, conn, req, state, perf_counter())


def hold_first(app: App, conn: ClientConn, req: Request) -> bool:
    """A new request whose deployment was picked while refusing connections: held, before any
    attempt, when its model is in an outage and may hold it (else False: it is sent)."""
    policy = req.route.policy
    assert policy is not None  # it has a deployment
    now = perf_counter()
    if not (policy.holds and policy.outage(now) and _may_hold(app, req, policy, now)):
        return False
    state = req.retry_state = RetryState(policy)
    state.unsent = True
    _hold(app, policy, conn, req, state, now)
    return True


def _hold(app: App, policy: Policy, conn: ClientConn, req: Request, state: RetryState,
          now: float) -> None:
    if state.probing:
        state.probing = False
        policy.held.appendleft((conn, req))
    else:
        policy.held.append((conn, req))
    state.held_at = now
    app.outage.held += 1
    _schedule(app, policy, 0.0)


def _schedule(app: App, policy: Policy, delay: float) -> None:
    """``_tick`` of ``policy`` in ``delay`` seconds, unless one comes sooner."""
    at = perf_counter() + delay
    if policy.timer is not None:
        if policy.timer_at <= at:
            return
        policy.timer.cancel()
    policy.timer_at = at
    policy.timer = app.loop.call_later(delay, _tick, app, policy)


def _unheld(app: App, state: RetryState, now: float) -> None:
    app.outage.held -= 1
    state.held_s += now - state.held_at
    state.held_at = 0.0


def _tick(app: App, policy: Policy) -> None:
    """Held requests past their deadline are answered; in an outage, due probes go; after it,
    the held requests are released at the pace allowed so far."""
    policy.timer = None
    now = perf_counter()
    held = policy.held
    while held:  # the oldest first: one deadline_s a model, so they expire in order
        conn, req = held[0]
        gone = conn.closed or conn.active is not req
        if not gone and now < _deadline(req, policy):
            break
        held.popleft()
        state = req.retry_state
        assert state is not None  # every held request has one
        _unheld(app, state, now)
        if not gone:
            from sluice.dispatch import give_up
            give_up(conn, req, 503, f"model {policy.name}: its providers refused connections "
                                    "until the request's deadline")
    if not held:
        policy.release_from = 0.0
        return
    cfg = app.outage.cfg
    if policy.outage(now):
        policy.release_from = 0.0
        nxt = _deadline(held[0][1], policy) - now
        for d in policy.deployments:
            if not d.down or not held:
                continue
            if d.probe_sent:
                if now - d.probe_sent > d.provider.connect_timeout + PROBE_GRACE_S:
                    _up(app, policy, d)  # connected, and waiting for its answer
                    return
                continue
            if now >= d.probe_at:
                _send(app, policy, d, now, probe=True)
            elif d.probe_at - now < nxt:
                nxt = d.probe_at - now
        if held:
            _schedule(app, policy, nxt if nxt > 0.001 else 0.001)
        return
    if not policy.release_from:
        policy.release_from = now
        policy.released = 0
    doublings = (now - policy.release_from) / cfg.release_doubling_s
    allowed = 1 + cfg.release_rate_per_s * cfg.release_doubling_s / log(2) * (
        2 ** (doublings if doublings < 60 else 60) - 1)
    while held and policy.released < allowed:
        d = policy.pick(now)
        if d.down:  # refusing again (a released request found out): an outage again
            break
        policy.released += 1
        _send(app, policy, d, now, probe=False)
    if held:
        _schedule(app, policy, RELEASE_TICK_S)


def _send(app: App, policy: Policy, d: Deployment, now: float, probe: bool) -> None:
    """The oldest held request goes to ``d`` (as its probe, or released)."""
    from sluice.dispatch import give_up, resend
    conn, req = policy.held.popleft()
    state = req.retry_state
    assert state is not None  # every held request has one
    _unheld(app, state, now)
    if conn.closed or conn.active is not req:
        return
    if req.deployment is not d and not _retarget(req, d.target):
        give_up(conn, req, 502, f"model {policy.name}: no provider could take the request")
        return
    req.deployment = d
    if probe:
        state.probing = True
        d.probe_sent = now
    if state.unsent:  # its first attempt
        state.unsent = False
    else:
        state.model_attempts += 1
        state.attempts += 1
    state.delay = 0.0
    resend(conn, req)
