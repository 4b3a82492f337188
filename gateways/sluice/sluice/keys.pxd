# Cython declarations for keys.py (see build.py): typed key records and lease arithmetic.
cimport cython

cdef class KeyRecord:
    cdef public str name
    cdef public Py_ssize_t index, base
    cdef public bint all_models
    cdef public frozenset models, allowed
    cdef public long long rpm, budget, period_s
    cdef public long long rpm_window, rpm_count, rpm_previous_count, rpm_lease
    cdef public double rpm_until
    cdef public long long budget_period_index, spent, reserved, budget_lease
    cdef public double budget_until
    cdef public long long prompt_tokens, completion_tokens
    cdef public long long max_in_flight, in_flight


cdef class KeyStore:
    cdef public object shared, slots
    cdef public Py_ssize_t worker, n_workers
    cdef public list records
    cdef public dict by_token, by_digest

    cpdef KeyRecord lookup(self, token)
    @cython.locals(total=cython.longlong, n=Py_ssize_t, b=Py_ssize_t, w=Py_ssize_t)
    cpdef bint in_flight_full(self, KeyRecord rec) except -1
    cpdef start_request(self, KeyRecord rec)
    cpdef end_request(self, KeyRecord rec)
    cpdef take_request(self, KeyRecord rec, double now)
    cpdef reserve(self, KeyRecord rec, tokens)
    cpdef settle(self, KeyRecord rec, reserved, actual)
