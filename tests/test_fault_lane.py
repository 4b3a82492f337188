"""The provider-fault lane: scenarios, config validation, plan keys, per-window statistics (its
tiny studies with the real processes: test_fault_lane_integration.py)."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from harness.model import fault_scenarios
from harness.model.config import ConfigError, from_profile
from harness.model.plan import fault_settings
from harness.run.preflight import preflight
from harness.stats import fault_lane as fstats

T0 = 1_700_000_000.0
SET_MS = 60.0


def _client(times, latency_ms=None, status=None):
    n = len(times)
    status = status if status is not None else [200] * n
    return pd.DataFrame({
        "start_t_unix_s": np.asarray(times, dtype="float64"),
        "latency_ms": np.asarray(latency_ms if latency_ms is not None else [SET_MS + 1] * n, dtype="float64"),
        "status_code": status,
        "error_kind": ["" if s == 200 else "http" for s in status],
        "chunks": [0] * n, "stream_done": [False] * n})


def _mock(times_s, path="/v1/chat/completions"):
    return pd.DataFrame({"path": [path] * len(times_s),
                         "body_end_t_unix_ns": (np.asarray(times_s) * 1e9).astype("int64")})


# --- scenarios and config ------------------------------------------------------------------------

def test_every_scenario_renders_a_schedule_the_mock_accepts():
    from mocks.faults import parse_schedule
    for name in fault_scenarios.SCENARIOS:
        parse_schedule(fault_scenarios.schedule_json(name, 15.0, fault_scenarios.duration_of(name, 0.0)))


def test_bursts_stay_inside_the_window():
    sched = fault_scenarios.render("overloaded", 15.0, 30.0)
    assert [s["start_s"] for s in sched] == [15.0, 25.0, 35.0]
    assert all(s["start_s"] + s["duration_s"] <= 45.0 for s in sched)


def test_provider_down_keeps_its_own_duration():
    assert fault_scenarios.duration_of("provider_down", 0.0) == 10.0
    assert fault_scenarios.duration_of("error_burst", 0.0) == 30.0
    assert fault_scenarios.duration_of("error_burst", 5.0) == 5.0


def _problems(tmp_path, **kw):
    with pytest.raises(ConfigError) as exc:
        preflight(from_profile("faults", out_dir=str(tmp_path), **kw))
    return exc.value.problems


def test_faults_profile_validates(tmp_path):
    preflight(from_profile("faults", out_dir=str(tmp_path)))
    for name in fault_scenarios.SCENARIOS:
        if not fault_scenarios.scenario(name).needs_stream:
            preflight(from_profile("faults", out_dir=str(tmp_path), fault_scenario=name))


def test_stream_scenario_without_streaming_is_one_line(tmp_path):
    (line,) = _problems(tmp_path, fault_scenario="stalled_streams")
    assert line.startswith("fault_scenario:") and "stream=true" in line
    preflight(from_profile("faults", out_dir=str(tmp_path), fault_scenario="stalled_streams",
                          stream=True))


def test_window_outside_the_hold_names_the_field(tmp_path):
    (line,) = _problems(tmp_path, fault_start_s=50.0)
    assert line.startswith("fault_duration_s:") and "60 s hold" in line
    (line,) = _problems(tmp_path, fault_start_s=61.0)
    assert line.startswith("fault_start_s:")
    (line,) = _problems(tmp_path, fault_scenario="nope")
    assert line.startswith("fault_scenario:") and "error_burst" in line
    # armed at the warm-up's start: the mock must see the arm before the first fault
    problems = _problems(tmp_path, warmup_s=0.1, ramp_s=0.0, fault_start_s=0.2)
    assert any(line.startswith("fault_start_s:") and "warmup_s + ramp_s + fault_start_s" in line
               for line in problems)


def test_runs_from_before_the_resilience_fields_read_as_shipped():
    from harness.model.manifests import RunManifest, from_plain
    run = from_plain(RunManifest, {"run_id": "x-1", "system": "x", "run_index": 1, "round": 1,
                                   "position": 0, "comparison_key": "", "spec": None,
                                   "status": "completed"}, "old run")
    assert (run.resilience, run.resilience_note) == ("shipped", "")


def test_fault_seed_defaults_to_the_study_seed_and_keys_without_faults_are_unchanged():
    cfg = from_profile("faults", seed=7)
    assert fault_settings(cfg)["fault_seed"] == 7
    assert fault_settings(from_profile("faults", seed=7, fault_seed=3))["fault_seed"] == 3
    assert fault_settings(from_profile("smoke")) == dict(faults="", fault_seed=0, fault_start_s=0.0,
                                                        fault_duration_s=0.0)


def test_overloaded_uses_the_providers_own_answer_and_failover_a_standby():
    assert {s["kind"] for s in fault_scenarios.render("overloaded", 15.0, 30.0)} == {"overloaded"}
    (spec,) = fault_scenarios.render("failover", 15.0, 30.0)
    assert spec == {"kind": "status", "status": 503, "share": 1.0, "start_s": 15.0, "duration_s": 30.0}
    assert fault_scenarios.needs_standby("failover")
    assert not any(fault_scenarios.needs_standby(n) for n in ("", "error_burst", "provider_down"))


def test_the_scenarios_users_report_breaking():
    """retry_after, all_rate_limited, mid_stream_error, stream_cut, no_response, non_retriable
    and flapping: each the mock's spec, its window, and what runs beside it."""
    def only(name):
        (spec,) = fault_scenarios.render(name, 10.0, fault_scenarios.duration_of(name, 0.0))
        return spec
    assert only("retry_after") == {"kind": "status", "status": 429, "retry_after_s": 2, "share": 0.2,
                                   "start_s": 10.0, "duration_s": 30.0}
    assert only("all_rate_limited") == {"kind": "status", "status": 429, "retry_after_s": 3, "share": 1.0,
                                        "start_s": 10.0, "duration_s": 30.0}
    assert only("mid_stream_error") == {"kind": "mid_stream_error", "after_frames": 3, "mode": "split",
                                        "share": 0.2, "start_s": 10.0, "duration_s": 30.0}
    assert only("stream_cut")["kind"] == "stream_cut" and only("non_retriable")["kind"] == "non_retriable"
    # no_response: a request faulted at the window's end still meets the 30-s client timeout
    # inside faults-extra's 50-s step (window from 10 s)
    assert only("no_response") == {"kind": "no_response", "share": 0.2, "start_s": 10.0, "duration_s": 10.0}
    assert 10.0 + fault_scenarios.duration_of("no_response", 0.0) + 30.0 <= 50.0
    streamed = {n for n in fault_scenarios.SCENARIOS if fault_scenarios.scenario(n).needs_stream}
    assert streamed == {"stalled_streams", "mid_stream_error", "stream_cut"}
    # the standby: healthy beside flapping and failover, rate-limited with the primary
    assert {n for n in fault_scenarios.SCENARIOS if fault_scenarios.needs_standby(n)} == {
        "failover", "flapping", "all_rate_limited"}
    assert [n for n in fault_scenarios.SCENARIOS if fault_scenarios.faults_standby(n)] == ["all_rate_limited"]
    assert not fault_scenarios.faults_standby("")


