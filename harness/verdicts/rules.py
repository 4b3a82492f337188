"""The rules the A/A check and the gate both judge by: paired ratios of a few figures, one limit each.

Both checks compare two entries of one study that ran interleaved, round by round: the A/A check
two copies of one system (``nginx~aa`` / ``nginx``), the gate two builds of one system (``sluice``
/ ``sluice~base``). Per figure, the ratio is taken inside each round (the two runs were minutes
apart and shared the machine's state: whoever else was using it, thermal state, page cache),
then averaged over rounds. No stored number from another study or another CPU model enters.

Which figures, and why these limits (measured on this 2-core machine; ``GATED``):

* CPU-ms per request, throughput and peak RSS: within 5 %. They barely move with the machine's
  noise when both entries meet it in the same round.
* wire-timed in-gateway p50 and net overhead p50: within 10 %. Sub-millisecond times on shared
  cores jitter more than CPU time does.

Tails (p95/p99) are reported with their spread and never judged: three rounds cannot estimate
a p99's ratio well enough to block a change on it.

A figure neither entry measured (no wire capture, no identity join) is reported as not
measured, with the reason, and not judged.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from harness.model.metrics import metric
from harness.stats.across import describe
from harness.stats.definitions import OVERHEAD_EPSILON_MS
from harness.verdicts.inputs import floor_of


@dataclass(frozen=True)
class Rule:
    metric: str              # a run_summary column (in the metric registry)
    max_change: float        # |paired ratio − 1| allowed, as a fraction

    @property
    def label(self) -> str:
        return metric(self.metric).label

    @property
    def lower_is_better(self) -> bool:
        return not metric(self.metric).higher_is_better


GATED: tuple[Rule, ...] = (
    Rule("cpu_ms_per_request", 0.05),
    Rule("throughput_rps", 0.05),
    Rule("rss_peak_bytes", 0.05),
    Rule("wire_in_gateway_p50_us", 0.10),
    Rule("net_overhead_p50_ms", 0.10),
)
TAILS: tuple[str, ...] = ("wire_in_gateway_p99_us", "net_overhead_p99_ms", "overhead_vs_mock_p95_ms")


@dataclass(frozen=True)
class PairedRatio:
    """``numerator`` / ``denominator`` of one figure, per round in which both completed a run."""
    metric: str
    numerator: str
    denominator: str
    rounds: tuple[int, ...]      # rounds with a defined ratio
    ratios: tuple[float, ...]    # one per round, in order
    mean: float                  # NaN when no round has a value
    sd: float                    # NaN with fewer than two rounds
    floored: tuple[int, ...] = ()  # rounds whose denominator was floored (a near-zero overhead)

    @property
    def n(self) -> int:
        return len(self.ratios)

    @property
    def measured(self) -> bool:
        return self.n > 0 and not math.isnan(self.mean)

    def rounds_text(self) -> str:
        return ", ".join(f"{r:.3f}" for r in self.ratios)


def paired_rounds(rs: pd.DataFrame, a: str, b: str) -> list[int]:
    """Rounds in which both entries completed a run, sorted."""
    if "round" not in rs.columns:
        return []
    done = rs[(rs["status"] == "completed") & rs["round"].notna()]
    in_a = set(done.loc[done["system"] == a, "round"])
    in_b = set(done.loc[done["system"] == b, "round"])
    return sorted(int(r) for r in in_a & in_b)


def paired_ratio(rs: pd.DataFrame, numerator: str, denominator: str, name: str,
                 epsilon_ms: float = OVERHEAD_EPSILON_MS) -> PairedRatio:
    """The figure's ratio per paired round; a near-zero denominator (an overhead) is floored at
    its metric's floor before dividing, and those rounds are named."""
    done = rs[rs["status"] == "completed"]
    rounds, ratios, floored = [], [], []
    if name in rs.columns:
        for rnd in paired_rounds(rs, numerator, denominator):
            here = done[done["round"] == rnd]
            x = here.loc[here["system"] == numerator, name].astype("float64").mean()
            y = here.loc[here["system"] == denominator, name].astype("float64").mean()
            if math.isnan(x) or math.isnan(y):
                continue
            floor = floor_of(name, epsilon_ms)
            if floor and y < floor:
                y = floor
                floored.append(rnd)
            if y <= 0:
                continue
            rounds.append(rnd)
            ratios.append(x / y)
    d = describe(ratios)
    return PairedRatio(name, numerator, denominator, tuple(rounds), tuple(ratios),
                       d["mean"] if ratios else math.nan, d["sd"], tuple(floored))


