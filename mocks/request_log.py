"""The mock's per-request log: one CSV line per request, one file per worker.

Importing this module starts nothing and does not import aiohttp (nor pandas, until
:func:`read_request_log` runs).

Each worker appends one line per request to ``<stats_dir>/requests-<pid>.csv``
(:class:`RequestLog`; columns: :data:`REQUEST_LOG_COLUMNS`); :func:`read_request_log`
merges the workers' files into one DataFrame.
"""

from __future__ import annotations

import glob
import os
import time

LOG_PREFIX = "requests-"
LOG_SUFFIX = ".csv"


def request_log_file(stats_dir: str, pid: int) -> str:
    return os.path.join(stats_dir, f"{LOG_PREFIX}{pid}{LOG_SUFFIX}")


# How a response ended (the ``ended`` column; faults: mocks.faults).
COMPLETE = "complete"                  # every byte went to the socket (any status, a malformed body too)
CLIENT_CLOSED = "client_closed"        # the client closed its connection before the end
FAULT_RESET = "fault_reset"            # the mock reset the connection mid-body (reset, mid_stream_error)
FAULT_CLOSED = "fault_closed"          # the mock closed it mid-body after a stall (FIN)
FAULT_CUT = "fault_cut"                # a whole chunked body without the dialect's terminal event
FAULT_ERROR_EVENT = "fault_error_event"  # the dialect's error event, then the body's end
NEVER_ANSWERED = "never_answered"      # no head ever went out (no_response), whoever closed
MOCK_CLOSED = "mock_closed"            # the mock's shutdown or a down window closed it first
ENDED = (COMPLETE, CLIENT_CLOSED, FAULT_RESET, FAULT_CLOSED, FAULT_CUT, FAULT_ERROR_EVENT,
         NEVER_ANSWERED, MOCK_CLOSED)

# (column, dtype) in file order; times are wall-clock ns, durations monotonic ns
REQUEST_LOG_COLUMNS = (
    ("request_id", "string"),            # the load generator's id ("" when none was found)
    ("mock_seq", "string"),              # the mock's own <pid>-<seq> (x-mock-request-id)
    ("path", "string"),
    ("worker_pid", "int64"),
    ("status_code", "int64"),            # the head's status; 499: no head went out, or the
                                         # client left before the whole answer
    ("fault", "string"),                 # injected fault ("" = none)
    ("body_end_t_unix_ns", "int64"),     # whole request body read: the hold starts
    ("hold_set_ns", "int64"),            # the hold asked for (setting or x-mock-latency-ms)
    ("hold_applied_ns", "int64"),        # body end -> head write started
    ("head_written_t_unix_ns", "int64"),  # response head handed to the socket
    ("last_frame_written_t_unix_ns", "int64"),  # last byte handed to the socket
    ("bytes_in", "int64"),               # request head + body
    ("bytes_out", "int64"),              # response head + body
    ("arrival_lag_ns", "int64"),         # request's last bytes received -> body end
    ("write_ns", "int64"),               # head write started -> head handed to the socket
    ("peer_port", "int64"),              # the client's (gateway's) source port
    # characters of assistant content handed to the socket in whole, valid JSON (a unary body
    # sent whole, each content frame): what a client can assemble, whatever it re-chunks or
    # translates; 0 for an error, a cut unary body, a malformed one
    ("content_chars_sent", "int64"),
    ("frames_sent", "int64"),            # content frames handed to the socket (the client's
                                         # ``chunks``; the opening, closing and error frames
                                         # are not counted); unary: 0
    ("client_closed_t_unix_ns", "int64"),  # when the client's close reached the mock (its
                                           # connection_lost) before the response ended; 0: it did not
    ("ended", "string"),                 # how the response ended: one of ENDED
)
_LOG_HEADER = (",".join(column for column, _ in REQUEST_LOG_COLUMNS) + "\n").encode()
_LOG_LINE = b"%s,%s,%s,%d,%d,%s,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%s\n"


