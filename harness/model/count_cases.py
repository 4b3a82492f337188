"""What the counting gate and lane count: the cases, the sizes, the system-call families.

Definitions only (harness/run/count_system.py counts; harness/verdicts/count_verdict.py judges).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

# Families judged by the gate: a rise in these is work, not timing. Waits (epoll_wait and its
# kin) depend on how the loop found its sockets and are shown apart, never judged.
IO_FAMILIES = {"reads": ("read", "readv", "recvfrom", "recvmsg", "recvmmsg", "pread64"),
               "writes": ("write", "writev", "pwrite64"),
               "sends": ("sendto", "sendmsg", "sendmmsg", "sendfile", "splice")}
WAITS = ("epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "select", "pselect6",
         "io_uring_enter")


@dataclass(frozen=True)
class CountCase:
    """One kind of request: ``feature`` of the system's gateway.toml ("" = its [request])."""
    name: str
    feature: str = ""
    stream: bool = False
    what: str = ""
    scale: float = 1.0    # its phases under Valgrind hold Sizes' n1 and n2 times this


# Every case the gate counts; a system that declares no such feature skips the case, saying so.
# The scales give every case's phases about the same work in Sluice (~80M instructions between
# N2 and N1): a timer firing more in one phase than in the other (~40k instructions under
# Valgrind, the 10-Hz tick) is then ~0.05% of any case, the cheap 401 as much as the stream.
GATE_CASES = (
    CountCase("plain", "passthrough", what="the relay alone: a key without limits, no alias", scale=2.0),
    CountCase("features", "", what="as the study calls it: key, alias, budget, validate_json",
              scale=1.35),
    CountCase("stream", "", stream=True, what="the same, streamed: 10 frames, one read each",
              scale=0.5),
    CountCase("anthropic_to_openai", "anthropic_to_openai", what="translated both ways", scale=0.9),
    CountCase("openai_to_anthropic", "openai_to_anthropic", what="translated both ways",
              scale=0.85),
    CountCase("refused", "refused", what="a key the gateway does not know: 401", scale=4.5),
    CountCase("rate_limited", "rate_limited", what="a key past its rate limit: 429", scale=2.3),
)
# The study's counting lane: what every system can be asked.
LANE_CASES = (CountCase("plain", "passthrough", what="the relay"),
              CountCase("stream", "passthrough", stream=True, what="10 frames, one read each"))


@dataclass(frozen=True)
class Sizes:
    """Requests per phase: warm-up, then N2 and N1 under Valgrind; natively under strace, fewer
    (a system call is a whole number: 200 requests between the phases tell 0.005 a request)."""
    warmup: int = 50
    n1: int = 200
    n2: int = 1000
    syscall_n1: int = 50
    syscall_n2: int = 250

    def check(self) -> None:
        if not (0 <= self.warmup and 0 < self.n1 < self.n2
                and 0 < self.syscall_n1 < self.syscall_n2):
            raise ValueError(f"count sizes: need 0 <= warmup, 0 < n1 < n2 and "
                             f"0 < syscall_n1 < syscall_n2, got {self}")

    def for_syscalls(self) -> "Sizes":
        return replace(self, n1=self.syscall_n1, n2=self.syscall_n2)

    def of(self, case: CountCase) -> "Sizes":
        """The phases of ``case`` under Valgrind (its scale; the warm-up and strace's as they are)."""
        return replace(self, n1=max(1, round(self.n1 * case.scale)),
                       n2=max(2, round(self.n2 * case.scale)))


def families(per_request: dict[str, float]) -> dict[str, float]:
    """The judged families (reads, writes, sends) and the waits, summed from calls by name."""
    out = {fam: sum(per_request.get(n, 0.0) for n in names) for fam, names in IO_FAMILIES.items()}
    out["waits"] = sum(per_request.get(n, 0.0) for n in WAITS)
    return out


# The lane's sizes: every system, Python and Node ones included, at ~50x slower under Valgrind.
LANE_SIZES = Sizes(warmup=20, n1=50, n2=300, syscall_n1=50, syscall_n2=250)
