"""Counting a system's work per request: instructions, allocations, system calls and RSS.

A timed figure on two shared cores moves by ~10% a round; a count does not. Each system runs its
own ``[start]`` command twice, at fixed addresses (``setarch -R``) with a fixed environment
(``PYTHONHASHSEED=0``): once under Valgrind's callgrind (instructions, and allocator calls from
its call graph) and once natively under ``strace -f`` (system calls by name; RSS). The lockstep
provider (mocks/lockstep.py) and one client connection run here, outside it, strictly one
request after another, a streamed answer one frame per read; so every request wakes the system
the same way each time.

Per case: a warm-up, then N2 and N1 requests, counted apart, the N1 phase lasting as long as
the N2 phase; the figure per request is the slope (count(N2) - count(N1)) / (N2 - N1), so
start-up, warm-up, the counting's own cost and the system's timers cancel. Callgrind's
counters are zeroed and dumped between the phases through ``vgdb``, so one
Valgrind process serves every case and the interpreter's start under Valgrind is paid once.

What counts cannot see (a sleep, a lock, a blocking call) the timed check beside them sees.
"""
from __future__ import annotations

import re
import selectors
import shutil
import socket
import subprocess
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

import psutil
from httptools import HttpParserError, HttpResponseParser

from harness.files.store import write_json
from harness.host.processes import ManagedProcess
from harness.model.count_cases import CountCase, Sizes
from harness.model.formats import COUNTS
from harness.model.gateway_spec import GatewaySpec, render
from harness.run.bodies import chat_body
from harness.run.systems import run_values, start_system
from mocks.lockstep import LockstepProvider

VALGRIND = "valgrind"
STRACE = "strace"
VGDB = "vgdb"
SETARCH = "setarch"
STEP_TIMEOUT_S = 120.0          # one request under Valgrind, or a vgdb call
READY_TIMEOUT_S = 300.0         # a start under Valgrind (an interpreter is ~50x slower there),
                                # unless its [ready] counted_timeout_s says otherwise
INVOKE_MS = 10                  # vgdb forces its way into a process blocked in a system call
SETTLE_S = 0.1                  # idle before a phase's end is marked: its last system calls are in
# The environment every counted process gets, and nothing else of this one (its size moves the
# stack, and a variable can change what a system does).
FIXED_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "HOME": "/root", "LANG": "C.UTF-8",
             "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
# Allocations: calls into Python's object allocator, and into the C allocator from outside the
# interpreter (the interpreter's own calls to malloc are its allocator forwarding large blocks).
PY_ALLOCATORS = ("_PyObject_Malloc", "_PyObject_Calloc", "_PyObject_Realloc")
C_ALLOCATORS = ("malloc", "calloc", "realloc", "posix_memalign", "aligned_alloc", "memalign")
DUMP_PART = re.compile(r"^callgrind\.out\.\d+\.\d+$")
PY_OBJECT = re.compile(r"libpython\d|/python\d[.\d]*$")


class CountError(RuntimeError):
    """A count could not be taken; says why (the system's start, a step, a tool)."""


@dataclass(frozen=True)
class CaseCount:
    case: str
    instructions_per_request: float | None = None
    allocations_per_request: float | None = None
    syscalls_per_request: dict[str, float] = field(default_factory=dict)
    rss_bytes: int | None = None
    statuses: dict[str, int] = field(default_factory=dict)    # status code -> requests
    reconnects: int = 0              # client connections the system closed during the case
    missing: str = ""                # why a figure could not be taken ("" = all taken)


@dataclass(frozen=True)
class BuildCount:
    """One system (one build of it) counted in every case."""
    label: str                       # "head", "base", "base~2", or the system's name
    system: str
    version: str
    commit: str
    cases: tuple[CaseCount, ...]
    sizes: Sizes
    valgrind_s: float = 0.0
    strace_s: float = 0.0
    failed: str = ""                 # the whole count failed: why

    def case(self, name: str) -> CaseCount | None:
        return next((c for c in self.cases if c.case == name), None)


# ------------------------------------------------------------------ the client
class _ClosedIdle(Exception):
    """The system closed the connection before any answer, the provider not asked."""


class _Response:
    def __init__(self):
        self.asked = False               # the provider got this request
        self.fed = False                 # an answer's bytes arrived
        self.parser = HttpResponseParser(self)
        self.body = bytearray()
        self.complete = False
        self.keep_alive = True

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()

    @property
    def status(self) -> int:
        return self.parser.get_status_code()


