"""The study's `scale` setting: each system "shipped" or "sized" for many open connections as its
gateway.toml's [scale] declares; validated, carried in the run spec and the comparison keys
(recipe 1's only when "sized": recorded keys keep), recorded in the run manifest; nginx's sized template loads in
the real nginx."""
import dataclasses
import json
import shutil
import subprocess

import pytest
from synthetic_manifests import small_run_manifest
from test_plan import RECORDED_PLAIN_KEY, run_spec
from test_suite import INSTRUMENTS, RECORDED_CELL_KEY, RECORDED_V2_CELL_KEY, _fixed_folders, _tomls

from harness.model import migrate
from harness.model import suite as M
from harness.model.config import ConfigError, from_profile
from harness.model.gateway_spec import load_gateway_spec, render
from harness.model.manifests import RunManifest
from harness.model.plan import make_plan
from harness.run.preflight import preflight
from harness.run.run import instruments


def test_the_inflight_profile_sizes_every_system_and_shipped_stays_available(tmp_path):
    assert from_profile("inflight").scale == "sized"
    assert from_profile("smoke").scale == "shipped"
    assert from_profile("inflight", scale="shipped").scale == "shipped"
    preflight(from_profile("smoke", out_dir=str(tmp_path), scale="sized"))
    with pytest.raises(ConfigError) as info:
        preflight(from_profile("smoke", out_dir=str(tmp_path), scale="big"))
    assert info.value.problems == ["scale: one of ['shipped', 'sized'], got 'big'"]


def test_the_plan_carries_scale_and_keys_a_sized_run_apart(tmp_path):
    def plan(scale):
        config = from_profile("smoke", gateways=("direct", "nginx"), out_dir=str(tmp_path),
                              scale=scale)
        return {r.system: r for r in make_plan(config, {n: load_gateway_spec(n)
                                                        for n in config.gateways}, instruments())}
    shipped, sized = plan("shipped"), plan("sized")
    for system in ("direct", "nginx"):
        assert (shipped[system].scale, sized[system].scale) == ("shipped", "sized")
        assert shipped[system].comparison_key != sized[system].comparison_key


def test_recorded_keys_keep_and_a_sized_run_or_cell_has_its_own(tmp_path):
    assert migrate.run_key_v1(run_spec(scale="shipped")) == RECORDED_PLAIN_KEY
    assert migrate.run_key_v1(run_spec(scale="sized")) != RECORDED_PLAIN_KEY
    config = _fixed_folders(tmp_path)
    sized = dataclasses.replace(config, scale="sized")
    assert config.scale == "shipped" and migrate.cell_key_v1(config, _tomls(config)) == RECORDED_CELL_KEY
    assert migrate.cell_key_v1(sized, _tomls(config)) != RECORDED_CELL_KEY
    assert M.cell_key(sized, INSTRUMENTS) != RECORDED_V2_CELL_KEY


def test_the_manifest_records_scale_and_why_and_older_runs_read_as_shipped():
    run = small_run_manifest("nginx-1", "nginx", 1, {})
    run = dataclasses.replace(run, scale="sized", scale_note="no sized configuration declared",
                              spec=dataclasses.replace(run.spec, scale="sized"))
    back = RunManifest.from_json(run.to_json())
    assert (back.scale, back.scale_note, back.spec.scale) == \
        ("sized", "no sized configuration declared", "sized")
    data = json.loads(run.to_json())
    for key in ("scale", "scale_note"):
        data.pop(key)
    data["spec"].pop("scale")
    old = RunManifest.from_json(json.dumps(data))
    assert (old.scale, old.scale_note, old.spec.scale) == ("shipped", "", "shipped")


NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def _open_files(pid: int) -> tuple[str, str]:
    """A process's soft and hard open-file limits, as /proc shows them to anyone (prlimit on a
    worker that dropped to nobody needs a capability a container may not grant)."""
    line = next(x for x in open(f"/proc/{pid}/limits") if x.startswith("Max open files"))
    return tuple(line.split()[3:5])


@pytest.mark.integration  # the real nginx, started from its sized template
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
