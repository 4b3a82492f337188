"""Every column of every artifact table, once: name, type, unit, meaning, who writes it.

From these tables come the Parquet schemas, the raw CSV header (and so the row order) the load
generator and the samplers write, the casts that turn raw CSV into typed columns, the pandas
dtypes readers use, and the column tables of artifacts/README.md. A new column is one line in
its table; a new table is one ``Table``.

The Locust processes import this module, so it uses the standard library only (the Arrow and
pandas conversions live in harness.files). Each table's format version: harness.model.formats.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.model.failures import FAILURE_CLASSES

# Column types: what a column holds, spelled once for Arrow, pandas and the README.
TYPES = ("string", "float64", "int32", "int64", "bool", "list<float64>")
PANDAS_DTYPES = {"string": "str", "float64": "float64", "int32": "int32", "int64": "int64",
                 "bool": "bool", "list<float64>": "object"}
NUMERIC = ("float64", "int32", "int64")


@dataclass(frozen=True)
class Column:
    name: str
    type: str              # one of TYPES
    unit: str              # "" when the name carries no quantity (ids, labels, counts of things)
    meaning: str
    raw: bool = True       # written by the producer into its raw CSV (False: added when stored)
    stored: bool = True    # a column of the Parquet file (False: raw CSV only)

    def __post_init__(self):
        if self.type not in TYPES:
            raise ValueError(f"column {self.name}: unknown type {self.type!r} (known: {TYPES})")


@dataclass(frozen=True)
class Table:
    name: str
    file: str              # the Parquet file in a run directory
    columns: tuple[Column, ...]

    @property
    def stored(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.stored)

    @property
    def raw(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.raw)

    @property
    def names(self) -> list[str]:
        """The Parquet file's columns, in order."""
        return [c.name for c in self.stored]

    @property
    def raw_names(self) -> list[str]:
        """The raw CSV header: producers write their rows in this order."""
        return [c.name for c in self.raw]

    @property
    def pandas_dtypes(self) -> dict[str, str]:
        return {c.name: PANDAS_DTYPES[c.type] for c in self.stored}

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    def markdown(self) -> str:
        """The README's table of this file's columns; those not in the Parquet file, or not in
        the raw CSV, say so."""
        lines = ["| column | type | unit | meaning |", "|---|---|---|---|"]
        for c in self.columns:
            where = ("raw CSV only: " if not c.stored
                     else "" if c.raw else "added by the harness: ")
            lines.append(f"| `{c.name}` | {c.type} | {c.unit or '—'} | {where}{c.meaning} |")
        return "\n".join(lines)


def _c(name: str, type_: str, unit: str, meaning: str, **where) -> Column:
    return Column(name, type_, unit, meaning, **where)


