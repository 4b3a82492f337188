# Cython declarations for metrics.py (see build.py): typed counters, C-level method calls.

cdef class Histogram:
    cdef public tuple bounds
    cdef public list counts
    cdef public double sum

    cpdef observe(self, double v)


cdef class Metrics:
    cdef public dict requests
    cdef public long long in_flight
    cdef public Histogram overhead
    cdef public dict upstream_latency
    cdef public Histogram stream_relay
    cdef public dict upstream_errors
    cdef public dict upstream_connects
    cdef public long long client_disconnects
    cdef public long long connections_refused
    cdef public dict tokens
    cdef public long long changes
    cdef public dict retries, fallbacks, ejections
    cdef public long long retry_budget_exhausted, retries_in_flight

    cpdef count_request(self, model, status)
    cpdef upstream_error(self, provider, kind)
    cpdef Histogram latency_hist(self, provider)
