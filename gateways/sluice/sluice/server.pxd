# Cython declarations for server.py (see build.py): typed connection and request state, C-level
# calls between the client protocol, routing and the upstream side.
cimport cython

from sluice.keys cimport KeyRecord, KeyStore
from sluice.metrics cimport Metrics
from sluice.upstream cimport Pool, Provider, UpstreamConn

cdef int P_QUEUE, P_UPSTREAM, P_BAD, P_WRITE, P_FINAL, P_BURST
cdef double TEST_DELAY_S, TEST_CPU_BURN_S


@cython.final
cdef class Request:
    cdef public double t0, pre, t_resume, overhead
    cdef public bytes method, url, fwd, body, payload
    cdef public object token, pieces, reserved, client_model
    cdef public bint has_av, http11, keep_alive, upgrade, stream, include_usage, retried
    cdef public Py_ssize_t clen, left, blen
    cdef public int translate
    cdef public KeyRecord key
    cdef public Route route
    cdef public str model_label, dialect
    cdef public object dep, rs


@cython.final
cdef class Route:
    cdef public str name, upstream
    cdef public object model_cfg, max_output
    cdef public Provider provider
    cdef public bytes upstream_b
    cdef public object resil


@cython.final
cdef class HeaderPolicy:
    cdef public frozenset names
    cdef public tuple prefixes

    cpdef bint allows(self, bytes low)


@cython.final
cdef class ClientConn:
    cdef public App app
    cdef public object transport, parser, queue, peer
    cdef public Request cur, req, last_req
    cdef public bint busy, closed, eof, in_next, bad, final, feeding
    cdef public UpstreamConn up
    cdef public Pool waiting
    cdef public double wait_since, t_rx, last, t_begin
    cdef public int rpause, burst
    cdef public object on_header, on_url, on_body, on_message_begin
    cdef public dict hdrs, hprev
    cdef public tuple hdone, known
    cdef public list urlp, bodyp, between
    cdef public Py_ssize_t n_complete, hbytes
    cdef public bytes backlog, tail

    cpdef connection_made(self, transport)
    cpdef connection_lost(self, exc)
    cpdef _pause(self, int bit)
    cpdef _resume(self, int bit)
    cpdef pause_reading_for_upstream(self)
    cpdef resume_reading_for_upstream(self)
    cpdef write(self, data)
    cpdef writelines(self, parts)
    cpdef close(self)
    cpdef close_after_response(self)
    @cython.locals(t=double, at_start=bint, n_complete=Py_ssize_t)
    cpdef data_received(self, bytes data)
    @cython.locals(n=Py_ssize_t, pos=Py_ssize_t, end=Py_ssize_t, size=Py_ssize_t, r=Request)
    cpdef _parse(self, bytes data)
    cpdef _body_progress(self, Request r)
    @cython.locals(end=Py_ssize_t, i=Py_ssize_t, v=Py_ssize_t, j=Py_ssize_t)
    cpdef _learn_head(self, bytes data)
    @cython.locals(v=Py_ssize_t, j=Py_ssize_t, n_suffix=Py_ssize_t, start=Py_ssize_t, clen=Py_ssize_t,
                   prefix=bytes, suffix=bytes)
    cpdef bint _known_request(self, bytes data, double t) except -1
    cpdef _bad_request(self, int status, message, Request r=*)
    cpdef on_headers_complete(self)
    cpdef on_message_complete(self)
    cpdef _next(self)
    cpdef respond(self, Request r, int status, bytes body, bytes extra=*, bytes content_type=*, overhead_us=*)
    cpdef done(self, bint keep_alive)
    cpdef exchange_done(self, Request req, int status, prompt, completion)
    cpdef upstream_failed(self, int status, message, kind=*)
    cpdef resend(self, Request req)
    cpdef _resend(self, Request req)
    cpdef abort_response(self, Request req, int status)
    cpdef on_upstream(self, UpstreamConn conn)
    cpdef retry_upstream(self, Request req)


@cython.final
cdef class App:
    cdef public object cfg, loop, shared, metrics_token, server, children, parent_pid, access
    cdef public object response_filter
    cdef public Py_ssize_t worker, n_workers
    cdef public Py_ssize_t max_body, max_pipelined, max_url, max_head, max_headers, max_clients
    cdef public double header_timeout, body_timeout, idle_timeout, access_flush_s, stop_deadline
    cdef public double _last_slow, _last_flush
    cdef public HeaderPolicy forward_policy
    cdef public bint validate_json, overhead_header, require_auth, metrics_on, debug_on, stopping
    cdef public Metrics metrics
    cdef public set clients
    cdef public dict providers, routes
    cdef public KeyStore keys
    cdef public bytes models_openai, models_anthropic, health
    cdef public long long _snap_changes
    cdef public object retry_budget
    cdef public list policies

    cpdef handle(self, ClientConn conn, Request r)
    cpdef _reject(self, ClientConn conn, Request r, int status, message, bytes extra=*)
    @cython.locals(tgt=Route)
    cpdef chat(self, ClientConn conn, Request r)
    cpdef bytes _payload(self, Request r, Provider provider, bytes body)
    cpdef bint retarget(self, Request r, Route tgt) except -1
    cpdef _send_upstream(self, ClientConn conn, Request r, Pool pool)
    cpdef _patch_model(self, bytes body, obj, model, span, Route route)
    cpdef request_finished(self, ClientConn conn, Request req, int status, prompt, completion)
