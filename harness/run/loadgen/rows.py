"""Every request becomes one raw CSV row in <raw_dir>/requests-<host>-<pid>.csv, its header the
raw columns of harness.model.schema.REQUESTS (the harness turns them into requests.parquet), and
its error is classed here. Also kept per process: requests still open when it stopped, and
Locust's own high-CPU warnings. Locust calls these through the events the locustfile wires up."""
from __future__ import annotations

import email.utils
import os
import time

from harness.files import producers
from harness.model.failures import failure_class
from harness.model.load_settings import LoadSettings
from harness.model.schema import REQUESTS

# Rows reach the disk at least this often: a killed load generator loses at most this much.
FLUSH_EVERY_S = 1.0
ROW_BUFFER_BYTES = 1 << 20
ERROR_TEXT_MAX_CHARS = 300
# Words of a failure's text that say the connection, not the answer, failed.
CONNECTION_WORDS = ("connection", "refused", "reset", "broken pipe", "eof",
                    "remotedisconnected", "socket")


def classify(exception, status_code: int) -> tuple[str, str]:
    """(error_kind, error) of a request: "" for a success."""
    if exception is None:
        return "", ""
    text = f"{type(exception).__name__}: {exception}"[:ERROR_TEXT_MAX_CHARS]
    lowered = text.lower()
    if status_code and status_code >= 400:
        return "http", text
    if "timeout" in lowered or "timed out" in lowered:
        return "timeout", text
    if any(word in lowered for word in CONNECTION_WORDS):
        return "connection", text
    if status_code:
        return "http", text
    return "other", text


def retry_after_s(value) -> float | str:
    """A ``Retry-After`` header in seconds: its delta-seconds, or the seconds until its HTTP
    date; "" when absent or unreadable."""
    if not value:
        return ""
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return ""


def transport_error(exception, response, context: dict):
    """The transport's own error behind a failed request, the one its class (harness.model.
    failures) is read from, never the verdict that replaced it ("HTTP 0"): kept in the context
    by a task (a body or stream that broke after the head) or on the response by Locust (no
    answer); else the failure itself."""
    return context.get("transport_error") or getattr(response, "error", None) or exception


class RawRows:
    """This process's raw row file; flushed in batches so the hot path only appends to a buffer."""

    def __init__(self, settings: LoadSettings, host: str):
        self.raw_dir, self.host = settings.raw_dir, host  # pids are unique only per host
        self.overhead_header = settings.self_overhead_header
        self.overhead_scale_ms = settings.self_overhead_scale_ms
        self.writer = None
        self.killed_inflight = 0   # requests still open when the stop timeout killed their user
        self.runner = None
        self.next_flush = 0.0

    def open(self) -> None:
        # the pid is taken here, not on import: Locust's --processes forks after the import
        if self.writer is None:
            self.writer = producers.RawCsv(
                producers.raw_requests_path(self.raw_dir, self.host, os.getpid()),
                REQUESTS.raw_names, buffering=ROW_BUFFER_BYTES)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def maybe_flush(self, now: float) -> None:
        if now >= self.next_flush:
            self.writer.flush()
            self.next_flush = now + FLUSH_EVERY_S

    def _overhead_ms(self, headers) -> float | str:
        """The system's own overhead header, in ms; "" when it reports none."""
        value = headers.get(self.overhead_header) if self.overhead_header else None
        if value:
            try:
                return float(value) * self.overhead_scale_ms
            except ValueError:
                pass
        return ""

    def on_request(self, request_type, name, response_time, response_length, response=None,
                   exception=None, start_time=None, context=None, **kwargs) -> None:
        """Locust's request event: the request's row."""
        if self.writer is None:
            self.open()
        context = context or {}
        status = getattr(response, "status_code", 0) or 0
        headers = getattr(response, "headers", None) or {}
        kind, error = classify(exception, status)
        transport = transport_error(exception, response, context) if exception else None
        if transport is not None and transport is not exception:  # what "HTTP 0" stood for
            error = f"{error} ({type(transport).__name__}: {transport})"[:ERROR_TEXT_MAX_CHARS]
        error_class = failure_class(transport, status) if transport is not None else ""
        if kind and context.get("stream_error_event"):
            error_class = "error_event"
        runner = self.runner
        timing = context.get("stream") or {}
        slot = context.get("slot") or ("", "", "", "")
        self.writer.writerow({
            "start_t_unix_s": (f"{start_time:.6f}" if start_time
                               else f"{time.time() - response_time / 1000:.6f}"),
            "latency_ms": f"{response_time:.3f}", "status_code": status,
            "response_bytes": response_length or 0, "error_kind": kind, "error": error,
            "process_users": runner.user_count if runner else "", "worker_pid": os.getpid(),
            "worker_host": self.host, "mock_request_id": headers.get("x-mock-request-id", ""),
            "self_overhead_ms": self._overhead_ms(headers), "ttfb_ms": timing.get("ttfb_ms", ""),
            "ttft_ms": timing.get("ttft_ms", ""), "chunks": timing.get("chunks", ""),
            "chunk_gaps_ms": timing.get("chunk_gaps_ms", ""), "stream_done": timing.get("done", ""),
            "intended_start_t_unix_s": f"{slot[0]:.6f}" if slot[0] != "" else "",
            "offered_rate_per_s": slot[2], "step_index": slot[1], "waited_for_user": slot[3],
            "request_id": context.get("request_id", ""),
            # a failure the task did not judge (a stream cut short, no response) had no error body
            "error_body_dialect": context.get("error_body_dialect", "none") if kind else "",
            "error_class": error_class,
            "abandoned_t_unix_s": (f"{context['abandoned_t_unix_s']:.6f}"
                                   if "abandoned_t_unix_s" in context else ""),
            "content_chars": context.get("content_chars", ""),
            "retry_after_s": retry_after_s(headers.get("retry-after"))})
        self.maybe_flush(time.monotonic())

    def on_quitting(self) -> None:
        """Requests still unanswered when the stop timeout killed their user never produce a
        row: their count is kept; then the rows are closed."""
        producers.write_inflight_at_stop(self.raw_dir, self.host, os.getpid(),
                                         self.killed_inflight, time.time())
        self.close()


class CpuWarnings:
    """Locust's own high-CPU event in this process (each process fires its own), kept for the
    run manifest: a load generator short of CPU adds its own latency."""

    def __init__(self, raw_dir: str, host: str):
        self.raw_dir, self.host = raw_dir, host
        self.record = {"count": 0, "max_cpu_percent": 0.0, "first_t_unix_s": None}

    def add(self, cpu_percent: float) -> None:
        self.record["count"] += 1
        self.record["max_cpu_percent"] = max(self.record["max_cpu_percent"], float(cpu_percent))
        if self.record["first_t_unix_s"] is None:  # written at once: a killed process keeps it
            self.record["first_t_unix_s"] = time.time()
            self.write()

    def write(self) -> None:
        producers.write_cpu_warnings(self.raw_dir, self.host, os.getpid(), self.record)