def missing_reason(rs: pd.DataFrame, systems: tuple[str, ...], name: str) -> str:
    """Why a figure has no paired value: the reasons the runs recorded, else a plain account."""
    if name not in rs.columns:
        return "not in this study's run summary"
    rows = rs[rs["system"].isin(systems) & (rs["status"] == "completed")]
    for column in ("wire_reason", "identity_reason") if name.startswith(("wire_", "net_")) else ():
        if column in rows.columns:
            reasons = sorted({str(v) for v in rows[column].dropna() if str(v)})
            if reasons:
                return "; ".join(reasons)[:200]
    if not len(rows) or np.isnan(rows[name].astype("float64")).all():
        return "no completed run has a value"
    return "no round has a value for both"


@dataclass(frozen=True)
class Judged:
    """One rule applied to one paired ratio."""
    rule: Rule
    ratio: PairedRatio
    change: float            # mean − 1
    worse: bool              # beyond the limit in the figure's bad direction
    outside: bool            # beyond the limit in either direction
    missing: str = ""        # why it was not judged ("" = judged)


def judge(rule: Rule, ratio: PairedRatio, rs: pd.DataFrame) -> Judged:
    if not ratio.measured:
        return Judged(rule, ratio, math.nan, False, False,
                      missing_reason(rs, (ratio.numerator, ratio.denominator), rule.metric))
    change = ratio.mean - 1.0
    worse = change > rule.max_change if rule.lower_is_better else change < -rule.max_change
    return Judged(rule, ratio, change, worse, abs(change) > rule.max_change)


def judge_all(rs: pd.DataFrame, numerator: str, denominator: str,
              rules: tuple[Rule, ...] = GATED,
              epsilon_ms: float = OVERHEAD_EPSILON_MS) -> tuple[Judged, ...]:
    return tuple(judge(rule, paired_ratio(rs, numerator, denominator, rule.metric, epsilon_ms), rs)
                 for rule in rules)


OK, FAIL, UNDECIDED, NOT_MEASURED = "ok", "FAIL", "undecided", "not measured"
ALPHA = 0.05                 # a regression must be this significant to fail the gate


@dataclass(frozen=True)
class Guarded:
    """A head/base figure judged beside the A/A pair's noise on the same figure.

    Two copies of one system differing by ``noise`` (|A/A mean ratio − 1|) in the same study say
    how far that figure moves by chance here right now. Within the figure's limit, the limit is
    the allowance; beyond it, the limit plus that noise (and "ok" cannot be said: a regression of
    the limit's size could hide in the noise). A figure fails when its mean is worse than the
    allowance *and* that is significant over the rounds (``significance``): the head build's
    own rounds scatter too (CPU per request by ~15 % a round here), and a mean past the limit by
    chance must not block a change. Worse but not significant: undecided."""
    judged: Judged
    noise: float             # NaN: no A/A figure to guard it (judged on the limit alone)
    allowance: float         # the worse-direction change beyond which it fails
    outcome: str             # OK, FAIL, UNDECIDED or NOT_MEASURED
    p_value: float = math.nan  # the worse-than-allowance test, when the mean was past it


def significance(j: Judged, allowance: float) -> float:
    """One-sided p-value that the figure is worse than 1 + allowance (lower is better) or
    1 − allowance (higher is better), from the rounds' ratios on a log scale (Student's t with
    n − 1 degrees of freedom: the rounds are the independent samples). NaN with fewer than two
    rounds; 0 when every round agrees exactly beyond the allowance."""
    ratios = np.log(np.asarray(j.ratio.ratios, dtype="float64"))
    if ratios.size < 2 or not np.all(np.isfinite(ratios)):
        return math.nan
    bound = math.log(1 + allowance) if j.rule.lower_is_better else math.log(max(1 - allowance, 1e-9))
    diff = (ratios.mean() - bound) * (1 if j.rule.lower_is_better else -1)
    se = ratios.std(ddof=1) / math.sqrt(ratios.size)
    if se == 0:
        return 0.0 if diff > 0 else 1.0
    return float(stats.t.sf(diff / se, ratios.size - 1))


