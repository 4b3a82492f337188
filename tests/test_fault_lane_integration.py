"""The provider-fault lane for real at tiny scale: an error burst, the faults profile's open loop
with a system slow to start, and a failover to the standby provider; the mock, the systems and
Locust as native processes."""
from __future__ import annotations

import pandas as pd
import pytest

from harness.model.config import from_profile
from harness.run.preflight import preflight
from harness.stats import fault_lane as fstats

pytestmark = [pytest.mark.integration, pytest.mark.slow]   # ~150 s: three studies, one slow to start


def test_error_burst_study(tmp_path):
    from harness.run.study import run_study
    from harness.stats.loading import load_study
    from report import build
    config = from_profile("smoke", gateways=("direct", "nginx"), out_dir=str(tmp_path),
                          study_id="fb", fault_scenario="error_burst", hold_s=9.0,
                          max_hold_s=11.0, fault_start_s=3.0, fault_duration_s=3.0)
    result = run_study(preflight(config), progress=lambda line: None)
    assert result.status == "completed"
    study = load_study(result.study_dir)
    per_window, per_run = fstats.fault_summary(study)
    assert set(per_run["system"]) == {"direct", "nginx"} and per_run["stayed_up"].all()
    for system in ("direct", "nginx"):
        w = per_window[per_window["system"] == system].set_index("window")
        assert w.loc["during", "success_share"] == pytest.approx(0.8, abs=0.08)
        # windows go by the client's send time, faults by when the body reached the mock: a
        # request sent just before the fault's start can meet it (one of ~50 here)
        assert w.loc["before", "success_share"] >= 0.95 and w.loc["after", "success_share"] == 1.0
        assert w.loc["during", "amplification"] == pytest.approx(1.0, abs=0.05)
        # the mock's OpenAI error bodies, passed through: the client's dialect
        assert w.loc["during", "client_dialect_share"] == 1.0
    errors = study.requests[study.requests["error_kind"] != ""]
    assert len(errors) and set(errors["error_body_dialect"]) == {"client"}
    assert set(study.requests.loc[study.requests["error_kind"] == "", "error_body_dialect"]) == {""}
    run = study.runs[0]
    assert run.checks.count_match is None and run.checks.count_note
    # the mock's log, consolidated: what it sent and how each answer ended
    mock = pd.read_parquet(study.run_dirs["nginx-1"] / "mock_requests.parquet")
    answered = mock[mock["ended"] == "complete"]
    assert len(answered) >= 0.95 * len(mock) and (answered["frames_sent"] == 0).all()
    assert (answered.loc[answered["status_code"] == 200, "content_chars_sent"] > 0).all()
    assert (answered.loc[answered["fault"] == "status:500", "content_chars_sent"] == 0).all()
    html = build.build_report(study.path).path.read_text(encoding="utf-8")
    assert "When the provider fails" in html and "single run" in html


# A Sluice that takes this long to start listening: the slow start that once cost the lane its
# LiteLLM runs.
SLOW_START_S = 40.0


