# Cython declarations for chat_body.py (see build.py).
cimport cython


@cython.final
cdef class ChatBody:
    cdef public bytes data
    cdef public object parsed, model, model_span, output_limit, choices
    cdef public bint max_tokens_set, unchecked


cpdef bint read_fast(ChatBody body, found, bint limits) except -1
cpdef read_parsed(ChatBody body, found, bint limits)
cpdef check_repeats(ChatBody body)
cpdef bint _spelled_twice(list found) except -1
cpdef _repeated_key(bytes data)
cpdef _read_limits(ChatBody body, dict obj)
cpdef bint needs_output_cap(ChatBody body, dialect) except -1
cpdef write_output_cap(ChatBody body, dialect, cap)
cpdef prompt_tokens(ChatBody body, bytes data, dict part_tokens)
cpdef bint streams_without_usage(ChatBody body) except -1
cpdef bytes asking_usage(bytes data)
cpdef most_tokens(ChatBody body)
