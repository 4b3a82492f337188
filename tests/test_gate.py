"""harness.verdicts.gate: the head build against the base build of one study, paired by round; the
A/A pair decides whether the verdict counts; the history records per CPU model decide nothing.
Synthetic studies (tests/synthetic.py, through load_study and run_summary) and small
run_summary-shaped tables."""
from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from synthetic import default_params, make_study

from harness.commands import main as cli
from harness.verdicts import gate as G
from harness.verdicts import history as H
from harness.verdicts import rules as R

BASE_COMMIT = "abc123def4567890abc123def4567890abc12345"
RECORDED_V1 = Path(__file__).parent / "data" / "gate-record-v1.json"


def _params(**head_changes):
    """nginx twice (the A/A pair) and two identical builds of sluice; the head optionally changed."""
    p = default_params()
    head = p["sluice"]
    if head_changes:
        head = [replace(r, **{k: f(r) for k, f in head_changes.items()}) for r in head]
    return {"nginx": p["nginx"], "nginx~aa": p["nginx"], "sluice~base": p["sluice"], "sluice": head}


def _gate_study(root, name, cpu_model="Synthetic CPU @ 2.0GHz", **head_changes):
    s = make_study(root, name, params=_params(**head_changes))
    path = s.path / "manifest.json"
    m = json.loads(path.read_text())
    m["config"].update(profile="gate", gate_base_system="sluice~base", aa_pair=["nginx", "nginx~aa"])
    m["systems"]["sluice~base"]["source_commit"] = BASE_COMMIT
    m["machine"]["cpu_model"] = cpu_model
    path.write_text(json.dumps(m, indent=2))
    return s.path


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate")
    return {
        "same": _gate_study(root, "same"),
        # the head build spends 20 % more CPU per request
        "cpu": _gate_study(root, "cpu", cpu_cores=lambda r: r.cpu_cores * 1.2),
        # the head build better on every figure
        "better": _gate_study(root, "better", cpu_cores=lambda r: r.cpu_cores * 0.5,
                              hold_rate=lambda r: int(r.hold_rate * 1.3),
                              rss_peak=lambda r: r.rss_peak // 2),
        "root": root,
    }


def test_unchanged_head_passes_and_names_machine_and_builds(studies, tmp_path):
    res = G.judge(studies["same"], tmp_path)
    assert res.exit_code == G.EXIT_OK and res.decided, res.text
    assert res.lines[0] == ("gate: study same on Synthetic CPU @ 2.0GHz, 2 cores, kernel "
                            "Linux 6.1.0-synthetic")
    assert "base sluice~base (abc123def456" in res.lines[1]
    assert "A/A check (nginx and nginx~aa, the same system twice): pass" in res.text
    assert "gate: ok" in res.text
    assert "history: no record in" in res.text


def test_a_20_percent_cpu_burn_fails_naming_the_figure(studies, tmp_path):
    res = G.judge(studies["cpu"], tmp_path)
    assert res.exit_code == G.EXIT_FAIL, res.text
    failed = [line for line in res.lines if line.startswith("FAIL")]
    assert len(failed) == 1 and failed[0].startswith(
        "FAIL CPU time per request (sluice/sluice~base): 1.200")
    assert "+20%, limit 5%" in failed[0]
    assert any(line.startswith("gate: FAIL — 1 of 3 judged figures regressed") for line in res.lines)


def test_a_better_head_never_fails(studies, tmp_path):
    res = G.judge(studies["better"], tmp_path)
    assert res.exit_code == G.EXIT_OK and "gate: ok" in res.text, res.text


def test_stored_records_decide_nothing(studies, tmp_path):
    """A record from another CPU model, with figures far from this study's, changes no verdict:
    it is history only, and says so."""
    history_dir = tmp_path / "history"
    history_dir.mkdir()
    shutil.copy(RECORDED_V1, history_dir / "gate-intel-xeon.json")
    record = json.loads(RECORDED_V1.read_text())
    record["machine"]["cpu_model"] = "Intel Xeon"
    record["figures"]["cpu_ms_per_request_ratio"]["mean"] = 0.01
    (history_dir / "gate-intel-xeon.json").write_text(json.dumps(record))
    for name, code in (("same", G.EXIT_OK), ("cpu", G.EXIT_FAIL)):
        with_record = G.judge(studies[name], history_dir)
        without = G.judge(studies[name], tmp_path / "empty")
        assert with_record.exit_code == without.exit_code == code
        assert [g.outcome for g in with_record.guarded] == [g.outcome for g in without.guarded]
    assert "a record from another CPU model (Intel Xeon, 2 cores, kernel unknown): shown as " \
           "history only, never a yardstick here" in with_record.text


def _rs(rows):
    """run_summary-shaped: (system, round, cpu_ms_per_request) rows, all completed."""
    return pd.DataFrame([{"run_id": f"{s}-{r}", "system": s, "round": r, "status": "completed",
                          "reason": "", "cpu_ms_per_request": v} for s, r, v in rows])


def test_paired_ratio_per_round_and_its_spread():
    rs = _rs([("head", 1, 0.20), ("base", 1, 0.10), ("head", 2, 0.33), ("base", 2, 0.30),
              ("head", 3, 0.11), ("base", 4, 0.10)])
    r = R.paired_ratio(rs, "head", "base", "cpu_ms_per_request")
    assert r.rounds == (1, 2) and r.ratios == pytest.approx((2.0, 1.1))
    assert r.mean == pytest.approx(1.55) and r.sd == pytest.approx(math.sqrt(2) * 0.45)
    j = R.judge(R.Rule("cpu_ms_per_request", 0.05), r, rs)
    assert j.worse and j.change == pytest.approx(0.55)


def test_judge_fails_only_in_the_bad_direction():
    rule_lower = R.Rule("cpu_ms_per_request", 0.05)
    rule_higher = R.Rule("throughput_rps", 0.05)
    def ratio(mean):
        return R.PairedRatio("x", "head", "base", (1,), (mean,), mean, math.nan)
    rs = _rs([])
    assert R.judge(rule_lower, ratio(1.06), rs).worse
    assert not R.judge(rule_lower, ratio(1.04), rs).worse
    assert not R.judge(rule_lower, ratio(0.5), rs).worse and R.judge(rule_lower, ratio(0.5), rs).outside
    assert R.judge(rule_higher, ratio(0.94), rs).worse
    assert not R.judge(rule_higher, ratio(1.5), rs).worse


def test_bad_input_is_named(studies, tmp_path):
    plain = make_study(tmp_path, "plain", params={"nginx": default_params()["nginx"],
                                                  "sluice": default_params()["sluice"]})
    res = G.judge(plain.path, tmp_path)
    assert res.exit_code == 2 and "compares no two builds" in res.text
    res = G.judge(tmp_path / "nowhere", tmp_path)
    assert res.exit_code == 2 and "no study manifest" in res.text
    one = make_study(tmp_path, "one", params={k: v[:1] for k, v in _params().items()})
    m = json.loads((one.path / "manifest.json").read_text())
    m["config"]["gate_base_system"] = "sluice~base"
    (one.path / "manifest.json").write_text(json.dumps(m))
    res = G.judge(one.path, tmp_path)
    assert res.exit_code == 2 and "fewer than 2 rounds" in res.text


def test_history_reads_version_1_and_refuses_unknown_versions(tmp_path):
    record = H.read_record(RECORDED_V1)
    assert record["schema_version"] == 2 and record["migrated_from"] == 1
    assert record["commit"] == "bea31fdc407d3461727b6d896ab762dae0d3ff3c"
    assert record["head_vs_base"] == {}
    assert record["head_vs_reference"]["cpu_ms_per_request"]["mean"] == pytest.approx(1.7810760767578462)
    bad = tmp_path / "gate-x.json"
    bad.write_text(json.dumps({"schema_version": 99}))
    with pytest.raises(H.HistoryError, match=r"gate record schema_version 99 is not one this harness reads \(known: 1, 2\)"):
        H.read_record(bad)


def test_refresh_writes_this_cpu_models_record_and_run_takes_its_base(studies, tmp_path):
    res = G.refresh(studies["same"], tmp_path, now=1_770_000_000.0)
    assert res.exit_code == 0, res.text
    path = tmp_path / "gate-synthetic-cpu-2-0ghz.json"
    written = json.loads(path.read_text())
    assert written["schema_version"] == 2 and written["base_commit"] == BASE_COMMIT
    assert written["machine"]["cpu_model"] == "Synthetic CPU @ 2.0GHz"
    assert written["commit"] == "0123456789abcdef0123456789abcdef01234567-dirty"
    assert written["head_vs_base"]["cpu_ms_per_request"]["mean"] == pytest.approx(1.0)
    assert "cpu_ms_per_request" in written["head_vs_reference"]
    assert "uncommitted changes" in res.text
    commit, source = G.base_ref({"cpu_model": "Synthetic CPU @ 2.0GHz", "cpu_count": 2}, "gate",
                                tmp_path)
    assert commit == written["commit"] and "this CPU model's record" in source
    # the counts do not depend on the machine: the newest accepted commit is every model's base
    older = {**written, "commit": "f" * 40, "created_t_unix_s": 1_760_000_000.0,
             "machine": {**written["machine"], "cpu_model": "Other"}}
    (tmp_path / "gate-other.json").write_text(json.dumps(older))
    commit, source = G.base_ref({"cpu_model": "Other", "cpu_count": 2}, "gate", tmp_path)
    assert commit == written["commit"] and "the record of Synthetic CPU @ 2.0GHz" in source
    with pytest.raises(G.GateInputError, match="give --base REF"):
        G.base_ref({}, "gate", tmp_path / "empty")
    assert ("this CPU model's record, commit 0123456789ab"
            in G.judge(studies["same"], tmp_path).text)


def test_cli(studies, tmp_path, capsys):
    assert cli(["gate", "judge", str(studies["same"]), "--history-dir", str(tmp_path)]) == 0
    assert "gate: ok" in capsys.readouterr().out
    assert cli(["gate", "judge", str(studies["cpu"]), "--history-dir", str(tmp_path)]) == 1
    assert "FAIL CPU time per request" in capsys.readouterr().out
    assert cli(["gate", "judge", str(tmp_path / "nowhere")]) == 2
    assert "gate: cannot judge" in capsys.readouterr().err
    assert cli(["gate", "run", "--head-env", "oops", "--history-dir", str(tmp_path)]) == 2
    assert "--head-env 'oops': expected NAME=VALUE" in capsys.readouterr().err
    assert cli(["gate", "run", "--history-dir", str(tmp_path / "empty")]) == 2
    assert "give --base REF" in capsys.readouterr().err


def _judged(metric, mean):
    rule = next(r for r in R.GATED if r.metric == metric)
    ratio = R.PairedRatio(metric, "x", "y", (1, 2, 3), (mean,) * 3, mean, 0.0)
    return R.judge(rule, ratio, _rs([]))


def test_the_a_a_pair_guards_each_figure_with_its_own_noise():
    quiet, noisy = _judged("cpu_ms_per_request", 1.02), _judged("cpu_ms_per_request", 1.08)
    # the copies agree: the 5 % limit decides
    assert R.guard(_judged("cpu_ms_per_request", 1.04), quiet).outcome == R.OK
    assert R.guard(_judged("cpu_ms_per_request", 1.06), quiet).outcome == R.FAIL
    # the copies moved 8 %: a 6 % change could be chance (undecided), a 20 % one cannot (fail)
    g = R.guard(_judged("cpu_ms_per_request", 1.06), noisy)
    assert g.outcome == R.UNDECIDED and g.allowance == pytest.approx(0.13)
    assert R.guard(_judged("cpu_ms_per_request", 1.20), noisy).outcome == R.FAIL
    assert R.guard(_judged("cpu_ms_per_request", 0.70), noisy).outcome == R.UNDECIDED
    assert R.guard(_judged("throughput_rps", 1.30), _judged("throughput_rps", 1.01)).outcome == R.OK
    assert "limit 5% + A/A noise 8% = 13%" in R.guarded_line(g)
    assert R.guard(_judged("cpu_ms_per_request", 1.06), None).outcome == R.FAIL


def test_a_noisy_a_a_pair_makes_small_changes_inconclusive_and_large_ones_fail(tmp_path):
    # nginx~aa uses 10 % more CPU than nginx: the pair's noise on that figure is 10 %
    params_noisy = _params()
    params_noisy["nginx~aa"] = [replace(r, cpu_cores=r.cpu_cores * 1.1) for r in params_noisy["nginx"]]
    small = make_study(tmp_path, "small", params={**params_noisy, "sluice": [
        replace(r, cpu_cores=r.cpu_cores * 1.07) for r in params_noisy["sluice"]]})
    large = make_study(tmp_path, "large", params={**params_noisy, "sluice": [
        replace(r, cpu_cores=r.cpu_cores * 1.5) for r in params_noisy["sluice"]]})
    for s in (small, large):
        m = json.loads((s.path / "manifest.json").read_text())
        m["config"].update(profile="gate", gate_base_system="sluice~base", aa_pair=["nginx", "nginx~aa"])
        (s.path / "manifest.json").write_text(json.dumps(m))
    res = G.judge(small.path, tmp_path)
    assert res.exit_code == G.EXIT_OK and not res.decided, res.text
    assert "gate: INCONCLUSIVE — undecided: CPU time per request: the A/A pair moved 10%, more than its limit" in res.text
    res = G.judge(large.path, tmp_path)
    assert res.exit_code == G.EXIT_FAIL, res.text


def test_a_mean_past_the_limit_fails_only_when_significant_over_the_rounds():
    rule = next(r for r in R.GATED if r.metric == "cpu_ms_per_request")
    def judged(*ratios):
        mean = sum(ratios) / len(ratios)
        sd = pd.Series(ratios).std()
        return R.judge(rule, R.PairedRatio(rule.metric, "head", "base", tuple(range(1, len(ratios) + 1)),
                                           ratios, mean, sd), _rs([]))
    scattered = R.guard(judged(0.93, 1.06, 1.30), None)   # mean +9.7 %, one round carries it
    assert scattered.outcome == R.UNDECIDED and scattered.p_value > R.ALPHA
    assert "not significant at 0.05" in R.guarded_line(scattered)
    steady = R.guard(judged(1.19, 1.21, 1.20), None)      # +20 % in every round
    assert steady.outcome == R.FAIL and steady.p_value < 0.01
    assert "significant at 0.05" in R.guarded_line(steady)
    # the test is against the allowance, not against 1: +6 % every round is past 5 % by little
    assert R.significance(judged(1.06, 1.061, 1.059), 0.05) < R.ALPHA
    assert R.significance(judged(1.06, 1.03, 1.09), 0.05) > R.ALPHA
    # throughput: worse is lower
    thr = next(r for r in R.GATED if r.metric == "throughput_rps")
    low = R.judge(thr, R.PairedRatio(thr.metric, "h", "b", (1, 2, 3), (0.8, 0.81, 0.79), 0.8, 0.01), _rs([]))
    assert R.guard(low, None).outcome == R.FAIL


def _timed(metric, *ratios):
    rule = next(r for r in G.TIMED_RULES if r.metric == metric)
    mean = sum(ratios) / len(ratios)
    ratio = R.PairedRatio(metric, "sluice", "sluice~base", tuple(range(1, len(ratios) + 1)),
                          ratios, mean, float(pd.Series(ratios).std()))
    return R.judge(rule, ratio, _rs([]))


def test_the_timed_check_fails_a_figure_only_when_every_round_is_past_its_limit():
    net = "net_overhead_p50_ms"
    # a sleep in the request path: every round past +25 %, however far apart the rounds are
    assert G.every_round(_timed(net, 1.84, 1.26)).outcome == R.FAIL
    assert G.every_round(_timed(net, 3.1, 2.2, 1.3)).outcome == R.FAIL
    # one noisy round carries a mean of +55 %: not every round, so not a regression
    assert G.every_round(_timed(net, 2.0, 1.1)).outcome == R.OK
    assert G.every_round(_timed(net, 1.26, 1.25)).outcome == R.OK       # at the limit is within it
    assert G.every_round(_timed(net, 0.5, 0.6)).outcome == R.OK         # better never fails
    failed = G.every_round(_timed("wire_in_gateway_p50_us", 4.0, 3.5))
    assert failed.outcome == R.FAIL
    line = G.every_round_line(failed)
    assert line.startswith("FAIL in-gateway time p50 (wire) (sluice/sluice~base): 3.750 ± 0.354 "
                           "over 2 rounds (4.000, 3.500), +275%, limit 25%"), line
    assert line.endswith("; 2 of 2 rounds worse than that (it fails when every round is)")
    assert "1 of 2 rounds worse" in G.every_round_line(G.every_round(_timed(net, 2.0, 1.1)))
    missing = R.judge(R.Rule(net, 0.25), R.PairedRatio(net, "sluice", "sluice~base", (), (),
                                                       math.nan, math.nan), _rs([]))
    assert G.every_round(missing).outcome == R.NOT_MEASURED
