"""The open-loop lane: its parameters and its analysis on synthetic steps with known answers (the
real thing through papermill: test_open_loop_integration.py)."""
import math

import numpy as np
import pandas as pd
import pytest
from synthetic import UNARY_DEFAULTS
from synthetic_files import write_parquet
from synthetic_manifests import small_run_manifest, small_study_manifest

from harness import stats as A
from harness.files.store import REQUEST_SCHEMA
from harness.model.config import ConfigError, from_profile
from harness.model.formats import REQUESTS_TABLE
from harness.run.preflight import preflight
from report import tables
from report.build import render_report_html

RATES, STEP_S, T0 = (100.0, 200.0, 400.0), 10.0, 1_760_000_000.0


# --- parameters ----------------------------------------------------------------------------------

def problems(tmp_path, **overrides):
    with pytest.raises(ConfigError) as info:
        preflight(from_profile("open_loop", out_dir=str(tmp_path), **overrides))
    return info.value.problems


def test_the_profile_validates_and_plans_its_slots(tmp_path):
    config = from_profile("open_loop", out_dir=str(tmp_path))
    preflight(config)
    slots = config.open_loop_rates_per_s[0] * config.warmup_s + sum(config.open_loop_rates_per_s) * 20
    assert config.planned_rows() == int(slots * 3 * 3)


@pytest.mark.parametrize("rates", [[200, 100], [100, 100], [0, 100], [-5]])
def test_rates_must_be_positive_and_ascending(tmp_path, rates):
    found = problems(tmp_path, open_loop_rates_per_s=rates)
    assert found == [f"open_loop_rates_per_s: must be positive and strictly ascending, got "
                     f"{[float(r) for r in rates]}"]


def test_rates_that_are_not_numbers():
    with pytest.raises(ConfigError, match="open_loop_rates_per_s: expected a list of finite numbers"):
        from_profile("open_loop", open_loop_rates_per_s="fast,faster")
    assert from_profile("open_loop", open_loop_rates_per_s="[10, 20]").open_loop_rates_per_s == (10.0, 20.0)
    assert from_profile("open_loop", open_loop_rates_per_s="10,20").open_loop_rates_per_s == (10.0, 20.0)


def test_a_schedule_the_generator_cannot_keep_is_refused(tmp_path):
    found = problems(tmp_path, users=50, think_time_s=0.5, locust_processes=2, warmup_s=0.1,
                     open_loop_step_s=0.5, open_loop_rates_per_s=[100, 6000])
    by_name = {p.split(":")[0]: p for p in found}
    assert set(by_name) == {"users", "think_time_s", "locust_processes", "warmup_s",
                            "open_loop_step_s", "open_loop_rates_per_s"}, found
    assert "needs at least 720 users (Little's law" in by_name["users"]   # 6000 x 0.06 x 2
    assert "more than one Locust process" in by_name["open_loop_rates_per_s"]


def test_closed_loop_keeps_its_ramp_check(tmp_path):
    found = problems(tmp_path, open_loop_rates_per_s=[], users=1000, ramp_s=1.0, think_time_s=1.0)
    assert any(p.startswith("ramp_s:") for p in found)


# --- analysis on synthetic steps -----------------------------------------------------------------

# Added latency (ms over the mock) of each step, per run: the p99 from the intended start is
# 60 + added + 0.99 x SPAN by construction (evenly spread values, linear interpolation).
SPAN = 4.0
RUNS = {
    "direct": [dict(added=(0, 0, 0)), dict(added=(0, 0, 0))],
    "fast": [dict(added=(1, 3, 8)), dict(added=(1, 6, 8), waited_step=1)],
    "slow": [dict(added=(2, 20, None)), dict(added=(2, 20, None), unsent_step=3)],
}