class Driver:
    """One client connection to the system and the lockstep provider, in this thread."""

    def __init__(self, port: int, provider: LockstepProvider, timeout_s: float = STEP_TIMEOUT_S):
        self.port = port
        self.provider = provider
        self.timeout_s = timeout_s
        self.sock: socket.socket | None = None
        self.reconnects = 0
        self.rid = 0

    def close(self) -> None:
        if self.sock is not None:
            self.provider.selector.unregister(self.sock)
            self.sock.close()
            self.sock = None

    def _connect(self) -> None:
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.provider.selector.register(self.sock, selectors.EVENT_READ, "client")

    def request(self, raw: bytes) -> int:
        """Send one request and take its whole answer; the status code. A keep-alive connection
        the system closed before answering, and before the provider was asked (an idle timeout
        that lapsed while a phase was marked: uvicorn's is 5 s), is opened again once."""
        try:
            return self._exchange(raw)
        except _ClosedIdle:
            return self._exchange(raw)

    def _exchange(self, raw: bytes) -> int:
        if self.sock is None:
            self.reconnects += self.rid > 0
            self._connect()
        self.rid += 1
        rid = b"c%08d" % self.rid
        try:
            self.sock.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            self.close()
            raise _ClosedIdle() from None
        resp = _Response()
        parts: list[bytes] = []          # a streamed answer's writes not sent yet
        seen = 0                         # body bytes the client had when the last part went
        deadline = time.monotonic() + self.timeout_s
        while not resp.complete:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CountError(f"no whole answer within {self.timeout_s:g} s")
            for req in self.provider.poll(left, self._on_client(resp)):
                resp.asked = True
                if req.json().get("stream"):
                    parts = self.provider.stream_parts(req, rid)
                    req.conn.sendall(parts.pop(0))
                    seen, stream_conn = len(resp.body), req.conn
                else:
                    self.provider.answer(req, rid)
            # the next frame only once the client has the previous one
            if parts and len(resp.body) > seen and resp.body.endswith(b"\n\n"):
                stream_conn.sendall(parts.pop(0))
                seen = len(resp.body)
        if not resp.keep_alive:
            self.close()
        return resp.status

    def _on_client(self, resp: _Response) -> Callable[[], None]:
        def readable() -> None:
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                self.close()
                if not resp.complete and (resp.asked or resp.fed):
                    raise CountError("the system closed the client connection mid-answer")
                if not resp.complete:
                    raise _ClosedIdle()
                return
            resp.fed = True
            try:
                resp.parser.feed_data(data)
            except HttpParserError as exc:
                raise CountError(f"a malformed answer: {exc}") from None
        return readable


