"""The per-worker App: what one worker process serves with (providers, routes, keys, metrics),
the routing of a request by its path, the accounting of every chat request that went towards
a provider, and the housekeeping (the sweeper, the graceful stop).

A chat request is admitted in admission.py and sent in dispatch.py; the client connection is
client.py.
"""
import os
import signal
import sys
import time
from hmac import compare_digest
from time import perf_counter
from typing import TYPE_CHECKING

from orjson import dumps

from sluice import __version__, admission, dispatch, introspection
from sluice.access_log import AccessLog
from sluice.client import ClientConn
from sluice.deadlines import Deadlines, reset, unsent_bytes
from sluice.http import error_body, linger, response, response_filter
from sluice.keys import KeyStore
from sluice.metrics import Metrics
from sluice.pool import Provider
from sluice.request import HeaderPolicy, Route
from sluice.resilience import Outage, Policy, RetryBudget, share_retry_after

if TYPE_CHECKING:
    import asyncio  # noqa: F401 (type comments)
    import socket  # noqa: F401 (type comments)

    from sluice.config import Config  # noqa: F401 (type comments)
    from sluice.keys import KeyRecord  # noqa: F401 (type comments)
    from sluice.request import Request  # noqa: F401 (type comments)
    from sluice.resilience import RetryState  # noqa: F401 (type comments)
    from sluice.shared import Shared  # noqa: F401 (type comments)

TICK = 0.1
# paths answered by Sluice itself, with GET
OWN_PATHS = (b"/health", b"/metrics", b"/v1/models", b"/debug/state")
METRICS_CONTENT_TYPE = b"text/plain; version=0.0.4"
# connections over max_client_connections: answered at once, before any request (OpenAI shape)
REFUSAL = response(503, error_body("openai", 503, "too many client connections"),
                   extra=b"retry-after: 1\r\n", close=True)
MAX_LINGERING_REFUSALS = 32
# an open scrape (no metrics_token) this soon after the last rendering gets it again, whatever
# was counted since: rendering reads /proc and every task, and merges the other workers'
# snapshots, so a flood of scrapes between requests would cost several requests' work each. A
# scraper holding the token is the operator's: it sees what was counted since at once.
METRICS_CACHE_S = 1.0


