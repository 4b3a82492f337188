"""The counting gate on synthetic data: the dump and strace readers, and the verdict's rules."""

import pytest

from harness.model.count_cases import Sizes, families
from harness.run.count_system import CountError, read_dump, read_strace

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


def test_each_case_scales_its_phases_to_about_the_same_work():
    from harness.model.count_cases import GATE_CASES, CountCase
    refused = Sizes().of(CountCase("refused", scale=4.5))
    assert (refused.n1, refused.n2, refused.warmup, refused.syscall_n2) == (900, 4500, 50, 250)
    # Sluice's instructions a request in each case, times its requests between the phases
    sluice = {"plain": 53e3, "features": 74e3, "stream": 215e3, "anthropic_to_openai": 110e3,
              "openai_to_anthropic": 120e3, "refused": 21e3, "rate_limited": 44e3}
    work = [sluice[c.name] * (Sizes().of(c).n2 - Sizes().of(c).n1) for c in GATE_CASES]
    assert min(work) >= 75e6 and max(work) <= 90e6


def test_every_build_directory_has_one_length():
    from harness.run.count_system import LABEL_WIDTH, _same_length
    names = [_same_length(label) for label in ("head", "base", "base~2")]
    assert {len(n) for n in names} == {LABEL_WIDTH} and len(set(names)) == 3


def _record(cases: dict[str, tuple[float, float, float]]) -> dict:
    """Head, base and base again, one instruction count a request each, per case."""
    def build(label, i):
        return {"label": label, "system": "sluice", "cases": [
            {"case": name, "instructions_per_request": counts[i], "allocations_per_request": 10.0,
             "rss_bytes": 1000, "syscalls_per_request": {"read": 1.0, "write": 1.0}}
            for name, counts in cases.items()]}
    return {"builds": [build("head", 0), build("base", 1), build("base~2", 2)]}


def test_the_base_counts_agree_within_the_share_or_the_floor_whichever_is_more():
    from harness.verdicts.count_verdict import DETERMINISM, DETERMINISM_FLOOR, judge
    cheap = 21_500            # a 401: the floor is the wider bound
    dear = 330_000            # a stream: the share is
    assert DETERMINISM * cheap < DETERMINISM_FLOOR < DETERMINISM * dear
    ok = judge(_record({"refused": (cheap, cheap, cheap + DETERMINISM_FLOOR - 1),
                        "stream": (dear, dear, dear * (1 + DETERMINISM) - 1)}))
    assert ok.ok, ok.lines
    off = judge(_record({"refused": (cheap, cheap, cheap + DETERMINISM_FLOOR + 1),
                         "stream": (dear, dear, dear * (1 + DETERMINISM) + 1)}))
    assert off.nondeterministic == ("refused", "stream") and not off.ok
    assert "NOT DETERMINISTIC" in off.lines[-1]


def test_a_rise_over_the_limit_fails_and_a_fall_is_reported():
    from harness.verdicts.count_verdict import INSTRUCTIONS_RISE, judge
    worse = judge(_record({"plain": (53_000 * (1 + INSTRUCTIONS_RISE) + 50, 53_000, 53_000)}))
    assert not worse.ok and worse.failed == ("plain: instructions +2.1%",)
    better = judge(_record({"plain": (50_000, 53_000, 53_000)}))
    assert better.ok and "better" in better.lines[0]


def test_a_system_is_given_its_declared_start_time_under_valgrind(tmp_path, monkeypatch):
    import dataclasses

    from harness.model.gateway_spec import load_gateway_spec
    from harness.run import count_system

    asked = []

    def start_system(spec, run_dir, url, provider_port, workers, ready_timeout_s, **kw):
        asked.append(ready_timeout_s)
        raise OSError("not started here")

    monkeypatch.setattr(count_system, "start_system", start_system)
    nginx = load_gateway_spec("nginx")
    for spec in (nginx, dataclasses.replace(nginx, counted_ready_timeout_s=1200.0)):
        with pytest.raises(CountError, match="not started here"):
            count_system._run_cases(spec, (), Sizes(), tmp_path, (), {}, 1,
                                    lambda *a: None, lambda s: None)
    assert asked == [count_system.READY_TIMEOUT_S, 1200.0]
