# cython: language_level=3, boundscheck=False, wraparound=False
"""The byte scans on Sluice's request path as C loops over the buffer: the twin of bytescan.py
(the reference), with the same functions, arguments and answers. Read that module for what each
one answers; here is only how. No function allocates beyond its answer, and each is linear in
the bytes it looks at."""
from libc.string cimport memchr, memcmp

cdef enum:
    NOT_FOUND = -1

# no word of a set is a prefix of another: at most one matches at a place
cdef tuple DECIDED_KEYS = (b"model", b"max_tokens", b"max_completion_tokens", b"n", b"stream")
cdef tuple USAGE_NAMES = (b"prompt_tokens", b"completion_tokens", b"input_tokens", b"output_tokens",
                          b"cached_tokens", b"cache_creation_input_tokens", b"cache_read_input_tokens")


cdef inline bint is_space(unsigned char c) nogil:
    # \s of a bytes regex, and what bytes.strip() strips
    return c == 32 or (9 <= c <= 13)


cdef inline bint is_digit(unsigned char c) nogil:
    return 48 <= c <= 57


cdef inline bint is_word(unsigned char c) nogil:
    # \w of a bytes regex
    return is_digit(c) or (65 <= c <= 90) or (97 <= c <= 122) or c == 95


cdef inline bint is_hex(unsigned char c) nogil:
    return is_digit(c) or (65 <= c <= 70) or (97 <= c <= 102)


cdef inline bint is_bracket(unsigned char c) nogil:
    return c == 91 or c == 93 or c == 123 or c == 125


cdef inline bint word_at(const unsigned char* p, Py_ssize_t n, Py_ssize_t i, bytes word):
    """``word`` then a closing quote at p[i:]."""
    cdef Py_ssize_t k = len(word)
    return i + k < n and memcmp(p + i, <const char*>word, k) == 0 and p[i + k] == 34


cdef bytes quoted_word(const unsigned char* p, Py_ssize_t n, Py_ssize_t i, tuple words):
    """The word of ``words`` at p[i:] followed by a closing quote, else None."""
    cdef bytes word
    if i < n:
        for word in words:
            if p[i] == (<const unsigned char*>word)[0] and word_at(p, n, i, word):
                return word
    return None


cdef inline Py_ssize_t skip_space(const unsigned char* p, Py_ssize_t n, Py_ssize_t i) nogil:
    while i < n and is_space(p[i]):
        i += 1
    return i


cdef Py_ssize_t find_quote(const unsigned char* p, Py_ssize_t n, Py_ssize_t i) nogil:
    if i >= n:
        return NOT_FOUND
    cdef const void* q = memchr(p + i, 34, n - i)
    return NOT_FOUND if q == NULL else <const unsigned char*>q - p


cdef bint has_letter_escape(const unsigned char* p, Py_ssize_t n) nogil:
    # \u0040-\u007f, \u212a, \u017f (hex digits in either case)
    cdef Py_ssize_t i = 0
    cdef const void* q
    cdef unsigned char a, b, c, d
    while i + 6 <= n:
        q = memchr(p + i, 92, n - i)
        if q == NULL:
            return False
        i = <const unsigned char*>q - p
        if i + 6 <= n and p[i + 1] == 117:  # \u
            a, b, c, d = p[i + 2], p[i + 3], p[i + 4], p[i + 5]
            if a == 48 and b == 48 and 52 <= c <= 55 and is_hex(d):
                return True
            if a == 50 and b == 49 and c == 50 and (d == 65 or d == 97):  # 212a
                return True
            if a == 48 and b == 49 and c == 55 and (d == 70 or d == 102):  # 017f
                return True
        i += 1
    return False


cdef Py_ssize_t folded_word_end(const unsigned char* p, Py_ssize_t n, Py_ssize_t i, bytes word):
    """Where ``word`` spelled in any ASCII case, k also as U+212A and s as U+017F (UTF-8), ends
    at p[i:], else NOT_FOUND."""
    cdef const unsigned char* w = word
    cdef Py_ssize_t k, m = len(word)
    cdef unsigned char c
    for k in range(m):
        c = w[k]
        if i < n and (p[i] == c or (97 <= c <= 122 and p[i] == c - 32)):
            i += 1
        elif c == 107 and i + 2 < n and p[i] == 0xe2 and p[i + 1] == 0x84 and p[i + 2] == 0xaa:
            i += 3
        elif c == 115 and i + 1 < n and p[i] == 0xc5 and p[i + 1] == 0xbf:
            i += 2
        else:
            return NOT_FOUND
    return i


cdef inline bint may_start_key(unsigned char c) nogil:
    # every decided key starts with m, n or s (or U+017F, 0xc5 0xbf), in either case
    return c == 0xc5 or (c | 32) == 109 or (c | 32) == 110 or (c | 32) == 115


cdef bint folded_key_at(const unsigned char* p, Py_ssize_t n, Py_ssize_t i):
    """A decided key spelled in another case at p[i:], then a closing quote, then a colon."""
    cdef bytes word
    cdef Py_ssize_t end
    for word in DECIDED_KEYS:
        end = folded_word_end(p, n, i, word)
        if end != NOT_FOUND and end < n and p[end] == 34:
            end = skip_space(p, n, end + 1)
            if end < n and p[end] == 58:
                return True
    return False


