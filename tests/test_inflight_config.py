"""The in-flight lane's settings: bad ones refused before any process starts, naming the
parameter; the mock's hold derived from inflight_hold_s; the open-file limit raised and read
back; other lanes' comparison keys unchanged."""
from __future__ import annotations

import dataclasses
import resource
import subprocess
import sys

import pytest

from harness.host.processes import open_files_limit_of, raise_open_files_limit
from harness.model import inflight
from harness.model.config import ConfigError, from_profile
from harness.model.gateway_spec import load_gateway_spec
from harness.model.plan import make_plan
from harness.run.preflight import preflight
from harness.run.run import instruments


def _lane(**overrides):
    return from_profile("inflight", gateways=("direct", "nginx"), **overrides)


def test_the_profile_validates_and_holds_each_request_for_the_hold():
    config = _lane()
    preflight(config)
    assert inflight.mock_hold(config) == (10_000.0, config.stream_chunks)
    streamed = _lane(stream=True)
    preflight(streamed)
    latency_ms, frames = inflight.mock_hold(streamed)
    # a frame every 2.5 s from 2.5 s on: the stream lasts the hold
    assert latency_ms == 2500.0 and (frames + 1) * 2500.0 == 10_000.0


@pytest.mark.parametrize("overrides, parameter", [
    (dict(inflight_steps=(2500, 1000)), "inflight_steps"),
    (dict(inflight_steps=(0, 1000)), "inflight_steps"),
    (dict(inflight_hold_s=0.5), "inflight_hold_s"),
    (dict(inflight_step_s=10.0), "inflight_step_s"),
    (dict(users=5000), "users"),
    (dict(think_time_s=0.5), "think_time_s"),
    (dict(locust_processes=2), "locust_processes"),
    (dict(stream=True, chunk_delay_ms=250.0, mock_workers=1), "mock_workers"),
    (dict(request_timeout_s=15.0), "request_timeout_s"),
    (dict(open_files_limit=2048), "open_files_limit"),
    (dict(open_files_limit=100), "open_files_limit"),
    (dict(inflight_steps="many,more"), "inflight_steps"),
    (dict(stream=True, chunk_delay_ms=0.0), "chunk_delay_ms"),
])
def test_a_bad_parameter_is_refused_naming_it(overrides, parameter):
    with pytest.raises(ConfigError) as caught:
        preflight(_lane(**overrides))
    assert any(p.startswith(f"{parameter}:") for p in caught.value.problems), caught.value.problems


def test_a_port_range_too_small_for_the_top_step_is_refused():
    problems = inflight.problems(_lane(), 4, (40000, 45000), -1)
    assert any(p.startswith("inflight_steps:") and "ip_local_port_range" in p for p in problems)
    assert not inflight.problems(_lane(), 4, (32768, 60999), -1)


def test_an_open_file_limit_above_the_hard_limit_is_refused():
    problems = inflight.problems(_lane(open_files_limit=30000), 4, (32768, 60999), 20000)
    assert any(p.startswith("open_files_limit:") and "20000" in p for p in problems)


def test_the_lanes_settings_change_other_lanes_keys_only_where_they_change_the_run():
    """The mock's hold of the in-flight lane changes nothing outside it; the open-file limit is
    asked for every started process, so it is in every run's key."""
    config = from_profile("smoke", gateways=("nginx",))
    specs = {"nginx": load_gateway_spec("nginx", config.systems_dir)}
    before = make_plan(config, specs, instruments())[0].comparison_key
    held = make_plan(dataclasses.replace(config, inflight_hold_s=30.0), specs, instruments())
    assert held[0].comparison_key == before
    limited = make_plan(dataclasses.replace(config, open_files_limit=4096), specs, instruments())
    assert limited[0].comparison_key != before


def test_every_started_process_inherits_the_raised_open_file_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
        raised, _ = raise_open_files_limit(0)
        assert raised == hard
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
        try:
            assert open_files_limit_of(child.pid) == hard
        finally:
            child.kill()
            child.wait()
        assert raise_open_files_limit(1024) == (hard, hard)  # never lowered
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_each_step_is_checked_against_every_roles_open_file_limit_before_it_runs():
    one_process = [inflight.RoleFiles("locust", 4, 1024, 20_000),
                   inflight.RoleFiles("mock", 2, 1024, 20_000),
                   inflight.RoleFiles("system", 1, 60, 20_000)]
    # 10,000 open: 20,000 connections in one process, and 60 descriptors of its own
    assert inflight.descriptors_needed(10_000, one_process[2]) == 20_060
    assert inflight.descriptors_needed(10_000, one_process[0]) == 2_500 + 1024
    fits, reason = inflight.steps_that_fit((1000, 2500, 5000, 10000), one_process)
    assert fits == 3
    assert reason.startswith("10,000 open requests need 20,060 descriptors per system process")
    assert "its open-file limit is 20,000" in reason
    spread = [*one_process[:2], inflight.RoleFiles("system", 2, 60, 20_000)]
    assert inflight.steps_that_fit((1000, 2500, 5000, 10000), spread) == (4, "")
    unknown = [inflight.RoleFiles("system", 1, 60, None), inflight.RoleFiles("mock", 1, 60, -1)]
    assert inflight.steps_that_fit((1000, 100_000), unknown) == (2, "")
    tight = [inflight.RoleFiles("locust", 1, 1024, 1500)]
    assert inflight.steps_that_fit((1000, 2500), tight)[0] == 0
