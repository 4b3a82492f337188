"""The study's `scale` setting: each system "shipped" or "sized" for many open connections as its
gateway.toml's [scale] declares; validated, carried in the run spec and the comparison keys
(recipe 1's only when "sized": recorded keys keep), recorded in the run manifest (nginx's
sized template in the real nginx: test_scale_integration.py)."""
import dataclasses
import json

import pytest
from synthetic_manifests import small_run_manifest
from test_plan import RECORDED_PLAIN_KEY, run_spec
from test_suite import INSTRUMENTS, RECORDED_CELL_KEY, RECORDED_V2_CELL_KEY, _fixed_folders, _tomls

from harness.model import migrate
from harness.model import suite as M
from harness.model.config import ConfigError, from_profile
from harness.model.gateway_spec import load_gateway_spec
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
