# Cython declarations for usage.py (see build.py).
cimport cython

cdef tuple _COMPLETION
cdef bytes _DELTA


cpdef tuple weighed(tuple weights, prompt, completion, cache_write, cache_read)
cpdef tuple openai_usage(tuple weights, prompt, completion, cached)


@cython.final
cdef class UsageScan:
    cdef public dict counts
    cdef public bytes tail, edge
    cdef public tuple weights
    cdef public bint final, provisional

    @cython.locals(j=Py_ssize_t, after=Py_ssize_t)
    cpdef feed(self, bytes data)
    @cython.locals(i=Py_ssize_t, n=Py_ssize_t, k=Py_ssize_t, found=list, counts=dict)
    cpdef _scan(self, bytes data)
    cpdef tuple tokens(self)
