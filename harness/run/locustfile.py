"""The load generator, run by Locust as a subprocess (never imported by the harness or a notebook).

Settings come from the run's load.json named by SLUICE_LOAD_FILE (a harness.model.load_settings.
LoadSettings, written by harness/run/load.py, which also puts this repository on PYTHONPATH).
Every request becomes one raw CSV row in <raw_dir>/requests-<host>-<pid>.csv, its header the
raw columns of harness.model.schema.REQUESTS; the harness turns them into requests.parquet. The
shape writes its phase timestamps to <phases_file>, the whole load's users and requests each second to <raw_dir>/users.csv and, in a fault run, arms
the mock's faults when its warm-up starts (<fault_arm_file>); Locust's own high-CPU event is kept
per process (harness.files.producers writes every file).
"""
import collections
import math
import os
import random
import re
import socket
import time

import gevent
from gevent import GreenletExit
from gevent.event import AsyncResult
from locust import FastHttpUser, LoadTestShape, constant, events, task

from harness.files import producers
from harness.model.dialects import ERROR_BODY_PREFIX_BYTES, error_body_dialect
from harness.model.failures import failure_class
from harness.model.schema import REQUESTS

SETTINGS = producers.read_load_settings(os.environ["SLUICE_LOAD_FILE"])
# The topology's name for this host (harness/run/load.py sets it); pids are unique only per host.
HOSTNAME = os.environ.get("SLUICE_WORKER_HOST") or socket.gethostname()
# Locust's dispatcher hands each worker its new users once a second; where in that second each
# starts is drawn from the run's seed (the same draws in every process: each spreads evenly).
SPAWN_BATCH_S = 1.0
_START_POINTS = random.Random(SETTINGS.seed)
STREAM = SETTINGS.stream
# The client dialect's SSE frames: one that carries text, and the one that ends the stream.
CONTENT_FRAME = re.compile(SETTINGS.content_frame.encode())
DONE_FRAME = re.compile(SETTINGS.done_frame.encode())
UNARY_MARKER = SETTINGS.unary_marker.encode()
DIALECT = SETTINGS.dialect
# Built by the harness (harness/run/bodies.py) from the run's dialect, size and seed.
_body = producers.read_body(SETTINGS.body_file)
# Every request carries its own id: the x-request-id header (first of ours, so it sits in the
# first bytes a capture keeps) and `[rid:<id>]` in the body's slot (for systems that drop
# headers). Ids: 1-64 chars of [A-Za-z0-9._:-]; pid and a random salt keep processes apart.
_RID_PREFIX = "%s-%d-%s-" % (re.sub(r"[^A-Za-z0-9._:-]", ".", SETTINGS.run_id)[:32], os.getpid(),
                             os.urandom(2).hex())
_BODY_HEAD, _, _BODY_TAIL = _body.partition(SETTINGS.rid_slot.encode())
_BODY_HEAD += b"[rid:"
_BODY_TAIL = b"] " + _BODY_TAIL
_headers = {"Content-Type": "application/json", **SETTINGS.headers}
_SEQ = iter(range(1, 1 << 62))


def _identified():
    """(request id, headers, body) of the next request."""
    rid = _RID_PREFIX + str(next(_SEQ))
    return rid, {"x-request-id": rid, **_headers}, _BODY_HEAD + rid.encode() + _BODY_TAIL


def _judge_error_body(resp, body):
    """A failed request's body, judged against the client's dialect, into its row."""
    resp.request_meta["context"]["error_body_dialect"] = error_body_dialect(DIALECT, body)


_overhead_header = SETTINGS.self_overhead_header
_overhead_scale = SETTINGS.self_overhead_scale_ms


class RawRows:
    """Per-process raw row file; flushed in batches so the hot path only appends to a buffer."""

    def __init__(self):
        self.writer = None
        self.killed_inflight = 0
        self.runner = None
        self.next_flush = 0.0

    def maybe_flush(self, now):
        # Rows reach the disk at least once a second: a killed load generator loses at most that.
        if now >= self.next_flush:
            self.writer.flush()
            self.next_flush = now + 1.0

    def open(self):
        if self.writer is None:
            self.writer = producers.RawCsv(
                producers.raw_requests_path(SETTINGS.raw_dir, HOSTNAME, os.getpid()),
                REQUESTS.raw_names, buffering=1 << 20)

    def close(self):
        if self.writer is not None:
            self.writer.close()
            self.writer = None