class RequestLog:
    """One worker's per-request log: a CSV line per request, buffered in memory.

    ``record`` formats the line at once (about a microsecond, spread over the requests)
    so that ``flush`` is only a join and one ``write``: no pause on the event loop long
    enough to show in the holds.  Times are given as ``time.monotonic_ns()`` values (0 for
    ``client_closed_ns``: the client did not leave) and
    written as wall clock (``time.time_ns()`` scale) through an offset that ``flush``
    re-reads: every duration between two logged times is a monotonic one.  At most
    ``max_buffered`` lines wait for a flush; beyond that, and when a write fails, lines
    are dropped and counted in ``dropped``.  Ids and paths are written unquoted: the mock
    only logs ids made of ``[A-Za-z0-9._:-]`` and its own route keys.
    """

    __slots__ = ("path", "pid", "max_buffered", "dropped", "_buf", "_offset_ns", "_fd")

    def __init__(self, stats_dir: str, pid: int | None = None, max_buffered: int = 200_000):
        self.pid = os.getpid() if pid is None else pid
        self.path = request_log_file(stats_dir, self.pid)
        self.max_buffered = max_buffered
        self.dropped = 0
        self._buf: list[bytes] = []
        self._offset_ns = time.time_ns() - time.monotonic_ns()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        os.write(self._fd, _LOG_HEADER)

    def record(self, request_id: str, mock_seq: str, path: str, status: int, fault: str,
               body_end_ns: int, hold_set_ns: int, hold_applied_ns: int, head_written_ns: int,
               last_written_ns: int, bytes_in: int, bytes_out: int, arrival_lag_ns: int,
               write_ns: int, peer_port: int, content_chars: int, frames: int,
               client_closed_ns: int, ended: str) -> None:
        buf = self._buf
        if len(buf) >= self.max_buffered:
            self.dropped += 1
            return
        offset_ns = self._offset_ns
        buf.append(_LOG_LINE % (
            request_id.encode(), mock_seq.encode(), path.encode(), self.pid, status, fault.encode(),
            body_end_ns + offset_ns, hold_set_ns, hold_applied_ns, head_written_ns + offset_ns,
            last_written_ns + offset_ns, bytes_in, bytes_out, arrival_lag_ns, write_ns, peer_port,
            content_chars, frames, client_closed_ns + offset_ns if client_closed_ns else 0, ended.encode()))

    def flush(self) -> None:
        """Append the buffered lines to the file; raises OSError (the lines are dropped)."""
        self._offset_ns = time.time_ns() - time.monotonic_ns()
        buf = self._buf
        if not buf or self._fd < 0:
            return
        self._buf = []
        data = b"".join(buf)
        try:
            while data:  # a regular file takes it in one write; loop for the rare short one
                data = data[os.write(self._fd, data):]
        except OSError:
            self.dropped += data.count(b"\n")
            raise

    def close(self) -> None:
        try:
            self.flush()
        finally:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def read_request_log(stats_dir: str):
    """All workers' request logs in ``stats_dir`` as one pandas DataFrame (columns and
    dtypes: ``REQUEST_LOG_COLUMNS``), sorted by ``body_end_t_unix_ns``.

    Safe while the mock runs: a line still being written (no newline yet) is left out.  A
    log of an older mock, without the later columns, has them as missing values (None),
    never as a plausible measurement.
    """
    import io

    import pandas as pd

    dtypes = dict(REQUEST_LOG_COLUMNS)
    parts = []
    for path in sorted(glob.glob(os.path.join(stats_dir, f"{LOG_PREFIX}*{LOG_SUFFIX}"))):
        with open(path, "rb") as f:
            data = f.read()
        data = data[:data.rfind(b"\n") + 1]
        if data.count(b"\n") <= 1:
            continue
        part = pd.read_csv(io.BytesIO(data), dtype=dtypes, keep_default_na=False)
        for column, _ in REQUEST_LOG_COLUMNS:
            if column not in part:
                part[column] = pd.Series([None] * len(part), index=part.index, dtype=object)
        parts.append(part[[column for column, _ in REQUEST_LOG_COLUMNS]])
    if not parts:
        return pd.DataFrame({column: pd.Series(dtype=dtype) for column, dtype in REQUEST_LOG_COLUMNS})
    merged = pd.concat(parts, ignore_index=True)
    return merged.sort_values("body_end_t_unix_ns", kind="stable", ignore_index=True)
