"""Start and stop one process on a host, run there through the host's command prefix.
Not a user command: the harness runs it on other hosts (harness/remote/hosts.py).

    python -m harness.remote.launch --pid-file F [--cwd D] -- COMMAND...
        records its pid in F, then becomes COMMAND (exec): the pid in F is the real process,
        the leader of its own process group.
    python -m harness.remote.launch --stop F [--signal SIGTERM] [--timeout-s 10]
        signals that group, waits, then SIGKILLs the group and every descendant seen.

Through `ip netns exec` the harness's local pid is already the real one; through ssh it is only
the client, so stopping must happen on the host itself, by this module.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

import psutil

from harness.files.producers import read_pid, write_pid
from harness.host.processes import raise_open_files_limit, stop_tree


def launch(pid_file: Path, cwd: str, command: list[str]) -> None:
    try:
        os.setsid()
    except OSError:
        pass  # already a group leader (started in a new session): the group is ours already
    if cwd:
        os.chdir(cwd)
    write_pid(pid_file)
    raise_open_files_limit(0)  # as on the harness's host: the soft open-file limit at the hard one
    os.execvp(command[0], command)


def stop(pid_file: Path, sig: signal.Signals, timeout_s: float) -> int:
    """0 when nothing of the process is left (or it never started), 1 otherwise."""
    pid = read_pid(pid_file)
    if pid is None:
        return 0
    try:
        written = pid_file.stat().st_mtime
        # A pid reused by an unrelated process after ours exited is not ours to stop.
        if psutil.Process(pid).create_time() > written + 1.0:
            return 0
    except (OSError, psutil.Error):
        return 0
    return 0 if stop_tree(pid, sig, timeout_s) else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(prog="python -m harness.remote.launch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pid-file", type=Path)
    parser.add_argument("--cwd", default="")
    parser.add_argument("--stop", type=Path, metavar="PID_FILE")
    parser.add_argument("--signal", default="SIGTERM")
    parser.add_argument("--timeout-s", type=float, default=10.0)
    args = parser.parse_args(argv)
    if args.stop:
        return stop(args.stop, getattr(signal, args.signal), args.timeout_s)
    if not args.pid_file or not command:
        parser.error("either --stop PID_FILE, or --pid-file F -- COMMAND...")
    launch(args.pid_file, args.cwd, command)
    return 127  # not reached: exec replaced this process or raised


if __name__ == "__main__":
    sys.exit(main())