ROWS = RawRows()


class Schedule:
    """The open-loop arrival schedule: a warm-up at the first rate, then each rate for step_s.
    One dispatcher greenlet wakes at every slot and hands it to the user that came free last
    (its connection is the warmest); a slot that falls due while every user is busy waits in a
    backlog for the next free user, and keeps its intended start, so that wait is measured."""

    def __init__(self, rates, step_s, warmup_s):
        self.rates, self.step_s, self.warmup_s = rates, step_s, warmup_s
        self.t0 = None
        self.idle = []                      # AsyncResults of users waiting for a slot (a stack)
        self.backlog = collections.deque()  # slots that fell due with no user free
        self.done = False

    @property
    def steps_start_t(self):
        return self.t0 + self.warmup_s

    @property
    def end_t(self):
        return self.steps_start_t + len(self.rates) * self.step_s

    def slots(self):
        """(intended start, step index, offered rate) in order; step 0 is the warm-up."""
        steps = [(self.t0, self.warmup_s, self.rates[0], 0)] + [
            (self.steps_start_t + i * self.step_s, self.step_s, rate, i + 1)
            for i, rate in enumerate(self.rates)]
        for start, length, rate, index in steps:
            k = 0
            while k / rate < length:
                yield start + k / rate, index, rate
                k += 1

    def start(self):
        self.t0 = time.time()
        gevent.spawn(self.dispatch)

    def dispatch(self):
        for slot in self.slots():
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
        """The next slot for a free user (blocks until one falls due); None when there are none."""
        if self.backlog:
            return self.backlog.popleft()
        if self.done or self.t0 is None:
            return None
        waiter = AsyncResult()
        self.idle.append(waiter)
        return waiter.get()


SCHEDULE = (Schedule(SETTINGS.open_loop_rates_per_s, SETTINGS.open_loop_step_s,
                     SETTINGS.warmup_s) if SETTINGS.open_loop_rates_per_s else None)


def _classify(exception, status_code):
    if exception is None:
        return "", ""
    text = f"{type(exception).__name__}: {exception}"[:300]
    lowered = text.lower()
    if status_code and status_code >= 400:
        return "http", text
    if "timeout" in lowered or "timed out" in lowered:
        return "timeout", text
    if any(word in lowered for word in ("connection", "refused", "reset", "broken pipe", "eof",
                                        "remotedisconnected", "socket")):
        return "connection", text
    if status_code:
        return "http", text
    return "other", text


def _transport_error(exception, response, context):
    """The transport's own error behind a failed request, the one its class (harness.model.
    failures) is read from, never the verdict that replaced it ("HTTP 0"): kept in the context
    by a task (a body or stream that broke after the head) or on the response by Locust (no
    answer); else the failure itself."""
    return context.get("transport_error") or getattr(response, "error", None) or exception


