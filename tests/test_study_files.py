"""Every file of a study is read and written in harness/files/ (harness.files.study_files and the
readers and writers under it): a call that opens, reads or writes a file anywhere else in the
harness or the report is a failure, unless it is one of the few below that touch no study file,
each with its reason. And the store itself: its reads while and after a run."""
from __future__ import annotations

import ast
import dataclasses
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from synthetic import make_study
from synthetic_faults import FaultRun, make_fault_study

from harness.files.producers import (
    USERS_COLUMNS,
    USERS_FILE,
    RawCsv,
    read_pid,
    write_cpu_warnings,
    write_inflight_at_stop,
    write_phases,
    write_pid,
)
from harness.files.study_files import StudyFiles, is_suite
from harness.model import migrate
from harness.model.config import REPO_DIR
from harness.model.plan import Instruments, KeyVersionError, key_version
from harness.stats.loading import load_study

# Calls that read or write a file: a bare open(), these methods of a path, and these functions
# of json, pandas and pyarrow.
PATH_METHODS = {"read_text", "write_text", "read_bytes", "write_bytes"}
MODULE_FUNCTIONS = {"json": {"load", "dump"}, "pd": {"read_parquet", "read_csv", "read_json"},
                    "pq": {"read_table", "write_table", "read_schema"}}
FRAME_METHODS = {"to_csv", "to_parquet", "to_json", "to_pickle"}
NAMES = {"open", "write_atomic"}

# (file, function) -> why it touches no file of a study.
NOT_A_STUDY_FILE = {
    ("harness/host/probes.py", "read_port_range"): "/proc/sys: the machine's port range",
    ("harness/host/probes.py", "read_tw_reuse"): "/proc/sys: the machine's tcp_tw_reuse",
    ("harness/host/sampling.py", "_schedstat"): "/proc: a thread's run-queue wait",
    ("harness/remote/machine.py", "cpu_model"): "/proc/cpuinfo",
    ("harness/run/mock_load.py", "_cpu_pressure_us"): "/proc/pressure/cpu",
    ("harness/model/gateway_spec.py", "template"): "a system's declared template, in gateways/",
    ("harness/model/gateway_spec.py", "files_sha256"): "a system's declared files, in gateways/",
    ("harness/model/toml_schema.py", "read"): "a configuration file: gateway.toml, a suite",
    ("report/sections.py", "style"): "the report's stylesheet, in report/",
    ("report/sections.py", "_snippet"): "the report's code snippet template, in report/",
    ("report/sections.py", "methodology_paragraphs"): "the methodology's prose, in report/",
    ("harness/host/processes.py", "__init__"): "a process's own log, opened as its output",
    ("harness/host/processes.py", "log_tail"): "a process's own log, its tail quoted on failure",
    ("harness/run/capture.py", "start"): "tcpdump's own log, opened as its output",
    ("harness/run/capture.py", "_log_text"): "tcpdump's own log, read for its counters",
    ("harness/run/systems.py", "run_declared"): "an install or build log, opened as its output",
    ("harness/run/count_system.py", "dump"): "Valgrind's dumps, parsed and deleted as the count goes",
    ("harness/run/count_system.py", "count_system"): "strace's log, parsed as the count goes",
    ("harness/verdicts/history.py", "read_record"): "the gate's history in baselines/",
    ("harness/verdicts/history.py", "write_record"): "the gate's history in baselines/",
    ("report/build.py", "write"): "the report's HTML, never read back",
    ("report/compare.py", "build_compare"): "a comparison's HTML, never read back",
    ("report/index.py", "build_index"): "the study index's HTML, never read back",
}


def file_calls(path: Path) -> list[tuple[int, str, str]]:
    """(line, outermost function, call) of every call in ``path`` that reads or writes a file."""
    found: list[tuple[int, str, str]] = []

    class Visitor(ast.NodeVisitor):
        def __init__(self):
            self.functions: list[str] = []

        def visit_FunctionDef(self, node):
            self.functions.append(node.name)
            self.generic_visit(node)
            self.functions.pop()

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_Call(self, node):
            f, call = node.func, None
            if isinstance(f, ast.Name) and f.id in NAMES:
                call = f.id
            elif isinstance(f, ast.Attribute):
                owner = f.value.id if isinstance(f.value, ast.Name) else None
                if f.attr in PATH_METHODS or f.attr in FRAME_METHODS or f.attr == "write_atomic":
                    call = f.attr
                elif owner in MODULE_FUNCTIONS and f.attr in MODULE_FUNCTIONS[owner]:
                    call = f"{owner}.{f.attr}"
            if call is not None:
                found.append((node.lineno, self.functions[0] if self.functions else "<module>",
                              call))
            self.generic_visit(node)

    Visitor().visit(ast.parse(path.read_text(), str(path)))
    return found


