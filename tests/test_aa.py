"""harness.verdicts.aa: one system under two names must agree within the gate's limits, paired by
round, or the study says its own noise is too high. Synthetic studies (tests/synthetic.py) through
load_study and run_summary, and small run_summary-shaped tables."""
from __future__ import annotations

import json
import math
from dataclasses import replace

import pandas as pd
import pytest
from synthetic import default_params, make_study

from harness import stats as A
from harness.commands import main as cli
from harness.verdicts import aa as AA
from harness.verdicts import rules as R

COPY = "nginx~aa"


def _aa_params(copy_change=None):
    nginx = default_params()["nginx"]
    copy = [replace(r) if copy_change is None else replace(r, **{k: f(r) for k, f in copy_change.items()})
            for r in nginx]
    return {"direct": default_params()["direct"], "nginx": nginx, COPY: copy}


def _summary(tmp_path, name, params):
    s = make_study(tmp_path, name, params=params)
    return s, A.run_summary(A.load_study(s.path))


@pytest.fixture(scope="module")
def identical(tmp_path_factory):
    return _summary(tmp_path_factory.mktemp("aa"), "identical", _aa_params())


def test_identical_copies_pass(identical):
    _, rs = identical
    res = AA.judge(rs, "nginx", COPY)
    assert res.outcome == "pass" and res.passed and res.exit_code == 0
    assert res.reasons == ()
    assert [j.rule.metric for j in res.judged] == list(AA.DEFAULT_METRICS)
    measured = [j for j in res.judged if not j.missing]
    # synthetic runs have no wire capture and no identity join: those two are not judged
    assert {j.rule.metric for j in measured} == {"cpu_ms_per_request", "throughput_rps",
                                                "rss_peak_bytes"}
    for j in measured:
        assert j.ratio.mean == pytest.approx(1.0) and j.ratio.n == 3
    assert "n/a  in-gateway time p50 (wire) (nginx~aa/nginx): not measured" in res.text
    assert res.text.startswith("A/A check (nginx and nginx~aa, the same system twice): pass")


def test_a_copy_using_8_percent_more_cpu_is_noise_too_high(tmp_path):
    _, rs = _summary(tmp_path, "shifted", _aa_params({"cpu_cores": lambda r: r.cpu_cores * 1.08}))
    res = AA.judge(rs, "nginx", COPY)
    assert not res.passed and res.exit_code == 1
    assert [j.rule.metric for j in res.judged if j.outside] == ["cpu_ms_per_request"]
    assert res.reasons == ("CPU time per request: the two copies differ by +8% (paired by round; "
                           "more than 5%)",)
    for word in ("faster", "slower", "better", "worse"):
        assert word not in res.text


def _rs(pairs, metric="throughput_rps", a="nginx", b=COPY):
    """One row per entry and round from (value_a, value_b) per round."""
    rows = []
    for rnd, (va, vb) in enumerate(pairs, 1):
        rows.append({"run_id": f"{a}-{rnd}", "system": a, "round": rnd, "status": "completed",
                     "reason": "", metric: va})
        rows.append({"run_id": f"{b}-{rnd}", "system": b, "round": rnd, "status": "completed",
                     "reason": "", metric: vb})
    return pd.DataFrame(rows)


def test_pairing_cancels_what_both_copies_met_in_a_round():
    # the machine's speed drifts 30 % between rounds; both copies meet the same drift
    rs = _rs([(100.0, 101.0), (130.0, 131.0), (70.0, 71.0)])
    res = AA.judge(rs, "nginx", COPY, (R.Rule("throughput_rps", 0.05),))
    assert res.passed
    j = res.judged[0]
    assert j.ratio.ratios == pytest.approx((1.01, 131 / 130, 71 / 70))


def test_either_direction_beyond_the_limit_is_noise():
    for factor in (1.06, 0.94):
        rs = _rs([(100.0, 100.0 * factor)] * 3)
        res = AA.judge(rs, "nginx", COPY, (R.Rule("throughput_rps", 0.05),))
        assert not res.passed, factor
    assert AA.judge(_rs([(100.0, 104.0)] * 3), "nginx", COPY,
                       (R.Rule("throughput_rps", 0.05),)).passed


def test_near_zero_overheads_use_the_floor():
    rs = _rs([(0.010, 0.013), (0.012, 0.011), (0.011, 0.012)], metric="net_overhead_p50_ms")
    res = AA.judge(rs, "nginx", COPY, (R.Rule("net_overhead_p50_ms", 0.10),))
    j = res.judged[0]
    assert j.ratio.floored == (1, 2, 3)
    assert j.ratio.mean == pytest.approx((0.013 + 0.011 + 0.012) / 3 / 0.05)
    assert "floored" in res.text


def test_bad_input_is_named():
    with pytest.raises(AA.AAInputError, match=r"no runs of 'nginx~aa'.*systems in it: nginx"):
        AA.judge(_rs([(1.0, 2.0)] * 2)[lambda d: d.system == "nginx"], "nginx", COPY)
    with pytest.raises(AA.AAInputError, match="at least 2"):
        AA.judge(_rs([(1.0, 1.0)]), "nginx", COPY)
    failed = _rs([(1.0, 1.0)] * 3)
    failed.loc[3, ["status", "reason"]] = ["failed", "system exited"]
    with pytest.raises(AA.AAInputError, match=r"nginx~aa-2 \(failed: system exited\)"):
        AA.judge(failed, "nginx", COPY)
    with pytest.raises(AA.AAInputError, match="different names"):
        AA.judge(_rs([(1.0, 2.0)] * 2), "nginx", "nginx")
    with pytest.raises(AA.AAInputError, match="no figure of nginx and nginx~aa could be paired"):
        AA.judge(_rs([(math.nan, math.nan)] * 2), "nginx", COPY)


def test_cli(identical, tmp_path, capsys):
    s, _ = identical
    assert cli(["aa", str(s.path), "--a", "nginx", "--b", COPY]) == 0
    assert "A/A check (nginx and nginx~aa, the same system twice): pass" in capsys.readouterr().out
    assert cli(["aa", str(s.path), "--a", "nginx", "--b", "sluice"]) == 2
    assert "no runs of 'sluice'" in capsys.readouterr().err
    assert cli(["aa", str(tmp_path / "nowhere")]) == 2
    assert "no study manifest" in capsys.readouterr().err


def test_cli_reads_the_pair_from_the_study(identical, capsys):
    s, _ = identical
    assert cli(["aa", str(s.path)]) == 2
    assert "names no A/A pair" in capsys.readouterr().err
    m = json.loads((s.path / "manifest.json").read_text())
    m["config"]["aa_pair"] = ["nginx", COPY]
    (s.path / "manifest.json").write_text(json.dumps(m))
    assert cli(["aa", str(s.path)]) == 0
    assert "A/A check (nginx and nginx~aa, the same system twice): pass" in capsys.readouterr().out