@events.request.add_listener
def on_request(request_type, name, response_time, response_length, response=None, exception=None,
               start_time=None, context=None, **kwargs):
    if ROWS.writer is None:
        ROWS.open()
    status = getattr(response, "status_code", 0) or 0
    headers = getattr(response, "headers", None) or {}
    overhead = ""
    if _overhead_header:
        value = headers.get(_overhead_header)
        if value:
            try:
                overhead = float(value) * _overhead_scale
            except ValueError:
                pass
    kind, error = _classify(exception, status)
    transport = _transport_error(exception, response, context or {}) if exception else None
    if transport is not None and transport is not exception:  # what "HTTP 0" stood for
        error = f"{error} ({type(transport).__name__}: {transport})"[:300]
    error_class = failure_class(transport, status) if transport is not None else ""
    runner = ROWS.runner
    timing = (context or {}).get("stream") or {}
    slot = (context or {}).get("slot") or ("", "", "", "")
    ROWS.writer.writerow({
        "start_t_unix_s": (f"{start_time:.6f}" if start_time
                           else f"{time.time() - response_time / 1000:.6f}"),
        "latency_ms": f"{response_time:.3f}", "status_code": status,
        "response_bytes": response_length or 0, "error_kind": kind, "error": error,
        "process_users": runner.user_count if runner else "", "worker_pid": os.getpid(),
        "worker_host": HOSTNAME, "mock_request_id": headers.get("x-mock-request-id", ""),
        "self_overhead_ms": overhead, "ttfb_ms": timing.get("ttfb_ms", ""),
        "ttft_ms": timing.get("ttft_ms", ""), "chunks": timing.get("chunks", ""),
        "chunk_gaps_ms": timing.get("chunk_gaps_ms", ""), "stream_done": timing.get("done", ""),
        "intended_start_t_unix_s": f"{slot[0]:.6f}" if slot[0] != "" else "",
        "offered_rate_per_s": slot[2], "step_index": slot[1], "waited_for_user": slot[3],
        "request_id": (context or {}).get("request_id", ""),
        # a failure the task did not judge (a stream cut short, no response) had no error body
        "error_body_dialect": (context or {}).get("error_body_dialect", "none") if kind else "",
        "error_class": error_class})
    ROWS.maybe_flush(time.monotonic())


@events.init.add_listener
def on_init(environment, **kwargs):
    ROWS.runner = environment.runner
    ROWS.open()


# Locust's own high-CPU event in this process (each process fires its own), kept for the run
# manifest: a load generator short of CPU adds its own latency.
CPU_WARNINGS = {"count": 0, "max_cpu_percent": 0.0, "first_t_unix_s": None}


@events.cpu_warning.add_listener
def on_cpu_warning(environment, cpu_usage, **kwargs):
    CPU_WARNINGS["count"] += 1
    CPU_WARNINGS["max_cpu_percent"] = max(CPU_WARNINGS["max_cpu_percent"], float(cpu_usage))
    if CPU_WARNINGS["first_t_unix_s"] is None:  # written at once: a killed process keeps it
        CPU_WARNINGS["first_t_unix_s"] = time.time()
        producers.write_cpu_warnings(SETTINGS.raw_dir, HOSTNAME, os.getpid(), CPU_WARNINGS)


@events.quitting.add_listener
def on_quitting(environment, **kwargs):
    # Requests still unanswered when the stop timeout killed their user never produce a row.
    producers.write_inflight_at_stop(SETTINGS.raw_dir, HOSTNAME, os.getpid(),
                                     ROWS.killed_inflight, time.time())
    if CPU_WARNINGS["count"]:
        producers.write_cpu_warnings(SETTINGS.raw_dir, HOSTNAME, os.getpid(), CPU_WARNINGS)
    if USERS.writer is not None:
        USERS.writer.close()
    ROWS.close()


