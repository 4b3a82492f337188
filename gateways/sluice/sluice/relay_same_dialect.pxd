# Cython declarations for relay_same_dialect.py (see build.py).
cimport cython

from sluice.client cimport ClientConn
from sluice.http cimport content_length_at, without_connection_options
from sluice.request cimport Request
from sluice.upstream cimport UpstreamConn

cdef tuple _FRAMING, _BLANK_LINES
cdef object _USAGE_OBJECT, _NO_CHOICES
cdef bytes STREAM_FAILED_ANTHROPIC, STREAM_FAILED_OPENAI


@cython.locals(us=double, kept=bytes, named=bytes)
cpdef relay_head(UpstreamConn u, Request req, bytes head, bytes low, Py_ssize_t length_at,
                 bytes rest, bint reframe, double now)
cpdef bytes _without_framing(bytes head)
@cython.locals(length_at=Py_ssize_t, bodiless=bint)
cpdef write_head(UpstreamConn u, ClientConn client, bint past_end)
cpdef bytes reframed(UpstreamConn u, bint done)
@cython.locals(parts=list, end=Py_ssize_t, tail=bytes, look=bytes, held=bytes)
cpdef bytes _whole_events(UpstreamConn u, bytes body, bint done)
@cython.locals(sep=bytes, start=Py_ssize_t, last=bytes)
cpdef bint _ends_stream(bytes events) except -1
cpdef bytes stream_failed_event(str dialect)
@cython.locals(held=bytearray, edge=bytes, look=bytes, events=bytes, end=Py_ssize_t, at=Py_ssize_t,
               start=Py_ssize_t, stop=Py_ssize_t)
cpdef bytes _without_usage_chunk(UpstreamConn u, bytes body, bint done)
@cython.locals(stop=Py_ssize_t, i=Py_ssize_t, sep=bytes)
cpdef Py_ssize_t _event_stop(bytes data, Py_ssize_t at) except -1
