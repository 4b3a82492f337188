# Cython declarations for relay_same_dialect.py (see build.py).
cimport cython

from sluice.client cimport ClientConn
from sluice.http cimport content_length_at, without_connection_options
from sluice.request cimport Request
from sluice.upstream cimport UpstreamConn

cdef tuple _FRAMING


@cython.locals(us=double, kept=bytes, named=bytes)
cpdef relay_head(UpstreamConn u, Request req, bytes head, bytes low, Py_ssize_t length_at,
                 bytes rest, bint reframe, double now)
cpdef bytes _without_framing(bytes head)
@cython.locals(length_at=Py_ssize_t, bodiless=bint)
cpdef write_head(UpstreamConn u, ClientConn client, bint past_end)
cpdef bytes reframed(UpstreamConn u, bint done)
