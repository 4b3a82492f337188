"""harness.host.sampling: CPU time to the nanosecond from schedstat, kept for threads and processes
that exit, and the run-queue wait."""
import os
import subprocess
import sys

import pytest
from polling import wait_for

from harness.host.sampling import _RoleTree, run_queue_wait_ns, task_cpu_ns

pytestmark = pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/schedstat"),
                                reason="the kernel keeps no schedstat")


def test_task_cpu_is_per_thread_in_ns():
    threads = task_cpu_ns(os.getpid())
    assert os.getpid() in threads and all(isinstance(v, int) and v > 0 for v in threads.values())
    assert task_cpu_ns(2**22 + 7) == {}
    assert isinstance(run_queue_wait_ns([os.getpid()]), int)   # a live process has a count
    assert run_queue_wait_ns([2**22 + 7]) is None


def test_a_process_tree_keeps_the_cpu_of_a_child_that_exited():
    burn = "import time\nend = time.process_time() + 0.2\nwhile time.process_time() < end: pass\ntime.sleep(3)"
    parent = subprocess.Popen([sys.executable, "-c",
                               f"import subprocess, sys, time; subprocess.run([sys.executable, '-c', {burn!r}]); time.sleep(30)"])
    try:
        tree = _RoleTree(lambda: [parent.pid], None)
        assert wait_for(lambda: tree.sample()[0] == 2 and tree.sample()[2] >= 0.2, 10.0)
        during = tree.sample()[2]
        assert wait_for(lambda: tree.sample()[0] == 1, 10.0)   # the child exited
        after = tree.sample()[2]
        assert after >= during >= 0.2   # its CPU stays counted
        # not whole clock ticks: the ns source, not psutil's 10 ms
        assert any(abs(v * 100 - round(v * 100)) > 1e-6 for v in tree.cpu_by_task.values())
    finally:
        parent.kill()
        parent.wait()
