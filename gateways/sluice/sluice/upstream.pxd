# Cython declarations for upstream.py (see build.py): typed exchange state, C-level calls
# between the pool, the upstream protocol, the relay modules, dispatch and the client protocol.
cimport cython

from sluice cimport dispatch, relay_same_dialect, relay_translated
from sluice.client cimport ClientConn
from sluice.http cimport chunked_last, content_length_at, says_close
from sluice.pool cimport Pool, Provider
from sluice.request cimport Request
from sluice.server cimport App
from sluice.usage cimport UsageScan

cdef int RAW, REFRAME, TRANSLATE_BUFFERED, TRANSLATE_STREAM, DISCARD, PROVIDER_ERROR
cdef int SAME_DIALECT
cdef Py_ssize_t MAX_HEAD


@cython.final
cdef class UpstreamConn:
    cdef public Pool pool
    cdef public Provider provider
    cdef public App app
    cdef public object transport, parser
    cdef public bint alive, paused
    cdef public double idle_since
    cdef public ClientConn client
    cdef public Request req
    cdef public int mode, status
    cdef public bint head_done
    cdef public list response_open, body_parts, messages_begun, buffered
    cdef public object on_message_complete, on_body, on_message_begin
    cdef public bytes this_read, head_so_far, retry_after_line
    cdef public Py_ssize_t head_start, bytes_read, buffered_bytes, body_left, connection_at
    cdef public Py_ssize_t error_body_bytes
    cdef public double t_rx, t_sent, t_head, last_rx
    cdef public bint event_stream, chunked_to_client, close_delimited, client_head_sent, no_reuse
    cdef public bint at_event_end, strip_usage
    cdef public bytes last_events
    cdef public bytearray held
    cdef public list held_parts
    cdef public Py_ssize_t held_size
    cdef public object sse_parser, stream_translator
    cdef public UsageScan usage_scan
    cdef public tuple pending_head

    cpdef close(self)
    cpdef abort(self)
    cpdef start(self, ClientConn client, Request req, bytes payload)
    cpdef check_timeout(self, double now)
    cpdef data_received(self, bytes data)
    @cython.locals(left=Py_ssize_t, mode=int, client=ClientConn)
    cpdef _body_read(self, bytes data)
    @cython.locals(past_end=bint, client=ClientConn)
    cpdef _head_read(self, bytes data)
    cpdef _keep_head_part(self, bytes data)
    @cython.locals(end=Py_ssize_t, length_at=Py_ssize_t, body_here=Py_ssize_t, now=double,
                   reframe=bint, status=int)
    cpdef on_headers_complete(self)
    @cython.locals(length_at=Py_ssize_t, connection=Py_ssize_t, te=Py_ssize_t, framed=bint)
    cpdef Py_ssize_t _read_framing(self, bytes head, bytes low, int status) except? -1
    cpdef bint _relay_bodies(self) except -1
    cpdef _bodies(self)
    cpdef relayed_usage(self)
    cpdef _finish(self)
    cpdef _return_connection(self)
    cpdef release_buffered(self)
    cpdef _abandon(self)
    cpdef _lost_during_exchange(self)
    cpdef fail(self, int status, message, kind=*)
    cpdef fail_midstream(self)