def test_flapping_alternates_two_seconds_failing_and_two_healthy():
    sched = fault_scenarios.render("flapping", 10.0, 30.0)
    assert [(s["start_s"], s["duration_s"]) for s in sched] == [(10.0 + 4 * i, 2.0) for i in range(8)]
    assert all(s["kind"] == "status" and s["status"] == 503 and s["share"] == 1.0 for s in sched)


def test_the_extra_suite_runs_each_scenario_once_streamed_or_unary_as_it_needs():
    """faults-extra: every scenario in one cell, the streamed ones with stream = true, the
    unary ones without; the other combinations left out with a reason."""
    from harness.model.config import REPO_DIR
    from harness.model.suite import load_suite
    from harness.run.suite_run import expand
    cells = expand(load_suite(REPO_DIR / "notebooks" / "suites" / "faults-extra.toml"))
    runnable = {(c.values["fault_scenario"], c.values["request.stream"]) for c in cells if not c.excluded}
    assert runnable == {("slow_tail", True), ("resets", True), ("stalled_streams", True),
                        ("mid_stream_error", True), ("stream_cut", True), ("retry_after", False),
                        ("all_rate_limited", False), ("no_response", False), ("non_retriable", False),
                        ("flapping", False)}
    assert all(c.excluded.startswith("excluded by the suite: ") for c in cells if c.excluded)
    for c in cells:
        if not c.excluded:
            assert c.config.stream == c.values["request.stream"] and "direct" in c.config.gateways


