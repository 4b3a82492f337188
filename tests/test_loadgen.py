"""The load generator's pieces that need no Locust (harness/run/loadgen/): each request's row and
its error's kind, the request ids (one prefix per process, forked ones included), and the open-
loop schedule's slots and backlog. The user class and the shapes run under Locust, in a
subprocess: tests/test_failures.py and tests/test_load_shapes.py."""
from __future__ import annotations

import csv
import os
import socket
from types import SimpleNamespace

from locust_settings import load_settings

from harness.model.schema import REQUESTS
from harness.run.loadgen import request_ids, rows, schedule

# --- the error classifier ----------------------------------------------------------------------

def test_a_success_has_no_error_kind():
    assert rows.classify(None, 200) == ("", "")


def test_each_failure_gets_its_kind_and_a_bounded_text():
    assert rows.classify(RuntimeError("HTTP 503"), 503) == ("http", "RuntimeError: HTTP 503")
    # an error status wins over the words of the text
    assert rows.classify(TimeoutError("timed out"), 504)[0] == "http"
    assert rows.classify(TimeoutError("timed out"), 0)[0] == "timeout"
    assert rows.classify(OSError("Connection refused"), 0)[0] == "connection"
    assert rows.classify(OSError("Broken pipe"), 0)[0] == "connection"
    assert rows.classify(ValueError("no completion in the body"), 200)[0] == "http"
    assert rows.classify(ValueError("x"), 0)[0] == "other"
    kind, text = rows.classify(ValueError("y" * 1000), 0)
    assert kind == "other" and len(text) == rows.ERROR_TEXT_MAX_CHARS


def test_the_transport_error_is_the_tasks_then_locusts_then_the_failure():
    failure, kept, locusts = ValueError("HTTP 0"), OSError("reset"), OSError("refused")
    assert rows.transport_error(failure, SimpleNamespace(error=locusts),
                                {"transport_error": kept}) is kept
    assert rows.transport_error(failure, SimpleNamespace(error=locusts), {}) is locusts
    assert rows.transport_error(failure, None, {}) is failure


# --- the row -----------------------------------------------------------------------------------

def _written(tmp_path, **settings) -> tuple[rows.RawRows, list[dict]]:
    raw = rows.RawRows(load_settings(tmp_path, **settings), "host-a")
    raw.runner = SimpleNamespace(user_count=7)
    ok = SimpleNamespace(status_code=200, headers={"x-mock-request-id": "m1", "x-overhead": "2.5"})
    raw.on_request("POST", "chat", 12.5, 100, response=ok, start_time=1000.25,
                   context={"request_id": "r1", "slot": (999.5, 2, 40.0, True)})
    refused = ConnectionRefusedError(111, "Connection refused")
    raw.on_request("POST", "chat", 3.0, 0, response=SimpleNamespace(status_code=0, headers={}),
                   exception=refused, start_time=1000.5, context={"request_id": "r2"})
    raw.on_quitting()
    (path,) = (tmp_path / "raw").glob("requests-*.csv")
    assert path.name == f"requests-host-a-{os.getpid()}.csv"
    with open(path, newline="") as f:
        return raw, list(csv.DictReader(f))


def test_every_request_is_one_row_of_the_raw_columns(tmp_path):
    _, (ok, failed) = _written(tmp_path, self_overhead_header="x-overhead",
                               self_overhead_scale_ms=1000.0)
    assert list(ok) == REQUESTS.raw_names
    assert ok["start_t_unix_s"] == "1000.250000" and ok["latency_ms"] == "12.500"
    assert (ok["status_code"], ok["error_kind"], ok["error_class"]) == ("200", "", "")
    assert ok["self_overhead_ms"] == "2500.0" and ok["mock_request_id"] == "m1"
    assert (ok["process_users"], ok["worker_host"], ok["request_id"]) == ("7", "host-a", "r1")
    # the open-loop slot: intended start, step, offered rate, waited for a user
    assert (ok["intended_start_t_unix_s"], ok["step_index"], ok["offered_rate_per_s"],
            ok["waited_for_user"]) == ("999.500000", "2", "40.0", "True")
    assert ok["error_body_dialect"] == ""
    assert (failed["error_kind"], failed["error_class"]) == ("connection", "connect_refused")
    assert failed["error_body_dialect"] == "none"   # no answer: no error body was judged
    assert failed["intended_start_t_unix_s"] == "" and failed["self_overhead_ms"] == ""


