"""harness.run.builds: a commit's worktree beside this tree, made once and reused, and the
[build] its own gateway.toml declares; harness.model.builds: the study's items, checked."""
import dataclasses
import subprocess
import sys

import pytest

from harness.model import builds as model_builds
from harness.model.config import REPO_DIR
from harness.model.gateway_spec import load_gateway_spec
from harness.run import builds


@pytest.fixture
def worktrees(tmp_path):
    yield tmp_path / "builds"
    subprocess.run(["git", "worktree", "prune"], cwd=REPO_DIR, capture_output=True)
    for path in (tmp_path / "builds").glob("*"):
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=REPO_DIR,
                       capture_output=True)


def test_a_ref_that_names_no_commit_is_refused():
    with pytest.raises(builds.BuildError, match="'no-such-ref-here' names no commit"):
        builds.resolve("no-such-ref-here")


def test_one_worktree_per_commit_reused_while_whole(worktrees):
    first = builds.checkout("HEAD", worktrees)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_DIR, capture_output=True,
                          text=True).stdout.strip()
    assert first.commit == head and first.path == worktrees / head
    assert (first.gateways_dir / "sluice" / "gateway.toml").is_file()
    marker = first.path / "untracked-marker"
    marker.write_text("kept")
    assert builds.checkout("HEAD", worktrees).path == first.path and marker.exists()  # reused
    (first.gateways_dir / "sluice" / "gateway.toml").write_text("changed")  # no longer the commit
    again = builds.checkout("HEAD", worktrees)
    assert (again.gateways_dir / "sluice" / "gateway.toml").read_text() != "changed"
    spec = load_gateway_spec("sluice~base", again.gateways_dir)
    assert spec.directory == (again.gateways_dir / "sluice").resolve()
    # its installs are its own: never over this tree's, from other sources
    assert spec.cache_dir == (again.path / ".cache" / "gateways" / "sluice").resolve()
    assert load_gateway_spec("sluice").cache_dir == REPO_DIR / ".cache" / "gateways" / "sluice"


def test_a_failing_build_names_its_command_and_log(tmp_path):
    spec = dataclasses.replace(load_gateway_spec("sluice"),
                               build_command=(sys.executable, "-c", "raise SystemExit(3)"))
    with pytest.raises(builds.BuildError, match=r"build failed \(exit 3\).*log: .*b.log"):
        builds.build(spec, tmp_path / "b.log")
    assert builds.build(dataclasses.replace(spec, build_command=()), tmp_path / "b.log") == ""


def test_study_items_are_parsed_and_bad_ones_named():
    assert model_builds.build_refs(["sluice~base=main~1"]) == {"sluice~base": "main~1"}
    assert model_builds.system_env(["sluice:A=1", "sluice:B=x=y"]) == {"sluice": {"A": "1", "B": "x=y"}}
    entries = ("nginx", "sluice~base", "sluice")
    assert model_builds.problems(["sluice~base=HEAD"], ["sluice:A=1"], entries) == []
    assert model_builds.problems(["nope=HEAD", "sluice~base", "sluice~base=HEAD", "sluice~base=x"],
                                 ["sluice:1A=2", "sluice", "other:A=1"], entries) == [
        "builds: 'nope' is not one of the study's systems ['nginx', 'sluice~base', 'sluice']",
        "builds: expected ENTRY=REF (e.g. sluice~base=HEAD~1), got 'sluice~base'",
        "builds: 'sluice~base' is given twice",
        "system_env: '1A' is not an environment variable name",
        "system_env: expected ENTRY:NAME=VALUE (e.g. sluice:SLUICE_TEST_DELAY_MS=1), got 'sluice'",
        "system_env: 'other' is not one of the study's systems ['nginx', 'sluice~base', 'sluice']",
    ]
