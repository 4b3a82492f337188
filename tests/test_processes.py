"""Processes start in their own group, and stopping one stops everything it spawned."""
import signal
import subprocess
import sys
import time

import psutil
import pytest
from polling import wait_for

from harness.host import processes
from harness.host.processes import (
    ManagedProcess,
    ProcessError,
    free_port,
    port_in_use,
    wait_ready,
)

SPAWNER = ("import subprocess, sys, time\n"
           "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']) for _ in range(3)]\n"
           "print('spawned', flush=True)\n"
           "time.sleep(60)\n")
# A child that ignores SIGTERM and leaves the process group: only SIGKILL by pid gets it.
STUBBORN = ("import os, signal, subprocess, sys, time\n"
            "code = 'import os, signal, time; os.setsid(); signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'\n"
            "subprocess.Popen([sys.executable, '-c', code])\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('ready', flush=True)\n"
            "time.sleep(60)\n")


def test_stop_takes_down_the_whole_tree(tmp_path):
    proc = ManagedProcess("spawner", [sys.executable, "-c", SPAWNER], tmp_path / "log")
    assert wait_for(lambda: len(proc.tree()) == 4)
    pids = [p.pid for p in proc.tree()]
    proc.stop()
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid in pids)
    assert proc not in processes._live.values()   # no longer registered to be stopped


def test_stubborn_children_outside_the_group_are_killed(tmp_path):
    proc = ManagedProcess("stubborn", [sys.executable, "-c", STUBBORN], tmp_path / "log",
                          stop_timeout_s=1.0)
    assert wait_for(lambda: len(proc.tree()) == 2)
    pids = [p.pid for p in proc.tree()]
    proc.stop()
    assert wait_for(lambda: not any(psutil.pid_exists(pid) for pid in pids), 5)


def test_missing_binary_is_a_clear_error(tmp_path):
    with pytest.raises(ProcessError, match="no-such-binary-xyz"):
        ManagedProcess("ghost", ["no-such-binary-xyz"], tmp_path / "log")


def test_readiness_deadline_shows_log_tail(tmp_path):
    proc = ManagedProcess("mute", [sys.executable, "-c", "print('booting slowly', flush=True);"
                                   "import time; time.sleep(60)"], tmp_path / "log")
    try:
        with pytest.raises(ProcessError) as info:
            wait_ready(proc, f"http://127.0.0.1:{free_port()}/health", 200, 1.0, "mute")
        assert "not ready after" in str(info.value) and "booting slowly" in str(info.value)
    finally:
        proc.stop()


def test_early_exit_fails_fast_with_log(tmp_path):
    proc = ManagedProcess("crasher", [sys.executable, "-c", "import sys; print('bad config');"
                                      "sys.exit(3)"], tmp_path / "log")
    start = time.monotonic()
    with pytest.raises(ProcessError, match="exited with code 3") as info:
        wait_ready(proc, f"http://127.0.0.1:{free_port()}/", 200, 30.0, "crasher")
    assert time.monotonic() - start < 10 and "bad config" in str(info.value)
    proc.stop()


def test_stop_all_stops_everything_registered(tmp_path):
    procs = [ManagedProcess(f"p{i}", [sys.executable, "-c", "import time; time.sleep(60)"],
                            tmp_path / f"log{i}") for i in range(3)]
    processes.stop_all()
    assert all(not p.alive() for p in procs)


def test_free_port_is_free():
    port = free_port()
    assert not port_in_use(port)


def test_stop_tree_stops_a_group_it_did_not_start(tmp_path):
    """The stopper harness.remote.launch uses on other hosts: by pid, no Popen needed."""
    popen = subprocess.Popen([sys.executable, "-c", SPAWNER], stdout=subprocess.PIPE,
                             start_new_session=True)
    try:
        assert popen.stdout.readline().strip() == b"spawned"
        pids = [popen.pid, *(c.pid for c in psutil.Process(popen.pid).children(recursive=True))]
        assert processes.stop_tree(popen.pid, signal.SIGTERM, 5.0) and len(pids) == 4
        assert wait_for(lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status()
                                        != psutil.STATUS_ZOMBIE for p in pids), 5)
    finally:
        popen.kill()
        popen.wait()
        popen.stdout.close()
