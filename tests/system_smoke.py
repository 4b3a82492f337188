"""Start one system in front of a real mock, send one unary and one streaming request through
it, check the mock saw them, stop it, and check that none of its processes is left."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import psutil
from polling import wait_for

from harness.host.processes import log_tail
from harness.model.gateway_spec import load_gateway_spec
from harness.run.systems import (
    install,
    is_installed,
    read_version,
    start_mock,
    start_system,
)
from harness.run.verify import mock_snapshot, reply_problem, send_chat


@dataclass(frozen=True)
class SmokeResult:
    ok: bool
    installed: bool
    unary_status: int = 0
    stream_status: int = 0
    mock_count: int = 0
    version: str = ""
    errors: list = field(default_factory=list)
    log_tail: str = ""


def check_system(name: str, work_dir: Path, install_missing: bool = False,
                 workers: int = 1, ready_timeout_s: float = 120.0) -> SmokeResult:
    spec = load_gateway_spec(name)
    if not spec.runnable:
        return SmokeResult(False, False, errors=[f"not runnable here: {spec.not_runnable_reason}"])
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    if install_missing:
        result = install(spec, work_dir / "install.log")
        if not result.ok:
            return SmokeResult(False, False, errors=[result.message])
    elif not is_installed(spec):
        return SmokeResult(False, False, errors=[f"{name} is not installed (the study installs it)"])
    version = read_version(spec)
    errors: list[str] = []
    mock = start_mock(work_dir, latency_ms=5, workers=1, response_tokens=8)
    system = None
    unary = stream = None
    seen = 0
    pids: list[psutil.Process] = []
    try:
        system = start_system(spec, work_dir, mock.url, mock.port, workers, ready_timeout_s)
        if system.process is not None:
            pids = system.process.tree()
        t = system.target
        for _ in range(spec.warmup_requests):
            send_chat(t.base_url, t.chat_path, t.model, t.headers)
        before = mock_snapshot(mock.stats_dir)
        unary = send_chat(t.base_url, t.chat_path, t.model, t.headers)
        stream = send_chat(t.base_url, t.chat_path, t.model, t.headers, stream=True)
        seen = mock_snapshot(mock.stats_dir)["count"] - before["count"]
        for label, reply, is_stream in (("unary", unary, False), ("stream", stream, True)):
            problem = reply_problem(reply, is_stream)
            if problem:
                errors.append(f"{label}: {problem}")
        if seen != 2:
            errors.append(f"the mock saw {seen} of the 2 requests")
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        if system is not None and system.process is not None:
            pids = pids or system.process.tree()
            system.process.stop()
        mock.process.stop()
    # a worker may outlive its stopped parent for a moment: wait for the tree, bounded
    wait_for(lambda: not any(_alive(p) for p in pids), 5.0)
    left = [p.pid for p in pids if _alive(p)]
    if left:
        errors.append(f"processes left after stop: {left}")
    return SmokeResult(ok=not errors, installed=True,
                       unary_status=unary.status if unary else 0,
                       stream_status=stream.status if stream else 0, mock_count=seen,
                       version=version, errors=errors,
                       log_tail=log_tail(work_dir / "system.log"))


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
