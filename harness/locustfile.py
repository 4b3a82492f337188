"""The load generator, run by Locust as a subprocess (never imported by the harness or a notebook).

Settings come from the JSON file named by SLUICE_LOAD_FILE (written by harness/load.py).
Every request becomes one raw CSV row in <raw_dir>/requests-<pid>.csv; the harness turns
them into requests.parquet. The shape writes its phase timestamps to <phases_file>.
"""
import csv
import json
import math
import os
import re
import socket
import time

from gevent import GreenletExit
from locust import FastHttpUser, LoadTestShape, constant, events, task

SETTINGS = json.load(open(os.environ["SLUICE_LOAD_FILE"]))
HOSTNAME = socket.gethostname()
RAW_COLUMNS = ["start_t_unix_s", "latency_ms", "status_code", "response_bytes", "error_kind",
               "error", "process_users", "worker_pid", "worker_host", "mock_request_id",
               "self_overhead_ms", "ttfb_ms", "ttft_ms", "chunks", "chunk_gaps_ms", "stream_done"]
STREAM = SETTINGS["stream"]
# An OpenAI SSE frame that carries text: a non-empty "content" string in its delta.
CONTENT_FRAME = re.compile(rb'"content"\s*:\s*"[^"]')

_body = json.dumps({
    "model": SETTINGS["model"],
    "messages": [{"role": "system", "content": "You are a helpful assistant."},
                 {"role": "user", "content": "Say hello in a few words."}],
    "max_tokens": SETTINGS["max_tokens"],
    **({"stream": True} if STREAM else {}),
}).encode()
_headers = {"Content-Type": "application/json", **SETTINGS["headers"]}
_overhead_header = SETTINGS["self_overhead_header"]
_overhead_scale = SETTINGS["self_overhead_scale_ms"]


class RawRows:
    """Per-process raw row file; flushed in batches so the hot path only appends to a buffer."""

    def __init__(self):
        self.file = None
        self.writer = None
        self.killed_inflight = 0
        self.runner = None
        self.next_flush = 0.0

    def maybe_flush(self, now):
        # Rows reach the disk at least once a second: a killed load generator loses at most that.
        if now >= self.next_flush:
            self.file.flush()
            self.next_flush = now + 1.0

    def open(self):
        if self.file is None:
            os.makedirs(SETTINGS["raw_dir"], exist_ok=True)
            path = os.path.join(SETTINGS["raw_dir"], f"requests-{os.getpid()}.csv")
            self.file = open(path, "w", newline="", buffering=1 << 20)
            self.writer = csv.writer(self.file)
            self.writer.writerow(RAW_COLUMNS)

    def close(self):
        if self.file is not None:
            self.file.flush()
            self.file.close()
            self.file = None


ROWS = RawRows()


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
    runner = ROWS.runner
    timing = (context or {}).get("stream") or {}
    ROWS.writer.writerow([
        f"{start_time:.6f}" if start_time else f"{time.time() - response_time / 1000:.6f}",
        f"{response_time:.3f}", status, response_length or 0, kind, error,
        runner.user_count if runner else "", os.getpid(), HOSTNAME,
        headers.get("x-mock-request-id", ""), overhead,
        timing.get("ttfb_ms", ""), timing.get("ttft_ms", ""), timing.get("chunks", ""),
        timing.get("chunk_gaps_ms", ""), timing.get("done", "")])
    ROWS.maybe_flush(time.monotonic())


@events.init.add_listener
def on_init(environment, **kwargs):
    ROWS.runner = environment.runner
    ROWS.open()


@events.quitting.add_listener
def on_quitting(environment, **kwargs):
    # Requests still unanswered when the stop timeout killed their user never produce a row.
    path = os.path.join(SETTINGS["raw_dir"], f"inflight-{os.getpid()}.json")
    with open(path, "w") as f:
        json.dump({"inflight_at_stop": ROWS.killed_inflight, "t_unix_s": time.time()}, f)
    ROWS.close()


class ChatUser(FastHttpUser):
    wait_time = constant(SETTINGS["think_time_s"])
    network_timeout = SETTINGS["request_timeout_s"]
    connection_timeout = SETTINGS["request_timeout_s"]
    insecure = True

    @task
    def chat(self):
        try:
            if STREAM:
                self.chat_stream()
                return
            with self.client.post(SETTINGS["chat_path"], data=_body, headers=_headers,
                                  catch_response=True, name="chat") as resp:
                if resp.status_code != 200:
                    resp.failure(f"HTTP {resp.status_code}")
                elif not resp.content or b'"choices"' not in resp.content:
                    resp.failure("HTTP 200 without a chat completion body")
        except GreenletExit:
            ROWS.killed_inflight += 1
            raise

    def chat_stream(self):
        """Locust times a stream only to its headers, so the frames are timed here: each SSE
        line is read as soon as it is complete (readline, not a fixed-size read that would wait
        for several frames), and the row's latency becomes the whole stream's duration."""
        start = time.perf_counter()
        with self.client.post(SETTINGS["chat_path"], data=_body, headers=_headers,
                              catch_response=True, stream=True, name="chat") as resp:
            timing = {"ttfb_ms": round(resp.request_meta["response_time"], 3), "done": False}
            resp.request_meta["context"] = {**resp.request_meta.get("context", {}),
                                            "stream": timing}
            if resp.status_code != 200:
                resp._response.read()  # drain the error body: the connection stays usable
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
                        if line[5:].strip() == b"[DONE]":
                            timing["done"] = True
                        elif CONTENT_FRAME.search(line):
                            arrivals.append(time.perf_counter())
            except Exception as exc:  # a stream cut short is that system's error
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


class StudyShape(LoadTestShape):
    """Warm-up, a linear ramp to the target, a hold that lasts until both its duration and its
    request count are met (bounded by max_hold_s), then stop. Phase starts go to a file."""

    use_common_options = False

    def __init__(self):
        super().__init__()
        self.phases = {}
        self.requests_at_hold_start = None

    def _mark(self, name):
        if name not in self.phases:
            self.phases[name] = time.time()
            with open(SETTINGS["phases_file"], "w") as f:
                json.dump(self.phases, f)

    def tick(self):
        t = self.get_run_time()
        warmup, ramp = SETTINGS["warmup_s"], SETTINGS["ramp_s"]
        users, warm_users = SETTINGS["users"], SETTINGS["warmup_users"]
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
        count_met = total - self.requests_at_hold_start >= SETTINGS["min_hold_requests"]
        if (held < SETTINGS["hold_s"] or not count_met) and held < SETTINGS["max_hold_s"]:
            return users, spawn_rate
        self._mark("hold_end_t_unix_s")
        return None
