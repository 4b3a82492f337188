"""Command line, listening sockets, worker processes.

``workers = 1``: one process serves.  ``workers = N > 1``: the process started by the user is
the supervisor and serves nothing (as nginx's master): it owns the shared memory (shared.py) and
starts N workers, each a fresh interpreter (posix_spawn, so they stay in its process group) that
binds the same port with SO_REUSEPORT; the kernel spreads connections across them. A worker
killed by anything (kill -9, the OOM killer) takes no budget or rate-limit window with it: the
supervisor makes its slots true (``keys.release_worker``) and restarts it. The supervisor
forwards SIGTERM/SIGINT to the workers and never exits before they have (SIGKILL after the grace
period). Workers watch their parent and stop if it disappears.
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import time
from typing import TYPE_CHECKING, Any

from sluice import __version__, compiled
from sluice.config import ConfigError, load

if TYPE_CHECKING:
    import asyncio

    from sluice.config import Config
    from sluice.server import App
    from sluice.shared import Shared

# A worker runs this very package, installed or from a source folder: the folder that holds it
# goes first on the worker's path.
WORKER = ("import sys; sys.path.insert(0, %r); from sluice.main import main; raise SystemExit(main())"
          % os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# what the supervisor waits for: a worker's death, or the signal to stop
SUPERVISOR_SIGNALS = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT}
# a worker restarted this many seconds after its death, doubled for each death in the last minute
RESTART_BACKOFF_S = 0.5
RESTART_BACKOFF_MAX_S = 30.0
# SIGTERM: how long past shutdown_grace_s the workers get before SIGKILL
STOP_MARGIN_S = 2.0


def _mode() -> str:
    return "compiled" if compiled else "pure-python"


def log(msg: str) -> None:
    sys.stderr.write(f"sluice[{os.getpid()}]: {msg}\n")
    sys.stderr.flush()


def make_socket(host: str, port: int, backlog: int, reuseport: bool, listen: bool = True) -> socket.socket:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, stype, proto, _, addr = infos[0]
    sock = socket.socket(family, stype, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuseport:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(addr)
        if listen:
            sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class Supervisor:
    """The main process with workers = N > 1: starts, watches and restarts workers 0..N-1 and
    serves nothing, so that no worker's death can take the shared memory or the others with it."""

    def __init__(self, cfg: Config, shared: Shared, port: int) -> None:
        self.cfg = cfg
        self.shared = shared
        self.port = port
        self.procs: dict[int, int] = {}             # worker index -> pid
        self.deaths: dict[int, list[float]] = {}    # worker index -> recent death times
        self.respawn_at: dict[int, float] = {}      # worker index -> monotonic time
        # the configuration as this process loaded it, for every worker it starts or restarts
        assert cfg.raw is not None and cfg.path is not None  # a config that load() read
        self.config_fd = os.memfd_create("sluice-config", 0)
        os.write(self.config_fd, cfg.raw)
        self.config_path = os.path.abspath(cfg.path)

    def spawn(self, index: int, ready_fd: int | None = None) -> None:
        fd = self.shared.fd
        assert fd is not None  # the memory is shared: a memfd
        os.set_inheritable(fd, True)
        os.set_inheritable(self.config_fd, True)
        argv = [sys.executable, "-c", WORKER, "--config", self.config_path,
                "--config-fd", str(self.config_fd),
                "--worker-index", str(index), "--shm-fd", str(fd),
                "--parent-pid", str(os.getpid()), "--port", str(self.port)]
        if ready_fd is not None:
            argv += ["--ready-fd", str(ready_fd)]
        # the supervisor blocks the signals it waits for; a worker handles them itself
        self.procs[index] = os.posix_spawn(sys.executable, argv, os.environ, setsigmask=())

    def start(self) -> bool:
        """Every worker, once each listens; False when one exited before it did."""
        n = self.cfg.server.workers
        ready_r, ready_w = os.pipe()
        os.set_inheritable(ready_w, True)
        for i in range(n):
            self.spawn(i, ready_w)
        os.close(ready_w)
        # each worker writes a byte once it listens; EOF comes when every one has written or exited
        got = 0
        while got < n:
            data = os.read(ready_r, n)
            if not data:
                break
            got += len(data)
        os.close(ready_r)
        return got == n

    def _reap(self) -> list[tuple[int, int, int]]:
        dead = []
        for index, pid in list(self.procs.items()):
            try:
                got, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                got, status = pid, 0
            if got == pid:
                del self.procs[index]
                dead.append((index, pid, status))
        return dead

    def check(self) -> None:
        """Reap the workers that died, make their state true, restart them when their backoff ends."""
        from sluice.keys import release_worker
        now = time.monotonic()
        for index, pid, status in self._reap():
            code = os.waitstatus_to_exitcode(status)
            release_worker(self.shared.q, [k.budget_period_s for k in self.cfg.keys.values()],
                           self.cfg.server.workers, index, time.time())
            # its gauges (connections, requests in flight) died with it; its replacement publishes anew
            self.shared.clear_snapshot(index)
            log(f"worker {index} (pid {pid}) exited with {code}; restarting")
            recent = [t for t in self.deaths.get(index, []) if now - t < 60] + [now]
            self.deaths[index] = recent
            self.respawn_at[index] = now + min(RESTART_BACKOFF_MAX_S, RESTART_BACKOFF_S * 2 ** (len(recent) - 1))
        for index, at in list(self.respawn_at.items()):
            if now >= at and index not in self.procs:
                del self.respawn_at[index]
                try:
                    self.spawn(index)
                except OSError as e:  # short of memory or processes: the supervisor must stay
                    log(f"cannot restart worker {index}: {e}; trying again in {RESTART_BACKOFF_MAX_S:g}s")
                    self.respawn_at[index] = now + RESTART_BACKOFF_MAX_S

    def run(self) -> None:
        """Until SIGTERM or SIGINT: each is forwarded as SIGTERM, then the workers are waited for."""
        while True:
            if self.respawn_at:  # woken for the first restart due, unless a signal comes first
                now = time.monotonic()
                info = signal.sigtimedwait(SUPERVISOR_SIGNALS, max(0.0, min(self.respawn_at.values()) - now))
            else:
                info = signal.sigwaitinfo(SUPERVISOR_SIGNALS)
            if info is not None and info.si_signo != signal.SIGCHLD:
                break
            self.check()
        self.stop(self.cfg.server.shutdown_grace_s + STOP_MARGIN_S)

    def stop(self, wait_s: float) -> None:
        for pid in self.procs.values():
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        self._reap()
        while self.procs and (left_s := deadline - time.monotonic()) > 0:
            signal.sigtimedwait({signal.SIGCHLD}, left_s)
            self._reap()
        for pid in self.procs.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in self.procs.values():
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        self.procs.clear()


