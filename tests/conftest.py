"""Suite-wide: no test may leave a process behind. Tiers are marked per module (``pytestmark``:
``integration``, and ``slow`` for the longest of those; pyproject.toml declares them)."""
import os
import signal

import psutil
import pytest
from polling import wait_for
from smoke_study import run_smoke_study

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _descendants():
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


@pytest.fixture(autouse=True)
def no_orphans():
    """Fail the test if any process it started (by pid) is still alive afterwards."""
    before = {p.pid for p in _descendants()}
    yield

    def left_behind():
        return [p for p in _descendants() if p.pid not in before and p.is_running()
                and p.status() != psutil.STATUS_ZOMBIE]

    wait_for(lambda: not left_behind(), 5.0)
    left = left_behind()
    if not left:
        return
    described = [f"{p.pid} {' '.join(p.cmdline()[:4])}" for p in left]
    for p in left:
        try:
            os.kill(p.pid, signal.SIGKILL)
        except OSError:
            pass
    pytest.fail(f"processes left behind by this test: {described}")


@pytest.fixture(scope="session")
def smoke_study(tmp_path_factory):
    """One smoke study for every test that only reads one (tests/smoke_study.py)."""
    return run_smoke_study(tmp_path_factory.mktemp("smoke-study"))
