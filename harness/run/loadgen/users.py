"""The user: each sends the run's body with its own request id, judges the answer (unary, or an
SSE stream timed frame by frame) and, in the open loop, waits for the schedule's slots."""
from __future__ import annotations

import random
import re
import time

import gevent
from gevent import GreenletExit
from locust import FastHttpUser, constant, task

from harness.model.dialects import (
    ERROR_BODY_PREFIX_BYTES,
    error_body_dialect,
    frame_content_chars,
    is_error_event,
    unary_content_chars,
)
from harness.model.load_settings import LoadSettings
from harness.run.loadgen.abandon import Streams
from harness.run.loadgen.request_ids import RequestIds
from harness.run.loadgen.rows import RawRows
from harness.run.loadgen.schedule import Schedule

# Locust's dispatcher hands each worker its new users once a second; where in that second each
# starts is drawn from the run's seed (the same draws in every process: each spreads evenly).
SPAWN_BATCH_S = 1.0
# How long a user with no slot to send (the schedule not begun, or ended) waits before asking again.
NO_SLOT_WAIT_S = 1.0
# A failed stream's rest is read away in reads of this size, so its connection stays usable.
RESPONSE_DRAIN_BYTES = 1 << 16


class ChatUser(FastHttpUser):
    """The locustfile binds the run's pieces (``user_class``)."""

    abstract = True
    insecure = True
    slot = None
    settings: LoadSettings
    ids: RequestIds
    rows: RawRows
    schedule: Schedule | None = None
    streams: Streams | None = None  # the in-flight lane's open streams, when it leaves some
    stream = False
    content_frame: re.Pattern      # the client dialect's SSE frame that carries text
    done_frame: re.Pattern         # and the one that ends the stream
    unary_marker: bytes            # what a whole unary answer carries
    start_points: random.Random

    def on_start(self):
        # Locust spawns a second's users at once (its dispatcher sends spawn_rate users a second
        # in one batch); held open for a fixed hold, a batch would answer and send together for
        # the rest of the run. In the in-flight lane each user starts at a random point of its
        # batch's second instead: an even stream of requests, as real traffic is.
        if self.settings.load.inflight_steps:
            gevent.sleep(self.start_points.random() * SPAWN_BATCH_S)

    def context(self):
        # Locust merges this into every request's context: the open-loop slot reaches the row.
        return {"slot": self.slot} if self.slot else {}

    def _judge_error_body(self, resp, body):
        """A failed request's body, judged against the client's dialect, into its row."""
        resp.request_meta["context"]["error_body_dialect"] = error_body_dialect(
            self.settings.dialect, body)

    @task
    def chat(self):
        if self.schedule is not None:
            self.slot = self.schedule.take()
            if self.slot is None:  # the schedule has not begun or has ended: nothing to send
                gevent.sleep(NO_SLOT_WAIT_S)
                return
        try:
            if self.stream:
                self.chat_stream()
                return
            rid, headers, body = self.ids.next()
            with self.client.post(self.settings.chat_path, data=body, headers=headers,
                                  catch_response=True, name="chat",
                                  context={"request_id": rid}) as resp:
                # a body that broke after the head: Locust's record of it, which a verdict below
                # replaces, is the row's cause
                resp.request_meta["context"]["transport_error"] = resp.request_meta["exception"]
                if resp.status_code != 200:
                    self._judge_error_body(resp, resp.content)
                    resp.failure(f"HTTP {resp.status_code}")
                elif not resp.content or self.unary_marker not in resp.content:
                    self._judge_error_body(resp, resp.content)
                    resp.failure("HTTP 200 without a chat completion body")
                else:
                    resp.request_meta["context"]["content_chars"] = unary_content_chars(
                        self.settings.dialect, resp.content)
        except GreenletExit:
            self.rows.killed_inflight += 1
            raise

    def chat_stream(self):
        """Locust times a stream only to its headers, so the frames are timed here: each SSE
        line is read as soon as it is complete (readline, not a fixed-size read that would wait
        for several frames), and the row's latency becomes the whole stream's duration."""
        rid, headers, body = self.ids.next()
        start = time.perf_counter()
        with self.client.post(self.settings.chat_path, data=body, headers=headers,
                              catch_response=True, stream=True, name="chat",
                              context={"request_id": rid}) as resp:
            timing = {"ttfb_ms": round(resp.request_meta["response_time"], 3), "done": False}
            resp.request_meta["context"] = {**resp.request_meta.get("context", {}),
                                            "stream": timing}
            if resp.status_code != 200:
                raw = resp._response  # None when no response arrived (a connection error)
                head = raw.read(ERROR_BODY_PREFIX_BYTES) if raw is not None else b""
                self._judge_error_body(resp, head)
                while raw is not None and raw.read(RESPONSE_DRAIN_BYTES):  # the connection stays usable
                    pass
                resp.failure(f"HTTP {resp.status_code}")
                return
            arrivals, size, chars, error_event, broken = [], 0, 0, False, None
            dialect = self.settings.dialect
            if self.streams is not None:
                self.streams.open(self, resp)
            try:
                while True:
                    line = resp._response.readline(b"\n")
                    if not line:
                        break
                    size += len(line)
                    if line.startswith(b"data:"):
                        if self.done_frame.search(line):
                            timing["done"] = True
                        elif self.content_frame.search(line):
                            arrivals.append(time.perf_counter())
                            chars += frame_content_chars(dialect, line)
                        elif not error_event and is_error_event(dialect, line):
                            error_event = True
            except Exception as exc:
                broken = exc
            context = resp.request_meta["context"]
            context["content_chars"] = chars
            left = self.streams.close(self) if self.streams is not None else None
            if left is not None:  # the client left it (the abandon wave): not the system's doing
                context["abandoned_t_unix_s"] = left[0]
                resp.success()
            elif broken is not None:  # a stream cut short is that system's error
                context["transport_error"] = broken
                resp.failure(f"stream broken after {len(arrivals)} frames: {type(broken).__name__}")
            elif error_event:  # the clean error of a stream already started: a client SDK raises it
                context["stream_error_event"] = True
                context["error_body_dialect"] = "client"
                resp.failure(f"stream ended by its dialect's error event after {len(arrivals)} frames")
            end = time.perf_counter()
            resp.request_meta["response_time"] = (end - start) * 1000.0
            resp.request_meta["response_length"] = size
            timing["chunks"] = len(arrivals)
            if arrivals:
                timing["ttft_ms"] = round((arrivals[0] - start) * 1000.0, 3)
                timing["chunk_gaps_ms"] = " ".join(f"{(b - a) * 1000.0:.3f}"
                                                   for a, b in zip(arrivals, arrivals[1:]))
            elif left is None:
                resp.failure("stream carried no content frame")
        if left is not None:  # it waits for the next step before it sends again
            gevent.sleep(max(0.0, left[1] - time.time()))


def user_class(settings: LoadSettings, ids: RequestIds, rows: RawRows,
               schedule: Schedule | None, streams: Streams | None = None) -> type[ChatUser]:
    """The run's user class, bound to its settings (Locust makes users from the class)."""
    return type("ChatUser", (ChatUser,), {
        "abstract": False, "settings": settings, "ids": ids, "rows": rows, "schedule": schedule,
        "streams": streams,
        "wait_time": constant(settings.load.think_time_s),
        "network_timeout": settings.load.request_timeout_s,
        "connection_timeout": settings.load.request_timeout_s,
        "stream": settings.load.stream,
        "content_frame": re.compile(settings.content_frame.encode()),
        "done_frame": re.compile(settings.done_frame.encode()),
        "unary_marker": settings.unary_marker.encode(),
        "start_points": random.Random(settings.seed)})