def test_resilience_is_shipped_or_recommended_and_the_fault_profile_recommends(tmp_path):
    assert from_profile("faults").resilience == "recommended"
    assert from_profile("smoke").resilience == "shipped"
    preflight(from_profile("faults", out_dir=str(tmp_path), resilience="shipped"))
    (line,) = _problems(tmp_path, resilience="tuned")
    assert line == "resilience: one of ['shipped', 'recommended'], got 'tuned'"


def test_a_standby_needs_a_third_fixed_port(tmp_path):
    preflight(from_profile("faults", out_dir=str(tmp_path), fault_scenario="failover",
                               base_port=65533))
    (line,) = _problems(tmp_path, fault_scenario="failover", base_port=65534)
    assert line.startswith("base_port:") and "base_port + 2" in line
    preflight(from_profile("faults", out_dir=str(tmp_path), base_port=65534))  # no standby


def _plan(tmp_path, **kw):
    from harness.model.gateway_spec import load_gateway_spec
    from harness.model.plan import make_plan
    from harness.run.run import instruments
    cfg = from_profile("faults", gateways=("direct", "sluice"), out_dir=str(tmp_path), **kw)
    return {r.system: r for r in make_plan(cfg, {n: load_gateway_spec(n) for n in cfg.gateways},
                                           instruments())}


def test_plan_carries_resilience_in_the_key_and_a_standby_port(tmp_path):
    rec = _plan(tmp_path, fault_scenario="failover", base_port=20000)
    shipped = _plan(tmp_path, fault_scenario="failover", base_port=20000, resilience="shipped")
    for system in ("direct", "sluice"):
        assert rec[system].resilience == "recommended" and shipped[system].resilience == "shipped"
        assert rec[system].comparison_key != shipped[system].comparison_key
        assert (rec[system].mock_port, rec[system].system_port, rec[system].standby_port) == \
            (20000, 20001, 20002)
    assert _plan(tmp_path, base_port=20000)["sluice"].standby_port == 0   # error_burst: no standby


def test_runs_from_before_the_setting_read_as_shipped():
    from harness.model.manifests import RunManifest
    from tests.synthetic_manifests import small_run_manifest
    run = small_run_manifest("sluice-1", "sluice", 1, {})
    data = json.loads(run.to_json())
    for key in ("resilience", "resilience_note"):
        data.pop(key)
    data["spec"].pop("resilience")
    data["spec"].pop("standby_port")
    old = RunManifest.from_json(json.dumps(data))
    assert (old.resilience, old.resilience_note, old.spec.resilience, old.spec.standby_port) == \
        ("shipped", "", "shipped", 0)


def test_templates_see_the_standby_only_when_one_runs(tmp_path):
    from harness.model.gateway_spec import load_gateway_spec, render
    from harness.run.systems import MockHandle, run_values
    spec = load_gateway_spec("sluice")
    text = (spec.directory / "resilient.toml.tmpl").read_text()
    alone = run_values(spec, tmp_path, 9001, "127.0.0.1", "http://127.0.0.1:9000", "127.0.0.1",
                       9000, 1)
    assert alone["standby"] is False and "standby_url" not in alone
    rendered = render(text, alone)
    assert rendered.count('base_url = "http://127.0.0.1:9000/v1"') == 1   # no phantom standby
    assert "[providers.standby]" not in rendered
    standby = MockHandle(process=None, url="http://10.0.0.2:9002", port=9002,
                         stats_dir=tmp_path, address="10.0.0.2")
    both = run_values(spec, tmp_path, 9001, "127.0.0.1", "http://127.0.0.1:9000", "127.0.0.1",
                      9000, 1, standby)
    assert (both["standby_url"], both["standby_host"], both["standby_port"]) == \
        ("http://10.0.0.2:9002", "10.0.0.2", 9002)
    assert 'base_url = "http://10.0.0.2:9002/v1"' in render(text, both)


# --- statistics ----------------------------------------------------------------------------------

def test_windows_are_clipped_to_the_hold():
    w = fstats.windows(T0, T0 + 60, fstats.FaultWindow(T0 + 15, T0 + 45))
    assert w == {"before": (T0, T0 + 15), "during": (T0 + 15, T0 + 45), "after": (T0 + 45, T0 + 60)}
    w = fstats.windows(T0, T0 + 60, fstats.FaultWindow(T0 + 50, T0 + 80))
    assert w["after"] == (T0 + 60, T0 + 60)