class ChatUser(FastHttpUser):
    wait_time = constant(SETTINGS.think_time_s)
    network_timeout = SETTINGS.request_timeout_s
    connection_timeout = SETTINGS.request_timeout_s
    insecure = True
    slot = None

    def on_start(self):
        # Locust spawns a second's users at once (its dispatcher sends spawn_rate users a second
        # in one batch); held open for a fixed hold, a batch would answer and send together for
        # the rest of the run. In the in-flight lane each user starts at a random point of its
        # batch's second instead: an even stream of requests, as real traffic is.
        if SETTINGS.inflight_steps:
            gevent.sleep(_START_POINTS.random() * SPAWN_BATCH_S)

    def context(self):
        # Locust merges this into every request's context: the open-loop slot reaches the row.
        return {"slot": self.slot} if self.slot else {}

    @task
    def chat(self):
        if SCHEDULE is not None:
            self.slot = SCHEDULE.take()
            if self.slot is None:  # the schedule has not begun or has ended: nothing to send
                gevent.sleep(1.0)
                return
        try:
            if STREAM:
                self.chat_stream()
                return
            rid, headers, body = _identified()
            with self.client.post(SETTINGS.chat_path, data=body, headers=headers,
                                  catch_response=True, name="chat",
                                  context={"request_id": rid}) as resp:
                # a body that broke after the head: Locust's record of it, which a verdict below
                # replaces, is the row's cause
                resp.request_meta["context"]["transport_error"] = resp.request_meta["exception"]
                if resp.status_code != 200:
                    _judge_error_body(resp, resp.content)
                    resp.failure(f"HTTP {resp.status_code}")
                elif not resp.content or UNARY_MARKER not in resp.content:
                    _judge_error_body(resp, resp.content)
                    resp.failure("HTTP 200 without a chat completion body")
        except GreenletExit:
            ROWS.killed_inflight += 1
            raise

    def chat_stream(self):
        """Locust times a stream only to its headers, so the frames are timed here: each SSE
        line is read as soon as it is complete (readline, not a fixed-size read that would wait
        for several frames), and the row's latency becomes the whole stream's duration."""
        rid, headers, body = _identified()
        start = time.perf_counter()
        with self.client.post(SETTINGS.chat_path, data=body, headers=headers,
                              catch_response=True, stream=True, name="chat",
                              context={"request_id": rid}) as resp:
            timing = {"ttfb_ms": round(resp.request_meta["response_time"], 3), "done": False}
            resp.request_meta["context"] = {**resp.request_meta.get("context", {}),
                                            "stream": timing}
            if resp.status_code != 200:
                raw = resp._response  # None when no response arrived (a connection error)
                head = raw.read(ERROR_BODY_PREFIX_BYTES) if raw is not None else b""
                _judge_error_body(resp, head)
                while raw is not None and raw.read(1 << 16):  # drain: the connection stays usable
                    pass
                resp.failure(f"HTTP {resp.status_code}")
                return
            arrivals, size = [], 0
            try:
                while True:
                    line = resp._response.readline(b"\n")
                    if not line:
                        break
                    size += len(line)
                    if line.startswith(b"data:"):
                        if DONE_FRAME.search(line):
                            timing["done"] = True
                        elif CONTENT_FRAME.search(line):
                            arrivals.append(time.perf_counter())
            except Exception as exc:  # a stream cut short is that system's error
                resp.request_meta["context"]["transport_error"] = exc
                resp.failure(f"stream broken after {len(arrivals)} frames: {type(exc).__name__}")
            end = time.perf_counter()
            resp.request_meta["response_time"] = (end - start) * 1000.0
            resp.request_meta["response_length"] = size
            timing["chunks"] = len(arrivals)
            if arrivals:
                timing["ttft_ms"] = round((arrivals[0] - start) * 1000.0, 3)
                timing["chunk_gaps_ms"] = " ".join(f"{(b - a) * 1000.0:.3f}"
                                                   for a, b in zip(arrivals, arrivals[1:]))
            else:
                resp.failure("stream carried no content frame")


class UsersRecord:
    """The whole load's users and requests, a row each tick of the shape (which runs in the
    one process that knows them all: Locust's master)."""

    def __init__(self):
        self.writer = None

    def add(self, runner):
        if self.writer is None:
            self.writer = producers.RawCsv(os.path.join(SETTINGS.raw_dir, producers.USERS_FILE),
                                           producers.USERS_COLUMNS)
        self.writer.writerow({"t_unix_s": f"{time.time():.3f}", "users": runner.user_count,
                              "requests": runner.stats.total.num_requests})
        self.writer.flush()


USERS = UsersRecord()


