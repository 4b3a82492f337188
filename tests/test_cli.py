"""`python -m harness <command>`: one entry point; bad parameters are one line and exit 2."""
import subprocess
import sys

import pytest

from harness.commands import COMMANDS, main, parser
from harness.commands.options import study_config
from harness.model.config import REPO_DIR, from_profile


def cli(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=REPO_DIR,
                          capture_output=True, text=True, timeout=timeout)


def test_help_lists_every_command():
    done = cli("--help")
    assert done.returncode == 0
    assert all(f"    {name}" in done.stdout for name in COMMANDS), done.stdout


@pytest.mark.parametrize("args,field", [
    (["study", "--set", "users=abc"], "users: expected a whole number, got 'abc'"),
    (["notebook", "--set", "mock_latency_ms=nan"], "mock_latency_ms: expected a finite number, got 'nan'"),
    (["study", "--set", "think_time_s=Infinity"], "think_time_s: expected a finite number, got inf"),
    (["gate", "run", "--set", "stream=maybe"], "stream: expected true or false, got 'maybe'"),
    (["study", "--gateways", "direct", "--set", 'gateways=["nginx"]'], "gateways: given both"),
])
def test_a_bad_parameter_is_one_line_and_exit_code_2(tmp_path, args, field):
    done = cli(*args, "--set", f"out_dir={tmp_path / 'out'}")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and field in done.stderr, done.stderr
    assert done.stdout == "" and not (tmp_path / "out").exists()


def test_every_problem_is_named_before_anything_starts(tmp_path, capsys):
    assert main(["study", "--profile", "smoke", "--gateways", "direct,nope", "--set", "users=0",
                 "--set", f"out_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "gateways: unknown gateway 'nope'" in err and "users: must be at least 1" in err
    assert list(tmp_path.iterdir()) == []


def test_the_default_systems_are_the_profiles_from_every_entry_point(tmp_path):
    args = parser().parse_args(["notebook", "--set", f"out_dir={tmp_path}"])
    config = study_config(args)
    assert config.gateways == from_profile("standard").gateways
    gate = study_config(parser().parse_args(["study", "--profile", "gate",
                                             "--set", f"out_dir={tmp_path}"]))
    assert gate.gateways == ("nginx", "sluice~base", "sluice")


def test_the_notebook_is_handed_the_preflight_the_command_made(tmp_path, monkeypatch):
    """The command parses and clears the study once; the notebook gets that result, not
    parameters to parse and check again."""
    from harness.commands import executing
    handed = []
    monkeypatch.setattr(executing, "execute", lambda notebook, executed, handoff, **parameters:
                        handed.append((notebook, executed, handoff, parameters)) and False)
    assert main(["notebook", "--profile", "smoke", "--gateways", "direct", "--set", "users=3",
                 "--set", f"out_dir={tmp_path}", "--set", "study_id=nb"]) == 1
    ((notebook, executed, cleared, parameters),) = handed
    assert notebook == "head_to_head.ipynb" and executed == tmp_path / "nb" / "head_to_head.ipynb"
    assert cleared.config.users == 3 and cleared.config.gateways == ("direct",)
    assert [r.system for r in cleared.plan] == ["direct"] and parameters == {"with_report": True}


def test_unknown_system_to_install_is_one_line(capsys):
    assert main(["install", "no-such-system"]) == 2
    assert "unknown gateway 'no-such-system'" in capsys.readouterr().err


def test_a_gate_without_a_base_or_with_a_bad_head_env_is_refused_before_it_builds(capsys):
    assert main(["gate", "run", "--set", "gate_base_system=", "--head-env", "NOEQUALS"]) == 2
    out, err = capsys.readouterr()
    assert "gate_base_system: the gate compares the head build" in err
    assert "--head-env 'NOEQUALS': expected NAME=VALUE" in err
    assert "building the base" not in out
