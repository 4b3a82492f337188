# Cython declarations for usage.py (see build.py).
cimport cython

cpdef tuple believed(prompt, completion)


@cython.final
cdef class UsageScan:
    cdef public dict counts
    cdef public Py_ssize_t frames
    cdef public bytes tail
    cdef public bint event_stream

    @cython.locals(i=Py_ssize_t)
    cpdef feed(self, bytes data)
    cpdef tuple tokens(self, Py_ssize_t body_len, Py_ssize_t bytes_read)
