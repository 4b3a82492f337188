# Cython declarations for rewrite.py (see build.py).
from sluice.chat_body cimport asking_usage
from sluice.pool cimport Provider
from sluice.request cimport Request, Route

cdef int ANTHROPIC_TO_OPENAI, OPENAI_TO_ANTHROPIC, SAME_DIALECT

cpdef patch_model(bytes body, obj, model, span, Route route)
cpdef bytes translated_body(Request r, Route target, obj)
cpdef bytes payload(Request r, Provider provider, bytes body)
cpdef bint retarget(Request r, Route target) except -1