def guard(j: Judged, aa: Judged | None) -> Guarded:
    if j.missing:
        return Guarded(j, math.nan, math.nan, NOT_MEASURED)
    limit = j.rule.max_change
    noise = abs(aa.change) if aa is not None and not aa.missing else math.nan
    noisy = not math.isnan(noise) and noise > limit
    allowance = limit + noise if noisy else limit
    worse_by = j.change if j.rule.lower_is_better else -j.change
    if worse_by > allowance:
        p = significance(j, allowance)
        if p <= ALPHA:
            return Guarded(j, noise, allowance, FAIL, p)
        return Guarded(j, noise, allowance, UNDECIDED, p)
    return Guarded(j, noise, allowance, UNDECIDED if noisy else OK)


def guarded_line(g: Guarded) -> str:
    """The figure's line: its outcome, the head/base ratio over the rounds, and what it was
    judged against (the limit, or the limit plus the A/A noise)."""
    j = g.judged
    if g.outcome == NOT_MEASURED:
        return _not_measured(j)
    against = (f"limit {pct(j.rule.max_change)} + A/A noise {pct(g.noise)} = {pct(g.allowance)}"
               if g.allowance > j.rule.max_change else f"limit {pct(j.rule.max_change)}")
    unguarded = "; no A/A figure guards it" if math.isnan(g.noise) else ""
    label = {OK: "ok", FAIL: "FAIL", UNDECIDED: "?"}[g.outcome]
    test = ("" if math.isnan(g.p_value) else
            f"; worse than that with p = {g.p_value:.2g} (one-sided t over the rounds, "
            f"{'significant' if g.p_value <= ALPHA else 'not significant'} at {ALPHA:g})")
    return f"{label:<4} {_measured(j)}, {against}{unguarded}{test}{_floored(j.ratio)}"


def tails(rs: pd.DataFrame, numerator: str, denominator: str,
          epsilon_ms: float = OVERHEAD_EPSILON_MS) -> tuple[PairedRatio, ...]:
    """The tails' paired ratios: reported with their spread, never judged."""
    return tuple(paired_ratio(rs, numerator, denominator, name, epsilon_ms) for name in TAILS)


def pct(x: float, signed: bool = False) -> str:
    if x is None or math.isnan(x):
        return "n/a"
    digits = 1 if abs(x) < 0.1 else 0
    return f"{x:{'+' if signed else ''}.{digits}%}".replace(".0%", "%")


def line(j: Judged, flag: str, flagged: bool) -> str:
    """One line per judged figure: ``flag`` (NOISY) when flagged, else ``ok``; the mean ratio
    with its spread and every round's, the change and the limit."""
    if j.missing:
        return _not_measured(j)
    return (f"{flag if flagged else 'ok':<4} {_measured(j)}, limit {pct(j.rule.max_change)}"
            f"{_floored(j.ratio)}")


def _name(j: Judged) -> str:
    return f"{j.rule.label} ({j.ratio.numerator}/{j.ratio.denominator})"


def _not_measured(j: Judged) -> str:
    return f"n/a  {_name(j)}: not measured ({j.missing}); not judged"


def _measured(j: Judged) -> str:
    r = j.ratio
    sd = "" if math.isnan(r.sd) else f" ± {r.sd:.3f}"
    return (f"{_name(j)}: {r.mean:.3f}{sd} over {r.n} rounds ({r.rounds_text()}), "
            f"{pct(j.change, True)}")


def _floored(r: PairedRatio) -> str:
    return (f"; {r.denominator} floored at its metric's floor in rounds "
            f"{', '.join(map(str, r.floored))}" if r.floored else "")


def tail_line(r: PairedRatio) -> str:
    if not r.measured:
        return f"tail {metric(r.metric).label} ({r.numerator}/{r.denominator}): not measured"
    sd = "" if math.isnan(r.sd) else f" ± {r.sd:.3f}"
    return (f"tail {metric(r.metric).label} ({r.numerator}/{r.denominator}): {r.mean:.3f}{sd} "
            f"({r.rounds_text()}); reported, never judged")