# Derived columns (raw=False) are filled by the harness when it consolidates the raw CSVs.
REQUESTS = Table("requests", "requests.parquet", (
    _c("run_id", "string", "", "the run", raw=False),
    _c("system", "string", "", "the system under test", raw=False),
    _c("start_t_unix_s", "float64", "s since the Unix epoch",
       "when the request was sent (client clock)"),
    _c("latency_ms", "float64", "ms",
       "send to last byte of the response, as the load generator saw it (unrounded)"),
    _c("status_code", "int32", "", "HTTP status; 0 when no response arrived"),
    _c("response_bytes", "int64", "bytes", "response body size"),
    _c("error_kind", "string", "",
       "`\"\"` (success), `http` (status ≥ 400, a bad body, or a stream ended by its "
       "dialect's error event: `error_class` `error_event`), `timeout`, `connection`, `other`; `truncated` (set when stored: "
       "a 200 without its dialect's terminal event, whose assembled content is shorter than "
       "what the provider sent on the attempt that answered, or answered from an attempt the "
       "provider broke off: a failure, never a success)"),
    _c("error", "string", "", "the error message, `\"\"` when none"),
    _c("process_users", "float64", "users",
       "users running in this Locust process when the request ended (empty when unknown); "
       "the harness turns it into `users`", stored=False),
    _c("users", "int32", "users", "users running in the whole load generator at that moment",
       raw=False),
    _c("phase", "string", "",
       "`warmup`, `ramp`, `hold` or `tail` (after the hold, before stop), from the run's phases",
       raw=False),
    _c("worker_pid", "int32", "", "the Locust process that sent it"),
    _c("worker_host", "string", "",
       "the host it ran on: the topology's host name (this machine's hostname without one)"),
    _c("mock_request_id", "string", "",
       "the mock's `x-mock-request-id` echoed back; `\"\"` if the system dropped it"),
    _c("self_overhead_ms", "float64", "ms",
       "the system's own overhead header, in ms; NaN when it reports none"),
    _c("ttfb_ms", "float64", "ms", "streaming lane: send to the response head; NaN for unary requests"),
    _c("ttft_ms", "float64", "ms", "streaming lane: send to the first SSE frame carrying content"),
    _c("chunks", "int32", "frames", "streaming lane: content frames received (0 for unary requests)"),
    _c("chunk_gaps_ms", "list<float64>", "ms",
       "streaming lane: the gap before each content frame after the first, as they arrived "
       "(raw CSV: space-separated)"),
    _c("stream_done", "bool", "", "streaming lane: the stream ended with its dialect's done frame"),
    _c("intended_start_t_unix_s", "float64", "s since the Unix epoch",
       "open-loop lane: the schedule's slot for this request, when it was meant to start; NaN in "
       "closed loop. Latency from the intended start = (`start_t_unix_s` − this) × 1000 + "
       "`latency_ms`"),
    _c("offered_rate_per_s", "float64", "requests/s",
       "open-loop lane: the offered rate of the slot's step (the warm-up runs at the first rate); "
       "NaN in closed loop"),
    _c("step_index", "int32", "",
       "open-loop lane: 1, 2, … for the steps, 0 for the warm-up and in closed loop"),
    _c("waited_for_user", "bool", "",
       "open-loop lane: the slot fell due while every user was busy and waited for the next free "
       "one (that wait is in the latency from the intended start)"),
    _c("request_id", "string", "",
       "the load generator's id of this request (`<run>-<pid>-<salt>-<seq>`), sent as the "
       "`x-request-id` header and as `[rid:<id>]` in the last user message"),
    _c("mock_service_ms", "float64", "ms",
       "the mock's time for this request, from its request log: request's last bytes received → "
       "last response byte handed to the socket (the last attempt's, if the system retried); "
       "NaN when the mock never logged this id", raw=False),
    _c("net_overhead_ms", "float64", "ms",
       "`latency_ms` − `mock_service_ms`: the client's, the network's and the system's time, "
       "none of the mock's; NaN when unmatched", raw=False),
    _c("wire_request_path_us", "float64", "µs",
       "from the capture: last byte of the system's request to the mock − last byte of the "
       "client's request to the system; NaN outside the capture window or unjoined", raw=False),
    _c("wire_response_path_us", "float64", "µs",
       "from the capture: first byte of the system's response to the client − first byte of "
       "the mock's response to the system", raw=False),
    _c("wire_in_gateway_us", "float64", "µs",
       "`wire_request_path_us` + `wire_response_path_us`: the time the system adds, on the wire",
       raw=False),
    _c("wire_mock_us", "float64", "µs",
       "from the capture: first byte of the mock's response − last byte of the request it got "
       "(for the floor, direct, the only wire figure)", raw=False),
    _c("error_body_dialect", "string", "",
       "a failed request's body, judged on its first 16 KiB: `client` (the error shape of the "
       "client's dialect: OpenAI `{\"error\": {\"message\", \"type\"}}`, Anthropic "
       "`{\"type\": \"error\", \"error\": {\"type\", \"message\"}}`), `other` (JSON of "
       "another shape), `none` (empty, not JSON, or no response); `\"\"` for a success"),
    _c("error_class", "string", "",
       "a failed request's cause, classified at the client from the transport's own error "
       "(harness/model/failures.py defines each): "
       + ", ".join(f"`{c}`" for c in FAILURE_CLASSES) + "; `\"\"` for a success"),
    _c("abandoned_t_unix_s", "float64", "s since the Unix epoch",
       "in-flight lane: when the client closed this stream mid-way (its abandon phase; the row "
       "is neither a success nor a failure); NaN when the client did not leave"),
    _c("content_chars", "float64", "characters",
       "the assistant content the client assembled: a stream's content deltas, a unary "
       "answer's message content (the unit of the provider's `content_chars_sent`, which "
       "survives re-chunking and translation); NaN when no answer was read"),
    _c("retry_after_s", "float64", "s",
       "the answer's `Retry-After` header, in seconds (an HTTP date: seconds from the answer "
       "until then); NaN when it carried none"),
    _c("content_chars_sent", "float64", "characters",
       "the provider's `content_chars_sent` on the attempt that answered (the one whose "
       "`x-mock-request-id` came back, else the last attempt that was not an error); NaN when "
       "the provider never logged this id", raw=False),
))

