"""A system's folder as committed at another git ref, checked out and built beside this tree.

``checkout(ref)`` resolves the ref to its commit and keeps one git worktree of it under
``.cache/builds/<commit>/`` (made once, reused; a broken one is made again).
``build(spec, log)`` runs the ``[build]`` command the spec's own gateway.toml declares, with
``{{gateway_dir}}`` pointing into that worktree, so both builds are compiled the same way, each
from its own sources. A folder whose gateway.toml declares no ``[build]`` runs as committed (or
as its ``[install]`` built it: a worktree's ``{{cache_dir}}`` is its own).
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.model.config import REPO_DIR
from harness.model.gateway_spec import GatewaySpec
from harness.run.systems import run_declared

BUILDS_DIR = REPO_DIR / ".cache" / "builds"
GIT_TIMEOUT_S = 120.0


class BuildError(RuntimeError):
    """A ref that does not name a commit, a checkout or a build that failed; says which."""


@dataclass(frozen=True)
class Checkout:
    ref: str                 # as the user gave it
    commit: str              # the full commit it resolved to
    path: Path               # the worktree's root

    @property
    def gateways_dir(self) -> Path:
        return self.path / "gateways"


def _git(*args: str, cwd: Path = REPO_DIR) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"git {' '.join(args)}: {exc}") from None


def resolve(ref: str) -> str:
    """The full commit a ref names in this repository. A shallow clone (as CI may make) is
    deepened once from its origin when it lacks the ref."""
    def rev_parse() -> str:
        done = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        return done.stdout.strip() if done.returncode == 0 else ""
    commit = rev_parse()
    if not commit and _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        _git("fetch", "--quiet", "--unshallow")
        commit = rev_parse()
    if not commit:
        raise BuildError(f"{ref!r} names no commit in {REPO_DIR}")
    return commit


def checkout(ref: str, builds_dir: Path = BUILDS_DIR) -> Checkout:
    """One worktree per commit, detached; reused while it is whole and at that commit."""
    commit = resolve(ref)
    path = builds_dir / commit
    if path.is_dir():
        head = _git("rev-parse", "HEAD", cwd=path)
        clean = _git("status", "--porcelain", "--untracked-files=no", cwd=path)
        if head.returncode == 0 and head.stdout.strip() == commit and not clean.stdout.strip():
            return Checkout(ref, commit, path)
        shutil.rmtree(path, ignore_errors=True)
    _git("worktree", "prune")
    builds_dir.mkdir(parents=True, exist_ok=True)
    done = _git("worktree", "add", "--detach", "--force", str(path), commit)
    if done.returncode != 0:
        raise BuildError(f"git worktree add {path} {commit[:12]} failed: "
                         f"{(done.stderr or done.stdout).strip()[:300]}")
    return Checkout(ref, commit, path)


def build(spec: GatewaySpec, log_path: Path) -> str:
    """Run the spec's [build] command in its folder (idempotent by its own design); '' when it
    declares none, else a one-line account. BuildError, naming the command and its log, when
    it fails."""
    if not spec.build_command:
        return ""
    problem = run_declared(spec, spec.build_command, "build", log_path, spec.build_timeout_s,
                           cwd=spec.directory)
    if problem:
        raise BuildError(problem)
    return f"built (log: {log_path})"