def test_four_provider_requests_per_client_request_is_amplification_4():
    times = T0 + np.arange(0, 10, 0.1)
    client = _client(times)
    mock = _mock(np.repeat(times + 0.01, 4))
    f = fstats.window_figures(client, mock, T0, T0 + 10, SET_MS)
    assert f["requests"] == 100 and f["mock_rows"] == 400 and f["amplification"] == 4.0
    assert f["success_share"] == 1.0 and f["status_counts"] == {200: 100}
    assert f["added_p50_ms"] == pytest.approx(1.0)


def test_success_share_and_status_mix_in_the_window_only():
    times = T0 + np.arange(0, 20, 0.1)             # 200 requests, 10 per second
    status = [500 if (T0 + 5 <= t < T0 + 10) and i % 5 == 0 else 200 for i, t in enumerate(times)]
    client = _client(times, status=status)
    gen = fstats.generation_rows(pd.concat([_mock(times), _mock([T0 + 6], path="/health")]))
    before = fstats.window_figures(client, gen, T0, T0 + 5, SET_MS)
    during = fstats.window_figures(client, gen, T0 + 5, T0 + 10, SET_MS)
    assert before["success_share"] == 1.0
    assert during["success_share"] == pytest.approx(0.8)
    assert during["status_counts"] == {200: 40, 500: 10}
    assert during["amplification"] == 1.0            # /health is not a provider request


def test_recovery_is_the_first_bin_back_near_the_before_p50():
    times = T0 + np.arange(0, 10, 0.05)
    # after the fault's end at T0+3: 2.5 s slow (200 ms), then back at 61 ms
    lat = [200.0 if T0 + 3 <= t < T0 + 5.5 else 61.0 for t in times]
    client = _client(times, latency_ms=lat)
    assert fstats.recovery_s(client, T0 + 3, T0 + 10, 61.0) == 3.0      # bin [T0+6, T0+7)
    # within 2 ms counts as recovered even when 10% is tighter
    assert fstats.recovery_s(_client(times, latency_ms=[12.5] * len(times)), T0 + 3, T0 + 10, 11.0) == 0.0
    never = _client(times, latency_ms=[200.0] * len(times))
    assert math.isnan(fstats.recovery_s(never, T0 + 3, T0 + 10, 61.0))


def test_raw_logs_of_both_providers_when_no_table_was_stored(tmp_path):
    from harness.files.readers import read_mock_requests
    from tests.test_identity import _mock, _mock_row
    for name, rows in (("mock-stats", [("a", 2), ("b", 4)]), ("mock-standby-stats", [("a", 3)])):
        (tmp_path / name).mkdir()
        _mock([_mock_row(rid, t) for rid, t in rows]).to_csv(tmp_path / name / "requests-9.csv",
                                                             index=False)
    assert read_mock_requests(tmp_path)["request_id"].tolist() == ["a", "a", "b"]


def test_timeline_bins():
    times = T0 + np.arange(0, 3, 0.25)
    client = _client(times, status=[500 if t >= T0 + 1 and t < T0 + 2 else 200 for t in times])
    tl = fstats.timeline(client, _mock(np.repeat(times, 2)), T0, T0 + 3)
    assert list(tl["t_s"]) == [0.0, 1.0, 2.0]
    assert list(tl["success_share"]) == [1.0, 0.0, 1.0]
    assert list(tl["amplification"]) == [2.0, 2.0, 2.0]


def test_error_bodies_in_the_clients_dialect_per_window():
    times = T0 + np.arange(0, 2, 0.1)                    # 20 requests
    status = [502] * 6 + [503] * 3 + [0] + [200] * 10
    client = _client(times, status=status).assign(
        error_body_dialect=["client"] * 6 + ["other"] * 3 + ["none"] + [""] * 10)
    client.loc[9, "error_kind"] = "connection"
    client.loc[10, ["error_kind", "error_body_dialect"]] = ["other", "none"]   # a stream cut short
    f = fstats.window_figures(client, _mock(times), T0, T0 + 2, SET_MS)
    # neither the connection error nor the stream cut after its 200 had an error body to judge
    assert f["error_responses"] == 9 and f["client_dialect_share"] == pytest.approx(6 / 9)
    assert math.isnan(fstats.window_figures(client, _mock(times), T0 + 1, T0 + 2,
                                            SET_MS)["client_dialect_share"])   # no errors there
    # an artifact from before the column: not judged, never a plausible 0%
    older = client.assign(error_body_dialect=None)
    f = fstats.window_figures(older, _mock(times), T0, T0 + 2, SET_MS)
    assert f["error_responses"] == 0 and math.isnan(f["client_dialect_share"])