def request_bytes(spec: GatewaySpec, case: CountCase, port: int, values: dict) -> bytes:
    """The raw request of a case, as the study's load generator would send it."""
    plan = spec.request_plan(case.feature)
    body = chat_body(plan.dialect, plan.model, max_tokens=32, stream=case.stream)
    head = [f"POST {render(plan.chat_path, values)} HTTP/1.1", f"host: 127.0.0.1:{port}",
            "content-type: application/json", "user-agent: sluice-count"]
    if plan.dialect == "anthropic":
        head.append("anthropic-version: 2023-06-01")
    head += [f"{k}: {render(v, values)}" for k, v in plan.headers.items()]
    head.append(f"content-length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


# ------------------------------------------------------------------ the tools
LABEL_WIDTH = 16


def _same_length(label: str) -> str:
    """A build's directory name, of one length for every label up to LABEL_WIDTH: the system's
    paths (its config's, under this directory) then have the same length in every count, so
    its heap is laid out alike, and with it Python's address-based hashes (the base's two counts
    were 0.1% apart from "base" and "base~2" alone)."""
    return label.ljust(LABEL_WIDTH, "_")


def tools_missing() -> str:
    """'' when Valgrind (with vgdb), strace and setarch are here; else what is missing."""
    absent = [t for t in (VALGRIND, VGDB, STRACE, SETARCH) if shutil.which(t) is None]
    return (f"not installed: {', '.join(absent)} (Debian's valgrind and strace packages; "
            "scripts/install-test-deps.sh installs them)" if absent else "")


def valgrind_version() -> str:
    try:
        return subprocess.run([VALGRIND, "--version"], capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def _valgrind_prefix(out_dir: Path) -> tuple[str, ...]:
    return (SETARCH, "-R", VALGRIND, "--tool=callgrind", "--trace-children=yes", "--vgdb=yes",
            "--dump-instr=no", "--dump-line=no", "--compress-strings=no", "--compress-pos=no",
            f"--callgrind-out-file={out_dir}/callgrind.out.%p", f"--log-file={out_dir}/valgrind.%p.log",
            "--")


def _strace_prefix(log: Path) -> tuple[str, ...]:
    return (SETARCH, "-R", STRACE, "-f", "-qq", "-ttt", "-o", str(log), "--")


class Callgrind:
    """Zero and dump the counters of every Valgrind process of a started system (vgdb). vgdb
    forces its way into a process blocked in a system call after INVOKE_MS (its ptrace invoker;
    the guest code it runs there is the same at every mark, so it cancels in the slope)."""

    def __init__(self, out_dir: Path, proc: ManagedProcess):
        self.out_dir = out_dir
        self.proc = proc

    def pids(self) -> list[int]:
        # the processes running under Valgrind: those with a vgdb FIFO of their own
        return [p.pid for p in self.proc.tree()
                if any(Path("/tmp").glob(f"vgdb-pipe-from-vgdb-to-{p.pid}-*"))]

    def _monitor(self, pid: int, command: str) -> None:
        try:
            done = subprocess.run([VGDB, f"--max-invoke-ms={INVOKE_MS}", f"--pid={pid}",
                                   *command.split()], capture_output=True, text=True,
                                  timeout=STEP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise CountError(f"vgdb --pid={pid} {command}: no answer in {STEP_TIMEOUT_S:g} s") from None
        if done.returncode != 0:
            raise CountError(f"vgdb --pid={pid} {command} failed: "
                             f"{(done.stderr or done.stdout).strip()[-300:]}")

    def _dumps(self) -> set[Path]:
        # a dump is a part file, callgrind.out.<pid>.<n>; a forked process writes its whole
        # run's file (no part number) as well
        return {f for f in self.out_dir.glob("callgrind.out.*") if DUMP_PART.search(f.name)}

    def zero(self) -> None:
        for pid in self.pids():
            self._monitor(pid, "zero")

    def dump(self) -> tuple[int, int]:
        """(instructions, allocator calls) since the last zero, summed over the processes."""
        before = self._dumps()
        for pid in self.pids():
            self._monitor(pid, "dump")
        files = sorted(self._dumps() - before)
        if not files:
            raise CountError("callgrind wrote no dump")
        totals = [read_dump(f.read_text(errors="replace")) for f in files]
        for f in files:
            f.unlink()
        return sum(t[0] for t in totals), sum(t[1] for t in totals)


def read_dump(text: str) -> tuple[int, int]:
    """(instructions, allocator calls) of one callgrind dump (written with
    --compress-strings=no). Allocator calls: calls into Python's object allocator, and into the
    C allocator from outside the interpreter."""
    total = None
    allocations = 0
    ob = cfn = ""
    for line in text.splitlines():
        if line.startswith("calls="):
            callee = cfn.split("'", 1)[0]
            if callee in PY_ALLOCATORS or (callee in C_ALLOCATORS and not PY_OBJECT.search(ob)):
                allocations += int(line[6:].split(None, 1)[0])
        elif line.startswith("fn="):
            cfn = ""
        elif line.startswith("cfn="):
            cfn = line[4:]
        elif line.startswith("ob="):
            ob = line[3:]
        elif line.startswith(("totals:", "summary:")):
            value = int(line.split(":", 1)[1].split()[0])
            total = value if total is None or line.startswith("totals:") else total
    if total is None:
        raise CountError("a callgrind dump without totals")
    return total, allocations


_STRACE_LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(?:<\.\.\. )?([a-z_0-9]+)(\(| resumed>)")


def read_strace(text: str, windows: list[tuple[float, float]]) -> list[Counter]:
    """System calls by name started within each window (t_unix_s from, to) of a `strace -f
    -ttt` log; a call strace split around a wait is counted once, where it started."""
    counts = [Counter() for _ in windows]
    for line in text.splitlines():
        m = _STRACE_LINE.match(line)
        if not m or m.group(4) != "(":
            continue
        t = float(m.group(2))
        for i, (a, b) in enumerate(windows):
            if a <= t < b:
                counts[i][m.group(3)] += 1
                break
    return counts


# ------------------------------------------------------------------ one system, every case
def counted_ready_timeout_s(spec: GatewaySpec) -> float:
    """How long its start under Valgrind may take: its declared [ready] counted_timeout_s, else
    READY_TIMEOUT_S."""
    return spec.counted_ready_timeout_s or READY_TIMEOUT_S


@dataclass
class _Phases:
    """What one case measured in one process: per phase (N1, N2), a count or a time window."""
    counts: list = field(default_factory=list)
    windows: list = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)
    rss_bytes: int | None = None
    reconnects: int = 0


def _run_cases(spec: GatewaySpec, cases: tuple[CountCase, ...], sizes: Sizes, run_dir: Path,
               prefix: tuple[str, ...], env: dict[str, str], workers: int,
               on_phase: Callable, progress: Callable[[str], None],
               scaled: bool = False, ports: tuple[int, int] = (0, 0)) -> tuple[dict, float]:
    """Start the system under ``prefix`` and drive every case through warm-up, N2 and N1 (as long;
    ``scaled``: each case's own, ``Sizes.of``).
    ``on_phase(proc, port, mark, phases)`` acts at each mark: "start" and "end" of a counted
    phase, whose window (t_unix_s from, to) lies between them. ({case: _Phases}, seconds)."""
    provider = LockstepProvider(timeout_s=STEP_TIMEOUT_S, port=ports[0])
    t0 = time.monotonic()
    started = None
    results = {}
    try:
        started = start_system(spec, run_dir, provider.url, provider.port, workers,
                               counted_ready_timeout_s(spec), port=ports[1], prefix=prefix, environment=env,
                               counted=True)
        port = int(started.target.base_url.rsplit(":", 1)[1].split("/", 1)[0])
        driver = Driver(port, provider)
        proc = started.process
        # what its request headers may name (a provider URL Portkey is told per request)
        values = run_values(spec, run_dir, port, "127.0.0.1", provider.url, "127.0.0.1",
                            provider.port, workers, counted=True)
        for case in cases:
            raw = request_bytes(spec, case, port, values)
            ph = _Phases()
            phases = sizes.of(case) if scaled else sizes
            n2, n1 = phases.n2, phases.n1
            if not results:   # a process's first marks and phase carry one-time work (~3%
                warm = _Phases()  # a request more in Sluice): a marked phase that is not kept
                on_phase(proc, port, "start", warm)
                for _ in range(n2):
                    driver.request(raw)
                on_phase(proc, port, "end", warm)
            for _ in range(sizes.warmup):
                driver.request(raw)
            longest = 0.0
            for n in (n2, n1):
                on_phase(proc, port, "start", ph)
                t_from = time.time()
                for _ in range(n):
                    ph.statuses[str(driver.request(raw))] += 1
                # the longer phase to a whole second, the shorter as long: both then hold the
                # same firings of every timer (a period of a whole second fits a whole number
                # of times in either), which cancel in the slope, whatever the machine's speed
                time.sleep(max(SETTLE_S + (-(time.time() + SETTLE_S - t_from)) % 1.0,
                               t_from + longest - time.time()))
                longest = max(longest, time.time() - t_from)
                ph.windows.append((t_from, time.time()))
                on_phase(proc, port, "end", ph)
            ph.reconnects = driver.reconnects
            driver.reconnects = 0
            results[case.name] = ph
            progress(f"  {case.name}: {sum(ph.statuses.values())} requests "
                     f"({', '.join(f'{k}: {v}' for k, v in sorted(ph.statuses.items()))})")
        driver.close()
    except OSError as exc:
        raise CountError(f"{type(exc).__name__}: {exc}") from None
    finally:
        if started is not None and started.process is not None:
            started.process.stop()
        provider.close()
    return results, time.monotonic() - t0


def count_system(spec: GatewaySpec, cases: tuple[CountCase, ...], work_dir: Path, label: str,
                 version: str = "", commit: str = "", sizes: Sizes = Sizes(), workers: int = 1,
                 extra_env: dict[str, str] | None = None, syscalls: bool = True,
                 progress: Callable[[str], None] = print,
                 ports: tuple[int, int] = (0, 0)) -> BuildCount:
    """Count one system in every case it declares (a case whose feature it lacks is reported
    missing). ``syscalls``: also run it under strace (system calls, RSS); the gate's second count
    of the base needs only instructions. ``ports``: the provider's and the system's (0: any);
    builds whose counts are compared get the same ones, since a port reaches the system's hashed
    keys (its pool's, its config's): a different one moved a count by up to 0.35%. A failure to
    start or to count is the BuildCount's ``failed``, never raised."""
    sizes.check()
    declared, lacking = [], []
    for c in cases:
        if not c.feature or c.feature in spec.features:
            declared.append(c)
        elif c.feature == "passthrough":     # no features declared: its [request] is the relay
            declared.append(replace(c, feature=""))
        else:
            lacking.append(CaseCount(c.name, missing=f"{spec.name} declares no feature {c.feature!r}"))
    declared = tuple(declared)
    env = {**FIXED_ENV, **(extra_env or {})}
    base = BuildCount(label, spec.name, version, commit, tuple(lacking), sizes)
    if not spec.has_process:
        return replace(base, failed=f"{spec.name} starts no process of its own: nothing to count")
    problem = tools_missing()
    if problem:
        return replace(base, failed=problem)
    work_dir.mkdir(parents=True, exist_ok=True)

    # 1. instructions and allocations, under callgrind
    vg_dir = work_dir / f"{_same_length(label)}-callgrind"
    shutil.rmtree(vg_dir, ignore_errors=True)
    vg_dir.mkdir(parents=True)
    counters: list[Callgrind] = []

    def vg_phase(proc, port, mark, ph):
        if not counters:
            counters.append(Callgrind(vg_dir, proc))
        if mark == "start":
            counters[0].zero()
        else:
            ph.counts.append(counters[0].dump())

    progress(f"{label}: {spec.name} under callgrind ({len(declared)} cases, {sizes.n2} and "
             f"{sizes.n1} requests each times its scale, after {sizes.warmup})")
    try:
        vg, vg_s = _run_cases(spec, declared, sizes, vg_dir, _valgrind_prefix(vg_dir), env,
                              workers, vg_phase, progress, scaled=True, ports=ports)
    except Exception as exc:   # a start that failed names its log; a step says what it waited for
        return replace(base, failed=f"under callgrind: {str(exc).splitlines()[0][:400]}")

    # 2. system calls and RSS, natively under strace
    st, st_s, text = {}, 0.0, ""
    if syscalls:
        st_dir = work_dir / f"{_same_length(label)}-strace"
        shutil.rmtree(st_dir, ignore_errors=True)
        st_dir.mkdir(parents=True)
        log = st_dir / "strace.log"

        def st_phase(proc, port, mark, ph):
            if mark == "end":
                ph.rss_bytes = _rss_bytes(proc)

        progress(f"{label}: {spec.name} under strace")
        try:
            st, st_s = _run_cases(spec, declared, sizes.for_syscalls(), st_dir,
                                  _strace_prefix(log), env, workers, st_phase, progress,
                                  ports=ports)
        except Exception as exc:
            return replace(base, failed=f"under strace: {str(exc).splitlines()[0][:400]}")
        text = log.read_text(errors="replace") if log.exists() else ""
    dn_calls = sizes.syscall_n2 - sizes.syscall_n1
    out = list(lacking)
    for case in declared:
        phases = sizes.of(case)
        dn = phases.n2 - phases.n1
        v, s = vg[case.name], st.get(case.name, _Phases())
        # phases N2 then N1, of one duration: their difference is N2 - N1 requests' work
        (i2, a2), (i1, a1) = v.counts
        c2, c1 = read_strace(text, s.windows) if s.windows else (Counter(), Counter())
        names = set(c1) | set(c2)
        syscalls = {n: round((c2[n] - c1[n]) / dn_calls, 4) for n in sorted(names)}
        out.append(CaseCount(case.name, round((i2 - i1) / dn, 1),
                             round((a2 - a1) / dn, 2) if (a1 or a2) else None,
                             {n: x for n, x in syscalls.items() if x != 0},
                             s.rss_bytes, dict(v.statuses), v.reconnects + s.reconnects,
                             "" if (a1 or a2) else "no allocator calls seen (an interpreter "
                             "without symbols hides its allocator)"))
    order = {c.name: i for i, c in enumerate(cases)}
    return replace(base, cases=tuple(sorted(out, key=lambda c: order[c.case])),
                   valgrind_s=round(vg_s, 1), strace_s=round(st_s, 1))


def _rss_bytes(proc: ManagedProcess) -> int | None:
    """The system's RSS: its process tree less the tools it runs under."""
    total = 0
    for p in proc.tree():
        try:
            if p.name() not in (STRACE, SETARCH):
                total += p.memory_info().rss
        except psutil.Error:
            pass
    return total or None


def write_counts(path: Path, builds: list[BuildCount], machine: dict, purpose: str) -> None:
    """counts.json: every build counted, with the machine, the tool and the sizes."""
    write_json(path, {"purpose": purpose, "machine": machine, "valgrind": valgrind_version(),
                      "builds": [asdict(b) for b in builds]}, COUNTS)