SAMPLES = Table("samples", "samples.parquet", (
    _c("run_id", "string", "", "the run", raw=False),
    _c("system", "string", "", "the run's system under test", raw=False),
    _c("t_unix_s", "float64", "s since the Unix epoch", "sample time"),
    _c("role", "string", "", "`system` (the system under test), `mock`, `standby` (the "
       "standby provider, when the fault scenario has one), `locust`, `capture` (tcpdump, "
       "during the wire capture), `machine`"),
    _c("pid_count", "int32", "processes", "processes in the role's tree at that moment"),
    _c("rss_bytes", "int64", "bytes",
       "resident memory summed over the role's whole process tree (for `machine`: used memory)"),
    _c("cpu_percent", "float64", "% of one core",
       "CPU used by the tree since the previous sample (100 = one core busy; `machine`: all "
       "cores, so up to 200 on 2 cores)"),
    _c("cpu_seconds_total", "float64", "s",
       "cumulative CPU seconds of the tree's processes, each thread's time on a CPU from "
       "/proc/<pid>/task/<tid>/schedstat (to the ns; psutil's user+system clock ticks where "
       "the kernel keeps no schedstat); a process that exited keeps its last value"),
    _c("num_fds", "int32", "descriptors", "open file descriptors over the tree"),
    _c("load_avg_1m", "float64", "runnable tasks", "the machine's 1-minute load average"),
    _c("inflight_requests", "float64", "requests",
       "requests the system reports in flight (its `[metrics] inflight_gauge`); NaN when it has none"),
    _c("host", "string", "",
       "the host the sample was taken on (the topology's name; this machine's hostname without "
       "one). Multi-host: each host has its own `machine` rows, and `locust` rows per host (the "
       "master's, and the sum of the workers on a worker host)"),
))

