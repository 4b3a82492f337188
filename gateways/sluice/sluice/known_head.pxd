# Cython declarations for known_head.py (see build.py).
cimport cython

from sluice.request cimport Request


@cython.final
cdef class KnownHead:
    cdef public bytes prefix, suffix
    cdef public Request head

    @cython.locals(start=Py_ssize_t, content_length=Py_ssize_t, r=Request)
    cpdef Request request(self, bytes data, double t, Py_ssize_t max_body)


@cython.locals(end=Py_ssize_t, i=Py_ssize_t, v=Py_ssize_t, j=Py_ssize_t)
cpdef KnownHead learn(Request r, bytes data, bint expect_continue)
