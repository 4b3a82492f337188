"""The open-loop arrival schedule: a warm-up at the first rate, then each rate for step_s. One
dispatcher greenlet wakes at every slot and hands it to the user that came free last (its
connection is the warmest); a slot that falls due while every user is busy waits in a backlog
for the next free user, and keeps its intended start, so that wait is measured."""
from __future__ import annotations

import collections
import time

import gevent
from gevent.event import AsyncResult

from harness.model.load_settings import LoadSettings


def slots(t0: float, rates, step_s: float, warmup_s: float):
    """(intended start, step index, offered rate) in order; step 0 is the warm-up, at the first
    rate. A step of length L at rate r has the slots k / r for every k / r < L."""
    steps_start_t = t0 + warmup_s
    steps = [(t0, warmup_s, rates[0], 0)] + [
        (steps_start_t + i * step_s, step_s, rate, i + 1) for i, rate in enumerate(rates)]
    for start, length, rate, index in steps:
        k = 0
        while k / rate < length:
            yield start + k / rate, index, rate
            k += 1


class Schedule:
    def __init__(self, rates, step_s: float, warmup_s: float):
        self.rates, self.step_s, self.warmup_s = rates, step_s, warmup_s
        self.t0 = None
        self.idle = []                      # AsyncResults of users waiting for a slot (a stack)
        self.backlog = collections.deque()  # slots that fell due with no user free
        self.done = False

    @classmethod
    def of(cls, settings: LoadSettings) -> "Schedule | None":
        """The run's schedule; None in closed loop (no rates)."""
        load = settings.load
        if not load.open_loop_rates_per_s:
            return None
        return cls(load.open_loop_rates_per_s, load.open_loop_step_s, load.warmup_s)

    @property
    def steps_start_t(self) -> float:
        return self.t0 + self.warmup_s

    @property
    def end_t(self) -> float:
        return self.steps_start_t + len(self.rates) * self.step_s

    def start(self) -> None:
        self.t0 = time.time()
        gevent.spawn(self.dispatch)

    def dispatch(self) -> None:
        for slot in slots(self.t0, self.rates, self.step_s, self.warmup_s):
            delay = slot[0] - time.time()
            if delay > 0:
                gevent.sleep(delay)
            if self.idle:
                self.idle.pop().set((*slot, False))
            else:
                self.backlog.append((*slot, True))
        self.done = True
        while self.idle:
            self.idle.pop().set(None)

    def take(self):
        """The next slot for a free user, (intended start, step index, offered rate, waited
        for a user) (blocks until one falls due); None when there are none."""
        if self.backlog:
            return self.backlog.popleft()
        if self.done or self.t0 is None:
            return None
        waiter = AsyncResult()
        self.idle.append(waiter)
        return waiter.get()