def test_a_studys_fault_figures_per_system_and_configuration(tmp_path):
    from synthetic_faults import FaultRun, make_fault_study

    from harness.stats.loading import load_study
    path = make_fault_study(tmp_path, "cell", {
        "direct": [FaultRun()],
        # every request of the fault window reached the provider four times
        "sluice": [FaultRun(attempts=4, fail_every=0, slow_ms=50.0, slow_after_s=3.0,
                            resilience="recommended"),
                   FaultRun(attempts=4, fail_every=10, dialect="other", stayed_up=False,
                            resilience="recommended")]})
    per_window, per_run = fstats.fault_summary(load_study(path))
    assert set(per_window["resilience"]) == {"shipped", "recommended"}
    during = per_window[per_window["window"] == "during"].set_index("run_id")
    assert during.loc["sluice-1", "amplification"] == 4.0
    assert during.loc["direct-1", "client_dialect_share"] == 1.0
    assert during.loc["sluice-2", "client_dialect_share"] == 0.0
    figures = fstats.system_figures(per_window, per_run).set_index("system")
    direct, sluice = figures.loc["direct"], figures.loc["sluice"]
    assert (direct["runs"], direct["success_during_n"], direct["success_during_mean"]) == (1, 1, 0.8)
    assert math.isnan(direct["success_during_sd"])                       # one run: no spread
    assert sluice["runs"] == 2 and sluice["stayed_up"] == 1 and sluice["resilience"] == "recommended"
    assert sluice["amplification_during_mean"] == 4.0 and sluice["amplification_during_sd"] == 0.0
    assert sluice["success_during_mean"] == pytest.approx(0.95)
    assert sluice["recovery_s_mean"] == pytest.approx(1.5)             # 3 s and 0 s
    assert sluice["client_dialect_during_n"] == 1                     # only run 2 had errors
    assert sluice["rss_peak_bytes_mean"] == 40 * 2**20
    # a study none of whose runs reached the hold: no rows, the same columns
    none = fstats.system_figures(per_window.iloc[:0], per_run)
    assert none.empty and list(none.columns) == list(fstats.SYSTEM_COLUMNS)


def test_the_study_report_shows_the_dialect_share_and_the_configuration(tmp_path):
    from synthetic_faults import FaultRun, make_fault_study

    from report.data import collect
    from report.sections import render_section
    runs = {"direct": [FaultRun()],
            "sluice": [FaultRun(resilience="shipped",
                                resilience_note="no recommended configuration declared")]}
    html = render_section(collect(make_fault_study(tmp_path, "new", runs)), "faults")
    assert "error bodies in the client&#39;s dialect" in html
    assert 'title="of 20 error responses (status ≥ 400)">100%' in html
    assert "as shipped: no recommended configuration declared" in html
    # an artifact from before the column: the figure is missing, and says why
    old = render_section(collect(make_fault_study(tmp_path, "old", runs,
                                                  without_columns=("error_body_dialect",))),
                         "faults")
    assert 'title="not measured in requests table version 2 (requests.error_body_dialect)">—' in old


def test_a_fault_cells_report_speaks_of_the_fault_not_of_its_failures_as_a_limit(tmp_path):
    """The injected failures are the run's subject: no run is labelled behaviour for them, and
    the first sentences say what the systems did during the fault, not what a month would cost."""
    from synthetic_faults import FaultRun, make_fault_study

    from harness.stats import runs as R
    from report.data import collect
    from report.sections import render_section
    data = collect(make_fault_study(tmp_path, "cell", {"direct": [FaultRun()],
                                                       "sluice": [FaultRun(attempts=2)]}))
    reasons = [why for rs in data.labels["reasons"] for why in rs]
    assert reasons and not any("failed request" in why for why in reasons)
    # outside the fault lane, failed requests still limit a run
    row = {"status": "completed", "errors_http": 3}
    assert any("3 failed requests" in why for why in R.classify(row)[1])
    assert not any("failed request" in why for why in R.classify(row, faulted=True)[1])
    html = render_section(data, "summary")
    assert "Highest success during the fault" in html and "per month" not in html
