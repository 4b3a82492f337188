"""The mock's timer (mocks/timer.py) in process, both kinds: a wait never ends before its
deadline, and a wait its owner completes early (a stream whose client left) is left alone."""
import asyncio
import time

import pytest

from mocks.timer import PreciseTimer


@pytest.mark.parametrize("fallback", [False, True], ids=["timerfd", "loop-timer"])
def test_waits_never_end_early_and_an_early_completion_is_left_alone(fallback):
    async def main():
        timer = PreciseTimer(force_fallback=fallback)
        try:
            start = time.monotonic_ns()
            due = [start + ms * 1_000_000 for ms in (30, 10, 20)]
            waits = [timer.wait_until(d) for d in due]
            assert all(isinstance(w, asyncio.Future) for w in waits)
            ended = []
            for w, d in zip(waits, due):
                w.add_done_callback(lambda _f, d=d: ended.append((d, time.monotonic_ns())))
            early = timer.wait_until(start + 5_000_000_000)
            early.set_result("the client left")  # its owner completes it: the timer must not
            await asyncio.gather(*waits)
            assert early.result() == "the client left"
            assert len(ended) == 3 and all(t >= d for d, t in ended)
            await asyncio.wait_for(timer.wait_until(start), 1.0)  # a past deadline is due at once
        finally:
            timer.close()
        return timer.kind

    kind = asyncio.run(main())
    assert kind == ("loop-timer" if fallback else "timerfd")
