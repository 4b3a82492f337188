"""A system's own words about its limits: the lines its gateway.toml's [limits] declares, found in
its logs after a run (harness/files/limit_logs.py), recorded in the run manifest, and quoted with
their count as the in-flight lane's evidence (harness/stats/limit_lines.py)."""
import dataclasses
import json
from datetime import datetime, timezone

import pytest
from synthetic_manifests import small_run_manifest

from harness.files import limit_logs
from harness.files.limit_logs import ELLIPSIS, excerpt, line_time, scan
from harness.model.manifests import LimitLine, RunManifest
from harness.stats.limit_lines import EVIDENCE_CHARS, evidence

NGINX_PATTERNS = ("worker_connections are not enough", "Too many open files", "upstream timed out")
NOT_ENOUGH = "8192 worker_connections are not enough, reusing connections"


def _nginx_line(second: int, pid: int = 7) -> str:
    return f"2026/12/01 21:31:{second:02d} [warn] {pid}#{pid}: {NOT_ENOUGH}"


def _local(second: int) -> float:
    """nginx writes the machine's local time."""
    return datetime(2026, 12, 1, 21, 31, second).timestamp()


def _nginx_run_dir(tmp_path, flood: int = 1204):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lines = ["2026/12/01 21:30:58 [notice] 6#6: using the \"epoll\" event method"]
    lines += [_nginx_line(10 + i % 40) for i in range(flood)]
    lines.append("2026/12/01 21:31:55 [crit] 8#8: *9 accept4() failed (24: Too many open files)")
    (run_dir / "nginx-error.log").write_text("\n".join(lines) + "\n")
    # the process's own output: tracing colours, then a traceback's last line without a time
    (run_dir / "system.log").write_text(
        "\x1b[2m2026-12-01T21:32:00.250000Z\x1b[0m \x1b[31mERROR\x1b[0m accept error: "
        "Too many open files (os error 24)\n"
        "OSError: [Errno 24] Too many open files\n")
    return run_dir


def test_each_declared_pattern_is_counted_with_its_first_line_and_time(tmp_path):
    run_dir = _nginx_run_dir(tmp_path)
    not_enough, files, timed_out = scan(run_dir, ("nginx-error.log",), NGINX_PATTERNS)
    assert (not_enough.count, not_enough.log, not_enough.line) == (1204, "nginx-error.log",
                                                                   _nginx_line(10))
    assert not_enough.t_unix_s == pytest.approx(_local(10))
    # declared logs first, then system.log: three lines in all, the first in nginx-error.log
    assert (files.count, files.log) == (3, "nginx-error.log")
    assert files.t_unix_s == pytest.approx(_local(55))
    assert (timed_out.count, timed_out.log, timed_out.line, timed_out.t_unix_s) == (0, "", "", None)
    assert not any(line.partial for line in (not_enough, files, timed_out))


def test_a_system_log_line_loses_its_colours_and_keeps_its_utc_time(tmp_path):
    (line,) = scan(_nginx_run_dir(tmp_path), (), ("accept error",))
    assert line.log == "system.log" and line.line.startswith("2026-12-01T21:32:00.250000Z ERROR")
    assert line.t_unix_s == pytest.approx(
        datetime(2026, 12, 1, 21, 32, 0, 250000, tzinfo=timezone.utc).timestamp())


def test_missing_logs_and_no_patterns_give_what_they_can(tmp_path):
    assert scan(tmp_path, ("nginx-error.log",), ()) == ()
    (line,) = scan(tmp_path, ("nginx-error.log",), ("anything",))
    assert line == LimitLine(pattern="anything", count=0)


def test_a_log_is_read_up_to_its_bound_and_says_so(tmp_path, monkeypatch):
    run_dir = _nginx_run_dir(tmp_path, flood=1000)
    monkeypatch.setattr(limit_logs, "LOG_BYTES", 200 * 100)   # ~200 of nginx's 100-byte lines
    (line,) = scan(run_dir, ("nginx-error.log",), NGINX_PATTERNS[:1])
    assert line.partial and 150 < line.count < 250 and line.line == _nginx_line(10)