class StudyShape(LoadTestShape):
    """Warm-up, a linear ramp to the target, a hold that lasts until both its duration and its
    request count are met (bounded by max_hold_s), then stop. Phase starts go to a file, and
    the users and requests so far to another each tick."""

    use_common_options = False

    def __init__(self):
        super().__init__()
        self.phases = {}
        self.requests_at_hold_start = None
        self.step_seen = None        # the in-flight step the last tick was in
        self.failures_at_step = 0    # failed requests when that step began
        self.drain_end = None        # when the in-flight drain after the last step ends
        self.drain_users = 0

    def _mark(self, name, t=None):
        if name not in self.phases:
            self.phases[name] = time.time() if t is None else t
            if name == "warmup_start_t_unix_s" and SETTINGS.fault_arm_file:
                self._arm_faults(self.phases[name])
            producers.write_phases(SETTINGS.phases_file, self.phases)

    def _arm_faults(self, warmup_start):
        """The mock's fault windows count from the hold's planned start, reckoned from the
        load's real start: the same place in the hold whatever the system's start took."""
        ramp = 0.0 if SCHEDULE is not None or SETTINGS.inflight_steps else SETTINGS.ramp_s
        producers.arm_faults(SETTINGS.fault_arm_file, warmup_start + SETTINGS.warmup_s + ramp)

    def tick(self):
        USERS.add(self.runner)
        if SCHEDULE is not None:
            return self.open_loop_tick()
        if SETTINGS.inflight_steps:
            return self.inflight_tick()
        t = self.get_run_time()
        warmup, ramp = SETTINGS.warmup_s, SETTINGS.ramp_s
        users, warm_users = SETTINGS.users, SETTINGS.warmup_users
        spawn_rate = max(users / ramp if ramp > 0 else users, warm_users, 1.0) * 1.5
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
        count_met = total - self.requests_at_hold_start >= SETTINGS.min_hold_requests
        if (held < SETTINGS.hold_s or not count_met) and held < SETTINGS.max_hold_s:
            return users, spawn_rate
        self._mark("hold_end_t_unix_s")
        return None

    def inflight_tick(self):
        """The in-flight lane: warm-up, then each step's users (each keeps one request open) for
        step_s, its new users spawned evenly over one hold; the steps are the measured window.
        A step that ended with any failed request is the last: the steps above it are not run.
        After the last step run the users hold one more hold (the drain), so the requests of its
        window are answered; hold_end marks where the load stopped."""
        t, warmup = self.get_run_time(), SETTINGS.warmup_s
        # the steps that fit the machine's open-file limits (harness/run/run.py checks them)
        steps = SETTINGS.inflight_steps[:SETTINGS.inflight_steps_run]
        step_s, hold_s = SETTINGS.inflight_step_s, SETTINGS.inflight_hold_s
        if t < warmup:
            self._mark("warmup_start_t_unix_s")
            return SETTINGS.warmup_users, SETTINGS.warmup_users
        self._mark("ramp_start_t_unix_s")
        self._mark("hold_start_t_unix_s")
        now = time.time()
        if self.drain_end is None:
            index = int((now - self.phases["hold_start_t_unix_s"]) // step_s)
            failures = self.runner.stats.total.num_failures
            if self.step_seen != index:  # a step has ended (or the first begins)
                if self.step_seen is not None and failures > self.failures_at_step:
                    index = len(steps)  # it failed: stop here
                self.step_seen, self.failures_at_step = index, failures
            if index < len(steps):
                before = steps[index - 1] if index else SETTINGS.warmup_users
                self.drain_users = steps[index]  # the users of the step running now
                return steps[index], max(1.0, (steps[index] - before) / hold_s)
            self.drain_end = now + (hold_s + SETTINGS.inflight_drain_margin_s if steps else 0.0)
        if now < self.drain_end:
            return self.drain_users, 1.0
        self._mark("hold_end_t_unix_s")
        return None

    def open_loop_tick(self):
        """Every user at once (they only wait for slots); the phases are the schedule's exact
        boundaries (the steps are the measured window); stop when the last step has ended."""
        if SCHEDULE.t0 is None:
            SCHEDULE.start()
            self._mark("warmup_start_t_unix_s", SCHEDULE.t0)
        now = time.time()
        if now >= SCHEDULE.steps_start_t:
            self._mark("ramp_start_t_unix_s", SCHEDULE.steps_start_t)
            self._mark("hold_start_t_unix_s", SCHEDULE.steps_start_t)
        if now >= SCHEDULE.end_t:
            self._mark("hold_end_t_unix_s", SCHEDULE.end_t)
            return None
        return SETTINGS.users, SETTINGS.open_loop_spawn_rate_per_s
