# Cython declarations for pool.py (see build.py): typed provider and pool state, C-level calls
# from the client side (acquire, wait) and the upstream side (release, discard).
cimport cython

from sluice cimport dispatch
from sluice.client cimport ClientConn
from sluice.metrics cimport Histogram
from sluice.server cimport App
from sluice.upstream cimport UpstreamConn


@cython.final
cdef class Provider:
    cdef public object cfg
    cdef public str name, dialect, host
    cdef public object response_filter, port, ssl
    cdef public bytes head_prefix, anthropic_version
    cdef public double connect_timeout, response_timeout, stream_idle_timeout, pool_idle_timeout
    cdef public Pool pool
    cdef public Histogram latency


@cython.final
cdef class Pool:
    cdef public Provider provider
    cdef public App app
    cdef public object loop
    cdef public Py_ssize_t max_connections, max_waiters, connecting, parked
    cdef public list idle
    cdef public object waiters
    cdef public set busy, tasks

    @cython.locals(c=UpstreamConn)
    cpdef UpstreamConn acquire(self)
    cpdef wait(self, ClientConn client)
    cpdef forget(self, ClientConn client)
    cpdef connect(self)
    cpdef _connect_failed(self, kind, error)
    cpdef give(self, UpstreamConn conn)
    cpdef release(self, UpstreamConn conn)
    cpdef discard(self, UpstreamConn conn)
