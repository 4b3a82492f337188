"""Plans interleave systems round by round, in a seeded order, with stable comparison keys."""
import dataclasses

import pytest

from harness.model import migrate
from harness.model.affinity import CpuAffinity, Niceness
from harness.model.config import from_profile
from harness.model.gateway_spec import load_gateway_spec
from harness.model.plan import (
    Instruments,
    KeyVersionError,
    RunSpec,
    comparison_key,
    key_version,
)
from harness.model.run_parts import LoadShape, MockSettings, WireSettings, part
from harness.model.topology import Host, Topology, Workers, local_topology
from harness.run.run import instruments


def specs(names):
    return {n: load_gateway_spec(n) for n in names}


def make_plan(config, specs, commits=None):
    from harness.model.plan import make_plan as plan
    return plan(config, specs, instruments(), commits)


def test_rounds_interleave_every_system():
    config = from_profile("standard", gateways=["direct", "nginx"], runs_per_gateway=3)
    plan = make_plan(config, specs(config.gateways))
    assert len(plan) == 6
    for r in (1, 2, 3):
        rnd = [p for p in plan if p.round == r]
        assert sorted(p.system for p in rnd) == ["direct", "nginx"]
        assert [p.position for p in rnd] == [0, 1]
    assert [p.run_index for p in plan if p.system == "nginx"] == [1, 2, 3]


def test_order_depends_on_seed_and_is_reproducible():
    orders = set()
    for seed in range(8):
        c = from_profile("standard", gateways=["direct", "nginx"], seed=seed)
        plan = make_plan(c, specs(c.gateways))
        assert plan == make_plan(c, specs(c.gateways))
        orders.add(tuple(p.system for p in plan))
    assert len(orders) > 1


def test_comparison_keys():
    c = from_profile("standard", gateways=["direct", "nginx"])
    plan = make_plan(c, specs(c.gateways))
    keys = {p.system: {q.comparison_key for q in plan if q.system == p.system} for p in plan}
    assert all(len(k) == 1 for k in keys.values()), "repeated runs of a system share a key"
    assert keys["direct"] != keys["nginx"]
    key = next(iter(keys["nginx"]))
    assert key_version(key) == 3 and len(key) == len("3:") + 64
    other = make_plan(from_profile("standard", gateways=["direct", "nginx"], users=999),
                      specs(c.gateways))
    assert {p.comparison_key for p in other if p.system == "nginx"} != keys["nginx"]
    reseeded = make_plan(from_profile("standard", gateways=["direct", "nginx"], seed=5),
                         specs(c.gateways))
    assert {p.comparison_key for p in reseeded if p.system == "nginx"} == keys["nginx"]


# Keys recorded for two fully specified runs. A comparison key is written into every run manifest
# and compared across studies (and suites) recorded at different times, so a recorded key must
# keep matching the run it was recorded for: the current recipe's (RECORDED_V3_KEY) and recipes
# 1's and 2's, recomputed by harness.model.migrate. A change to the current recipe (a field, the
# JSON form, the hash) must fail here: it raises KEY_VERSION and moves the recipe it replaces,
# frozen, into migrate. Never update these literals to make the test pass.
LOAD = LoadShape(users=50, ramp_s=10.0, hold_s=30.0, min_hold_requests=100, max_hold_s=60.0,
                 warmup_s=5.0, warmup_users=5, think_time_s=0.5, locust_processes=2,
                 request_timeout_s=30.0, stream=True, open_loop_rates_per_s=(),
                 open_loop_step_s=0.0, feature="", request_bytes=0)
MOCK = MockSettings(mock_latency_ms=60.0, mock_workers=1, mock_response_tokens=16,
                    stream_chunks=20, chunk_delay_ms=20.0)
TOML_SHA256 = "ab" * 32
RECORDED_PLAIN_KEY = "cf6646dabda76ed3ee3b364f269cb4068c121cd11b1e838f64ee2d3793c8ac34"
# a fault run's key moved once: fault_lead_s retired (the load arms the faults)
RECORDED_EVERYTHING_SET_KEY = "46bf305ac5f516718e364d3a7a70113352ad9dab2e1919ea58f6350bcd762496"
FILES = {"gateway.toml": TOML_SHA256, "nginx.conf.tmpl": "cd" * 32}
INSTRUMENTS = Instruments(mock_version="1.2.0", locust_version="2.47.0")
RECORDED_V2_KEY = "2:bba54bfe948a28a0436c6fd19e27593e43911393412937184c51623a9ed6adc4"
RECORDED_V3_KEY = "3:75a0d094d109faeff3a2c7db779e3a925979fc4936016dbba1dd8ae281f08994"


def run_spec(**changes) -> RunSpec:
    """The fixed run: nginx's first, on one machine, with LOAD and MOCK."""
    return dataclasses.replace(RunSpec(
        run_id="nginx-1", system="nginx", run_index=1, round=1, position=0, load=LOAD, mock=MOCK,
        gateway_workers=2, idle_s=3.0, cooldown_s=5.0, ready_timeout_s=60.0,
        gateway_toml_sha256=TOML_SHA256, seed=0, comparison_key="", topology=local_topology(),
        files_sha256=FILES, instruments=INSTRUMENTS), **changes)


