# Cython declarations for request.py (see build.py): the typed request, route and header digest.
cimport cython

from sluice.keys cimport KeyRecord
from sluice.pool cimport Provider

cdef int SAME_DIALECT
cdef int H_DROP, H_AUTHORIZATION, H_X_API_KEY, H_EXPECT, H_ANTHROPIC_VERSION, H_CONTENT_LENGTH
cdef int H_UPGRADE, H_TRANSFER_ENCODING, H_CONNECTION
cdef dict CONSUMED_HEADERS


@cython.final
cdef class Request:
    cdef public double t0, own_time, t_resume, overhead_us
    cdef public bytes method, url, forward_headers, body, payload
    cdef public object token, body_pieces, reserved, client_model
    cdef public bint has_anthropic_version, http11, keep_alive, upgrade, stream, include_usage
    cdef public bint strip_usage, sent, discard_body
    cdef public Py_ssize_t content_length, body_left, body_received, body_bytes, held, lost_attempts
    cdef public int translation
    cdef public KeyRecord key
    cdef public Route route
    cdef public str model_label, dialect
    cdef public object deployment, retry_state

    cpdef Request with_head(self, double t0)
    cpdef bint add_body_piece(self, list parts, Py_ssize_t max_body) except -1
    cpdef take_body(self, list parts)


@cython.final
cdef class Route:
    cdef public str name, upstream
    cdef public object model_cfg, max_output
    cdef public Provider provider
    cdef public bytes upstream_bytes
    cdef public object policy


@cython.final
cdef class HeaderPolicy:
    cdef public frozenset names
    cdef public tuple prefixes

    cpdef bint allows(self, bytes low)


@cython.final
cdef class HeaderDigest:
    cdef public object token, odd_content_length, transfer_encoding
    cdef public bytes forward_headers
    cdef public bint expect_continue, has_anthropic_version, upgrade


@cython.locals(forward=dict)
cpdef HeaderDigest digest_headers(dict headers, HeaderPolicy policy)
