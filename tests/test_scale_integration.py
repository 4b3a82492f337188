"""The real nginx started from its sized template: it answers, its workers hold the open-file
limit it asks for (or say why not), and its counted configuration loads."""
import shutil
import subprocess

import pytest

from harness.model.gateway_spec import load_gateway_spec, render

pytestmark = pytest.mark.integration
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def _open_files(pid: int) -> tuple[str, str]:
    """A process's soft and hard open-file limits, as /proc shows them to anyone (prlimit on a
    worker that dropped to nobody needs a capability a container may not grant)."""
    line = next(x for x in open(f"/proc/{pid}/limits") if x.startswith("Max open files"))
    return tuple(line.split()[3:5])


@pytest.mark.timeout(120)
@pytest.mark.skipif(not shutil.which("nginx"),
                    reason="nginx not installed (scripts/install-test-deps.sh)")
def test_nginx_starts_from_its_sized_template(tmp_path):
    """Rendered and started as a study's run does (harness.run.systems.start_system), it answers;
    its workers hold the open-file limit it asks for, or say why not; counted, it loads too."""
    from harness.files.limit_logs import scan
    from harness.run.systems import run_values, start_system
    spec, notes = load_gateway_spec("nginx").configured(scale="sized")
    assert notes["scale"] == "" and spec.start_files[0].template == "nginx.sized.tmpl"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    started = start_system(spec, run_dir, "http://127.0.0.1:9", 9, workers=2, ready_timeout_s=20)
    try:
        assert "worker_connections 32768;" in (run_dir / "nginx.conf").read_text()
        workers = [p for p in started.process.tree() if "worker process" in " ".join(p.cmdline())]
        assert len(workers) == 2
        limits = {_open_files(p.pid) for p in workers}
    finally:
        started.process.stop()
    # without the capability to raise its hard limit a worker keeps the one it inherited, and
    # says so (once per worker); a notice at start, so no declared limit line matches it
    refused = (run_dir / "nginx-error.log").read_text().count("setrlimit(RLIMIT_NOFILE")
    assert refused == (0 if limits == {("65536", "65536")} else 2)
    said = {line.pattern: line.count
            for line in scan(run_dir, spec.limit_logs, spec.limit_patterns)}
    assert said and not any(said.values()), said
    counted_dir = tmp_path / "counted"
    counted_dir.mkdir()
    values = run_values(spec, counted_dir, 8080, "127.0.0.1", "http://127.0.0.1:9", "127.0.0.1",
                        9, 2, counted=True)
    conf = counted_dir / "nginx.conf"
    conf.write_text(render((spec.directory / "nginx.sized.tmpl").read_text(), values))
    assert "user root;" in conf.read_text()
    check = subprocess.run([NGINX, "-t", "-p", f"{counted_dir}/", "-c", str(conf)],
                           capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr
