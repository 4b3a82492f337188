# Cython declarations for relay_translated.py (see build.py).
cimport cython

from sluice.client cimport ClientConn
from sluice.http cimport chunk, error_body
from sluice.request cimport Request
from sluice.upstream cimport UpstreamConn
from sluice.usage cimport openai_usage, weighed

cdef int ANTHROPIC_TO_OPENAI
cdef Py_ssize_t MAX_BUFFERED_BODY


@cython.locals(us=double)
cpdef start_stream(UpstreamConn u, ClientConn client, Request req)
@cython.locals(i=Py_ssize_t)
cpdef start_buffered(UpstreamConn u, bytes head, bytes low)
cpdef relay_stream(UpstreamConn u, ClientConn client, bytes body)
cpdef buffer(UpstreamConn u, bytes body)
cpdef tuple stream_usage(UpstreamConn u)
cpdef tuple finish_stream(UpstreamConn u, ClientConn client)
cpdef stream_failed(UpstreamConn u, ClientConn client, Request req)
@cython.locals(overhead=double, status=int)
cpdef tuple write_buffered(UpstreamConn u, ClientConn client, Request req)
cpdef tuple _charged(Request req, tuple weights, prompt, completion, cache_write, cache_read)
cpdef tuple _translated_answer(Request req, bytes body, tuple weights)
