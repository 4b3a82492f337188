# Cython declarations for relay_same_dialect.py (see build.py).
cimport cython

from sluice.client cimport ClientConn
from sluice.http cimport content_length_at, without_connection_options
from sluice.request cimport Request
from sluice.upstream cimport UpstreamConn

cdef tuple _FRAMING, _BLANK_LINES
cdef object _USAGE_OBJECT, _NO_CHOICES


@cython.locals(us=double, kept=bytes, named=bytes)
cpdef relay_head(UpstreamConn u, Request req, bytes head, bytes low, Py_ssize_t length_at,
                 bytes rest, bint reframe, double now)
cpdef bytes _without_framing(bytes head)
@cython.locals(length_at=Py_ssize_t, bodiless=bint)
cpdef write_head(UpstreamConn u, ClientConn client, bint past_end)
cpdef bytes reframed(UpstreamConn u, bint done)
@cython.locals(held=bytearray, edge=bytes, look=bytes, events=bytes, end=Py_ssize_t, at=Py_ssize_t,
               start=Py_ssize_t, stop=Py_ssize_t)
cpdef bytes _without_usage_chunk(UpstreamConn u, bytes body, bint done)
@cython.locals(stop=Py_ssize_t, i=Py_ssize_t, sep=bytes)
cpdef Py_ssize_t _event_stop(bytes data, Py_ssize_t at) except -1