def _serve(cfg: Config, shared: Shared, sock: socket.socket, worker: int, n_workers: int,
           parent_pid: int | None = None) -> tuple[asyncio.AbstractEventLoop, App]:
    import asyncio

    import uvloop

    from sluice.server import App, install_signals

    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    app = App(cfg, loop, shared, worker, n_workers)
    app.parent_pid = parent_pid
    app.start(sock)
    install_signals(loop, app)
    return loop, app


def raise_open_files(cfg: Config) -> None:
    """The soft open-file limit raised to the hard one (as nginx's worker_rlimit_nofile lets an
    operator do): each open request holds a client and a provider descriptor. Logged, with a
    warning when the configured connection caps could need more. Workers inherit it."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = 1048576 if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, target), hard))
            soft = max(soft, target)
        except (ValueError, OSError) as e:
            log(f"cannot raise the open files limit from {soft}: {e}")
    need = cfg.server.max_client_connections + sum(p.max_connections for p in cfg.providers.values())
    log(f"open files limit {soft} per process (hard {hard}); the connection caps may need {need + 64}")
    if soft < need + 64:
        log(f"warning: open files limit {soft} is below what max_client_connections and the providers' "
            f"max_connections allow ({need + 64}): raise the hard limit (ulimit -Hn, LimitNOFILE) "
            f"or lower those caps")


# Only for the harness's own test of the fault lane's arming: a Sluice that takes this long to
# start listening (a slow start, as LiteLLM's). Never set in use.
TEST_START_DELAY_S = float(os.environ.get("SLUICE_TEST_START_DELAY_S", "0") or 0)


def run_main(cfg: Config) -> int:
    from sluice.shared import Shared, deployment_slots, snapshot_bytes

    if TEST_START_DELAY_S > 0:
        time.sleep(TEST_START_DELAY_S)
    s = cfg.server
    n = s.workers
    raise_open_files(cfg)
    shared = Shared(len(cfg.keys), n, snapshot_bytes(cfg), n_deployments=deployment_slots(cfg))
    try:
        # with workers, bound without listening: it holds the port (a restarted worker binds it
        # again) and learns it when the config says 0, yet the kernel gives it no connection
        sock = make_socket(s.host, s.port, s.backlog, reuseport=n > 1, listen=n == 1)
    except OSError as e:
        log(f"cannot listen on {s.listen}: {e}")
        return 1
    port = sock.getsockname()[1]
    if n == 1:
        loop, app = _serve(cfg, shared, sock, 0, 1)
        log(f"sluice {__version__} ({_mode()}) listening on {s.host}:{port} with 1 worker(s)")
        try:
            loop.run_forever()
        finally:
            loop.close()
        return 0
    # blocked before any worker exists, so that no death and no stop is missed: run() waits for them
    signal.pthread_sigmask(signal.SIG_BLOCK, SUPERVISOR_SIGNALS)
    supervisor = Supervisor(cfg, shared, port)
    if not supervisor.start():
        log("a worker exited before it listened; stopping")
        supervisor.stop(STOP_MARGIN_S)
        return 1
    log(f"sluice {__version__} ({_mode()}) listening on {s.host}:{port} with {n} worker(s)")
    supervisor.run()
    return 0


def run_worker(cfg: Config, index: int, shm_fd: int, parent_pid: int, port: int, ready_fd: int | None) -> int:
    from sluice.shared import Shared, deployment_slots, snapshot_bytes

    s = cfg.server
    if os.getppid() != parent_pid:
        return 0
    shared = Shared(len(cfg.keys), s.workers, snapshot_bytes(cfg), fd=shm_fd,
                    n_deployments=deployment_slots(cfg))
    try:
        sock = make_socket(s.host, port, s.backlog, reuseport=True)
    except OSError as e:
        log(f"worker {index} cannot listen on {s.host}:{port}: {e}")
        return 1
    loop, app = _serve(cfg, shared, sock, index, s.workers, parent_pid=parent_pid)
    if ready_fd is not None:
        os.write(ready_fd, b"1")
        os.close(ready_fd)
    try:
        loop.run_forever()
    finally:
        loop.close()
    return 0


USAGE = """usage: sluice --config FILE [--check] [--version]

  --config FILE   TOML configuration (see README.md)
  --check         validate the configuration and exit
  --version       print the version and exit