def scan_keys(bytes data not None):
    cdef const unsigned char* p = data
    cdef Py_ssize_t n = len(data), i = 0, j
    if has_letter_escape(p, n):
        return None
    cdef list found = []
    cdef bytes key
    while True:
        i = find_quote(p, n, i)
        if i == NOT_FOUND:
            return found
        j = i + 1
        if j >= n or not may_start_key(p[j]):  # most strings end here, at their first byte
            i = j
            continue
        key = quoted_word(p, n, j, DECIDED_KEYS)
        if key is None:
            if folded_key_at(p, n, j):
                return None
            i += 1
        else:
            found.append(key)
            i = j + len(key) + 1  # past the closing quote: matches do not overlap


def first_model_span(bytes data not None):
    cdef const unsigned char* p = data
    cdef Py_ssize_t n = len(data), i, start
    i = skip_space(p, n, 0)
    if i >= n or p[i] != 123:  # {
        return None
    i = skip_space(p, n, i + 1)
    if i >= n or p[i] != 34 or not word_at(p, n, i + 1, b"model"):
        return None
    i = skip_space(p, n, i + 7)
    if i >= n or p[i] != 58:  # :
        return None
    i = skip_space(p, n, i + 1)
    if i >= n or p[i] != 34:
        return None
    start = i = i + 1
    while i < n and p[i] != 34 and p[i] != 92:
        i += 1
    if i >= n or p[i] != 34:
        return None
    return (start, i)


cdef Py_ssize_t count_digits(const unsigned char* p, Py_ssize_t n, Py_ssize_t i) nogil:
    cdef Py_ssize_t k = i
    while k < n and is_digit(p[k]):
        k += 1
    return k - i


cdef long long digits_value(const unsigned char* p, Py_ssize_t i, Py_ssize_t k) nogil:
    cdef long long v = 0
    cdef Py_ssize_t e = i + k
    while i < e:
        v = v * 10 + (p[i] - 48)
        i += 1
    return v


cdef bint bracket_between(const unsigned char* p, Py_ssize_t lo, Py_ssize_t hi) nogil:
    while lo < hi:
        if is_bracket(p[lo]):
            return True
        lo += 1
    return False


def top_level_count(bytes data not None, Py_ssize_t at):
    cdef const unsigned char* p = data
    cdef Py_ssize_t n = len(data), i, digits_at, k, end
    if at < 0 or at > n:
        raise ValueError("at: 0 <= at <= len(data)")
    # "\w+"\s*:\s*(\d{1,12})\s*[,}]
    if at >= n or p[at] != 34:
        return None
    i = at + 1
    while i < n and is_word(p[i]):
        i += 1
    if i == at + 1 or i >= n or p[i] != 34:
        return None
    i = skip_space(p, n, i + 1)
    if i >= n or p[i] != 58:
        return None
    digits_at = skip_space(p, n, i + 1)
    k = count_digits(p, n, digits_at)
    if k < 1 or k > 12:
        return None
    i = skip_space(p, n, digits_at + k)
    if i >= n or (p[i] != 44 and p[i] != 125):
        return None
    if p[at - 1 if at > 0 else n - 1] == 92:  # a backslash: the quote may be inside a string
        return None
    cdef long long count = digits_value(p, digits_at, k)
    if count < 1:
        return None
    cdef const void* brace = memchr(p, 123, n)  # the body's opening brace
    if not bracket_between(p, 0 if brace == NULL else <const unsigned char*>brace - p + 1, at):
        return count
    end = n - 1
    while end >= 0 and p[end] != 125:
        end -= 1
    if end < 0:
        return None  # no closing brace: what follows the count is not blank
    if not bracket_between(p, digits_at + k, end) and skip_space(p, n, end + 1) == n:
        return count
    return None


def usage_counts(bytes data not None, Py_ssize_t start):
    cdef const unsigned char* p = data
    cdef Py_ssize_t n = len(data), i = max(start, 0), j, digits_at, k
    cdef list found = []
    cdef bytes name
    while True:
        i = find_quote(p, n, i)
        if i == NOT_FOUND:
            return found
        j = i + 1
        name = quoted_word(p, n, j, USAGE_NAMES)
        if name is not None:
            j = skip_space(p, n, j + len(name) + 1)
            if j < n and p[j] == 58:
                digits_at = skip_space(p, n, j + 1)
                k = count_digits(p, n, digits_at)
                if 1 <= k <= 12:
                    found.append((name, data[digits_at:digits_at + k]))
                    i = digits_at + k
                    continue
        i += 1


def known_head_body_start(bytes data not None, bytes prefix not None, bytes suffix not None):
    cdef const unsigned char* p = data
    cdef Py_ssize_t n = len(data), v = len(prefix), s = len(suffix), j, start
    if n < v or memcmp(p, <const char*>prefix, v) != 0:
        return -1
    j = v
    while j < n and j < v + 18 and is_digit(p[j]):  # data.find(CRLF, v, v + 20) after digits
        j += 1
    if j == v or j + 1 >= n or j + 2 > v + 20 or p[j] != 13 or p[j + 1] != 10:
        return -1
    if j + s > n or memcmp(p + j, <const char*>suffix, s) != 0:
        return -1
    start = j + s
    return start if digits_value(p, v, j - v) == n - start else -1