def test_open_loop_fault_study_counts_every_request_sent_during_the_fault(tmp_path):
    """The faults profile's shape at small scale: open loop, the same arrivals for every system,
    each request sent during the fault counted with all its attempts; and the faults armed when
    the load starts, so a system 40 s slow to start meets them where one ready at once does."""
    from harness.files.readers import read_fault_schedule
    from harness.run.study import run_study
    from harness.stats.loading import load_study
    fault_start_s = 3.0
    config = from_profile("faults", gateways=("direct", "sluice"), out_dir=str(tmp_path),
                          study_id="ol", fault_scenario="error_burst", users=40, warmup_s=1.0,
                          open_loop_rates_per_s=(40.0,), open_loop_step_s=9.0,
                          fault_start_s=fault_start_s, fault_duration_s=4.0, runs_per_gateway=1,
                          system_env=(f"sluice:SLUICE_TEST_START_DELAY_S={SLOW_START_S:g}",))
    result = run_study(preflight(config), progress=lambda line: None)
    assert result.status == "completed"
    study = load_study(result.study_dir)
    runs = {r.system: r for r in study.runs}
    assert runs["sluice"].ready_s >= SLOW_START_S > 100 * runs["direct"].ready_s
    for system, run in runs.items():
        run_dir = study.run_dirs[run.run_id]
        hold_start = run.phases.t("hold_start")
        assert read_fault_schedule(run_dir / "faults.json")["epoch_unix_s"] == \
            pytest.approx(hold_start, abs=0.01)
        mock = pd.read_parquet(run_dir / "mock_requests.parquet")
        faulted = mock.loc[mock["fault"] != "", "body_end_t_unix_ns"] / 1e9 - hold_start
        # the first fault lands at the window's start (a 20% share: within a few arrivals)
        assert fault_start_s <= faulted.min() <= fault_start_s + 0.3, system
        assert faulted.max() <= fault_start_s + 4.0 + 0.05, system
    _, per_run = fstats.fault_summary(study)
    runs = per_run.set_index("system")
    for system in ("direct", "sluice"):
        # 40 req/s for the 4-s window: the same ~160 arrivals for both
        assert runs.loc[system, "requests_sent_during"] == pytest.approx(160, abs=12)
        assert runs.loc[system, "first_attempt_failure_share"] == pytest.approx(0.2, abs=0.1)
    assert runs.loc["direct", "amplification_sent_during"] == pytest.approx(1.0, abs=0.01)
    assert runs.loc["direct", "tts_p99_ms"] == float("inf")      # its failures never succeed
    assert runs.loc["sluice", "success_sent_during"] > runs.loc["direct", "success_sent_during"]
    assert runs.loc["sluice", "amplification_sent_during"] > 1.0  # its retries, counted


def test_failover_study_the_standby_serves_while_the_primary_fails(tmp_path):
    from harness.run.study import run_study
    from harness.stats.loading import load_study
    from harness.stats.runs import _identity_problem
    from report import build
    config = from_profile("smoke", gateways=("direct", "sluice"), out_dir=str(tmp_path),
                          study_id="fo", fault_scenario="failover", resilience="recommended",
                          hold_s=10.0, max_hold_s=12.0, fault_start_s=3.0, fault_duration_s=4.0)
    result = run_study(preflight(config), progress=lambda line: None)
    assert result.status == "completed"
    study = load_study(result.study_dir)
    runs = {r.system: r for r in study.runs}
    assert (runs["sluice"].resilience, runs["sluice"].resilience_note) == ("recommended", "")
    assert runs["direct"].resilience == "recommended"
    assert runs["direct"].resilience_note.startswith("the client calls the provider itself")
    per_window, per_run = fstats.fault_summary(study)
    assert per_run["stayed_up"].all()
    w = per_window.set_index(["system", "window"])
    assert w.loc[("sluice", "during"), "success_share"] >= 0.95   # failed over to the standby
    assert w.loc[("direct", "during"), "success_share"] <= 0.05   # nothing between it and the 503s
    assert w.loc[("sluice", "during"), "amplification"] > 1.0     # its retries, both providers' rows
    mock = pd.read_parquet(study.run_dirs["sluice-1"] / "mock_requests.parquet")
    assert ((mock["provider"] == "standby") & (mock["status_code"] == 200)).sum() > 0
    assert set(pd.read_parquet(study.run_dirs["direct-1"] / "mock_requests.parquet")["provider"]) \
        == {"primary"}
    identity = runs["sluice"].checks.identity
    assert identity.client_without_mock == 0 and identity.ids_seen_more_than_once > 0
    assert "more than once" not in _identity_problem(runs["sluice"])
    roles = set(study.samples[study.samples["run_id"] == "sluice-1"]["role"])
    assert {"mock", "standby", "system"} <= roles
    html = build.build_report(study.path).path.read_text(encoding="utf-8")
    assert "When the provider fails" in html