# The mock's per-request log (mocks.request_log.REQUEST_LOG_COLUMNS), restricted to the run's load.
MOCK_REQUESTS = Table("mock_requests", "mock_requests.parquet", (
    _c("run_id", "string", "", "the run", raw=False),
    _c("system", "string", "", "the run's system under test", raw=False),
    _c("provider", "string", "",
       "the mock that served it: `primary`, or `standby` (the second mock a fault scenario "
       "such as `failover` starts); an artifact from before the column reads as `primary`",
       raw=False),
    _c("request_id", "string", "",
       "the load generator's id (last `[rid:<id>]` in the body, else `x-request-id`); "
       "`\"\"` when none was found"),
    _c("mock_seq", "string", "", "the mock's own `<pid>-<seq>` (its `x-mock-request-id`)"),
    _c("path", "string", "", "the route the mock served"),
    _c("worker_pid", "int64", "", "the mock worker that served it"),
    _c("status_code", "int64", "",
       "the status of the head the mock wrote; 499: no head went out, or the client left before "
       "the whole answer"),
    _c("fault", "string", "",
       "the injected fault (mocks/faults.py): `status:<code>`, `overloaded`, `slow`, `reset`, "
       "`stall`, `malformed`, `mid_stream_error:event`, `mid_stream_error:reset`, `stream_cut`, "
       "`no_response`, `non_retriable`; `\"\"` for none"),
    _c("body_end_t_unix_ns", "int64", "ns since the Unix epoch",
       "the whole request body read: the hold starts"),
    _c("hold_set_ns", "int64", "ns", "the hold asked for (setting or `x-mock-latency-ms`)"),
    _c("hold_applied_ns", "int64", "ns", "body end → response head write started"),
    _c("head_written_t_unix_ns", "int64", "ns since the Unix epoch",
       "response head handed to the socket"),
    _c("last_frame_written_t_unix_ns", "int64", "ns since the Unix epoch",
       "last response byte handed to the socket"),
    _c("bytes_in", "int64", "bytes", "request head + body"),
    _c("bytes_out", "int64", "bytes", "response head + body"),
    _c("arrival_lag_ns", "int64", "ns", "request's last bytes received → body read"),
    _c("write_ns", "int64", "ns", "head write started → head handed to the socket"),
    _c("peer_port", "int64", "", "the client's (the system's) source port"),
    _c("content_chars_sent", "int64", "characters",
       "assistant content handed to the socket in whole, valid JSON (a unary body sent whole; "
       "each content frame of a stream): what a client can assemble, whatever it re-chunks or "
       "translates; 0 for an error answer, a cut unary body, a malformed one; missing before "
       "version 4"),
    _c("frames_sent", "int64", "frames",
       "content frames handed to the socket (the frames the client's `chunks` counts; the "
       "opening, closing and error frames are not counted); 0 for a unary answer; missing "
       "before version 4"),
    _c("client_closed_t_unix_ns", "int64", "ns since the Unix epoch",
       "when the client's (the system's) close of its connection reached the mock, before the "
       "response ended (noticed between frames: the stream stops writing at once); 0 when the "
       "client did not leave first; missing before version 4"),
    _c("ended", "string", "",
       "how the response ended: `complete` (every byte went out, whatever the status), "
       "`client_closed` (the client closed first), `fault_reset` (the mock reset the connection "
       "mid-body: `reset`, `mid_stream_error:reset`), `fault_closed` (the mock closed it "
       "mid-body after a `stall`), `fault_cut` (`stream_cut`: a whole chunked body without the "
       "dialect's terminal event), `fault_error_event` (`mid_stream_error:event`: the dialect's "
       "error event, then the body's end), `never_answered` (`no_response`: no head ever went "
       "out; `client_closed_t_unix_ns` says when the client gave up, 0 when the mock stopped "
       "first), `mock_closed` (the mock's shutdown or a `down` window closed it first); "
       "missing before version 4"),
))

# The in-flight lane's health probe during a streamed run that leaves streams: one row a probe.
PROBES = Table("probes", "probes.parquet", (
    _c("run_id", "string", "", "the run", raw=False),
    _c("system", "string", "", "the run's system under test", raw=False),
    _c("t_unix_s", "float64", "s since the Unix epoch", "when the probe was sent"),
    _c("latency_ms", "float64", "ms", "until its whole answer (or its error)"),
    _c("status_code", "int32", "", "its answer's status; 0 when none came"),
    _c("error", "string", "", "why it got no answer; `\"\"` when it did"),
))

TABLES = {t.name: t for t in (REQUESTS, SAMPLES, MOCK_REQUESTS, PROBES)}


def missing_value(column: Column):
    """What a column absent from an older artifact holds when loaded: missing, never a
    plausible measurement (no 0, no False, no empty string)."""
    return float("nan") if column.type == "float64" else None
