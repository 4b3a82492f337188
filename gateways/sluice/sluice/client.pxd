# Cython declarations for client.py (see build.py): typed connection state, C-level calls
# between the client protocol, the App, dispatch and the upstream side.
cimport cython

from sluice cimport dispatch, framing, known_head, request
from sluice.http cimport error_body
from sluice.framing cimport ChunkedFraming
from sluice.known_head cimport KnownHead
from sluice.pool cimport Pool
from sluice.request cimport HeaderDigest, Request
from sluice.server cimport App
from sluice.upstream cimport UpstreamConn

cdef int PAUSE_QUEUE_FULL, PAUSE_UPSTREAM, PAUSE_BAD, PAUSE_WRITE, PAUSE_FINAL, PAUSE_BURST
cdef int PAUSE_QUEUED_BYTES
cdef tuple CHAT_PATHS
cdef Py_ssize_t CACHED_HEAD_BYTES


@cython.final
cdef class ClientConn:
    cdef public App app
    cdef public object transport, parser, peer
    cdef public list queue
    cdef public Request incoming, active, last_parsed
    cdef public bint busy, closed, eof, draining_queue, bad, final, feeding
    cdef public UpstreamConn upstream
    cdef public Pool waiting_on
    cdef public double wait_since, t_rx, last_active, head_began
    cdef public int paused_for, burst
    cdef public object on_header, on_url, on_body, on_message_begin
    cdef public dict headers, last_headers
    cdef public HeaderDigest last_digest
    cdef public KnownHead known_head
    cdef public list url_parts, body_parts, between_messages
    cdef public Py_ssize_t completed, head_bytes, queued_bytes, held_bytes
    cdef public bint key_known
    cdef public list head_pieces
    cdef public ChunkedFraming chunked
    cdef public bytes backlog, read_tail

    cpdef connection_made(self, transport)
    cpdef connection_lost(self, exc)
    cpdef _pause(self, int reason)
    cpdef _resume(self, int reason)
    cpdef pause_reading_for_upstream(self)
    cpdef resume_reading_for_upstream(self)
    cpdef write(self, data)
    cpdef writelines(self, parts)
    cpdef close(self)
    cpdef close_after_response(self)
    @cython.locals(t=double, at_start=bint, completed=Py_ssize_t, r=Request, head=KnownHead)
    cpdef data_received(self, bytes data)
    @cython.locals(n=Py_ssize_t, pos=Py_ssize_t, end=Py_ssize_t, r=Request, part=bytes)
    cpdef _parse(self, bytes data)
    @cython.locals(received=Py_ssize_t)
    cpdef _body_progress(self, Request r)
    cpdef _bad_request(self, int status, message, Request r=*)
    @cython.locals(d=HeaderDigest)
    cpdef on_headers_complete(self)
    cpdef on_message_complete(self)
    @cython.locals(app=App)
    cpdef bint hold(self, Request r, Py_ssize_t n) except -1
    cpdef release(self, Request r)
    cpdef _handle(self, Request r)
    cpdef _next(self)
    cpdef respond(self, Request r, int status, bytes body, bytes extra=*, bytes content_type=*, overhead_us=*)
    cpdef done(self, bint keep_alive)
    @cython.locals(queued=Py_ssize_t)
    cpdef bint holds_too_much(self) except -1
    cpdef bint body_held(self) except -1
    cpdef exchange_done(self, Request r, int status, prompt, completion)
    cpdef abort_response(self, Request r, int status)
