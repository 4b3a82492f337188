"""The three load shapes, one per run (``shape_class`` picks it): the closed loop's warm-up,
ramp and hold; the in-flight lane's steps; the open loop's schedule. Each tick a shape writes
the whole load's users and requests so far (it runs in the one process that knows them all:
Locust's master) and, when a phase begins, the phases so far; in a fault run it arms the mock's
faults when its warm-up starts."""
from __future__ import annotations

import math
import os
import time

from locust import LoadTestShape

from harness.files import producers
from harness.model import inflight
from harness.model.load_settings import LoadSettings
from harness.run.loadgen import abandon
from harness.run.loadgen.schedule import Schedule

# The spawn rate asked for, over the ramp's own rate: spawning keeps up with the ramp's target.
SPAWN_RATE_HEADROOM = 1.5


class UsersRecord:
    """The whole load's users and requests, a row each tick of the shape."""

    def __init__(self, raw_dir: str):
        self.path = os.path.join(raw_dir, producers.USERS_FILE)
        self.writer = None

    def add(self, runner) -> None:
        if self.writer is None:
            self.writer = producers.RawCsv(self.path, producers.USERS_COLUMNS)
        self.writer.writerow({"t_unix_s": f"{time.time():.3f}", "users": runner.user_count,
                              "requests": runner.stats.total.num_requests})
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class StudyShape(LoadTestShape):
    """What every shape shares: its phases, the users record and the faults' arming. The
    locustfile binds ``settings`` and ``users`` (Locust makes the shape without arguments)."""

    abstract = True
    use_common_options = False
    settings: LoadSettings
    users: UsersRecord
    schedule: Schedule | None = None
    # the ramp's length before the hold: where the faults' window counts from
    ramps = True

    def __init__(self):
        super().__init__()
        self.phases = {}

    def _mark(self, name, t=None):
        if name not in self.phases:
            self.phases[name] = time.time() if t is None else t
            if name == "warmup_start_t_unix_s" and self.settings.fault_arm_file:
                self._arm_faults(self.phases[name])
            producers.write_phases(self.settings.phases_file, self.phases)

    def _arm_faults(self, warmup_start):
        """The mock's fault windows count from the hold's planned start, reckoned from the
        load's real start: the same place in the hold whatever the system's start took."""
        ramp = self.settings.load.ramp_s if self.ramps else 0.0
        producers.arm_faults(self.settings.fault_arm_file,
                             warmup_start + self.settings.load.warmup_s + ramp)

    def tick(self):
        self.users.add(self.runner)
        return self.step()

    def step(self):
        """(users, spawn rate) now; None to stop."""
        raise NotImplementedError


class ClosedLoop(StudyShape):
    """Warm-up, a linear ramp to the target, a hold that lasts until both its duration and its
    request count are met (bounded by max_hold_s), then stop."""

    abstract = True

    def __init__(self):
        super().__init__()
        self.requests_at_hold_start = None

    def step(self):
        s = self.settings
        t = self.get_run_time()
        warmup, ramp = s.load.warmup_s, s.load.ramp_s
        users, warm_users = s.load.users, s.load.warmup_users
        spawn_rate = max(users / ramp if ramp > 0 else users, warm_users, 1.0) * SPAWN_RATE_HEADROOM
        if t < warmup:
            self._mark("warmup_start_t_unix_s")
            return warm_users, max(warm_users, 1)
        if t < warmup + ramp:
            self._mark("ramp_start_t_unix_s")
            target = max(warm_users, math.ceil(users * (t - warmup) / ramp))
            return min(target, users), spawn_rate
        self._mark("hold_start_t_unix_s")
        held = time.time() - self.phases["hold_start_t_unix_s"]
        total = self.runner.stats.total.num_requests
        if self.requests_at_hold_start is None:
            self.requests_at_hold_start = total
        count_met = total - self.requests_at_hold_start >= s.load.min_hold_requests
        if (held < s.load.hold_s or not count_met) and held < s.load.max_hold_s:
            return users, spawn_rate
        self._mark("hold_end_t_unix_s")
        return None


