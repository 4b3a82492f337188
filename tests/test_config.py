"""Study parameters are validated before anything starts, each problem named."""
import dataclasses

import pytest

from harness.model.config import ConfigError, PROFILES, StudyConfig, from_profile, validate


def problems_of(config):
    with pytest.raises(ConfigError) as info:
        validate(config)
    return info.value.problems


def test_profiles_all_validate(tmp_path):
    for name in PROFILES:
        validate(from_profile(name, out_dir=str(tmp_path)))


def test_standard_defaults_match_the_protocol():
    c = from_profile("standard")
    assert (c.users, c.ramp_s, c.hold_s, c.runs_per_gateway, c.mock_latency_ms, c.think_time_s) == \
        (1000, 120.0, 30.0, 3, 60.0, 1.0)
    assert from_profile("saturation").think_time_s == 0.0
    assert from_profile("published").ramp_s == 330.0


def test_unknown_gateway_is_named(tmp_path):
    found = problems_of(from_profile("smoke", gateways=["direct", "no-such-gw"], out_dir=str(tmp_path)))
    assert len(found) == 1 and "no-such-gw" in found[0] and found[0].startswith("gateways:")


@pytest.mark.parametrize("field,value", [("users", 0), ("users", -5), ("runs_per_gateway", 0),
                                         ("mock_latency_ms", -1), ("hold_s", -1),
                                         ("request_timeout_s", 0)])
def test_bad_numbers_name_the_parameter(tmp_path, field, value):
    found = problems_of(from_profile("smoke", out_dir=str(tmp_path), **{field: value}))
    assert any(p.startswith(f"{field}:") for p in found), found


def test_ramp_shorter_than_possible(tmp_path):
    found = problems_of(from_profile("standard", ramp_s=1.0, out_dir=str(tmp_path)))
    assert any(p.startswith("ramp_s:") and "users/s" in p for p in found)


def test_out_dir_not_writable(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    found = problems_of(from_profile("smoke", out_dir=str(blocker / "sub")))
    assert found[0].startswith("out_dir:")


def test_not_enough_disk_for_planned_rows(tmp_path):
    found = problems_of(from_profile("standard", users=10**6, ramp_s=10**5, max_hold_s=10**5,
                                     think_time_s=0.0, locust_processes=10**4, out_dir=str(tmp_path)))
    assert any(p.startswith("out_dir:") and "GB" in p for p in found), found


def test_unknown_parameter_and_profile():
    with pytest.raises(ConfigError, match="colour: unknown parameter"):
        from_profile("smoke", colour="blue")
    with pytest.raises(ConfigError, match="profile:"):
        from_profile("turbo")


def test_config_is_frozen_and_study_id_is_filled():
    c = from_profile("smoke")
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.users = 3
    assert c.study_id == "" and c.with_study_id().study_id
    assert StudyConfig(study_id="x").with_study_id().study_id == "x"


def test_gateways_accept_lists_json_commas_and_all():
    assert from_profile("smoke", gateways='["direct","nginx"]').gateways == ("direct", "nginx")
    assert from_profile("smoke", gateways="direct, nginx").gateways == ("direct", "nginx")
    assert {"direct", "nginx"} <= set(from_profile("smoke", gateways="all").gateways)
    with pytest.raises(ConfigError, match="gateways: not a JSON list"):
        from_profile("smoke", gateways='["direct"')