def file_access_outside_the_store(root: Path = REPO_DIR) -> list[str]:
    wrong = []
    for top in ("harness", "report"):
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith("harness/files/"):
                continue
            for line, function, call in file_calls(path):
                if (rel, function) not in NOT_A_STUDY_FILE:
                    wrong.append(f"{rel}:{line}: {call}() in {function}")
    return wrong


def test_no_file_is_read_or_written_outside_the_store():
    assert file_access_outside_the_store() == []


def test_every_exception_is_still_needed():
    """An exception whose call has gone is removed with it."""
    used = set()
    for rel, _ in NOT_A_STUDY_FILE:
        used |= {(rel, function) for _, function, _ in file_calls(REPO_DIR / rel)}
    assert set(NOT_A_STUDY_FILE) - used == set()


def test_the_check_sees_a_read_planted_outside_the_store(tmp_path):
    for top in ("harness", "report"):
        shutil.copytree(REPO_DIR / top, tmp_path / top,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c"))
    (tmp_path / "harness" / "stats" / "_probe.py").write_text(
        "import json\nimport pandas as pd\n\n\n"
        "def phases(run_dir):\n    return json.load(open(run_dir / 'phases.json'))\n\n\n"
        "def rows(run_dir):\n    return pd.read_parquet(run_dir / 'requests.parquet')\n")
    assert file_access_outside_the_store(tmp_path) == [
        "harness/stats/_probe.py:6: json.load() in phases",
        "harness/stats/_probe.py:6: open() in phases",
        "harness/stats/_probe.py:10: pd.read_parquet() in rows"]


# --- the store --------------------------------------------------------------------------------

def test_a_run_reads_what_its_producers_wrote(tmp_path):
    run = StudyFiles(tmp_path).run("nginx", 2).fresh()
    assert run.dir == tmp_path / "runs" / "nginx" / "2" and run.raw_dir.is_dir()
    assert run.phases() == {} and run.inflight_at_stop() == 0 and run.progress() == (0, 0)
    write_phases(run.phases_path, {"warmup_start_t_unix_s": 1.5})
    write_inflight_at_stop(str(run.raw_dir), "here", 11, 3, 2.0)
    write_inflight_at_stop(str(run.raw_dir), "there", 12, 4, 2.0)
    assert run.phases() == {"warmup_start_t_unix_s": 1.5} and run.inflight_at_stop() == 7
    users = RawCsv(run.raw_dir / USERS_FILE, USERS_COLUMNS)
    for t, n, requests in ((10.0, 5, 40), (11.0, 8, 95)):
        users.writerow({"t_unix_s": t, "users": n, "requests": requests})
    users.close()
    assert run.progress() == (8, 95)
    assert run.users_history()["users"].tolist() == [5, 8]
    assert run.cpu_warnings() == []
    write_cpu_warnings(str(run.raw_dir), "here", 11,
                       {"count": 3, "max_cpu_percent": 97.4, "first_t_unix_s": 1.0})
    assert run.cpu_warnings() == ["here-11: CPU above Locust's threshold 3 times, at most 97%"]


def test_raw_rows_reach_the_disk_when_flushed(tmp_path):
    rows = RawCsv(tmp_path / "raw" / "a.csv", ["x", "y"])
    rows.writerow({"x": 1, "y": "b"})
    rows.flush()
    assert (tmp_path / "raw" / "a.csv").read_text().splitlines() == ["x,y", "1,b"]
    rows.close()


def test_a_pid_file_is_read_back_and_missing_is_none(tmp_path):
    assert read_pid(tmp_path / "pids" / "a.pid") is None
    write_pid(tmp_path / "pids" / "a.pid")
    assert read_pid(tmp_path / "pids" / "a.pid") > 0


def test_a_suite_is_told_from_a_study(tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "manifest.json").write_text(json.dumps({"cells": []}))
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "manifest.json").write_text(json.dumps({"runs": []}))
    assert is_suite(tmp_path / "s") and not is_suite(tmp_path / "t")
    assert not is_suite(tmp_path / "missing")