def test_a_system_without_an_overhead_header_reports_none(tmp_path):
    _, (ok, _) = _written(tmp_path)
    assert ok["self_overhead_ms"] == ""


def test_requests_killed_at_stop_are_counted(tmp_path):
    raw = rows.RawRows(load_settings(tmp_path), socket.gethostname())
    (tmp_path / "raw").mkdir()      # the harness makes it before Locust starts
    raw.killed_inflight = 3
    raw.on_quitting()
    (path,) = (tmp_path / "raw").glob("inflight-*.json")
    assert '"inflight_at_stop": 3' in path.read_text()


# --- the request ids ---------------------------------------------------------------------------

def test_each_request_carries_its_id_in_the_header_and_the_body(tmp_path):
    ids = request_ids.RequestIds(load_settings(tmp_path, run_id="nginx 1/x", headers={"a": "b"}))
    rid, headers, body = ids.next()
    second, _, _ = ids.next()
    assert rid.startswith(f"nginx.1.x-{os.getpid()}-") and rid.endswith("-1")
    assert second == rid[:-1] + "2"
    assert list(headers) == ["x-request-id", "Content-Type", "a"] and headers["x-request-id"] == rid
    assert body == b'{"messages": [{"role": "user", "content": "[rid:' + rid.encode() + b'] "}]}'


def test_a_forked_process_gets_its_own_ids(tmp_path):
    """Locust's --processes forks after the locustfile is imported: each child begins its own
    prefix at Locust's init, so no two processes send the same id."""
    ids = request_ids.RequestIds(load_settings(tmp_path))
    ids.begin()                     # the parent, at its init
    read, write = os.pipe()
    child = os.fork()
    if child == 0:                  # the child: its init, then its first request
        try:
            ids.begin()
            os.write(write, ids.next()[0].encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    with os.fdopen(read, "rb") as f:
        child_id = f.read().decode()
    parent_id = ids.next()[0]
    assert child_id and child_id != parent_id
    assert child_id.split("-")[-3] == str(child) and parent_id.split("-")[-3] == str(os.getpid())


# --- the open-loop schedule --------------------------------------------------------------------

def test_slots_are_the_warmup_at_the_first_rate_then_each_step():
    slots = list(schedule.slots(100.0, (2.0, 4.0), 1.0, 1.5))
    starts = [s[0] for s in slots]
    assert [s[1] for s in slots] == [0, 0, 0, 1, 1, 2, 2, 2, 2]
    assert starts == [100.0, 100.5, 101.0, 101.5, 102.0, 102.5, 102.75, 103.0, 103.25]
    assert {s[2] for s in slots if s[1] == 2} == {4.0}
    assert [s[1] for s in schedule.slots(0.0, (10.0,), 1.0, 0.0)] == [1] * 10   # no warm-up


def test_slots_due_with_no_user_free_wait_in_order_and_say_so():
    sched = schedule.Schedule((4.0,), 1.0, 0.0)
    assert sched.take() is None                       # not begun: nothing to send
    sched.t0 = 0.0                                    # long past: every slot is due at once
    sched.dispatch()
    taken = [sched.take() for _ in range(4)]
    assert taken == [(k / 4, 1, 4.0, True) for k in range(4)]
    assert sched.take() is None and sched.done        # the schedule has ended
    assert sched.end_t == 1.0


def test_closed_loop_has_no_schedule(tmp_path):
    assert schedule.Schedule.of(load_settings(tmp_path)) is None
    open_loop = schedule.Schedule.of(load_settings(tmp_path, open_loop_rates_per_s=(5.0,),
                                                   open_loop_step_s=2.0, warmup_s=1.0))
    assert (open_loop.rates, open_loop.step_s, open_loop.warmup_s) == ((5.0,), 2.0, 1.0)
