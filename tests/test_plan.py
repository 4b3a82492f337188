"""Plans interleave systems round by round, in a seeded order, with stable comparison keys."""
from harness.model.config import from_profile
from harness.model.gateway_spec import load_gateway_spec
from harness.model.plan import make_plan


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
    assert len(key) == 64 and int(key, 16) >= 0
    other = make_plan(from_profile("standard", gateways=["direct", "nginx"], users=999),
                      specs(c.gateways))
    assert {p.comparison_key for p in other if p.system == "nginx"} != keys["nginx"]
    reseeded = make_plan(from_profile("standard", gateways=["direct", "nginx"], seed=5),
                         specs(c.gateways))
    assert {p.comparison_key for p in reseeded if p.system == "nginx"} == keys["nginx"]