def _step_rows(run_id, system, index, rate, start, added, rng, unsent=False, waited=False):
    n = int(rate * STEP_S)
    intended = start + np.arange(n) / rate
    if added is None:   # a backlog: latency from the intended start grows through the step
        from_intended = 60.0 + 500.0 * np.arange(n) / n
    else:
        from_intended = 60.0 + added + np.linspace(0.0, SPAN, n)
        rng.shuffle(from_intended)
    keep = np.arange(n) < (n // 2 if unsent else n)
    lag_ms = 0.5
    return pd.DataFrame({
        **UNARY_DEFAULTS,   # every column an open-loop step does not set below
        "run_id": run_id, "system": system,
        "start_t_unix_s": intended[keep] + lag_ms / 1e3,
        "latency_ms": from_intended[keep] - lag_ms, "status_code": 200, "response_bytes": 300,
        "error_kind": "", "error": "", "users": 100, "phase": "hold", "worker_pid": 1,
        "worker_host": "synthetic", "mock_request_id": "m", "self_overhead_ms": math.nan,
        "ttfb_ms": math.nan, "ttft_ms": math.nan, "chunks": 0,
        "chunk_gaps_ms": [[] for _ in range(int(keep.sum()))], "stream_done": False,
        "intended_start_t_unix_s": intended[keep], "offered_rate_per_s": rate,
        "step_index": index, "waited_for_user": waited, "error_class": ""})


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    path = tmp_path_factory.mktemp("open-loop") / "study"
    rng = np.random.default_rng(3)
    entries, t = [], T0
    for system, params in RUNS.items():
        for n, p in enumerate(params, 1):
            run_id, run_dir = f"{system}-{n}", path / "runs" / system / str(n)
            run_dir.mkdir(parents=True)
            frames = [_step_rows(run_id, system, i, rate, t + (i - 1) * STEP_S, p["added"][i - 1], rng,
                                 unsent=p.get("unsent_step") == i, waited=p.get("waited_step") == i)
                      for i, rate in enumerate(RATES, 1)]
            write_parquet(pd.concat(frames, ignore_index=True), REQUEST_SCHEMA,
                          run_dir / "requests.parquet", REQUESTS_TABLE.version)
            manifest = small_run_manifest(
                run_id, system, n, {"hold_start_t_unix_s": t, "hold_end_t_unix_s": t + 3 * STEP_S},
                open_loop_rates_per_s=list(RATES), open_loop_step_s=STEP_S)
            (run_dir / "manifest.json").write_text(manifest.to_json())
            entries.append({"run_id": run_id, "system": system, "run_index": n,
                            "status": "completed", "reason": "", "dir": f"runs/{system}/{n}"})
            t += 100.0
    (path / "manifest.json").write_text(
        small_study_manifest("open-loop", list(RUNS), entries,
                             roles={s: "floor" if s == "direct" else "system" for s in RUNS}).to_json())
    return A.load_study(path)


def test_steps_measure_from_the_intended_start(synthetic):
    steps = A.open_loop_steps(synthetic).set_index(["run_id", "offered_rps"])
    assert len(steps) == 6 * 3
    for system, params in RUNS.items():
        for n, p in enumerate(params, 1):
            for rate, added in zip(RATES, p["added"]):
                row = steps.loc[(f"{system}-{n}", rate)]
                assert row.scheduled == rate * STEP_S
                if added is None:
                    continue
                if p.get("unsent_step") is None:
                    assert row.sent == row.scheduled and row.unsent == 0
                assert row.from_intended_p99_ms == pytest.approx(60 + added + 0.99 * SPAN, abs=1e-3)
                assert row.from_start_p99_ms == pytest.approx(60 + added + 0.99 * SPAN - 0.5, abs=1e-3)
                assert row.schedule_lag_p99_ms == pytest.approx(0.5, abs=1e-3)  # float64 clock
                assert row.p99_added_ms == pytest.approx(added, abs=1e-3)
                assert row.achieved_rps == pytest.approx(rate, rel=0.01)
                assert row.kept_up, row.reasons


def test_a_backlog_and_unsent_slots_are_not_kept_up(synthetic):
    steps = A.open_loop_steps(synthetic).set_index(["run_id", "offered_rps"])
    backlog = steps.loc[("slow-1", 400.0)]
    assert not backlog.kept_up and "grew from" in backlog.reasons
    unsent = steps.loc[("slow-2", 400.0)]
    assert unsent.unsent == 2000 and "2000 of 4000 slots never sent" in unsent.reasons
    waited = steps.loc[("fast-2", 100.0)]
    assert waited.kept_up and "1000 requests waited for a free user" in waited.reasons


def test_capacity_under_each_bound_across_runs(synthetic):
    cap = A.open_loop_capacity(A.open_loop_steps(synthetic), "direct").set_index("system")
    fast, slow = cap.loc["fast"], cap.loc["slow"]
    # fast: run 1 sustains 200 under 5 ms (+8 at 400), run 2 only 100 (+6 at 200)
    assert (fast["sustained_5ms_rps_mean"], fast["sustained_5ms_rps_sd"]) == \
        pytest.approx((150.0, math.sqrt(2) * 50))
    assert fast["sustained_10ms_rps_mean"] == 400.0 and fast["sustained_50ms_rps_mean"] == 400.0
    assert fast["runs_kept_up_throughout"] == 2 and math.isnan(fast["stopped_at_rps_mean"])
    assert slow["sustained_5ms_rps_mean"] == 100.0 and slow["sustained_10ms_rps_mean"] == 100.0
    assert slow["sustained_50ms_rps_mean"] == 200.0
    assert slow["stopped_at_rps_mean"] == 400.0 and slow["stopped_at_rps_sd"] == 0.0
    assert not slow["floor_also_stopped"]
    capacity = A.open_loop_capacity(A.open_loop_steps(synthetic), "direct")
    table = tables.open_loop(capacity, "direct").frame().set_index("system")
    assert table.loc["slow", "stopped keeping up at (req/s)"] == "400 ± 0 (n=2)"
    assert table.loc["fast", "stopped keeping up at (req/s)"] == "2 of 2 runs kept up to 400"
    assert table.loc["fast", "sustained with p99 added ≤ 5 ms (req/s)"] == "150 ± 71 (n=2)"


def test_a_closed_loop_study_has_no_open_loop_rows(tmp_path):
    from synthetic import make_study
    study = A.load_study(make_study(tmp_path).path)
    assert A.open_loop_steps(study).empty
    assert 'id="open-loop"' not in render_report_html(study.path)


def test_report_section_and_plot(synthetic):
    html = render_report_html(synthetic.path, verify=False)
    section = html[html.index('id="open-loop"'):html.index('id="self-overhead"')]
    assert "Open-loop lane" in section and 'id="open-loop-table"' in section
    assert 'id="plot-open-loop"' in section and "data:image/png;base64," in section
    assert "400 ± 0 (n=2)" in section
