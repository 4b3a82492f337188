"""What the counting gate and lane count: the cases, the sizes, the system-call families.

Definitions only (harness/run/counting.py counts; harness/checks/counts.py judges).
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


# Every case the gate counts; a system that declares no such feature skips the case, saying so.
GATE_CASES = (
    CountCase("plain", "passthrough", what="the relay alone: no key, no alias"),
    CountCase("features", "", what="as the study calls it: key, alias, budget, validate_json"),
    CountCase("stream", "", stream=True, what="the same, streamed: 10 frames, one read each"),
    CountCase("anthropic_to_openai", "anthropic_to_openai", what="translated both ways"),
    CountCase("openai_to_anthropic", "openai_to_anthropic", what="translated both ways"),
    CountCase("refused", "refused", what="a key the gateway does not know: 401"),
    CountCase("rate_limited", "rate_limited", what="a key past its rate limit: 429"),
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


def families(per_request: dict[str, float]) -> dict[str, float]:
    """The judged families (reads, writes, sends) and the waits, summed from calls by name."""
    out = {fam: sum(per_request.get(n, 0.0) for n in names) for fam, names in IO_FAMILIES.items()}
    out["waits"] = sum(per_request.get(n, 0.0) for n in WAITS)
    return out


# The lane's sizes: every system, Python and Node ones included, at ~50x slower under Valgrind.
LANE_SIZES = Sizes(warmup=20, n1=50, n2=300, syscall_n1=50, syscall_n2=250)
