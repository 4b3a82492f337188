"""Sub-millisecond sleeps for the event loop.

uvloop (libuv) keeps timers in whole milliseconds against a cached loop clock, so
``asyncio.sleep(0.060)`` ends anywhere from about 1 ms early to 1 ms late.  The mock's
hold is its measurement instrument, so on Linux it uses one ``timerfd`` (CLOCK_MONOTONIC,
absolute deadlines in ns) registered with the loop as a reader, armed for the earliest
pending deadline; everything waiting is kept in a heap.  A wait therefore never ends
before its deadline and ends after it only by the kernel's wake-up latency.

Elsewhere (no timerfd), it falls back to loop timers rounded up to the next millisecond,
re-checked against ``time.monotonic_ns()`` so that waits still never end early.

Deadlines are ``time.monotonic_ns()`` values (CLOCK_MONOTONIC, the clock timerfd uses).
"""

from __future__ import annotations

import asyncio
import ctypes
import heapq
import itertools
import os
import time

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = 0o4000
_TFD_CLOEXEC = 0o2000000
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class PreciseTimer:
    """``wait_until(deadline_ns)`` returns a Future that completes at the deadline (its
    owner may complete it earlier: the timer then leaves it alone)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None, force_fallback: bool = False):
        self._loop = loop or asyncio.get_running_loop()
        self._heap: list = []
        self._seq = itertools.count()
        self._armed_ns: int | None = None
        self._fd = -1
        self.kind = "loop-timer"
        if not force_fallback:
            self._setup_timerfd()

    def _setup_timerfd(self) -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            create = libc.timerfd_create
            settime = libc.timerfd_settime
        except (OSError, AttributeError):
            return
        create.argtypes = [ctypes.c_int, ctypes.c_int]
        create.restype = ctypes.c_int
        settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p]
        settime.restype = ctypes.c_int
        fd = create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            return
        self._fd = fd
        self._settime = settime
        self._spec = _Itimerspec()
        self._spec_ref = ctypes.byref(self._spec)
        self._value = self._spec.it_value
        self._loop.add_reader(fd, self._on_fire)
        self.kind = "timerfd"

    def close(self) -> None:
        if self._fd >= 0:
            try:
                self._loop.remove_reader(self._fd)
            except Exception:  # loop already closed
                pass
            os.close(self._fd)
            self._fd = -1
        for _, _, fut in self._heap:
            if not fut.done():
                fut.cancel()
        self._heap.clear()

    # ------------------------------------------------------------------ timerfd path
    def _arm(self, deadline_ns: int) -> None:
        it_value = self._value
        it_value.tv_sec, it_value.tv_nsec = divmod(deadline_ns, 1_000_000_000)
        if self._settime(self._fd, _TFD_TIMER_ABSTIME, self._spec_ref, None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")
        self._armed_ns = deadline_ns

    def _on_fire(self) -> None:
        try:
            os.read(self._fd, 8)
        except (BlockingIOError, InterruptedError):
            pass
        heap = self._heap
        now = time.monotonic_ns()
        while heap and heap[0][0] <= now:
            fut = heapq.heappop(heap)[2]
            if not fut.done():
                fut.set_result(None)
        if heap:
            self._arm(heap[0][0])
        else:
            self._armed_ns = None

    def wait_until(self, deadline_ns: int) -> asyncio.Future:
        """A Future done at ``deadline_ns`` (``time.monotonic_ns()`` clock)."""
        if self._fd < 0:
            return self._fallback(deadline_ns)
        fut = self._loop.create_future()
        heapq.heappush(self._heap, (deadline_ns, next(self._seq), fut))
        armed = self._armed_ns
        if armed is None or deadline_ns < armed:
            self._arm(deadline_ns)
        return fut

    # ------------------------------------------------------------------ fallback path
    def _fallback(self, deadline_ns: int):
        loop = self._loop
        fut = loop.create_future()

        def check() -> None:
            if fut.done():  # completed early by its owner (a lost connection)
                return
            left_ns = deadline_ns - time.monotonic_ns()
            if left_ns <= 0:
                fut.set_result(None)
                return
            # whole milliseconds, rounded up; an early wake-up (the loop's cached clock
            # can be stale) goes round again for the rest
            loop.call_later((left_ns + 999_999) // 1_000_000 / 1000.0, check)

        check()
        return fut