class App:
    """Everything one worker process serves with."""

    def __init__(self, cfg, loop, shared, worker=0, n_workers=1):
        # type: (Config, asyncio.AbstractEventLoop, Shared, int, int) -> None
        self.cfg = cfg
        self.loop = loop
        self.worker = worker
        self.n_workers = n_workers
        self.shared = shared
        s = cfg.server
        self.max_body = s.max_body_bytes
        self.max_held_body = s.max_held_body_bytes
        self.body_bytes_held = 0  # request bodies held by this worker: arriving, queued, in flight
        self.max_pipelined = s.max_pipelined
        self.max_queued = s.max_queued_bytes_per_connection
        self.max_url = s.max_url_bytes
        self.max_head = s.max_header_bytes
        self.max_headers = s.max_headers
        self.max_clients = s.max_client_connections
        self.header_timeout = s.client_header_timeout_s
        self.body_timeout = s.client_body_timeout_s
        self.metrics_token = s.metrics_token.encode() or None
        self.forward_policy = HeaderPolicy(s.forward_request_headers)
        self.validate_json = s.validate_json
        self.overhead_header = s.overhead_header
        self.require_auth = s.require_auth
        self.metrics_on = s.metrics
        self.debug_on = s.debug_endpoints
        self.idle_timeout = s.client_idle_timeout_s
        self.send_timeout = s.client_send_timeout_s
        self.deadlines = Deadlines(s.client_send_timeout_s)
        self.max_sse_frame = s.max_sse_frame_bytes
        self.metrics_per_key = s.metrics_per_key
        self.metrics = Metrics()
        self.clients = set()  # type: set[ClientConn]
        self.accepting = 0  # accepted in this loop iteration, not in clients yet
        self.refusals_lingering = 0
        self.stopping = False
        self.server = None  # type: asyncio.Server | None
        self.parent_pid = None  # type: int | None  # the supervisor's, with workers = N > 1
        self.access_log = AccessLog(s.access_log) if s.access_log else None
        self.response_filter = response_filter(s.forward_response_headers)
        self.providers = {n: Provider(p, self) for n, p in cfg.providers.items()}
        self.retry_budget = RetryBudget(cfg.retry_budget)
        self.outage = Outage(cfg.outage)
        self.part_tokens = cfg.prompt_estimate.part_tokens
        self.token_weights = cfg.token_weights
        self._build_routes(cfg)
        share_retry_after(self, self.policies)
        self.keys = KeyStore(cfg.keys, shared, worker, n_workers)
        for rec in self.keys.records:  # model names and aliases each key may call
            rec.allowed = frozenset(n for n, r in self.routes.items() if rec.allows(n, r.name))
        self._list_models()
        self.metrics_text = b""
        self.metrics_at = 0.0
        self.metrics_changes = -1
        self.health = dumps({"status": "ok", "version": __version__})
        self._last_slow_tick = 0.0
        self._last_flush = 0.0
        self.access_flush_s = s.access_log_flush_s
        self._snapshot_changes = -1

    def _build_routes(self, cfg):
        # type: (Config) -> None
        """A Route per model name and alias; a resilience Policy for the models that need one."""
        self.routes = {}  # type: dict[str, Route]
        self.policies = []  # type: list[Policy]
        by_model = {}  # type: dict[str, Route]
        fallback_targets = {f for m in cfg.models.values() for f in m.fallbacks}
        for m in cfg.models.values():
            route = Route(m, self.providers[m.provider])
            if m.resilient or m.name in fallback_targets:
                targets = [Route(m, self.providers[d.provider], d.upstream_model) for d in m.deployments]
                route.policy = Policy(m, targets)
                self.policies.append(route.policy)
            by_model[m.name] = route
            for name in [m.name] + m.aliases:
                self.routes[name] = route
        for m in cfg.models.values():
            if m.fallbacks:
                # (a model with fallbacks has a policy)
                by_model[m.name].policy.fallbacks = [by_model[f] for f in m.fallbacks]  # type: ignore[union-attr]

    def _list_models(self):
        # type: () -> None
        """The bodies of GET /v1/models (OpenAI's, Anthropic's): every model and alias, and for
        each key those it may call (the same bytes for a key that may call all)."""
        self.models_all = self._models_bodies(list(self.routes))
        self.models_by_key = [
            self.models_all if rec.all_models
            else self._models_bodies([n for n in self.routes if n in rec.allowed])
            for rec in self.keys.records]

    def _models_bodies(self, names):
        # type: (list[str]) -> tuple[bytes, bytes]
        return (dumps({"object": "list", "data": [
                    {"id": n, "object": "model", "created": 0, "owned_by": self.routes[n].provider.name}
                    for n in names]}),
                dumps({"data": [
                    {"type": "model", "id": n, "display_name": n, "created_at": "1970-01-01T00:00:00Z"}
                    for n in names], "has_more": False,
                    "first_id": names[0] if names else None, "last_id": names[-1] if names else None}))

    # ------------------------------------------------------------ routing
    def handle(self, conn, r):
        # type: (ClientConn, Request) -> None
        conn.active = r
        url = r.url
        q = url.find(b"?")
        path = url if q < 0 else url[:q]
        if path == b"/v1/chat/completions":
            r.dialect = "openai"
            if r.method != b"POST":
                return conn.respond(r, 405, error_body("openai", 405, "use POST"), b"allow: POST\r\n")
            return admission.chat(self, conn, r)
        if path == b"/v1/messages":
            r.dialect = "anthropic"
            if r.method != b"POST":
                return conn.respond(r, 405, error_body("anthropic", 405, "use POST"), b"allow: POST\r\n")
            return admission.chat(self, conn, r)
        dialect = "anthropic" if r.has_anthropic_version else "openai"
        if r.method != b"GET":
            if path in OWN_PATHS:
                return conn.respond(r, 405, error_body(dialect, 405, "use GET"), b"allow: GET\r\n")
            return conn.respond(r, 404, error_body(dialect, 404, f"no route for {path.decode('latin-1')}"))
        if path == b"/health":
            return conn.respond(r, 200, self.health)
        if path == b"/v1/models":
            # as a chat request: a key presented is checked; then what it may call is listed
            key = self.keys.lookup(r.token) if r.token else None
            if key is None and (self.require_auth or r.token):
                return conn.respond(r, 401, error_body(dialect, 401, "missing or invalid API key"))
            bodies = self.models_all if key is None else self.models_by_key[key.index]
            return conn.respond(r, 200, bodies[1] if r.has_anthropic_version else bodies[0])
        if path == b"/metrics" and self.metrics_on:
            if self.metrics_token is not None and not compare_digest(r.token or b"", self.metrics_token):
                return conn.respond(r, 401, error_body(dialect, 401, "/metrics needs its bearer token"))
            now = perf_counter()
            if now - self.metrics_at >= METRICS_CACHE_S or (
                    self.metrics_token is not None and self.metrics.changes != self.metrics_changes):
                self.metrics_text = introspection.render_metrics(self)
                self.metrics_at = now
                self.metrics_changes = self.metrics.changes
            return conn.respond(r, 200, self.metrics_text, b"", METRICS_CONTENT_TYPE)
        if path == b"/debug/state" and self.debug_on:
            return conn.respond(r, 200, dumps(introspection.debug_state(self)))
        return conn.respond(r, 404, error_body(dialect, 404, f"no route for {path.decode('latin-1')}"))

    def internal_error(self, conn, r):
        # type: (ClientConn, Request) -> None
        """A bug met while handling ``r``: a 500 in the client's dialect (or, once a response head
        went out, a closed connection), counted, the reservation and the in-flight count released."""
        import traceback
        sys.stderr.write("sluice: internal error while handling a request:\n")
        traceback.print_exc(file=sys.stderr)
        if conn.active is not r:
            return  # that request was already answered; what failed came after it
        head_sent = conn.upstream is not None and conn.upstream.client_head_sent
        dispatch.cancel(conn)
        r.keep_alive = False
        if r.payload is not None:
            self.request_finished(conn, r, 500, None, None)
        else:
            self.metrics.count_request(r.model_label, 500)
            if r.reserved:
                self.keys.settle(r.key, r.reserved, 0)  # type: ignore[arg-type]  # a reservation is a key's
                r.reserved = 0
        if head_sent or conn.closed:
            conn.active = None
            conn.busy = False
            conn.close()
            return
        try:
            conn.respond(r, 500, error_body(r.dialect, 500, "internal error"))
        except Exception:
            conn.close()

    # ------------------------------------------------------------ accounting
    def request_finished(self, conn, req, status, prompt, completion):
        # type: (ClientConn, Request, int, int | None, int | None) -> None
        """Every chat request that was sent towards a provider ends here exactly once."""
        m = self.metrics
        m.in_flight -= 1
        m.count_request(req.model_label, status)
        retry_state = req.retry_state
        if retry_state is not None and retry_state.waiting:
            retry_state.waiting = False
            m.retries_in_flight -= 1
        if req.overhead_us:
            m.overhead.observe(req.overhead_us / 1e6)
        key = req.key
        if key is not None and key.max_in_flight:
            self.keys.end_request(key)
        if key is not None and req.reserved:
            estimate = req.body_bytes // 4
            if prompt is None:  # the provider reported nothing (believable)
                prompt = estimate
                # a client gone mid-exchange (499), or a request given up on once sent, may
                # have left the provider generating: it pays the whole reservation, the most
                # its request could cost; an error status from the provider costs the prompt
                completion = (max(0, req.reserved - prompt)
                              if status < 400 or status == 499 or req.sent else 0)
            # each earlier attempt given up on once sent costs a whole reservation too
            lost = req.lost_attempts
            # (completion is None only with prompt, and then both were set just above)
            self.keys.settle(key, req.reserved, prompt + completion + lost * req.reserved)  # type: ignore[operator]
            key.prompt_tokens += prompt + lost * estimate
            key.completion_tokens += completion + lost * max(0, req.reserved - estimate)  # type: ignore[operator]  # (as above)
            req.reserved = 0
        elif key is not None and prompt is not None:
            key.prompt_tokens += prompt
            key.completion_tokens += completion  # type: ignore[operator]  # prompt is not None: neither is it
        if self.access_log is not None:
            self._log_access(conn, req, status, key, retry_state)

    def _log_access(self, conn, req, status, key, retry_state):
        # type: (ClientConn, Request, int, KeyRecord | None, RetryState | None) -> None
        now = time.time()
        self.access_log.entries.append((  # type: ignore[union-attr]  # called when there is one
            now, conn.peer, req.method.decode(), req.url.decode("latin-1"), status, req.model_label,
            key.name if key is not None else "-", perf_counter() - req.t0, req.overhead_us, req.stream,
            retry_state.attempts if retry_state is not None else 1,
            retry_state.fallback if retry_state is not None else None,
            retry_state.held_s if retry_state is not None else 0.0))
        if len(self.access_log.entries) >= 4096:  # type: ignore[union-attr]  # (as above)
            self.access_log.flush()  # type: ignore[union-attr]  # (as above)

    # ------------------------------------------------------------ housekeeping
    def start(self, sock):
        # type: (socket.socket) -> None
        self.server = self.loop.run_until_complete(self.loop.create_server(
            # (protocols by their methods, as uvloop takes them)
            self.accept, sock=sock, backlog=self.cfg.server.backlog))  # type: ignore[arg-type]
        self.loop.call_later(TICK, self._tick)

    def accept(self):
        # type: () -> ClientConn | Refusal
        """The protocol of a connection just accepted: a ClientConn, or over max_client_connections
        a Refusal. Those accepted in one loop iteration join ``clients`` only later (connection_made
        runs from the ready queue), so they are counted apart until then."""
        if len(self.clients) + self.accepting >= self.max_clients:
            return Refusal(self)
        if not self.accepting:
            self.loop.call_soon(self._accepted)  # queued before the connection_made calls
        self.accepting += 1
        return ClientConn(self)

    def _accepted(self):
        # type: () -> None
        self.accepting = 0

    def _tick(self):
        # type: () -> None
        now = perf_counter()
        for p in self.providers.values():
            p.pool.sweep(now)
        if now - self._last_slow_tick >= 1.0:
            self._last_slow_tick = now
            self._slow_tick(now)
        if self.access_log is not None and now - self._last_flush >= self.access_flush_s:
            self._last_flush = now
            self.access_log.flush()
        if not self._done_stopping(now):
            self.loop.call_later(TICK, self._tick)

    def _slow_tick(self, now):
        # type: (float) -> None
        self._sweep_clients(now)
        self.deadlines.sweep(self, now)
        self.keys.return_leases()
        introspection.sync_tokens(self)
        if self.n_workers > 1 and self.metrics.changes != self._snapshot_changes:
            self._snapshot_changes = self.metrics.changes
            self.shared.write_snapshot(self.worker, self.metrics.snapshot(introspection.gauges(self)))
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            self.stop()  # the supervisor is gone: do not outlive it

    def _sweep_clients(self, now):
        # type: (float) -> None
        """Client deadlines: a body, a head, an idle keep-alive connection."""
        limit = now - self.idle_timeout
        head_limit = now - self.header_timeout
        body_limit = now - self.body_timeout
        for c in list(self.clients):
            if c.closed or c.bad:
                continue
            r = c.incoming
            if r is not None:  # a body arriving: the whole body has a deadline
                if r.t0 < body_limit and not c.body_held():
                    c.timed_out(f"request body not received within {self.body_timeout:g}s")
                    continue
            elif c.head_bytes and not c.final:  # a head arriving: so has the whole head
                if c.head_began < head_limit:
                    c.timed_out(f"request head not received within {self.header_timeout:g}s")
                    continue
            if not c.busy and not c.queue and c.last_active < limit:
                if r is not None or c.head_bytes:  # a request stopped half-way
                    c.timed_out("request not completed in time")
                elif unsent_bytes(c.transport):  # answers the client never took
                    reset(c)
                else:
                    c.close()

    def stop(self):
        # type: () -> None
        """Graceful stop: no new connections, finish what is in flight (bounded by shutdown_grace_s)."""
        if self.stopping:
            return
        self.stopping = True
        self.stop_deadline = perf_counter() + self.cfg.server.shutdown_grace_s
        if self.server is not None:
            self.server.close()
        for c in list(self.clients):
            if not c.busy and not c.queue:
                c.close()

    def _done_stopping(self, now):
        # type: (float) -> bool
        if not self.stopping:
            return False
        busy = any(c.busy for c in self.clients)
        if busy and now < self.stop_deadline:
            return False
        for c in list(self.clients):
            c.close()
        for p in self.providers.values():
            p.pool.close()
        if self.access_log is not None:
            self.access_log.close()
            self.access_log = None
        if self.n_workers > 1:
            self.shared.clear_snapshot(self.worker)
        self.loop.call_later(0.05, self.loop.stop)
        return True