EVERYTHING_SET = dict(
    topology=Topology(hosts=(Host("a", "10.0.0.1"), Host("b", "10.0.0.2", ("ssh", "b"), True)),
                      mock="a", system="b", locust_master="a",
                      locust_workers=(Workers("a", 2),), source="two-hosts.toml"),
    mock=MockSettings(mock_latency_ms=60.0, mock_workers=1, mock_response_tokens=16,
                      stream_chunks=20, chunk_delay_ms=20.0, fault_scenario="errors", faults="[]",
                      fault_seed=3, fault_start_s=10.0, fault_duration_s=20.0),
    resilience="recommended", affinity=CpuAffinity(load="0", mock="1", system="1"),
    source_commit="0123abcd" * 5, env=(("SLUICE_TEST_DELAY_MS", "1"),),
    nice=Niceness(load=5, mock=5, system=0))


def test_recorded_comparison_keys_keep():
    assert comparison_key(run_spec()) == RECORDED_V3_KEY
    # recipe 2: the spec's parts by their old names, its files and instruments beside it
    assert migrate.run_key_v2(run_spec()) == RECORDED_V2_KEY
    # recipe 1: every optional part at its unset value was the run as before that part existed
    assert migrate.run_key_v1(run_spec()) == RECORDED_PLAIN_KEY
    assert migrate.run_key_v1(run_spec(**EVERYTHING_SET)) == RECORDED_EVERYTHING_SET_KEY
    # a run recorded with recipe 1 or 2 is the same run as the current plan's
    current = run_spec(comparison_key=comparison_key(run_spec()))
    assert migrate.same_run(RECORDED_PLAIN_KEY, current)
    assert migrate.same_run(RECORDED_V2_KEY, current)
    assert not migrate.same_run(RECORDED_EVERYTHING_SET_KEY, current)
    assert migrate.same_run(current.comparison_key, current)
    assert not migrate.same_run(comparison_key(run_spec(idle_s=9.0)), current)
    # a run recorded with recipe 3 meets one recorded with an older recipe in the older one
    for version, recorded in ((1, RECORDED_PLAIN_KEY), (2, RECORDED_V2_KEY)):
        assert migrate.run_key_in(version, current.comparison_key, current) == recorded
        assert migrate.run_key_in(version, recorded, None) == recorded


def test_a_lane_only_setting_added_since_is_in_a_run_only_where_set():
    """The abandon share (streamed in-flight runs only) is left out of the plain form and the key
    of every other run, so theirs stay as recorded; where set it is in both, and recipes 1 and 2,
    which never knew it, have no key for that run."""
    from harness.model.manifests import from_plain
    assert "inflight_abandon_share" not in run_spec().to_dict()["load"]
    streamed = run_spec(load=dataclasses.replace(LOAD, inflight_steps=(100,), inflight_step_s=20.0,
                                                 inflight_hold_s=10.0))
    leaves = run_spec(load=dataclasses.replace(streamed.load, inflight_abandon_share=0.25))
    assert leaves.to_dict()["load"]["inflight_abandon_share"] == 0.25
    assert comparison_key(leaves) != comparison_key(streamed)
    assert migrate.run_key_v2(leaves) is None and migrate.run_key_v1(leaves) is None
    for spec in (streamed, leaves):
        assert from_plain(RunSpec, spec.to_dict(), "test") == spec


def test_recipe_2_has_no_key_for_a_spec_recorded_before_recipe_3():
    """Such a spec does not hold its system's files: its recorded key is its own recipe's."""
    assert migrate.run_key_v2(run_spec(files_sha256={})) is None


def test_the_current_recipe_leaves_nothing_out_while_unset():
    """Each setting recipe 1 left out at its unset value is in the key whatever its value; the
    run's place in the plan, its seed and its ports are not."""
    key = comparison_key(run_spec())
    for name, value in EVERYTHING_SET.items():
        changed = comparison_key(run_spec(**{name: value}))
        assert changed != key, name
    for change in (dict(idle_s=9.0), dict(open_files_limit=4096), dict(scale="sized")):
        assert comparison_key(run_spec(**change)) != key, change
    assert comparison_key(run_spec(files_sha256={**FILES, "nginx.conf.tmpl": "ef" * 32})) != key
    assert comparison_key(run_spec(instruments=Instruments("1.2.1", "2.47.0"))) != key
    assert comparison_key(run_spec(instruments=Instruments("1.2.0", "2.48.0"))) != key
    same = run_spec(run_id="nginx-2", run_index=2, round=2, position=1, seed=5, mock_port=20000,
                    system_port=20001)
    assert comparison_key(same) == key
    # one machine's placement does not carry its host name
    renamed = Topology(hosts=(Host("elsewhere", "127.0.0.1"),), mock="elsewhere",
                       system="elsewhere", locust_master="elsewhere")
    assert comparison_key(run_spec(topology=renamed)) == key


