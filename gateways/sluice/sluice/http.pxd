# Cython declarations for http.py (see build.py).

cpdef bytes status_line(int code)
cpdef bytes error_body(str dialect, int status, message, code=*)
cpdef bytes response(int status, bytes body, bytes content_type=*, bytes extra=*, bint close=*)
