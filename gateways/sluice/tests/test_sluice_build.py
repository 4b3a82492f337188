"""Compiled and pure-Python modules from one source: which one runs, and when."""
import os
import shutil
import subprocess
import sys
import time

import pytest
from sluice_helpers import PURE, SLUICE_DIR

pytestmark = pytest.mark.integration

PROBE = "import sluice, sluice.server as s; print(sluice.compiled, s.__file__.endswith('.py'))"


def _probe(env_extra, cwd=SLUICE_DIR):
    env = {k: v for k, v in os.environ.items() if k != "SLUICE_PURE_PYTHON"}
    env.update(env_extra)
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split(), done.stderr


@pytest.mark.skipif(PURE, reason="this run tests the pure-Python modules")
def test_the_build_is_loaded_unless_pure_python_is_asked_for():
    assert _probe({})[0] == ["True", "False"]  # the extension module, not server.py
    assert _probe({"SLUICE_PURE_PYTHON": "1"})[0] == ["False", "True"]


@pytest.mark.skipif(PURE, reason="this run tests the pure-Python modules")
def test_a_build_of_other_sources_is_not_loaded(tmp_path):
    copy = tmp_path / "sluice"
    shutil.copytree(os.path.join(SLUICE_DIR, "sluice"), copy / "sluice")
    with open(copy / "sluice" / "upstream.py", "a") as f:
        f.write("# edited after the build\n")
    out, err = _probe({}, cwd=copy)
    assert out == ["False", "True"]
    assert "older than the sources" in err


def test_the_startup_line_says_which_mode_runs(sluice):
    # the line follows the listening socket: /health may be answered just before it is written
    line = "(pure-python) listening on" if PURE else "(compiled) listening on"
    deadline = time.monotonic() + 5
    while line not in sluice.output() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert line in sluice.output()


@pytest.mark.parametrize("pure", ["0", "1"])
def test_every_module_can_be_imported_first(pure):
    """A module imported before the others (a tool, a test) must not meet a cycle: the compiled
    modules import the ones they cimport as they load, and those import it back."""
    if pure == "0" and PURE:
        pytest.skip("this run tests the pure-Python modules")
    names = sorted(f[:-3] for f in os.listdir(os.path.join(SLUICE_DIR, "sluice"))
                   if f.endswith(".py") and f not in ("__init__.py", "__main__.py"))
    env = {k: v for k, v in os.environ.items() if k != "SLUICE_PURE_PYTHON"}
    env["SLUICE_PURE_PYTHON"] = pure
    failed = {}
    for name in names:
        done = subprocess.run([sys.executable, "-c", f"import sluice.{name}"], cwd=SLUICE_DIR,
                              env=env, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            failed[name] = done.stderr.strip().splitlines()[-1]
    assert not failed, failed