def test_a_key_of_a_recipe_this_harness_does_not_know_is_refused():
    assert key_version(RECORDED_PLAIN_KEY) == 1 and key_version(RECORDED_V2_KEY) == 2
    assert key_version(RECORDED_V3_KEY) == 3
    for key in ("4:" + "ab" * 32, "x:" + "ab" * 32):
        with pytest.raises(KeyVersionError, match="recipe version .* is not one this harness knows"):
            migrate.same_run(key, run_spec())


def _every_value_its_own():
    """A config in which no two settings share a value, so a part's field read from the wrong
    setting shows."""
    return from_profile("faults", gateways=("direct",), users=301, ramp_s=7.0, hold_s=61.0,
                        min_hold_requests=11, max_hold_s=97.0, warmup_s=13.0, warmup_users=3,
                        think_time_s=0.3, request_timeout_s=29.0, stream=True, request_bytes=4096,
                        mock_latency_ms=41.0, mock_workers=2, mock_response_tokens=17,
                        stream_chunks=19, chunk_delay_ms=23.0, fault_scenario="error_burst",
                        fault_start_s=5.0, fault_duration_s=9.0, fault_seed=37,
                        wire_capture_s=3.0, wire_capture_offset_s=1.5, wire_snaplen_bytes=300,
                        cpu_affinity_load="0", cpu_affinity_mock="1", cpu_affinity_system="0-1",
                        nice_load=1, nice_mock=2, nice_system=4)


@pytest.mark.parametrize("lane", ["every value its own", "inflight", "inflight streamed",
                                  "open_loop"])
def test_each_part_holds_the_settings_of_its_names(lane):
    """What the plan decides aside (the rendered fault schedule), every field of the load, mock
    and wire parts is the study's setting of its name, or unset outside its lane (the in-flight
    lane's mock holds each request for inflight_hold_s instead of its latency and chunks; only
    its streamed runs leave streams mid-way, so a unary one holds no abandon share)."""
    inflight = dict(gateways=("direct",), inflight_steps=(100, 300), inflight_step_s=47.0,
                    inflight_hold_s=8.0, inflight_abandon_share=0.3)
    config = {"every value its own": _every_value_its_own(),
              "inflight": from_profile("inflight", **inflight),
              "inflight streamed": from_profile("inflight", stream=True, **inflight),
              "open_loop": from_profile("open_loop", gateways=("direct",), open_loop_step_s=21.0),
              }[lane]
    run = make_plan(config, specs(config.gateways))[0]
    unset = set()
    if not config.inflight_steps:
        unset |= {"inflight_step_s", "inflight_hold_s"}
    if not (config.inflight_steps and config.stream):
        unset.add("inflight_abandon_share")
    if not config.fault_scenario:
        unset |= {"fault_scenario", "fault_seed", "fault_start_s", "fault_duration_s", "faults"}
    if not config.open_loop_rates_per_s:
        unset.add("open_loop_step_s")
    held = {"mock_latency_ms", "stream_chunks"} if config.inflight_steps else set()
    for got in (run.load, run.mock, run.wire):
        for name, value in dataclasses.asdict(got).items():
            if name in unset:
                assert not value, f"{name} set outside its lane"
            elif name not in held | {"faults"}:
                assert value == getattr(config, name), name
    assert run.mock.faults or not config.fault_scenario


def test_a_part_names_what_it_does_not_hold():
    with pytest.raises(TypeError, match=r"WireSettings has no \['wire_colour'\]"):
        part(WireSettings, from_profile("smoke"), wire_colour=1)


def test_recipe_1_has_no_key_for_a_run_that_sets_what_it_never_knew(monkeypatch):
    """A field added after recipe 1 was frozen: set, no recorded recipe-1 key can be its."""
    monkeypatch.setattr(migrate, "V1_RUN_FIELDS",
                        tuple(f for f in migrate.V1_RUN_FIELDS if f != "scale"))
    assert migrate.run_key_v1(run_spec()) == RECORDED_PLAIN_KEY
    assert migrate.run_key_v1(run_spec(scale="sized")) is None


def test_a_system_with_nothing_to_configure_runs_runs_unconfigured_times(tmp_path):
    """The fault lane's recommended runs: three for a system that is configured, one for a
    system that runs as shipped anyway (the floor, direct, has no [resilience]; MLflow's is
    unconfigurable)."""
    config = from_profile("faults", gateways=["direct", "nginx", "mlflow"], runs_per_gateway=3,
                          runs_unconfigured=1, out_dir=str(tmp_path))
    specs = {name: load_gateway_spec(name) for name in config.gateways}
    runs = {}
    for run in make_plan(config, specs):
        runs[run.system] = runs.get(run.system, 0) + 1
    assert runs == {"direct": 1, "nginx": 3, "mlflow": 1}
    shipped = make_plan(from_profile("faults", gateways=["direct", "nginx"], runs_per_gateway=3,
                                     runs_unconfigured=1, resilience="shipped",
                                     out_dir=str(tmp_path)), specs)
    assert len(shipped) == 6          # as shipped, every system is what it is: all runs
