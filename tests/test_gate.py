"""harness.checks.gate: thresholds, direction, the baseline file, the messages, on synthetic studies
(tests/synthetic.py, through load_study and run_summary) and small run_summary-shaped tables."""
from __future__ import annotations

import json
import math
from dataclasses import replace

import pandas as pd
import pytest
from synthetic import default_params, make_study

from harness import stats as A
from harness.checks import gate as G
from harness.commands import main as cli

BASE_COMMIT = "abc123def4567890abc123def4567890abc12345"


def _params(**sluice_changes):
    """direct, nginx and sluice as in the default synthetic study; sluice optionally changed."""
    p = default_params()
    p = {k: p[k] for k in ("direct", "nginx", "sluice")}
    if sluice_changes:
        p["sluice"] = [replace(r, **{k: f(r) for k, f in sluice_changes.items()})
                       for r in p["sluice"]]
    return p


def _set_manifest(path, **changes):
    mpath = path / "manifest.json"
    m = json.loads(mpath.read_text())
    m.update(changes)
    mpath.write_text(json.dumps(m, indent=2))


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate")
    base = make_study(root, "base", params=_params())
    _set_manifest(base.path, git_commit=BASE_COMMIT)
    # the same systems measured again: a different commit, nothing changed
    again = make_study(root, "again", params=_params(), seed=11)
    _set_manifest(again.path, git_commit="fedcba9876543210fedcba9876543210fedcba98")
    # Sluice deliberately 30 % slower: 30 % more overhead, 30 % less throughput
    slow = make_study(root, "slow", params=_params(
        overhead_ms=lambda r: r.overhead_ms * 1.3, span_ms=lambda r: r.span_ms * 1.3,
        hold_rate=lambda r: int(round(r.hold_rate * 0.7))))
    # Sluice better on every figure
    fast = make_study(root, "fast", params=_params(
        overhead_ms=lambda r: r.overhead_ms * 0.5, span_ms=lambda r: r.span_ms * 0.5,
        hold_rate=lambda r: int(round(r.hold_rate * 1.5)), cpu_cores=lambda r: r.cpu_cores * 0.5,
        rss_peak=lambda r: r.rss_peak // 2, rss_steady=lambda r: r.rss_steady // 2,
        rss_idle=lambda r: r.rss_idle // 2, rss_recovered=lambda r: r.rss_recovered // 2))
    baseline = root / "baselines" / "gate.json"
    res = G.refresh(base.path, baseline, now=1_770_000_000.0)
    assert res.exit_code == 0, res.text
    return {"root": root, "base": base, "again": again, "slow": slow, "fast": fast,
            "baseline": baseline}


def _rs(rows):
    """A table shaped like run_summary's, from (system, round, status, figures...) rows."""
    cols = ["run_id", "system", "round", "status", "reason", "throughput_rps",
            "overhead_vs_mock_p50_ms", "overhead_vs_mock_p95_ms", "cpu_ms_per_request",
            "rss_peak_bytes"]
    out = []
    counts: dict[str, int] = {}
    for system, rnd, status, thr, o50, o95, cpu, rss in rows:
        counts[system] = counts.get(system, 0) + 1
        out.append([f"{system}-{counts[system]}", system, rnd, status,
                    "" if status == "completed" else "died", thr, o50, o95, cpu, rss])
    return pd.DataFrame(out, columns=cols)


# --- the threshold -------------------------------------------------------------------------------

def test_threshold_is_the_10_percent_floor_when_the_spread_is_small():
    thr, rel = G.threshold(1.0, 0.02)
    assert rel == pytest.approx(0.02)
    assert thr == pytest.approx(0.10)           # 3 × 2 % = 6 % < 10 %


def test_threshold_is_three_sd_when_the_spread_is_large():
    thr, rel = G.threshold(2.0, 0.08)           # relative sd 4 %
    assert rel == pytest.approx(0.04)
    assert thr == pytest.approx(0.12)


def test_threshold_parameters_and_unknown_sd():
    assert G.threshold(1.0, 0.02, min_threshold=0.05, sd_multiple=2.0)[0] == pytest.approx(0.05)
    assert G.threshold(1.0, 0.04, min_threshold=0.05, sd_multiple=2.0)[0] == pytest.approx(0.08)
    thr, rel = G.threshold(1.0, None)           # a baseline of one round: the floor only
    assert thr == pytest.approx(0.10) and math.isnan(rel)
    assert G.threshold(1.0, float("nan"))[0] == pytest.approx(0.10)


def _fig(name, mean, direction):
    return G.Figure(name, mean, 0.01, 3, direction, "paired by round")


META = {"commit": BASE_COMMIT, "study_id": "20260101T000000Z"}


def test_judge_fails_only_beyond_the_threshold_in_the_bad_direction():
    base = {"mean": 1.21, "sd": 0.0484, "n": 5, "direction": "lower"}   # rel sd 4 % -> 12 %
    worse = G.judge(_fig("overhead_p50_ratio", 1.62, "lower"), base, META)
    assert worse.failed
    assert worse.threshold == pytest.approx(0.12)
    assert worse.line.startswith("FAIL median overhead vs mock ratio 1.620 vs baseline 1.210 "
                                 "(+34%, threshold 12% = max(10%, 3×sd 4%)) — baseline from commit "
                                 "abc123def456 (study 20260101T000000Z)")
    within = G.judge(_fig("overhead_p50_ratio", 1.21 * 1.11, "lower"), base, META)
    assert not within.failed and within.line.startswith("ok median overhead vs mock ratio")


def test_a_better_figure_never_fails():
    low = {"mean": 1.0, "sd": 0.01, "n": 5, "direction": "lower"}
    high = {"mean": 1.0, "sd": 0.01, "n": 5, "direction": "higher"}
    assert not G.judge(_fig("overhead_p95_ratio", 0.3, "lower"), low, META).failed
    assert not G.judge(_fig("cpu_ms_per_request_ratio", 0.01, "lower"), low, META).failed
    assert not G.judge(_fig("throughput_ratio", 3.0, "higher"), high, META).failed
    # and the bad direction of a higher-is-better figure is down
    j = G.judge(_fig("throughput_ratio", 0.85, "higher"), high, META)
    assert j.failed and "(-15%" in j.line
    assert not G.judge(_fig("throughput_ratio", 0.95, "higher"), high, META).failed


def test_peak_rss_is_absolute_and_printed_in_mib():
    base = {"mean": 36 * 2**20, "sd": 0.0, "n": 3, "direction": "lower"}
    j = G.judge(_fig("rss_peak_bytes", 48 * 2**20, "lower"), base, META)
    assert j.failed
    assert "peak RSS 48.0 MiB vs baseline 36.0 MiB (+33%" in j.line


# --- the figures ---------------------------------------------------------------------------------

def test_figures_are_paired_by_round(studies):
    rs = A.run_summary(A.load_study(studies["base"].path))
    figs = G.compute_figures(rs, "sluice", "nginx")
    exp = studies["base"].expected
    want = [exp[f"sluice-{i}"]["overhead_vs_mock_p50_ms"] / exp[f"nginx-{i}"]["overhead_vs_mock_p50_ms"]
            for i in (1, 2, 3)]
    f = figs["overhead_p50_ratio"]
    assert f.method == "paired by round" and f.n == 3
    assert f.mean == pytest.approx(sum(want) / 3)
    assert f.sd == pytest.approx(pd.Series(want).std(ddof=1))
    assert figs["rss_peak_bytes"].mean == pytest.approx(36 * 2**20)
    assert figs["rss_peak_bytes"].method == "absolute"
    assert figs["throughput_ratio"].direction == "higher"
    assert {f.direction for n, f in figs.items() if n != "throughput_ratio"} == {"lower"}


def test_without_pairing_the_ratio_of_means_with_propagated_sd():
    rs = _rs([("sluice", None, "completed", 100.0, 2.0, 4.0, 0.5, 30e6),
              ("sluice", None, "completed", 110.0, 2.2, 4.4, 0.55, 31e6),
              ("nginx", None, "completed", 200.0, 1.0, 2.0, 1.0, 10e6),
              ("nginx", None, "completed", 210.0, 1.1, 2.1, 1.1, 11e6)])
    figs = G.compute_figures(rs, "sluice", "nginx")
    f = figs["throughput_ratio"]
    assert f.method == "ratio of means" and f.n == 2
    r, sd = A.ratio_with_sd(105.0, pd.Series([100.0, 110.0]).std(), 205.0,
                            pd.Series([200.0, 210.0]).std())
    assert f.mean == pytest.approx(r) and f.sd == pytest.approx(sd)
    # one run each: the ratio is defined, its sd is not, and the baseline says so
    one = G.compute_figures(rs.iloc[[0, 2]], "sluice", "nginx")
    assert one["throughput_ratio"].mean == pytest.approx(0.5)
    assert math.isnan(one["throughput_ratio"].sd)
    assert one["throughput_ratio"].to_json()["sd"] is None


def test_division_guard_floors_a_near_zero_reference_overhead():
    rs = _rs([("sluice", 1, "completed", 100.0, 0.5, 4.0, 0.5, 30e6),
              ("nginx", 1, "completed", 100.0, 0.0, 2.0, 1.0, 10e6),
              ("sluice", 2, "completed", 100.0, 0.6, 4.0, 0.5, 30e6),
              ("nginx", 2, "completed", 100.0, -0.02, 2.0, 1.0, 10e6),
              ("sluice", 3, "completed", 100.0, 0.4, 4.0, 0.5, 30e6),
              ("nginx", 3, "completed", 100.0, 0.5, 2.0, 1.0, 10e6)])
    f = G.compute_figures(rs, "sluice", "nginx")["overhead_p50_ratio"]
    assert f.mean == pytest.approx((0.5 / 0.05 + 0.6 / 0.05 + 0.4 / 0.5) / 3)
    assert math.isfinite(f.sd)
    assert f.notes == ("nginx overhead floored at 0.05 ms in rounds 1, 2",)
    floored = G.compute_figures(rs, "sluice", "nginx", epsilon_ms=0.1)["overhead_p50_ratio"]
    assert floored.mean == pytest.approx(
        (0.5 / 0.1 + 0.6 / 0.1 + 0.4 / 0.5) / 3)
    # the ratio-of-means path floors the mean
    nopair = rs.assign(round=None)
    nopair.loc[nopair.system == "nginx", "overhead_vs_mock_p50_ms"] = [0.01, 0.0, -0.01]
    g = G.compute_figures(nopair, "sluice", "nginx")["overhead_p50_ratio"]
    assert g.method == "ratio of means"
    assert g.mean == pytest.approx(0.5 / 0.05)
    assert g.notes == ("nginx mean overhead 0 ms floored at 0.05 ms",)


def test_division_guard_end_to_end_is_named_in_the_output(tmp_path):
    p = _params()
    # nginx's median latency 0.01 ms above the mock's setting: overhead p50 = -5.99 + 12 × 0.5
    p["nginx"] = [replace(r, overhead_ms=-5.99) for r in p["nginx"]]
    s = make_study(tmp_path, "near-zero", params=p)
    rs = A.run_summary(A.load_study(s.path))
    assert rs.loc[rs.system == "nginx", "overhead_vs_mock_p50_ms"].tolist() == pytest.approx(
        [0.01] * 3)
    baseline = tmp_path / "gate.json"
    assert G.refresh(s.path, baseline).exit_code == 0
    res = G.check(s.path, baseline)
    assert res.exit_code == 0, res.text
    line = next(x for x in res.lines if "median overhead vs mock ratio" in x)
    assert "nginx overhead floored at 0.05 ms in rounds 1, 2, 3" in line
    want = sum(s.expected[f"sluice-{i}"]["overhead_vs_mock_p50_ms"] / 0.05 for i in (1, 2, 3)) / 3
    assert res.judgements[1].name == "overhead_p50_ratio"
    assert res.judgements[1].current == pytest.approx(want)
    assert line.startswith(f"ok median overhead vs mock ratio {want:.3f} vs baseline {want:.3f}")


# --- the baseline file and the check -------------------------------------------------------------

def test_refresh_writes_the_documented_format(studies):
    data = json.loads(studies["baseline"].read_text())
    assert data["schema_version"] == G.SCHEMA_VERSION
    assert data["candidate"] == "sluice" and data["reference"] == "nginx"
    assert data["commit"] == BASE_COMMIT
    assert data["study_id"] == "base"
    assert data["created_t_unix_s"] == 1_770_000_000.0
    assert data["profile"] == "synthetic"
    assert set(data["figures"]) == {f.name for f in G.FIGURES}
    for name, f in data["figures"].items():
        assert set(f) >= {"mean", "sd", "n", "direction"}
        assert f["n"] == 3
        assert f["direction"] == ("higher" if name == "throughput_ratio" else "lower")


def test_round_trip_refresh_then_check_passes(studies):
    res = G.check(studies["base"].path, studies["baseline"])
    assert res.exit_code == 0, res.text
    assert [j.failed for j in res.judgements] == [False] * 5
    assert all(j.change == pytest.approx(0.0, abs=1e-12) for j in res.judgements)
    assert res.lines[-1].startswith("gate: ok")
    # another study of the same systems (another seed, another commit) passes too
    assert G.check(studies["again"].path, studies["baseline"]).exit_code == 0


def test_a_30_percent_slower_candidate_fails_naming_figure_and_baseline_commit(studies):
    res = G.check(studies["slow"].path, studies["baseline"])
    assert res.exit_code == 1, res.text
    failed = {j.name for j in res.judgements if j.failed}
    assert {"throughput_ratio", "overhead_p50_ratio", "overhead_p95_ratio"} <= failed
    assert "rss_peak_bytes" not in failed
    line = next(x for x in res.lines if "median overhead vs mock ratio" in x)
    assert line.startswith("FAIL median overhead vs mock ratio ")
    assert "(+30%, threshold 10% = max(10%, 3×sd" in line
    assert "baseline from commit abc123def456 (study base)" in line
    assert any(x.startswith("FAIL throughput ratio ") and "(-30%" in x for x in res.lines)
    assert any(x.startswith("ok peak RSS") for x in res.lines)
    assert res.lines[-1].startswith("gate: FAIL") and "median overhead vs mock ratio" in res.lines[-1]


def test_a_better_candidate_passes_end_to_end(studies):
    res = G.check(studies["fast"].path, studies["baseline"])
    assert res.exit_code == 0, res.text
    change = {j.name: j.change for j in res.judgements}
    assert change.pop("throughput_ratio") > 0.3
    assert all(c < -0.3 for c in change.values())


def test_missing_baseline_tells_to_refresh_and_check_never_writes_it(studies, tmp_path):
    missing = tmp_path / "nope" / "gate.json"
    res = G.check(studies["base"].path, missing)
    assert res.exit_code == 2
    assert f"no baseline at {missing}" in res.text
    assert "python -m harness gate refresh" in res.text
    assert not missing.exists()


def test_bad_baseline_file_is_bad_input(studies, tmp_path):
    bad = tmp_path / "gate.json"
    bad.write_text("{not json")
    assert G.check(studies["base"].path, bad).exit_code == 2
    data = json.loads(studies["baseline"].read_text())
    del data["figures"]["overhead_p95_ratio"]
    bad.write_text(json.dumps(data))
    res = G.check(studies["base"].path, bad)
    assert res.exit_code == 2 and "figures.overhead_p95_ratio" in res.text
    data = json.loads(studies["baseline"].read_text())
    data["schema_version"] = 99
    bad.write_text(json.dumps(data))
    assert "schema_version 99" in G.check(studies["base"].path, bad).text


def test_missing_systems_are_named(studies, tmp_path):
    p = _params()
    del p["sluice"]
    s = make_study(tmp_path, "no-sluice", params=p)
    res = G.check(s.path, studies["baseline"])
    assert res.exit_code == 2
    assert "no runs of candidate 'sluice'" in res.text
    assert "systems in it: direct, nginx" in res.text
    p = _params()
    del p["nginx"], p["sluice"]
    s = make_study(tmp_path, "direct-only", params=p)
    res = G.refresh(s.path, tmp_path / "never.json")
    assert res.exit_code == 2
    assert "candidate 'sluice' and reference 'nginx'" in res.text
    assert not (tmp_path / "never.json").exists()


def test_failed_runs_of_either_system_are_named(studies, tmp_path):
    p = _params()
    p["sluice"][1] = replace(p["sluice"][1], failed=True)
    s = make_study(tmp_path, "failed-run", params=p)
    res = G.check(s.path, studies["baseline"])
    assert res.exit_code == 2
    assert "sluice-2 (failed: system exited with code 1 during the ramp)" in res.text
    assert G.refresh(s.path, tmp_path / "never.json").exit_code == 2


def test_the_candidate_and_reference_come_from_the_study(tmp_path):
    s = make_study(tmp_path, "roles")
    _set_manifest(s.path, config={**json.loads((s.path / "manifest.json").read_text())["config"],
                                  "gate_system": "litellm", "reference_system": "sluice"})
    res = G.refresh(s.path, tmp_path / "roles.json")
    assert res.exit_code == 2 and "litellm-2 (failed" in res.text   # litellm's failed run
    res = G.refresh(s.path, tmp_path / "roles.json", candidate="nginx")
    assert res.exit_code == 0, res.text
    base = json.loads((tmp_path / "roles.json").read_text())
    assert (base["candidate"], base["reference"]) == ("nginx", "sluice")


def test_profile_mismatch_and_system_mismatch_are_bad_input(studies, tmp_path):
    data = json.loads(studies["baseline"].read_text())
    data["profile"] = "gate"
    other = tmp_path / "gate.json"
    other.write_text(json.dumps(data))
    res = G.check(studies["base"].path, other)
    assert res.exit_code == 2 and "profile 'synthetic'" in res.text and "'gate'" in res.text
    res = G.check(studies["base"].path, studies["baseline"], candidate="litellm")
    assert res.exit_code == 2 and "'sluice' vs 'nginx', not 'litellm' vs 'nginx'" in res.text


def test_cli_exit_codes_and_output(studies, tmp_path, capsys):
    b = str(studies["baseline"])
    assert cli(["gate", "check", str(studies["base"].path), "--baseline", b]) == 0
    assert "gate: ok" in capsys.readouterr().out
    assert cli(["gate", "check", str(studies["slow"].path), "--baseline", b]) == 1
    out = capsys.readouterr().out
    assert "FAIL median overhead vs mock ratio" in out and "abc123def456" in out
    # a looser threshold (the parameters reach the judgement)
    assert cli(["gate", "check", str(studies["slow"].path), "--baseline", b,
                   "--min-threshold", "0.5"]) == 0
    capsys.readouterr()
    assert cli(["gate", "check", str(studies["base"].path), "--baseline",
                   str(tmp_path / "missing.json")]) == 2
    assert "harness gate refresh" in capsys.readouterr().err
    fresh = tmp_path / "fresh.json"
    assert cli(["gate", "refresh", str(studies["slow"].path), "--baseline", str(fresh)]) == 0
    assert json.loads(fresh.read_text())["study_id"] == "slow"
    assert "wrote" in capsys.readouterr().out


def test_refresh_refuses_an_unfinished_study(tmp_path):
    s = make_study(tmp_path, "interrupted", params=_params(), status="interrupted")
    res = G.refresh(s.path, tmp_path / "gate.json")
    assert res.exit_code == 2 and "'interrupted', not completed" in res.text