"""


def parse_args(argv: list[str]) -> dict[str, Any]:
    """A few flags, parsed by hand: argparse costs each worker memory for nothing. Their values
    by name: the config's path (str), check (bool), the others int, or None when not given."""
    opts: dict[str, Any] = {"config": None, "check": False, "worker-index": None, "shm-fd": None,
                            "parent-pid": None, "port": None, "config-fd": None, "ready-fd": None}
    it = iter(argv)
    for arg in it:
        if arg in ("-h", "--help"):
            sys.stdout.write(USAGE)
            raise SystemExit(0)
        if arg == "--version":
            print(f"sluice {__version__} {_mode()}")
            raise SystemExit(0)
        if arg == "--check":
            opts["check"] = True
            continue
        name, eq, value = arg.partition("=")
        if not name.startswith("--") or name[2:] not in opts or name == "--check":
            sys.stderr.write(f"sluice: unknown argument {arg!r}\n{USAGE}")
            raise SystemExit(2)
        if not eq:
            given = next(it, None)
            if given is None:
                sys.stderr.write(f"sluice: {name} needs a value\n")
                raise SystemExit(2)
            value = given
        opts[name[2:]] = value if name == "--config" else _int(name, value)
    if not opts["config"]:
        sys.stderr.write(f"sluice: --config is required\n{USAGE}")
        raise SystemExit(2)
    return opts


def _int(name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        sys.stderr.write(f"sluice: {name} needs an integer\n")
        raise SystemExit(2) from None


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        cfg = load(opts["config"], opts["config-fd"])
    except ConfigError as e:
        log(f"configuration error: {e}")
        return 2
    if opts["check"]:
        print(f"{opts['config']}: ok ({len(cfg.providers)} provider(s), {len(cfg.models)} model(s), "
              f"{len(cfg.keys)} key(s), {cfg.server.workers} worker(s))")
        return 0
    if opts["worker-index"] is not None:
        return run_worker(cfg, opts["worker-index"], opts["shm-fd"], opts["parent-pid"], opts["port"],
                          opts["ready-fd"])
    return run_main(cfg)