class InFlight(StudyShape):
    """The in-flight lane: warm-up, then each step's users (each keeps one request open) for
    step_s, its new users spawned evenly over one hold; the steps are the measured window.
    A step that ended with any failed request, or whose added p99 over its measured hold was
    beyond inflight.STOP_ADDED_P99_S, is the last: the steps above it are not run. In a streamed
    run that leaves streams, each step's abandon phase begins with the message that closes its
    share of the open streams (harness.run.loadgen.abandon). After the last step run the users
    hold one more hold (the drain), so the requests of its window are answered; hold_end marks
    where the load stopped."""

    abstract = True
    ramps = False

    def __init__(self):
        super().__init__()
        self.step_seen = None        # the in-flight step the last tick was in
        self.failures_at_step = 0    # failed requests when that step began
        self.times_at_window = None  # the answers' times (Locust's histogram) when its window began
        self.times_at_wave = None    # and when its abandon wave was sent (the window's end)
        self.waves = set()           # the steps whose abandon wave was sent
        self.drain_end = None        # when the in-flight drain after the last step ends
        self.drain_users = 0

    def _answers(self) -> dict:
        return dict(self.runner.stats.total.response_times)

    def step(self):
        s = self.settings
        t, warmup = self.get_run_time(), s.load.warmup_s
        # the steps that fit the machine's open-file limits (harness/run/run.py checks them)
        steps = s.load.inflight_steps[:s.inflight_steps_run]
        step_s, hold_s = s.load.inflight_step_s, s.load.inflight_hold_s
        phase_s = inflight.abandon_phase_s(s.load)
        if t < warmup:
            self._mark("warmup_start_t_unix_s")
            return s.load.warmup_users, s.load.warmup_users
        self._mark("ramp_start_t_unix_s")
        self._mark("hold_start_t_unix_s")
        now = time.time()
        if self.drain_end is None:
            since = now - self.phases["hold_start_t_unix_s"]
            index = int(since // step_s)
            into = since - index * step_s
            failures = self.runner.stats.total.num_failures
            if self.step_seen != index:  # a step has ended (or the first begins)
                if self.step_seen is not None and (failures > self.failures_at_step
                                                   or self._too_slow(hold_s)):
                    index = len(steps)  # it failed, or added too much: stop here
                self.step_seen, self.failures_at_step = index, failures
                self.times_at_window = self.times_at_wave = None
            if index < len(steps):
                if self.times_at_window is None and into >= step_s - phase_s - hold_s:
                    self.times_at_window = self._answers()
                if phase_s and index not in self.waves and into >= step_s - phase_s:
                    self.waves.add(index)
                    self.times_at_wave = self._answers()  # the answers it cut short come after
                    self.runner.send_message(abandon.MESSAGE, {
                        "step": index + 1, "share": s.load.inflight_abandon_share,
                        "resume_t": self.phases["hold_start_t_unix_s"] + (index + 1) * step_s})
                before = steps[index - 1] if index else s.load.warmup_users
                self.drain_users = steps[index]  # the users of the step running now
                return steps[index], max(1.0, (steps[index] - before) / hold_s)
            self.drain_end = now + (hold_s + s.inflight_drain_margin_s if steps else 0.0)
        if now < self.drain_end:
            return self.drain_users, 1.0
        self._mark("hold_end_t_unix_s")
        return None

    def _too_slow(self, hold_s: float) -> bool:
        """The step that just ended added beyond STOP_ADDED_P99_S at p99: its answers since its
        measured window began (Locust's own histogram, in ms)."""
        if self.times_at_window is None:
            return False
        p99_ms = inflight.added_p99_ms(self.times_at_window, self.times_at_wave or self._answers(), hold_s)
        return p99_ms is not None and p99_ms > inflight.STOP_ADDED_P99_S * 1000.0


class OpenLoop(StudyShape):
    """Every user at once (they only wait for slots); the phases are the schedule's exact
    boundaries (the steps are the measured window); stop when the last step has ended."""

    abstract = True
    ramps = False

    def step(self):
        schedule = self.schedule
        if schedule.t0 is None:
            schedule.start()
            self._mark("warmup_start_t_unix_s", schedule.t0)
        now = time.time()
        if now >= schedule.steps_start_t:
            self._mark("ramp_start_t_unix_s", schedule.steps_start_t)
            self._mark("hold_start_t_unix_s", schedule.steps_start_t)
        if now >= schedule.end_t:
            self._mark("hold_end_t_unix_s", schedule.end_t)
            return None
        return self.settings.load.users, self.settings.open_loop_spawn_rate_per_s


def shape_class(settings: LoadSettings, users: UsersRecord,
                schedule: Schedule | None) -> type[StudyShape]:
    """The run's one shape, bound to its settings: open loop with a schedule, the in-flight
    steps with steps, else the closed loop."""
    base = OpenLoop if schedule is not None else InFlight if settings.load.inflight_steps else ClosedLoop
    return type(base.__name__, (base,), {"abstract": False, "settings": settings,
                                         "users": users, "schedule": schedule})
