# Cython declarations for server.py (see build.py): the typed per-worker App, C-level calls from
# the client protocol (handle), admission and dispatch (request_finished).
cimport cython

from sluice cimport admission, dispatch
from sluice.client cimport ClientConn
from sluice.http cimport error_body
from sluice.keys cimport KeyRecord, KeyStore
from sluice.metrics cimport Metrics
from sluice.request cimport HeaderPolicy, Request


@cython.final
cdef class App:
    cdef public object cfg, loop, shared, metrics_token, server, parent_pid, access_log, outage
    cdef public object response_filter
    cdef public Py_ssize_t worker, n_workers
    cdef public Py_ssize_t max_body, max_pipelined, max_url, max_head, max_headers, max_clients
    cdef public Py_ssize_t max_queued, max_held_body, body_bytes_held
    cdef public double header_timeout, body_timeout, idle_timeout, send_timeout, access_flush_s
    cdef public double stop_deadline
    cdef public Py_ssize_t max_sse_frame
    cdef public object deadlines
    cdef public double _last_slow_tick, _last_flush
    cdef public HeaderPolicy forward_policy
    cdef public bint validate_json, overhead_header, require_auth, metrics_on, debug_on, stopping
    cdef public bint metrics_per_key
    cdef public Metrics metrics
    cdef public set clients
    cdef public dict providers, routes
    cdef public KeyStore keys
    cdef public bytes health, metrics_text
    cdef public tuple models_all, token_weights
    cdef public list models_by_key
    cdef public double metrics_at
    cdef public long long metrics_changes
    cdef public Py_ssize_t accepting, refusals_lingering
    cdef public long long _snapshot_changes
    cdef public object retry_budget
    cdef public dict part_tokens
    cdef public list policies

    cpdef handle(self, ClientConn conn, Request r)
    @cython.locals(key=KeyRecord)
    cpdef request_finished(self, ClientConn conn, Request req, int status, prompt, completion)
    cpdef _log_access(self, ClientConn conn, Request req, int status, KeyRecord key, retry_state)
