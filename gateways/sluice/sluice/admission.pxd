# Cython declarations for admission.py (see build.py).
cimport cython

from sluice cimport dispatch, rewrite
from sluice.client cimport ClientConn
from sluice.http cimport error_body
from sluice.keys cimport KeyRecord
from sluice.request cimport Request, Route
from sluice.server cimport App


@cython.final
cdef class ChatBody:
    cdef public bytes data
    cdef public object parsed, model, model_span


cpdef chat(App app, ClientConn conn, Request r)
cpdef reject(App app, ClientConn conn, Request r, int status, message, bytes extra=*)
cpdef bint _authenticate(App app, ClientConn conn, Request r) except -1
cpdef bint _read_model(App app, ClientConn conn, Request r, ChatBody body) except -1
cpdef bint _route(App app, ClientConn conn, Request r, model) except -1
cpdef bint _within_key_limits(App app, ClientConn conn, Request r, KeyRecord key) except -1
cpdef Route _target(Request r)
cpdef bint _body_for_provider(ClientConn conn, Request r, ChatBody body, Route target) except -1
cpdef bint _reserve_budget(App app, ClientConn conn, Request r, ChatBody body,
                           Route target) except -1
