# Cython declarations for framing.py (see build.py): a client's head and chunked body measured
# before they are parsed.
cimport cython

from sluice.client cimport ClientConn
from sluice.request cimport HeaderDigest, Request

cdef object HEX_DIGITS
cdef Py_ssize_t MAX_SIZE_DIGITS, MAX_CHUNKS


@cython.locals(end=Py_ssize_t)
cpdef Py_ssize_t part_end(ClientConn conn, bytes data, Py_ssize_t pos) except? -1
@cython.locals(size=Py_ssize_t)
cpdef bint count_head_bytes(ClientConn conn, bytes data, Py_ssize_t pos, Py_ssize_t end) except -1
@cython.locals(hosts=Py_ssize_t, head=bytes, line=bytes)
cpdef bint host_ok(ClientConn conn, bytes data, Py_ssize_t pos, Py_ssize_t end) except -1
@cython.locals(line=Py_ssize_t)
cpdef head_too_large(ClientConn conn, bytes data, Py_ssize_t pos)
cpdef bint refuse_unknown_coding(ClientConn conn, HeaderDigest digest) except -1


@cython.final
cdef class ChunkedFraming:
    cdef public Py_ssize_t data_left, trailer_bytes, trailer_fields, chunks
    cdef public bytes size_digits
    cdef public bint on_digits, in_trailers

    @cython.locals(i=Py_ssize_t, lf=Py_ssize_t, stop=Py_ssize_t, digits_end=Py_ssize_t,
                   step=Py_ssize_t, digits=bytes)
    cpdef Py_ssize_t trailer_share(self, bytes data, Py_ssize_t pos, Py_ssize_t end) except -1


@cython.locals(f=ChunkedFraming, n=Py_ssize_t)
cpdef bint count_trailer_bytes(ClientConn conn, bytes data, Py_ssize_t pos, Py_ssize_t end) except -1
@cython.locals(f=ChunkedFraming)
cpdef bint drop_trailer_fields(ClientConn conn, Request r) except -1
