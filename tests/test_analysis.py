"""harness.stats against a synthetic study whose every figure is known by construction."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats
from synthetic import RunParams, default_params, make_study
from synthetic_manifests import small_run_manifest

from harness import stats as A
from harness.model.manifests import RunHost
from report import format as F


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    return make_study(tmp_path_factory.mktemp("study"))


@pytest.fixture(scope="module")
def study(syn):
    return A.load_study(syn.path)


@pytest.fixture(scope="module")
def rs(study):
    return A.run_summary(study)


def _close(got, want, rel=1e-9, abs_=1e-9):
    if isinstance(want, float) and math.isnan(want):
        return pd.isna(got)
    return math.isclose(float(got), float(want), rel_tol=rel, abs_tol=abs_)


# --- loading -------------------------------------------------------------------------------------

def test_load_study_keeps_every_run_and_marks_the_failed_one(syn, study):
    assert [r.run_id for r in study.runs] == [p.run_id for p in syn.manifest.plan]
    assert set(study.requests["run_id"]) == set(syn.expected)
    statuses = study.requests.groupby("run_id")["run_status"].first()
    assert statuses["litellm-2"] == "failed"
    assert statuses["nginx-1"] == "completed"
    assert "litellm-2" not in study.completed_run_ids
    assert study.systems == ["direct", "nginx", "sluice", "litellm"]
    assert study.mock_stats["nginx-1"]["latency_ms"] == 60.0


def test_changed_artifact_is_refused_naming_the_file(tmp_path):
    s = make_study(tmp_path)
    target = s.path / "runs" / "nginx" / "2" / "requests.parquet"
    rows = pd.read_parquet(target)
    rows.loc[rows.index[500], "latency_ms"] = 1.0      # a "better" latency, edited in afterwards
    pq.write_table(pa.Table.from_pandas(rows).replace_schema_metadata(
        pq.read_schema(target).metadata), target)
    with pytest.raises(A.IntegrityError) as info:
        A.load_study(s.path)
    assert "runs/nginx/2/requests.parquet" in str(info.value)
    assert "SHA-256" in str(info.value)
    A.load_study(s.path, verify=False)   # the check can be skipped knowingly


def test_missing_listed_file_is_refused(tmp_path):
    s = make_study(tmp_path)
    (s.path / "runs" / "sluice" / "1" / "mock_stats.json").unlink()
    with pytest.raises(A.IntegrityError, match="runs/sluice/1/mock_stats.json"):
        A.load_study(s.path)


def test_not_a_study_directory(tmp_path):
    with pytest.raises(A.ArtifactError, match="no study manifest"):
        A.load_study(tmp_path)


def test_run_without_manifest_is_kept_as_failed(tmp_path):
    s = make_study(tmp_path)
    m = json.loads((s.path / "manifest.json").read_text())
    m["status"] = "interrupted"
    m["runs"].append({"run_id": "nginx-4", "system": "nginx", "run_index": 4,
                      "status": "interrupted", "reason": "stopped by Ctrl-C",
                      "dir": "runs/nginx/4"})
    (s.path / "manifest.json").write_text(json.dumps(m))
    study = A.load_study(s.path)
    rs = A.run_summary(study)
    row = rs.set_index("run_id").loc["nginx-4"]
    assert row["status"] == "interrupted" and row["label"] is A.Label.FAILED
    assert "Ctrl-C" in row["label_reasons"]
    summ = A.system_summary(rs)
    thr = summ[(summ.system == "nginx") & (summ.metric == "throughput_rps")].iloc[0]
    assert thr["n"] == 3 and thr["n_not_completed"] == 1


# --- per run: known answers ----------------------------------------------------------------------

FIGURES = ["status", "throughput_rps", "requests_in_window",
           "latency_p50_ms", "latency_p95_ms", "latency_p99_ms",
           "overhead_vs_mock_p50_ms", "overhead_vs_mock_p95_ms", "overhead_vs_mock_p99_ms",
           "overhead_vs_direct_p50_ms", "overhead_vs_direct_p95_ms", "overhead_vs_direct_p99_ms",
           "errors_http", "errors_timeout", "errors_connection", "errors_other", "errors_total",
           "inflight_at_stop", "cpu_ms_per_request",
           "rss_idle_bytes", "rss_peak_bytes", "rss_steady_bytes", "rss_recovered_bytes",
           "self_overhead_p50_ms", "self_overhead_p95_ms", "label"]


@pytest.mark.parametrize("figure", FIGURES)
def test_run_summary_known_answers(syn, rs, figure):
    by_run = rs.set_index("run_id")
    checked = 0
    for run_id, exp in syn.expected.items():
        if figure not in exp:
            continue
        got, want = by_run.loc[run_id, figure], exp[figure]
        if isinstance(got, A.Label):
            got = got.value
        if isinstance(want, str):
            assert got == want, (run_id, figure)
        else:
            assert _close(got, want), (run_id, figure, got, want)
        checked += 1
    assert checked >= 3


def test_window_is_the_hold_and_nothing_else(syn, study, rs):
    hold = study.requests[study.requests["phase"] == "hold"].groupby("run_id").size()
    for run_id, n in hold.items():
        assert rs.set_index("run_id").loc[run_id, "requests_in_window"] == n
    row = rs.set_index("run_id").loc["nginx-2"]
    assert row["window_s"] == pytest.approx(10.0)
    # warm-up latencies are +150 ms: were they in, the p99 would be far above the hold's
    assert row["latency_p99_ms"] < 60.0 + 0.80 + 12.0 + 1e-9


def test_percentiles_are_numpy_linear(study, rs):
    run = study.run("sluice-2")
    rows = A.window_rows(study, run)
    ok = rows[rows["error_kind"] == ""]["latency_ms"].to_numpy()
    for q in (50, 95, 99):
        assert rs.set_index("run_id").loc["sluice-2", f"latency_p{q}_ms"] == pytest.approx(
            np.percentile(ok, q), abs=1e-12)


def test_throughput_counts_successes_only(syn, rs):
    row = rs.set_index("run_id").loc["litellm-3"]
    assert row["requests_in_window"] == 620
    assert row["throughput_rps"] == pytest.approx((620 - 5) / 10.0)
    assert row["errors_in_window"] == 5


def test_cpu_per_request_counts_every_request_in_the_window(rs):
    row = rs.set_index("run_id").loc["litellm-3"]
    assert row["cpu_seconds_in_window"] == pytest.approx(1.5 * 10.0)
    assert row["cpu_ms_per_request"] == pytest.approx(1.5 * 10.0 * 1000 / 620)


def test_the_floor_is_the_system_whose_role_says_so(tmp_path):
    """Not a name: with nginx declared the floor, overheads are measured against nginx."""
    s = make_study(tmp_path)
    m = json.loads((s.path / "manifest.json").read_text())
    m["systems"]["direct"]["role"], m["systems"]["nginx"]["role"] = "system", "floor"
    (s.path / "manifest.json").write_text(json.dumps(m))
    rs = A.run_summary(A.load_study(s.path)).set_index("run_id")
    assert rs.loc["nginx-1", "overhead_vs_direct_p50_ms"] == pytest.approx(0.0, abs=0.05)
    assert rs.loc["direct-1", "overhead_vs_direct_p50_ms"] < 0


def test_direct_has_no_process_so_no_cpu_or_memory(rs):
    row = rs.set_index("run_id").loc["direct-1"]
    assert math.isnan(row["cpu_ms_per_request"]) and math.isnan(row["rss_peak_bytes"])
    assert "no samples of a system process" in row["cpu_reason"]


def test_overhead_vs_direct_is_nan_with_a_reason_without_direct(tmp_path):
    params = default_params()
    del params["direct"]
    s = make_study(tmp_path, params=params)
    rs = A.run_summary(A.load_study(s.path))
    assert rs["overhead_vs_direct_p50_ms"].isna().all()
    assert (rs["overhead_vs_direct_reason"]
            == "no floor system (gateway.toml role \"floor\") in this study").all()
    # overhead vs the mock does not need the floor
    assert rs.set_index("run_id").loc["nginx-1", "overhead_vs_mock_p50_ms"] == pytest.approx(
        s.expected["nginx-1"]["overhead_vs_mock_p50_ms"])


def test_memory_phases(rs):
    row = rs.set_index("run_id").loc["sluice-3"]
    assert row["rss_idle_bytes"] == 12 * 2**20
    assert row["rss_steady_bytes"] == 30 * 2**20     # the one peak sample is not the steady state
    assert row["rss_peak_bytes"] == 36 * 2**20
    assert row["rss_recovered_bytes"] == 16 * 2**20


# --- capacity or behaviour -----------------------------------------------------------------------

REASON_WORDS = {"locust cpu": "Locust CPU peaked", "locust warning": "high-CPU warning",
                "mock hold": "hold-time p99", "mock cpu": "mock's CPU peaked",
                "load average": "load average before the run", "failed requests": "failed request",
                "other cpu": "other processes on the machine used"}


def test_labels_and_their_reasons(syn, rs):
    by_run = rs.set_index("run_id")
    for run_id, exp in syn.expected.items():
        assert by_run.loc[run_id, "label"].value == exp["label"], run_id
        text = by_run.loc[run_id, "label_reasons"]
        for key in exp.get("label_reasons", []):
            assert REASON_WORDS[key] in text, (run_id, key, text)
        if exp["label"] == "capacity":
            assert text == ""
    assert "system exited with code 1" in by_run.loc["litellm-2", "label_reasons"]


def _capacity_row(**over):
    row = {"status": "completed", "locust_cpu_peak_percent": 50.0, "locust_processes": 1,
           "locust_cpu_warning": False, "mock_hold_p99_ms": 61.0, "mock_latency_ms": 60.0,
           "mock_cpu_peak_percent": 30.0, "mock_cpu_limit_percent": 90.0,
           "load_avg_before": 0.5, "cpu_count": 2, "errors_http": 0, "errors_timeout": 0,
           "errors_connection": 0, "errors_other": 0, "count_match": True}
    row.update(over)
    return row


@pytest.mark.parametrize("over,words", [
    ({}, None),
    ({"locust_cpu_peak_percent": 90.0}, "Locust CPU peaked at 90%"),
    ({"locust_cpu_peak_percent": 150.0, "locust_processes": 2}, None),   # 2 processes: 180% limit
    ({"locust_cpu_peak_percent": 185.0, "locust_processes": 2}, "limit 180%"),
    ({"locust_cpu_warning": True}, "high-CPU warning"),
    ({"mock_hold_p99_ms": 62.0}, None),                                   # exactly within 2 ms
    ({"mock_hold_p99_ms": 62.01}, "hold-time p99 was 62.01 ms"),
    ({"mock_cpu_peak_percent": 95.0}, "mock's CPU peaked at 95%"),
    ({"load_avg_before": 2.0}, "load average before the run was 2.00 on 2 cores"),
    ({"errors_timeout": 2, "errors_http": 1}, "3 failed requests (1 http, 2 timeout)"),
    ({"count_match": False}, "mock's count does not match"),
    ({"other_cpu_mean_percent": 20.0}, None),                             # at the limit: fine
    ({"other_cpu_mean_percent": 65.0}, "other processes on the machine used 65% CPU"),
    ({"status": "running"}, "still running"),
    ({"locust_cpu_peak_percent": math.nan}, "Locust CPU was not sampled"),
    ({"mock_hold_p99_ms": None}, "hold-time p99 is unknown"),
    ({"offered_rps": 200.0, "throughput_rps": 185.0}, "the offered load, not the system, set"),
    ({"offered_rps": 200.0, "throughput_rps": 120.0}, None),   # well below the offer: the system
])
def test_classify_each_criterion(over, words):
    label, reasons = A.classify(_capacity_row(**over))
    if over.get("status") == "running":
        assert label is A.Label.FAILED and any(words in r for r in reasons)
        return
    if words is None:
        assert (label, reasons) == (A.Label.CAPACITY, [])
    else:
        assert label is A.Label.BEHAVIOUR
        assert any(words in r for r in reasons), reasons


def test_other_processes_competing_for_the_cpu_make_it_behaviour(tmp_path):
    params = {"nginx": [RunParams(other_cpu=o) for o in (5.0, 80.0)]}
    rs = A.run_summary(A.load_study(make_study(tmp_path, params=params).path)).set_index("run_id")
    assert rs.loc["nginx-1", "label"] is A.Label.CAPACITY
    assert rs.loc["nginx-1", "other_cpu_mean_percent"] == pytest.approx(5.0)
    assert rs.loc["nginx-2", "label"] is A.Label.BEHAVIOUR
    assert "other processes on the machine used 80% CPU" in rs.loc["nginx-2", "label_reasons"]


def test_system_labels(rs):
    labels = A.system_labels(rs).set_index("system")
    assert labels.loc["nginx", "label"] is A.Label.CAPACITY
    assert labels.loc["sluice", "label"] is A.Label.BEHAVIOUR
    assert any(r.startswith("sluice-1: ") for r in labels.loc["sluice", "reasons"])
    assert labels.loc["litellm", "completed"] == 2


# --- across runs ---------------------------------------------------------------------------------

def _frame(values: dict[str, list[float]], metric="throughput_rps", status=None):
    rows = []
    for system, vals in values.items():
        for i, v in enumerate(vals, 1):
            rows.append({"run_id": f"{system}-{i}", "system": system, "run_index": i,
                         "status": "completed", metric: v})
    df = pd.DataFrame(rows)
    if status:
        for run_id, st in status.items():
            df.loc[df.run_id == run_id, "status"] = st
    return df


def test_system_summary_known_answers_and_ci():
    df = _frame({"a": [9.0, 10.0, 11.0], "b": [100.0, 100.0, 100.0]})
    s = A.system_summary(df, ["throughput_rps"]).set_index("system")
    assert s.loc["a", "mean"] == 10.0 and s.loc["a", "sd"] == 1.0 and s.loc["a", "n"] == 3
    assert s.loc["a", "min"] == 9.0 and s.loc["a", "max"] == 11.0
    assert s.loc["a", "cov"] == pytest.approx(0.10)
    assert s.loc["a", "ci95_half"] == pytest.approx(4.302652729911275 / math.sqrt(3))
    assert s.loc["a", "ci95_low"] == pytest.approx(10 - 4.302652729911275 / math.sqrt(3))
    assert s.loc["b", "sd"] == 0.0 and not s.loc["b", "unstable"]


@pytest.mark.parametrize("vals,unstable", [
    ([9.0, 10.0, 11.0], True),          # CoV exactly 10 %: flagged (≥)
    ([9.5, 10.0, 10.5], False),         # 5 %
    ([50.0, 100.0, 150.0], True),
])
def test_cov_flag(vals, unstable):
    s = A.system_summary(_frame({"a": vals}), ["throughput_rps"]).iloc[0]
    assert bool(s["unstable"]) is unstable


def test_failed_runs_are_not_averaged():
    df = _frame({"a": [100.0, 1.0, 102.0]}, status={"a-2": "failed"})
    s = A.system_summary(df, ["throughput_rps"]).iloc[0]
    assert s["n"] == 2 and s["mean"] == 101.0 and s["n_not_completed"] == 1


def _welch_p(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    t = (a.mean() - b.mean()) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
    return 2 * stats.t.sf(abs(t), df)


def test_ratio_and_its_propagated_sd():
    r, sd = A.ratio_with_sd(120.0, 6.0, 100.0, 4.0)
    assert r == pytest.approx(1.2)
    assert sd == pytest.approx(1.2 * math.sqrt(0.05 ** 2 + 0.04 ** 2))


@pytest.mark.parametrize("metric,sys_vals,ref_vals,outcome,word", [
    # higher throughput is better
    ("throughput_rps", [130.0, 131.0, 129.0], [100.0, 101.0, 99.0], "better", "faster"),
    ("throughput_rps", [70.0, 71.0, 69.0], [100.0, 101.0, 99.0], "worse", "slower"),
    # lower latency / overhead is better
    ("overhead_vs_mock_p50_ms", [0.50, 0.52, 0.48], [0.80, 0.81, 0.79], "better", "faster"),
    ("latency_p95_ms", [90.0, 91.0, 89.0], [70.0, 70.5, 69.5], "worse", "slower"),
    # lower CPU and memory are better, worded as such
    ("cpu_ms_per_request", [0.5, 0.51, 0.49], [1.0, 1.01, 0.99], "better", "less CPU"),
    ("rss_peak_bytes", [3e8, 3.1e8, 2.9e8], [5e7, 5.1e7, 4.9e7], "worse", "more memory"),
])
def test_verdict_both_ways(metric, sys_vals, ref_vals, outcome, word):
    df = pd.concat([_frame({"x": sys_vals}, metric), _frame({"ref": ref_vals}, metric)])
    c = A.compare(df, reference="ref", metrics=[metric]).iloc[0]
    assert c["outcome"] is A.Outcome(outcome) and c["basis"] is A.Basis.TESTED
    assert F.verdict_word(c["outcome"], metric) == word
    assert c["p_value"] == pytest.approx(_welch_p(sys_vals, ref_vals), rel=1e-9)
    assert c["p_value"] < 0.05 and abs(c["ratio"] - 1) >= 0.10
    assert "< 0.05" in F.verdict_reason(c)


def test_significant_but_under_ten_percent_is_no_clear_difference():
    sys_vals, ref_vals = [105.0, 105.1, 104.9], [100.0, 100.1, 99.9]
    df = pd.concat([_frame({"x": sys_vals}), _frame({"ref": ref_vals})])
    c = A.compare(df, reference="ref", metrics=["throughput_rps"]).iloc[0]
    assert c["p_value"] < 0.001
    assert c["outcome"] is A.Outcome.NO_CLEAR_DIFFERENCE
    assert "only 5.0% off 1 (< 10%)" in F.verdict_reason(c)


def test_large_but_noisy_is_no_clear_difference():
    sys_vals, ref_vals = [60.0, 150.0, 240.0], [100.0, 101.0, 99.0]
    df = pd.concat([_frame({"x": sys_vals}), _frame({"ref": ref_vals})])
    c = A.compare(df, reference="ref", metrics=["throughput_rps"]).iloc[0]
    assert c["ratio"] == pytest.approx(1.5)
    assert c["p_value"] >= 0.05
    assert c["outcome"] is A.Outcome.NO_CLEAR_DIFFERENCE and "≥ 0.05" in F.verdict_reason(c)


def test_ten_percent_rule_boundary():
    # identical runs within each set: the difference is certain, only the 10 % rule decides
    df = pd.concat([_frame({"x": [110.0] * 3}), _frame({"ref": [100.0] * 3})])
    assert (A.compare(df, reference="ref", metrics=["throughput_rps"]).iloc[0]["outcome"]
            is A.Outcome.BETTER)
    df = pd.concat([_frame({"x": [109.0] * 3}), _frame({"ref": [100.0] * 3})])
    assert (A.compare(df, reference="ref", metrics=["throughput_rps"]).iloc[0]["outcome"]
            is A.Outcome.NO_CLEAR_DIFFERENCE)


def test_too_few_runs_and_missing_reference():
    df = pd.concat([_frame({"x": [130.0]}), _frame({"ref": [100.0, 101.0]})])
    c = A.compare(df, reference="ref", metrics=["throughput_rps"]).iloc[0]
    assert c["basis"] is A.Basis.TOO_FEW_RUNS
    assert "too few completed runs" in F.verdict_reason(c)
    with pytest.raises(KeyError, match="nginx"):
        A.compare(df, reference="nginx")


def test_one_reference_the_setting_when_it_ran_else_the_first_that_ran(tmp_path):
    from harness.model.roles import Roles
    params = {"sluice": [RunParams(overhead_ms=0.5)], "direct": [RunParams(overhead_ms=0.2)]}
    study = A.load_study(make_study(tmp_path, params=params).path)
    assert Roles.of(study.manifest).reference == "nginx"          # the setting alone
    assert A.roles(study).reference == "sluice"                   # nginx did not run
    assert A.roles(study, reference="direct").reference == "direct"
    full = A.load_study(make_study(tmp_path / "full").path)
    assert A.roles(full).reference == "nginx"

def test_compare_on_the_synthetic_study(rs):
    c = A.compare(rs, "nginx", floor="direct").set_index(["system", "metric"])
    assert c.loc[("litellm", "throughput_rps"), "outcome"] is A.Outcome.WORSE
    assert c.loc[("sluice", "throughput_rps"), "outcome"] is A.Outcome.NO_CLEAR_DIFFERENCE
    assert c.loc[("sluice", "cpu_ms_per_request"), "outcome"] is A.Outcome.BETTER
    assert c.loc[("litellm", "throughput_rps"), "n"] == 2           # the failed run is out
    assert c.loc[("direct", "overhead_vs_direct_p50_ms"), "basis"] is A.Basis.NOT_COMPARED


# --- along the ramp -------------------------------------------------------------------------------

def test_ramp_curve(syn, study):
    rc = A.ramp_curve(study, bin_users=50)
    n1 = rc[rc.run_id == "nginx-1"].set_index("users_bin")
    assert list(n1.index) == [0, 50, 100, 150, 200]
    # the hold is the only source of bin 200: 1790 successes from the first send to hold_end
    step = 10.0 / 1790
    assert n1.loc[200, "successful"] == 1790
    assert n1.loc[200, "throughput_rps"] == pytest.approx(1790 / (10.0 - step / 2))
    assert n1.loc[200, "overhead_vs_mock_p50_ms"] == pytest.approx(
        syn.expected["nginx-1"]["overhead_vs_mock_p50_ms"])
    # along the ramp the synthetic rate is 0.9 × users: the bins' throughput rises with them
    for edge in (50, 100, 150):
        assert n1.loc[edge, "throughput_rps"] == pytest.approx(0.9 * (edge + 25), rel=0.03)
    # litellm saturates at 60 req/s: its knee is visible
    l1 = rc[rc.run_id == "litellm-1"].set_index("users_bin")
    assert l1.loc[150, "throughput_rps"] == pytest.approx(60, rel=0.03)
    # a failed run still shows the part of the ramp it ran
    assert (rc.run_id == "litellm-2").any()


def test_other_cpu_counts_hosts_of_one_machine_once():
    """Network-namespace hosts share one machine: its CPU is read once, ours summed over them;
    separate machines are judged apart and the busiest is reported."""
    def rows(host, role, pct):
        return [{"t_unix_s": t, "host": host, "role": role, "cpu_percent": pct} for t in (1.0, 2.0)]
    samples = pd.DataFrame(rows("a", "machine", 100.0) + rows("b", "machine", 100.0)
                           + rows("a", "locust", 30.0) + rows("b", "system", 50.0)
                           + rows("c", "machine", 40.0) + rows("c", "mock", 10.0))
    run = dataclasses.replace(small_run_manifest("x-1", "x", 1, {}), hosts={
        h: RunHost(address="10.0.0.1", before={"hostname": m})
        for h, m in (("a", "vm"), ("b", "vm"), ("c", "other"))})
    machine, other = A.other_cpu(run, samples, 0.0, 3.0)
    assert (machine, other) == (40.0, 30.0)  # 'other': 40 − 10 = 30 beats vm: 100 − (30 + 50)
    run.hosts["c"].before["hostname"] = "vm"  # all three one machine: read once, ours summed
    samples.loc[samples["host"] == "c", "cpu_percent"] = samples["role"].map({"machine": 100.0, "mock": 10.0})
    assert A.other_cpu(run, samples, 0.0, 3.0) == (100.0, 10.0)


def test_offered_load_comes_from_the_mock_not_from_the_measured_latency(tmp_path):
    """200 users with 1 s think time offer at most 200 / (1 + 0.06) ≈ 189 req/s. A system at
    180 req/s served the offer; one at 60 req/s did not, however slow its own answers made the
    closed loop (Little's law would always make users / (think + its latency) match it)."""
    made = make_study(tmp_path)
    for manifest_path in (made.path / "runs").glob("*/*/manifest.json"):
        manifest = json.loads(manifest_path.read_text())
        manifest["spec"]["load"]["think_time_s"] = 1.0
        manifest_path.write_text(json.dumps(manifest))
    rs = A.run_summary(A.load_study(made.path)).set_index("run_id")
    assert rs.loc["direct-1", "offered_rps"] == pytest.approx(200 / 1.06)
    assert "the offered load, not the system" in rs.loc["direct-1", "label_reasons"]
    assert "the offered load, not the system" not in rs.loc["litellm-1", "label_reasons"]
