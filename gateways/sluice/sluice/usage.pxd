# Cython declarations for usage.py (see build.py).
cimport cython

cdef tuple _COMPLETION
cdef bytes _DELTA
cdef Py_ssize_t UNARY_TAIL
cdef object _USAGE_KEY, _STRING_OR_BRACKET, _USUAL_END


cpdef tuple weighed(tuple weights, prompt, completion, cache_write, cache_read)
cpdef tuple openai_usage(tuple weights, prompt, completion, cached)
@cython.locals(i=Py_ssize_t, depth=Py_ssize_t, end=Py_ssize_t, c=int)
cpdef object top_level_usage(bytes tail)


@cython.final
cdef class UsageScan:
    cdef public dict counts
    cdef public bytes tail, edge
    cdef public tuple weights
    cdef public bint final, provisional, unary

    @cython.locals(j=Py_ssize_t, after=Py_ssize_t, tail=bytes)
    cpdef feed(self, bytes data)
    @cython.locals(i=Py_ssize_t, n=Py_ssize_t, k=Py_ssize_t, found=list, counts=dict)
    cpdef _scan(self, bytes data)
    @cython.locals(tail=bytes, counts=dict)
    cpdef end(self)
    cpdef tuple tokens(self)
