"""Plans interleave systems round by round, in a seeded order, with stable comparison keys."""
from harness.model.affinity import CpuAffinity, Niceness
from harness.model.config import from_profile
from harness.model.gateway_spec import load_gateway_spec
from harness.model.plan import LoadShape, MockSettings, comparison_key, make_plan
from harness.model.topology import Host, Topology, Workers, local_topology


def specs(names):
    return {n: load_gateway_spec(n) for n in names}


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
    assert len(key) == 64
    other = make_plan(from_profile("standard", gateways=["direct", "nginx"], users=999),
                      specs(c.gateways))
    assert {p.comparison_key for p in other if p.system == "nginx"} != keys["nginx"]
    reseeded = make_plan(from_profile("standard", gateways=["direct", "nginx"], seed=5),
                         specs(c.gateways))
    assert {p.comparison_key for p in reseeded if p.system == "nginx"} == keys["nginx"]


# Keys recorded today for two fully specified runs. A comparison key is written into every run
# manifest and compared across studies (and suites) recorded at different times, so the promise
# is that a run configured as before keeps the key it had: a change to the key's recipe (a new
# field of LoadShape or MockSettings that always enters the key, a renamed one, another JSON
# canonical form) makes every recorded study incomparable with new ones and must fail here.
# A new setting keeps earlier keys by entering the key only when set (as resilience and the
# others below do). Never update these literals to make the test pass.
LOAD = LoadShape(users=50, ramp_s=10.0, hold_s=30.0, min_hold_requests=100, max_hold_s=60.0,
                 warmup_s=5.0, warmup_users=5, think_time_s=0.5, locust_processes=2,
                 request_timeout_s=30.0, max_tokens=16, stream=True, open_loop_rates_per_s=(),
                 open_loop_step_s=0.0, feature="", request_bytes=0)
MOCK = MockSettings(latency_ms=60.0, workers=1, response_tokens=16, stream_chunks=20,
                    chunk_delay_ms=20.0)
TOML_SHA256 = "ab" * 32
RECORDED_PLAIN_KEY = "cf6646dabda76ed3ee3b364f269cb4068c121cd11b1e838f64ee2d3793c8ac34"
# a fault run's key moved once: fault_lead_s retired (the load arms the faults)
RECORDED_EVERYTHING_SET_KEY = "46bf305ac5f516718e364d3a7a70113352ad9dab2e1919ea58f6350bcd762496"


def test_recorded_comparison_keys_keep():
    assert comparison_key("nginx", LOAD, MOCK, 2, TOML_SHA256) == RECORDED_PLAIN_KEY
    # every optional part at its unset value is the run as it was before that part existed
    assert comparison_key("nginx", LOAD, MOCK, 2, TOML_SHA256, local_topology(), "shipped",
                          CpuAffinity(), "", (), Niceness()) == RECORDED_PLAIN_KEY
    two_hosts = Topology(hosts=(Host("a", "10.0.0.1"), Host("b", "10.0.0.2", ("ssh", "b"), True)),
                         mock="a", system="b", locust_master="a",
                         locust_workers=(Workers("a", 2),), source="two-hosts.toml")
    faulty = MockSettings(latency_ms=60.0, workers=1, response_tokens=16, stream_chunks=20,
                          chunk_delay_ms=20.0, fault_scenario="errors", faults="[]", fault_seed=3,
                          fault_start_s=10.0, fault_duration_s=20.0)
    assert comparison_key("nginx", LOAD, faulty, 2, TOML_SHA256, two_hosts, "recommended",
                          CpuAffinity(load="0", mock="1", system="1"), "0123abcd" * 5,
                          (("SLUICE_TEST_DELAY_MS", "1"),),
                          Niceness(load=5, mock=5, system=0)) == RECORDED_EVERYTHING_SET_KEY


def test_a_system_with_nothing_to_configure_runs_runs_unconfigured_times(tmp_path):
    """The fault lane's recommended runs: three for a system that is configured, one for a
    system that runs as shipped anyway (the direct baseline has no [resilience]; MLflow's is
    unconfigurable)."""
    from harness.model.config import from_profile
    from harness.model.gateway_spec import load_gateway_spec
    from harness.model.plan import make_plan
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
