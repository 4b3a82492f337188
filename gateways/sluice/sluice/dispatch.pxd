# Cython declarations for dispatch.py (see build.py): C-level calls from admission, the pool
# and the upstream side.
cimport cython

from sluice cimport rewrite
from sluice.client cimport ClientConn
from sluice.http cimport error_body
from sluice.keys cimport KeyRecord
from sluice.pool cimport Pool, Provider
from sluice.request cimport Request
from sluice.server cimport App
from sluice.upstream cimport UpstreamConn

cdef double TEST_DELAY_S, TEST_CPU_BURN_S
cdef long TEST_BURN_ITERATIONS, TEST_EXTRA_WRITE_FD

@cython.locals(key=KeyRecord, d=object)
cpdef send_first(App app, ClientConn conn, Request r, Provider provider, bytes body)
cpdef send(ClientConn conn, Request r, Pool pool)
cpdef _start(ClientConn conn, Request r, UpstreamConn up)
cpdef _wait(ClientConn conn, Pool pool, double now)
cpdef start_exchange(ClientConn conn, UpstreamConn up)
cpdef attempt_failed(ClientConn conn, int status, message, kind=*)
cpdef give_up(ClientConn conn, Request r, int status, message)
cpdef cancel(ClientConn conn)
cpdef resend(ClientConn conn, Request r)
cpdef resend_now(ClientConn conn, Request r)