def test_a_run_is_done_again_unless_its_files_still_match(tmp_path):
    """The resume check: a completed run is kept only when its recorded key is the planned run's
    (in the recipe it was recorded with) and its files are unchanged."""
    made = make_study(tmp_path)
    study = StudyFiles(made.path)
    entry = study.read_manifest().runs[0]
    run = study.at(entry.dir or f"runs/{entry.system}/{entry.run_index}")
    manifest = run.read_manifest()
    planned = dataclasses.replace(manifest.spec, comparison_key="3:" + "0" * 64,
                                  files_sha256={"gateway.toml": "ab" * 32},
                                  instruments=Instruments("1.2.0", "2.47.0"))
    run.write_manifest(dataclasses.replace(manifest, comparison_key=planned.comparison_key))
    assert run.completed(planned) is not None
    assert run.completed(dataclasses.replace(planned, comparison_key="3:" + "1" * 64)) is None
    # recorded with recipe 1 or 2: kept when that recipe of the planned run gives the recorded key
    for older in (migrate.run_key_v1, migrate.run_key_v2):
        run.write_manifest(dataclasses.replace(manifest, comparison_key=older(planned)))
        assert run.completed(planned) is not None
        assert run.completed(dataclasses.replace(planned, gateway_workers=planned.gateway_workers + 1)) is None
    # a recipe this harness does not know is refused, not taken for another run
    run.write_manifest(dataclasses.replace(manifest, comparison_key="9:" + "0" * 64))
    with pytest.raises(KeyVersionError, match="'9' is not one this harness knows"):
        run.completed(planned)
    run.write_manifest(dataclasses.replace(manifest, comparison_key=planned.comparison_key))
    name = next(iter(manifest.files))
    run.named(name).write_bytes(run.named(name).read_bytes() + b"x")
    assert run.completed(planned) is None


# The files of direct's and nginx's folders (GatewaySpec.files_sha256) when v3-smoke was recorded:
# recipe 2 hashed them beside the spec, which did not hold them.
V3_SMOKE_FILES = {
    "direct": {"gateway.toml": "df388ffe033e44b6183bf036fbf1b3be5ef8d4cbd23d08fd8ccd3313dc9b64ef"},
    "nginx": {"gateway.toml": "fb37deecc74441d970d71daff1c398f49017a6dc710b0cef1540dc0490d564b0",
              "install.sh": "c23cdad23eccb80d95e8f92543ab2966eab056c76631b9a1103f84a1f87dda31",
              "nginx.conf.tmpl": "0490ab4998eb894c56ae9f5b669993cedcde9da27d1893ceca218989eee4ce8b",
              "nginx.recommended.tmpl": "8026be3f9069803683c51bbf873046f96db2204b43e8b360bbe23cf0c6986f89",
              "nginx.sized.tmpl": "c18d727f769aac7bcc239317f74f994d4c70eef570da084c73f41c9eb1c67809"}}


@pytest.mark.parametrize("fixture, recipe", [("v2-smoke", 1), ("v3-smoke", 2)])
def test_every_run_of_a_recorded_study_resumes_under_the_current_recipe(tmp_path, fixture, recipe):
    """The recorded fixtures' runs carry recipe-1 and recipe-2 keys: planned again (the same
    spec, with the files and instruments it ran with, keyed by the current recipe) each is kept,
    with the key it was recorded with."""
    from harness.run.run import completed_record
    shutil.copytree(REPO_DIR / "tests" / "fixtures" / "studies" / fixture, tmp_path / "s")
    study = StudyFiles(tmp_path / "s")
    runs = [study.at(e.dir) for e in study.read_manifest().runs]
    assert runs
    for run in runs:
        recorded = run.read_manifest()
        assert key_version(recorded.comparison_key) == recipe
        planned = dataclasses.replace(
            recorded.spec, comparison_key="3:" + "0" * 64,
            files_sha256=V3_SMOKE_FILES[recorded.system],
            instruments=Instruments(recorded.mock_version, recorded.locust_version))
        record = completed_record(planned, tmp_path / "s")
        assert record is not None and record.comparison_key == recorded.comparison_key
        moved = dataclasses.replace(planned, gateway_toml_sha256="0" * 64)
        assert completed_record(moved, tmp_path / "s") is None


def test_a_study_carries_the_providers_rows(tmp_path):
    """Statistics read the providers' rows from the Study, never from a file."""
    study = load_study(make_fault_study(tmp_path, "f", {"nginx": [FaultRun()]}))
    run_id = study.runs[0].run_id
    rows = study.mock_requests(run_id)
    assert isinstance(rows, pd.DataFrame) and len(rows) > 0
    assert study.mock_requests(run_id) is rows          # read once
    assert study.fault_epochs and set(study.fault_epochs) <= set(study.run_dirs)
