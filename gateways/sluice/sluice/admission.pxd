# Cython declarations for admission.py (see build.py).
cimport cython

from sluice cimport chat_body, dispatch, rewrite
from sluice.chat_body cimport ChatBody
from sluice.client cimport ClientConn
from sluice.http cimport error_body
from sluice.keys cimport KeyRecord
from sluice.request cimport Request, Route
from sluice.server cimport App


@cython.locals(key=KeyRecord)
cpdef chat(App app, ClientConn conn, Request r)
cpdef reject(App app, ClientConn conn, Request r, int status, message, bytes extra=*)
cpdef bint _authenticate(App app, ClientConn conn, Request r) except -1
cpdef bint _read_body(App app, ClientConn conn, Request r, ChatBody body, bint budget) except -1
cpdef _refuse_body(App app, ClientConn conn, Request r, message)
cpdef bint _route(App app, ClientConn conn, Request r, model) except -1
cpdef bint _within_rpm(App app, ClientConn conn, Request r, KeyRecord key) except -1
cpdef bint _model_allowed(App app, ClientConn conn, Request r, KeyRecord key) except -1
cpdef Route _target(Request r)
cpdef bint _body_for_provider(ClientConn conn, Request r, ChatBody body, Route target) except -1
cpdef bint _reserve_budget(App app, ClientConn conn, Request r, ChatBody body) except -1
