"""The feature-cost lane: features declared in gateway.toml, 'system@feature' entries, the
analysis against passthrough (synthetic data with known answers); the real tiny study:
test_feature_cost_integration.py."""

import pytest
from synthetic import RunParams, make_study

from harness import stats as A
from harness.model.config import ConfigError, from_profile
from harness.model.gateway_spec import (
    GatewaySpecError,
    feature_of,
    folder_of,
    load_gateway_spec,
)
from harness.run.preflight import preflight
from report import format as F
from report import tables

BASE = ('schema_version = 1\nname = "x"\nkind = "competitor"\n'
        '[request]\nbase_url = "{{upstream_url}}"\nmodel = "m"\n')


def write(tmp_path, text):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "gateway.toml").write_text(BASE + text)
    return tmp_path


def test_a_feature_overrides_only_what_it_names(tmp_path):
    d = write(tmp_path, '[features.alias]\nmodel = "a"\n[features.anthropic]\ndialect = "anthropic"\n')
    spec = load_gateway_spec("x", d)
    assert spec.request_plan("alias").model == "a"
    plan = spec.request_plan("anthropic")
    assert (plan.model, plan.dialect, plan.chat_path) == ("m", "anthropic", "/v1/messages")
    assert spec.request_plan("").dialect == "openai"
    with pytest.raises(GatewaySpecError, match="declares no feature 'budget'"):
        spec.request_plan("budget")


@pytest.mark.parametrize("text,error", [
    ('[features.a]\ndialect = "gemini"\n', "dialect must be one of"),
    ('[features.a]\nmodle = "m"\n', "unknown key"),
    ('[features.a]\nheaders = { k = "{{nope}}" }\n', "unknown placeholder"),
])
def test_bad_feature_tables_are_refused(tmp_path, text, error):
    with pytest.raises(GatewaySpecError, match=error):
        load_gateway_spec("x", write(tmp_path, text))


def test_system_at_feature_names():
    assert folder_of("sluice~b@alias") == "sluice" and feature_of("sluice@alias") == "alias"
    assert feature_of("nginx~aa") == ""


def test_a_feature_a_system_lacks_fails_before_anything_starts():
    with pytest.raises(ConfigError, match="nginx@alias declares no feature 'alias'"):
        preflight(from_profile("smoke", gateways=("direct", "nginx@alias")))
    with pytest.raises(ConfigError, match="feature: nginx declares no feature"):
        preflight(from_profile("smoke", gateways=("nginx",), feature="auth_budget"))
    with pytest.raises(ConfigError, match="request_bytes"):
        preflight(from_profile("smoke", gateways=("direct",), request_bytes=-1))


def test_plan_gives_each_entry_its_feature_and_its_own_key():
    checked = preflight(from_profile("feature_cost", runs_per_gateway=1))
    plan = checked.plan
    by_system = {s.system: s for s in plan}
    assert by_system["sluice@alias"].load.feature == "alias"
    assert by_system["sluice@alias"].load.request_bytes == 32768
    assert len({s.comparison_key for s in plan}) == len(plan)


def test_feature_cost_against_passthrough_with_known_answers(tmp_path):
    """Overheads 0.5 / 0.9 ms and CPU 0.15 / 0.20 cores at the same rate: the alias adds
    0.4 ms at every percentile and 0.05 cores' worth of CPU per request."""
    def runs(overhead, cores):
        return [RunParams(overhead_ms=overhead + d, cpu_cores=cores + d / 10, hold_rate=180)
                for d in (-0.01, 0.0, 0.01)]
    params = {"direct@passthrough": [RunParams(overhead_ms=0.2, cpu_cores=None)] * 3,
              "sluice@passthrough": runs(0.5, 0.15), "sluice@alias": runs(0.9, 0.20)}
    study = A.load_study(make_study(tmp_path, params=params).path)
    cost = A.feature_cost(study)
    alias = cost[(cost["system"] == "sluice@alias")].set_index("metric")
    assert alias.loc["latency_p50_ms", "added_mean"] == pytest.approx(0.4, abs=1e-6)
    assert alias.loc["latency_p99_ms", "added_mean"] == pytest.approx(0.4, abs=1e-6)
    assert alias.loc["latency_p50_ms", "vs_floor_mean"] == pytest.approx(0.7, abs=1e-6)
    # CPU-ms per request = cores × 1000 / rate
    assert alias.loc["cpu_ms_per_request", "added_mean"] == pytest.approx(0.05 * 1000 / 180, rel=0.02)
    assert alias.loc["cpu_ms_per_request", "outcome"] is A.Outcome.WORSE
    assert F.verdict_word(alias.loc["cpu_ms_per_request", "outcome"], "cpu_ms_per_request") == \
        "more CPU"
    table = tables.feature_cost_table(cost, study.systems).frame()
    assert list(table["system"]) == ["sluice@passthrough", "sluice@alias"]
    added = F.heading("latency_p50_ms", "added")
    assert table.iloc[0][added] == "reference"
    assert table.iloc[1][added].startswith("0.40 ±")


def test_feature_cost_is_empty_without_features(tmp_path):
    study = A.load_study(make_study(tmp_path).path)
    assert A.feature_cost(study).empty


