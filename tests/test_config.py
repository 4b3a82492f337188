"""Study parameters are validated before anything starts, each problem named."""
import dataclasses
import math
import shutil

import pytest

from harness.model.config import (
    PLANNED_MAX_RATE_PER_PROCESS,
    PROFILES,
    SECTIONS,
    ConfigError,
    StudyConfig,
    from_profile,
    parse_overrides,
    path_of,
)
from harness.run.preflight import preflight

# Per declared field type, values that are not of it (as they arrive from --set, papermill or
# a suite file); every field of StudyConfig has one of these types.
WRONG_TYPES = {
    "int": ["abc", 2.5, True, [1]],
    "float": ["abc", math.nan, math.inf, -math.inf, "nan", False],
    "bool": ["maybe", 1, None],
    "str": [5, ["x"], True],
    "tuple[str, ...]": [5, [1, 2], '["direct"', {"a": 1}],
    "tuple[float, ...]": ["fast,faster", [math.nan], [math.inf], 7],
    "tuple[int, ...]": ["many,more", [2.5], [True], 7],
}


def bad_parameter_cases():
    """(field, wrong value) for every field of StudyConfig."""
    return [(f.name, value) for f in dataclasses.fields(StudyConfig) for value in WRONG_TYPES[f.type]]


def problems_of(config):
    with pytest.raises(ConfigError) as info:
        preflight(config)
    return info.value.problems


def _free_disk_bytes(monkeypatch, free: int) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda _path: shutil._ntuple_diskusage(10**15, 10**15 - free, free))


def test_profiles_all_validate(tmp_path, monkeypatch):
    # The parameters, not this machine's free disk: the disk check has its own test.
    _free_disk_bytes(monkeypatch, 10**15)
    for name in PROFILES:
        preflight(from_profile(name, out_dir=str(tmp_path)))


def test_too_little_disk_names_out_dir_and_the_sizes(tmp_path, monkeypatch):
    _free_disk_bytes(monkeypatch, 10**6)
    found = problems_of(from_profile("smoke", out_dir=str(tmp_path)))
    assert len(found) == 1 and found[0].startswith("out_dir:") and "GB free" in found[0], found


# The load of every case: 5 s warmup + 330 s ramp + 300 s longest hold = 635 s per run.
LOAD_635_S = dict(warmup_s=5.0, ramp_s=330.0, max_hold_s=300.0)


@pytest.mark.parametrize("settings,rows", [
    # No think time and a 60 ms mock: 1,000 users could ask 1000 / 0.06 = 16,667 req/s; one
    # Locust process completes far fewer, so the estimate stops at its ceiling of 11,000 req/s:
    # 11,000 x 635 s x 3 runs x 3 systems.
    (dict(users=1000, think_time_s=0.0, mock_latency_ms=60.0, locust_processes=1,
          runs_per_gateway=3, gateways=("a", "b", "c")), 62_865_000),
    # Two processes lift the ceiling to 22,000 req/s: the users' own pace decides,
    # 16,666.7 x 635 x 3 x 3.
    (dict(users=1000, think_time_s=0.0, mock_latency_ms=60.0, locust_processes=2,
          runs_per_gateway=3, gateways=("a", "b", "c")), 95_250_000),
    # Streaming: a call takes at least 1 s think + 60 ms + 20 chunks x 20 ms = 1.46 s, so 100
    # users ask 68.49 req/s: 68.49 x 635 x 2 runs x 2 systems = 173,972.6.
    (dict(users=100, think_time_s=1.0, mock_latency_ms=60.0, stream=True, stream_chunks=20,
          chunk_delay_ms=20.0, locust_processes=1, runs_per_gateway=2, gateways=("a", "b")),
     173_972),
    # Open loop: exactly the schedule's slots, 10/s through the 5 s warmup then 20 s at each of
    # 10, 20 and 40/s: (50 + 1,400) x 2 runs x 2 systems.
    (dict(open_loop_rates_per_s=(10.0, 20.0, 40.0), open_loop_step_s=20.0, users=100,
          runs_per_gateway=2, gateways=("a", "b")), 5_800),
])
def test_the_disk_estimate_has_a_realistic_ceiling(settings, rows):
    assert PLANNED_MAX_RATE_PER_PROCESS == 11_000.0
    assert StudyConfig(**LOAD_635_S, **settings).planned_rows() == rows


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


def test_every_setting_is_in_exactly_one_section():
    held = [name for names in SECTIONS.values() for name in names]
    assert sorted(held) == sorted(f.name for f in dataclasses.fields(StudyConfig)), (
        "a setting in no section, or in two")


def test_a_path_is_the_section_and_the_name_without_its_prefix():
    assert [path_of(n) for n in ("users", "mock_latency_ms", "wire_capture_offset_s",
                                 "gateway_workers", "gateways", "inflight_steps")] == [
        "load.users", "mock.latency_ms", "wire.capture_offset_s", "gateway.workers",
        "gateway.gateways", "inflight.steps"]


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
    with pytest.raises(ConfigError, match="gateways: expected a list of system names"):
        from_profile("smoke", gateways='["direct"')


def test_the_profile_default_systems_are_the_same_everywhere():
    """One default per profile: its own set, else every system under gateways/."""
    everything = from_profile("standard").gateways
    assert {"direct", "nginx", "sluice"} <= set(everything)
    assert from_profile("smoke").gateways == everything == StudyConfig().gateways
    assert from_profile("gate").gateways == PROFILES["gate"]["gateways"]


@pytest.mark.parametrize("field,value", bad_parameter_cases())
def test_every_field_rejects_a_value_of_the_wrong_type(field, value):
    with pytest.raises(ConfigError) as info:
        StudyConfig(**{field: value})
    (problem,) = info.value.problems
    assert problem.startswith(f"{field}: expected ") and problem.endswith(f"got {value!r}")
    assert "\n" not in str(info.value)


def test_values_as_text_are_converted():
    c = from_profile("smoke", users="7", ramp_s="2.5", stream="true", runs_per_gateway=2.0,
                     open_loop_rates_per_s="10, 20", gateways='["direct"]')
    assert (c.users, c.ramp_s, c.stream, c.runs_per_gateway) == (7, 2.5, True, 2)
    assert c.open_loop_rates_per_s == (10.0, 20.0) and c.gateways == ("direct",)


def test_command_line_overrides_keep_text_fields_as_typed():
    assert parse_overrides(["users=5", "study_id=2024", 'out_dir="/tmp/x"', "think_time_s=nan"]) == \
        {"users": 5, "study_id": "2024", "out_dir": "/tmp/x", "think_time_s": "nan"}
    with pytest.raises(ConfigError, match="expected NAME=VALUE"):
        parse_overrides(["users"])
    with pytest.raises(ConfigError, match="think_time_s: expected a finite number, got 'nan'"):
        from_profile("smoke", **parse_overrides(["think_time_s=nan"]))


def test_the_profile_is_named_by_itself_not_as_an_override():
    with pytest.raises(ConfigError, match="profile: name the preset itself"):
        from_profile("smoke", profile="gate")