class Refusal:  # an asyncio protocol (uvloop needs only the methods)
    """A connection accepted over max_client_connections: 503 + Retry-After, then closed, unless
    connections closed in the loop turn it came in made room (then it is served). At most
    MAX_LINGERING_REFUSALS linger (their request read and dropped, so that the answer is not lost
    to a reset); past that, one is closed as soon as its answer is written: a connect flood
    cannot hold more descriptors than that."""
    __slots__ = ("app", "lingering")

    def __init__(self, app):
        # type: (App) -> None
        self.app = app
        self.lingering = False

    def connection_made(self, transport):
        # type: (asyncio.Transport) -> None
        app = self.app
        if len(app.clients) < app.max_clients:
            conn = ClientConn(app)
            transport.set_protocol(conn)  # type: ignore[arg-type]  # a protocol by its methods
            conn.connection_made(transport)
            return
        app.metrics.connections_refused += 1
        transport.write(REFUSAL)
        if app.refusals_lingering < MAX_LINGERING_REFUSALS:
            app.refusals_lingering += 1
            self.lingering = True
            linger(transport, app.loop)
        else:
            transport.close()

    def data_received(self, data):
        # type: (bytes) -> None
        pass

    def eof_received(self):
        # type: () -> None
        return None  # the client is done: the transport closes

    def connection_lost(self, exc):
        # type: (Exception | None) -> None
        if self.lingering:
            self.app.refusals_lingering -= 1


def install_signals(loop, app):
    # type: (asyncio.AbstractEventLoop, App) -> None
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, app.stop)
