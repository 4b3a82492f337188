# Cython declarations for http.py (see build.py).
cimport cython

cpdef bytes status_line(int code)
cpdef bytes error_body(str dialect, int status, message, code=*)
cpdef bytes response(int status, bytes body, bytes content_type=*, bytes extra=*, bint close=*)
cpdef bytes chunk(bytes data)
@cython.locals(names=set, end=Py_ssize_t)
cpdef bytes without_connection_options(bytes head, bytes low, Py_ssize_t i)
cpdef Py_ssize_t content_length_at(bytes head, Py_ssize_t i) except? -1
cpdef bint says_close(bytes low, Py_ssize_t i)
cpdef bint chunked_last(bytes low, Py_ssize_t i)