@pytest.mark.parametrize("line,expected", [
    ("[2026-12-01 21:31:12 +0000] [123] [CRITICAL] WORKER TIMEOUT (pid:456)",
     datetime(2026, 12, 1, 21, 31, 12, tzinfo=timezone.utc).timestamp()),
    ("2026-12-01T23:31:12.5+02:00 overloaded",
     datetime(2026, 12, 1, 21, 31, 12, 500000, tzinfo=timezone.utc).timestamp()),
    ("2026/12/01 21:31:12 [alert] 7#7: worker_connections are not enough",
     datetime(2026, 12, 1, 21, 31, 12).timestamp()),
    ("OSError: [Errno 24] Too many open files", None),
    ("2026/13/45 21:31:12 [alert] not a date", None),
    ("x" * 80 + " 2026-12-01T21:31:12Z: a date far into the message is not the line's", None),
])
def test_line_time(line, expected):
    assert line_time(line) == (None if expected is None else pytest.approx(expected))


def test_a_long_line_is_kept_around_its_match():
    line = "a" * 500 + NOT_ENOUGH + "b" * 500
    start = line.index(NOT_ENOUGH)
    cut = excerpt(line, start, start + len(NOT_ENOUGH), 240)
    assert cut.startswith(ELLIPSIS) and cut.endswith(ELLIPSIS) and NOT_ENOUGH in cut
    assert len(cut) == 240 + 2 * len(ELLIPSIS)
    assert excerpt("short", 0, 5, 240) == "short"


def _run(run_id: str, lines: tuple[LimitLine, ...]) -> RunManifest:
    return dataclasses.replace(small_run_manifest(run_id, "nginx", int(run_id[-1]), {}),
                               limit_lines=lines)


def test_a_declared_line_in_a_synthetic_log_becomes_the_evidence(tmp_path):
    run = _run("nginx-1", scan(_nginx_run_dir(tmp_path), ("nginx-error.log",), NGINX_PATTERNS))
    assert evidence([run], {"nginx-1": _local(59)}) == \
        f'nginx-error.log: "{_nginx_line(10)}" (×1,204)'
    # the manifest keeps them as they were found
    assert RunManifest.from_json(run.to_json()).limit_lines == run.limit_lines


def test_the_evidence_counts_only_what_came_by_the_end_of_the_step(tmp_path):
    lines = scan(_nginx_run_dir(tmp_path), ("nginx-error.log",), NGINX_PATTERNS)
    run = _run("nginx-1", lines)
    # before the first "not enough" line: the next declared pattern has none either by then
    assert evidence([run], {"nginx-1": _local(9)}) == ""
    # a second run, the same lines: summed, said so; a run not at this step is left out
    runs = [run, _run("nginx-2", lines), _run("nginx-3", lines)]
    assert evidence(runs, {"nginx-1": _local(59), "nginx-2": _local(59)}).endswith(
        "(×2,408 in 2 runs)")
    # a line without a time cannot be placed, so it counts; a partial log is a lower bound
    untimed = (LimitLine("worker_connections are not enough", 0),
               LimitLine("Too many open files", 2, "system.log",
                         "OSError: [Errno 24] Too many open files", None, partial=True))
    assert evidence([_run("nginx-1", untimed)], {"nginx-1": 0.0}) == \
        'system.log: "OSError: [Errno 24] Too many open files" (at least ×2)'
    assert evidence([_run("nginx-1", ())], {"nginx-1": 0.0}) == ""


def test_the_evidence_quotes_a_long_line_around_its_match():
    stored = ELLIPSIS + "x" * 150 + " " + NOT_ENOUGH + " " + "y" * 60 + ELLIPSIS
    run = _run("nginx-1", (LimitLine("worker_connections are not enough", 3, "nginx-error.log",
                                     stored, None),))
    quoted = evidence([run], {"nginx-1": 0.0}).split('"')[1]
    assert NOT_ENOUGH in quoted and quoted.startswith(ELLIPSIS) and quoted.endswith(ELLIPSIS)
    assert len(quoted) <= EVIDENCE_CHARS + 2 * len(ELLIPSIS)


def test_runs_from_before_limit_lines_read_without_them():
    data = json.loads(_run("nginx-1", (LimitLine("p", 1, "system.log", "p", 1.0),)).to_json())
    data.pop("limit_lines")
    assert RunManifest.from_json(json.dumps(data)).limit_lines == ()
