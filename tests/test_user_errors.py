"""Bad input is one family (harness.model.errors.UserError): every command, given a wrong
parameter, file, directory or artifact, exits 2 with one `error:` line per problem, no traceback,
before it starts any process."""
import ast
import os
import subprocess
import sys

import pytest

from harness.commands import COMMANDS, main
from harness.files.handoff import HandoffError
from harness.files.readers import ArtifactError, IntegrityError
from harness.host.processes import ProcessError
from harness.model import errors
from harness.model.config import REPO_DIR, ConfigError
from harness.model.errors import UserError
from harness.model.formats import UnknownVersionError
from harness.model.gateway_spec import GatewaySpecError
from harness.model.manifests import ManifestError
from harness.model.migrate import TableFormatError
from harness.model.suite import SuiteError
from harness.model.toml_schema import TomlSchemaError
from harness.model.topology import TopologyError
from harness.run.builds import BuildError
from harness.run.capture import CaptureError
from harness.verdicts.aa import AAInputError
from harness.verdicts.gate import GateInputError
from harness.verdicts.history import HistoryError
from harness.verdicts.inputs import VerdictInputError

STUDY = REPO_DIR / "tests" / "fixtures" / "studies" / "v2-smoke"     # read only: no aa_pair, no gate

# (command line, with {tmp} for a fresh empty directory; what stderr must say)
CASES = {
    "notebook-bad-set": (["notebook", "--set", "users=abc", "--set", "out_dir={tmp}/out"],
                         "users: expected a whole number"),
    "notebook-unknown-gateway": (["notebook", "--gateways", "no-such-gw", "--set", "out_dir={tmp}/out"],
                                 "unknown gateway 'no-such-gw'"),
    "study-unknown-gateway": (["study", "--profile", "smoke", "--gateways", "no-such-gw",
                               "--set", "out_dir={tmp}/out"], "unknown gateway 'no-such-gw'"),
    "study-missing-topology": (["study", "--set", "topology={tmp}/none.toml",
                                "--set", "out_dir={tmp}/out"], "none.toml: cannot read it"),
    "suite-missing-file": (["suite", "{tmp}/none.toml", "--out-dir", "{tmp}/out"],
                           "none.toml: cannot read it"),
    "suite-no-file": (["suite"], "a suite file (or --compare A B) is needed"),
    "suite-compare-missing-dirs": (["suite", "--compare", "{tmp}/a", "{tmp}/b"],
                                   "no suite manifest"),
    "suite-compare-a-study": (["suite", "--compare", str(STUDY), str(STUDY)], "SuiteManifest"),
    "report-not-a-study": (["report", "{tmp}"], "no study manifest"),
    "report-compare-missing": (["report", "{tmp}/b", "--compare", "{tmp}/a"], "no study manifest"),
    "publish-unknown-profile": (["publish", "--profile", "no-such-profile", "--artifacts", "{tmp}",
                                 "--out", "{tmp}/published"], "--profile 'no-such-profile': not a profile"),
    "publish-missing-study": (["publish", "--study", "{tmp}/none", "--out", "{tmp}/published"],
                              "none: no study manifest in it"),
    "publish-readme-without-block": (["publish", "--artifacts", "{tmp}", "--out", "{tmp}/published",
                                      "--readme", "{tmp}/v99/manifest.json"],
                                     "--readme {tmp}/v99/manifest.json: no <!-- results:start -->"),
    "install-unknown-system": (["install", "no-such-system"], "unknown gateway 'no-such-system'"),
    "gate-judge-missing-dir": (["gate", "judge", "{tmp}/none", "--history-dir", "{tmp}"],
                               "gate: cannot judge: "),
    "gate-judge-not-a-gate-study": (["gate", "judge", str(STUDY), "--history-dir", "{tmp}"],
                                    "compares no two builds"),
    "gate-refresh-missing-dir": (["gate", "refresh", "{tmp}/none", "--history-dir", "{tmp}"],
                                 "gate refresh: refused: "),
    "gate-run-bad-set": (["gate", "run", "--set", "stream=maybe", "--history-dir", "{tmp}"],
                         "stream: expected true or false"),
    "gate-run-bad-head-env": (["gate", "run", "--head-env", "NOEQ", "--history-dir", "{tmp}"],
                              "--head-env 'NOEQ': expected NAME=VALUE"),
    "aa-missing-dir": (["aa", "{tmp}/none"], "A/A check: cannot be made: "),
    "aa-no-pair": (["aa", str(STUDY)], "names no A/A pair"),
    "soak-missing-dir": (["soak", "{tmp}/none"], "no study manifest"),
    "mock-no-connections": (["mock", "--connections", "0"], "connections: must be positive"),
    "soak-unknown-version": (["soak", "{tmp}/v99"], "schema_version 99 is not one this harness reads"),
}


@pytest.fixture
def no_process(monkeypatch):
    """Starting a process is a failure of the test: bad input must be refused before."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"a process was started on bad input: {args[:2]}")
    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    for name in ("fork", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, refuse)


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_error_line_and_exit_2(case, tmp_path, capsys, no_process):
    args, says = CASES[case]
    (tmp_path / "v99").mkdir()
    (tmp_path / "v99" / "manifest.json").write_text('{"schema_version": 99}')
    before = sorted(tmp_path.rglob("*"))
    code = main([a.replace("{tmp}", str(tmp_path)) for a in args])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    says = says.replace("{tmp}", str(tmp_path))
    assert err.count("\n") == 1 and err.startswith("error: ") and says in err, err
    assert "Traceback" not in err and out == ""
    assert sorted(tmp_path.rglob("*")) == before         # nothing written, nothing started


def test_every_command_has_a_bad_input_case():
    assert {args[0] for args, _ in CASES.values()} == set(COMMANDS)


def test_several_problems_are_one_error_line_each(tmp_path, capsys, no_process):
    code = main(["study", "--profile", "smoke", "--gateways", "direct", "--set", "users=0",
                 "--set", "runs_per_gateway=0", "--set", f"out_dir={tmp_path}/out"])
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and len(lines) >= 2, lines
    assert all(line.startswith("error: invalid study parameter: ") for line in lines), lines
    assert any("users: must be at least 1" in line for line in lines)
    assert any("runs_per_gateway: must be at least 1" in line for line in lines)


def test_the_command_line_prints_no_traceback(tmp_path):
    done = subprocess.run([sys.executable, "-m", "harness", "suite", "--compare",
                           str(tmp_path / "a"), str(tmp_path / "b")],
                          cwd=REPO_DIR, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr


@pytest.mark.parametrize("cls", [ConfigError, SuiteError, GatewaySpecError, TomlSchemaError,
                                 ManifestError, UnknownVersionError, TableFormatError,
                                 TopologyError, HistoryError, VerdictInputError, AAInputError,
                                 GateInputError, ArtifactError, IntegrityError, HandoffError])
def test_the_family(cls):
    assert issubclass(cls, UserError)


@pytest.mark.parametrize("cls", [BuildError, ProcessError, CaptureError])
def test_failures_of_the_machine_are_not_user_errors(cls):
    # A build or a process that fails is a run that failed (exit 1), not bad input; a ref
    # that names no commit reaches the user as a ConfigError from the study's preflight().
    assert not issubclass(cls, UserError)


def test_the_family_sits_at_the_bottom():
    tree = ast.parse(open(errors.__file__, encoding="utf-8").read())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m.split(".")[0] == "harness"], imported
