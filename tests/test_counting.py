"""The counting gate on synthetic data: the dump and strace readers, and the verdict's rules."""
import copy

import pytest

from harness.checks import counts
from harness.model.counting import Sizes, families
from harness.run.counting import CountError, read_dump, read_strace

DUMP = """version: 1
creator: callgrind-3.19.0
events: Ir
ob=/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0
fn=PyList_New
5 100
cob=/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0
cfn=_PyObject_Malloc
calls=7 0
5 70
cob=/lib/x86_64-linux-gnu/libc.so.6
cfn=malloc
calls=3 0
5 30
ob=/work/uvloop/loop.so
fn=uv_alloc
cob=/lib/x86_64-linux-gnu/libc.so.6
cfn=malloc'2
calls=2 0
6 20
cfn=memcpy
calls=9 0
6 9
totals: 12345
"""


def test_a_dump_gives_its_total_and_the_allocator_calls_that_are_not_forwarding():
    # 7 into Python's allocator, 2 mallocs from native code; libpython's own 3 mallocs are its
    # allocator forwarding blocks, not allocations of their own
    assert read_dump(DUMP) == (12345, 9)


def test_a_dump_without_totals_is_refused():
    with pytest.raises(CountError):
        read_dump("events: Ir\nfn=main\n1 2\n")


STRACE = """101 1000.100000 epoll_pwait(3, [], 1024, 0, NULL, 8) = 0
101 1000.200000 read(7, "POST", 65536) = 200
101 1000.300000 write(8, "POST", 200 <unfinished ...>
102 1000.300100 futex(0x1, FUTEX_WAKE, 1) = 0
101 1000.400000 <... write resumed>) = 200
101 2000.100000 read(7, "POST", 65536) = 200
101 2000.200000 write(7, "HTTP", 100) = 100
101 2000.300000 write(7, "HTTP", 100) = 100
--- SIGCHLD {si_signo=SIGCHLD} ---
"""


def test_strace_calls_are_counted_by_name_in_their_window_once_each():
    a, b = read_strace(STRACE, [(1000.0, 1001.0), (2000.0, 2001.0)])
    assert a == {"epoll_pwait": 1, "read": 1, "write": 1, "futex": 1}
    assert b == {"read": 1, "write": 2}
    assert families({"read": 2.0, "recvfrom": 1.0, "writev": 1.0, "epoll_pwait": 3.0}) == {
        "reads": 3.0, "writes": 1.0, "sends": 0.0, "waits": 3.0}


def test_sizes_are_checked_and_strace_gets_its_own():
    for bad in (Sizes(10, 200, 200), Sizes(syscall_n1=300, syscall_n2=250)):
        with pytest.raises(ValueError):
            bad.check()
    calls = Sizes().for_syscalls()
    assert (calls.n1, calls.n2, calls.warmup) == (50, 250, Sizes().warmup)


def _case(name, instructions, reads=2.0, writes=2.0, allocations=50.0, rss=30_000_000):
    return {"case": name, "instructions_per_request": instructions,
            "allocations_per_request": allocations,
            "syscalls_per_request": {"read": reads, "write": writes, "epoll_pwait": 2.0},
            "rss_bytes": rss, "statuses": {"200": 1400}, "reconnects": 0, "missing": ""}


def _record(head_cases, base=50_000.0, base2=50_050.0):
    def build(label, cases):
        return {"label": label, "system": "sluice", "version": "0.1.0 compiled", "commit": "c",
                "cases": cases, "failed": ""}
    return {"schema_version": 1, "builds": [
        build("base", [_case("plain", base), {"case": "refused", "missing": "not declared",
                                              "instructions_per_request": None}]),
        build("head", head_cases),
        build("base~2", [_case("plain", base2)])]}


def test_unchanged_counts_are_ok_and_a_fall_is_reported():
    assert counts.judge(_record([_case("plain", 50_010.0)])).ok
    verdict = counts.judge(_record([_case("plain", 45_000.0)]))
    assert verdict.ok and any("better" in line for line in verdict.lines)
    assert any("refused: not counted (not declared)" in line for line in verdict.lines)


def test_instructions_past_two_percent_fail():
    assert not counts.judge(_record([_case("plain", 50_025.0 * 1.019)])).failed
    verdict = counts.judge(_record([_case("plain", 50_025.0 * 1.021)]))
    assert verdict.failed and "instructions" in verdict.failed[0]


def test_one_more_write_a_request_fails_and_a_wait_does_not():
    verdict = counts.judge(_record([_case("plain", 50_000.0, writes=3.0)]))
    assert verdict.failed == ("plain: writes 2.00 -> 3.00 a request",)
    waits = _case("plain", 50_000.0)
    waits["syscalls_per_request"]["epoll_pwait"] = 5.0
    assert counts.judge(_record([waits])).ok


def test_allocations_and_rss_past_five_percent_fail():
    assert counts.judge(_record([_case("plain", 50_000.0, allocations=52.0)])).ok
    assert counts.judge(_record([_case("plain", 50_000.0, allocations=53.0)])).failed
    assert counts.judge(_record([_case("plain", 50_000.0, rss=31_600_000)])).failed


def test_base_counts_that_disagree_are_a_bug_of_the_counting_not_a_verdict():
    verdict = counts.judge(_record([_case("plain", 50_000.0)], base2=50_200.0))
    assert verdict.nondeterministic == ("plain",) and not verdict.ok
    assert "NOT DETERMINISTIC" in verdict.lines[-1]


def test_a_head_that_could_not_be_counted_fails():
    record = _record([])
    assert counts.judge(record).failed == ("plain: not counted in the head",)
    broken = copy.deepcopy(record)
    broken["builds"][1]["failed"] = "under callgrind: exited with code 1"
    assert counts.judge(broken).failed == ("head could not be counted",)
    assert counts.judge({"builds": broken["builds"][:1]}).failed
