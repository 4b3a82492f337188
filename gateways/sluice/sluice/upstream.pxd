# Cython declarations for upstream.py (see build.py): typed connection state, C-level calls
# between the pool, the upstream protocol and the client protocol.
cimport cython

from sluice.metrics cimport Histogram
from sluice.server cimport App, ClientConn, Request

cdef int RAW, REFRAME, BUFFER, TSTREAM, DISCARD
cdef Py_ssize_t MAX_HEAD, MAX_BUFFERED_BODY
cdef double STALE_RETRY_S

cpdef Py_ssize_t _clen(bytes head, Py_ssize_t i) except? -1
cpdef bint _closes(bytes low, Py_ssize_t i)


@cython.final
cdef class Provider:
    cdef public object cfg
    cdef public str name, dialect, host
    cdef public object drop_re, port, ssl
    cdef public bytes head_prefix, anthropic_version
    cdef public double connect_timeout, response_timeout, stream_idle_timeout, pool_idle_timeout
    cdef public Pool pool
    cdef public Histogram latency


@cython.final
cdef class Pool:
    cdef public Provider provider
    cdef public App app
    cdef public object loop
    cdef public Py_ssize_t max, connecting
    cdef public list idle, waiters
    cdef public set busy, tasks

    cpdef UpstreamConn acquire(self)
    cpdef wait(self, ClientConn client)
    cpdef forget(self, ClientConn client)
    cpdef connect(self)
    cpdef give(self, UpstreamConn conn)
    cpdef release(self, UpstreamConn conn)
    cpdef discard(self, UpstreamConn conn)


@cython.final
cdef class UpstreamConn:
    cdef public Pool pool
    cdef public Provider provider
    cdef public App app
    cdef public object transport, parser
    cdef public bint alive, paused, reused
    cdef public double idle_since
    cdef public ClientConn client
    cdef public Request req
    cdef public int mode, status
    cdef public bint head_done
    cdef public list open, bodyp, begins, parts
    cdef public object on_message_complete, on_body, on_message_begin
    cdef public bytes cur, pre, tail, retry_after
    cdef public Py_ssize_t hoff, nbytes, parts_len, frames, left
    cdef public double t_rx, t_sent, t_head, last_rx
    cdef public bint stream, chunked_out, close_delimited, scan, client_head_sent, broken
    cdef public object sse, translator
    cdef public dict usage
    cdef public tuple hout

    cpdef close(self)
    cpdef abort(self)
    cpdef start(self, ClientConn client, Request req, bytes payload)
    cpdef check_timeout(self, double now)
    @cython.locals(left=Py_ssize_t, after=bint)
    cpdef data_received(self, bytes data)
    cpdef bint _write_head(self, ClientConn client, bint after) except -1
    @cython.locals(idx=Py_ssize_t, cl=Py_ssize_t, connection=Py_ssize_t, keep=bint, now=double, us=double)
    cpdef on_headers_complete(self)
    cpdef bint _attempt_failed(self, Request req, int status, bytes head, bytes low) except -1
    cpdef _bodies(self)
    @cython.locals(i=Py_ssize_t)
    cpdef _scan(self, bytes data)
    cpdef relayed_usage(self)
    cpdef _raw_usage(self, Request req)
    cpdef _finish(self)
    cpdef _lost_during_exchange(self)
    cpdef _fail(self, int status, message, kind=*)
    cpdef _fail_midstream(self)
