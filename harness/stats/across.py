"""Across runs: mean ± sd per system, Welch verdicts against a reference, and each system's label."""
from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from typing import Iterable

import numpy as np
import pandas as pd
from scipy import stats

from harness.model.metrics import METRICS, Better
from harness.model.roles import Roles
from harness.stats.definitions import (
    COMPARE_METRICS,
    OVERHEAD_EPSILON_MS,
    SUMMARY_METRICS,
    UNSTABLE_COV,
    VERDICT_ALPHA,
    VERDICT_MIN_EFFECT,
)
from harness.stats.loading import Study
from harness.stats.outcomes import Basis, Label, Outcome

FLOOR_OVERHEAD = "overhead_vs_direct"   # the run_summary columns measured against the floor


def describe(values: Iterable[float], near_zero: bool = False) -> dict[str, float]:
    """n, mean, sd (n−1), min, max, CoV, t-based 95% CI of a run set (NaNs dropped). For a
    ``near_zero`` quantity (an overhead) the CoV is left out (NaN, never unstable) unless its 95%
    CI excludes zero: sd / |mean| of a mean near zero measures the mean, not the spread. With an
    infinite value the mean is infinite and the sd, CoV and CI are NaN."""
    a = np.asarray([v for v in values if v is not None], dtype="float64")
    a = a[~np.isnan(a)]
    n = int(a.size)
    mean = float(a.mean()) if n else math.nan
    # an infinite value (a time to success never reached) has a mean but no spread
    sd = float(a.std(ddof=1)) if n >= 2 and np.isfinite(a).all() else math.nan
    cov = (sd / abs(mean)) if n >= 2 and mean != 0 else math.nan
    half = float(stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)) if n >= 2 else math.nan
    if near_zero and not (abs(mean) > half):
        cov = math.nan
    return {"n": n, "mean": mean, "sd": sd, "min": float(a.min()) if n else math.nan,
            "max": float(a.max()) if n else math.nan, "cov": cov,
            "unstable": bool(not math.isnan(cov) and cov >= UNSTABLE_COV),
            "ci95_low": mean - half, "ci95_high": mean + half, "ci95_half": half}


SUMMARY_COLUMNS = ["system", "metric", "n", "mean", "sd", "min", "max", "cov", "unstable",
                   "ci95_low", "ci95_high", "ci95_half", "n_not_completed"]


def system_summary(run_summary_df: pd.DataFrame,
                   metrics: Iterable[str] = SUMMARY_METRICS,
                   floor: str | None = None) -> pd.DataFrame:
    """Long table, one row per (system, metric), over completed runs only; failed runs are counted
    in ``n_not_completed`` and never averaged. The floor's overhead vs itself is zero by
    construction: its CoV is left out (NaN) and it is never flagged unstable."""
    rows = []
    df = run_summary_df
    for system in pd.unique(df["system"]) if len(df) else ():
        sub = df[df["system"] == system]
        done = sub[sub["status"] == "completed"]
        for m in metrics:
            if m not in df.columns:
                continue
            d = describe(done[m].astype("float64"), near_zero=m in METRICS and METRICS[m].near_zero)
            if system == floor and m.startswith(FLOOR_OVERHEAD):
                d.update(cov=math.nan, unstable=False)
            rows.append({"system": system, "metric": m, **d,
                         "n_not_completed": int(len(sub) - len(done))})
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def ratio_with_sd(mean_a: float, sd_a: float, mean_b: float, sd_b: float) -> tuple[float, float]:
    """a/b and its sd by first-order error propagation (independent a and b)."""
    if mean_b == 0 or math.isnan(mean_b) or math.isnan(mean_a):
        return math.nan, math.nan
    r = mean_a / mean_b
    if mean_a == 0:
        return r, abs(sd_a / mean_b) if not math.isnan(sd_a) else math.nan
    rel = (sd_a / mean_a) ** 2 + (sd_b / mean_b) ** 2
    return r, abs(r) * math.sqrt(rel) if not math.isnan(rel) else math.nan


@dataclass(frozen=True)
class Verdict:
    """Run set a against reference run set b on one metric (see DEFINITIONS["verdict"])."""
    n: int
    n_ref: int
    mean: float
    sd: float
    mean_ref: float
    sd_ref: float
    ratio: float
    ratio_sd: float
    diff: float           # mean − mean_ref
    diff_low: float       # Welch 95% CI of the difference
    diff_high: float
    t: float
    p_value: float
    outcome: Outcome
    basis: Basis

    @property
    def effect(self) -> float:
        """How far the ratio is off 1."""
        return abs(self.ratio - 1)


def min_difference(mean_ref: float, metric: str) -> float:
    """The smallest difference a DIFFERENCE verdict counts: the 10 % rule applied to the
    reference's magnitude, floored (for an overhead) at the latency measurement's resolution,
    in the metric's own unit (a wire figure is in µs)."""
    floor = OVERHEAD_EPSILON_MS if metric in METRICS and METRICS[metric].near_zero else 0.0
    if metric.endswith("_us"):
        floor *= 1000.0
    return VERDICT_MIN_EFFECT * max(abs(mean_ref), floor)


def _welch_ci(aa: np.ndarray, bb: np.ndarray) -> tuple[float, float]:
    """The Welch–Satterthwaite 95% CI of mean(a) − mean(b)."""
    if aa.size < 2 or bb.size < 2:
        return math.nan, math.nan
    va, vb = aa.var(ddof=1) / aa.size, bb.var(ddof=1) / bb.size
    d = float(aa.mean() - bb.mean())
    if va + vb == 0:
        return d, d
    df = (va + vb) ** 2 / (va ** 2 / (aa.size - 1) + vb ** 2 / (bb.size - 1))
    half = float(stats.t.ppf(0.975, df) * math.sqrt(va + vb))
    return d - half, d + half


def verdict(a: Iterable[float], b: Iterable[float], metric: str) -> Verdict:
    """Compare run set ``a`` with reference run set ``b`` on one metric (see DEFINITIONS)."""
    better = METRICS[metric].better if metric in METRICS else Better.LOWER
    a, b = list(a), list(b)
    da, db = describe(a), describe(b)
    ratio, ratio_sd = ratio_with_sd(da["mean"], da["sd"], db["mean"], db["sd"])
    aa = np.asarray(a, dtype="float64")
    bb = np.asarray(b, dtype="float64")
    aa, bb = aa[~np.isnan(aa)], bb[~np.isnan(bb)]
    t_stat = p = math.nan
    if aa.size >= 2 and bb.size >= 2:
        if np.ptp(aa) == 0 and np.ptp(bb) == 0:
            # every run of each set identical: the difference is certain (or nil)
            p = 0.0 if aa[0] != bb[0] else 1.0
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                res = stats.ttest_ind(aa, bb, equal_var=False)
            t_stat, p = float(res.statistic), float(res.pvalue)
    low, high = _welch_ci(aa, bb)
    numbers = dict(n=da["n"], n_ref=db["n"], mean=da["mean"], sd=da["sd"], mean_ref=db["mean"],
                   sd_ref=db["sd"], ratio=ratio, ratio_sd=ratio_sd, diff=da["mean"] - db["mean"],
                   diff_low=low, diff_high=high, t=t_stat, p_value=p)
    if da["n"] < 2 or db["n"] < 2:
        return Verdict(**numbers, outcome=Outcome.NO_CLEAR_DIFFERENCE, basis=Basis.TOO_FEW_RUNS)
    significant = not math.isnan(p) and p < VERDICT_ALPHA

    def outcome_if(large: bool) -> Outcome:
        if not (significant and large):
            return Outcome.NO_CLEAR_DIFFERENCE
        higher = da["mean"] > db["mean"]
        return Outcome.BETTER if higher == (better is Better.HIGHER) else Outcome.WORSE

    near_zero = metric in METRICS and METRICS[metric].near_zero
    # a ratio to a reference ≤ 0, or to one whose CI reaches zero, is no effect size: compare
    # the difference instead, so a significant gap is never hidden behind an undefined ratio
    if (math.isnan(ratio) or db["mean"] <= 0 or da["mean"] < 0
            or (near_zero and not abs(db["mean"]) > db["ci95_half"])):
        large = abs(numbers["diff"]) >= min_difference(db["mean"], metric)
        return Verdict(**numbers, outcome=outcome_if(large), basis=Basis.DIFFERENCE)
    return Verdict(**numbers, outcome=outcome_if(abs(ratio - 1) >= VERDICT_MIN_EFFECT),
                   basis=Basis.TESTED)


# a verdict row's columns that judge (side_by_side leaves them out)
VERDICT_ONLY = ("ratio", "ratio_sd", "diff", "diff_low", "diff_high", "t", "p_value", "outcome",
                "basis")


def side_by_side(a: Iterable[float], b: Iterable[float]) -> dict[str, float]:
    """Run set ``a`` beside reference run set ``b`` without a verdict (their machines differ):
    the figures a verdict row carries for both sides (n, mean, sd), and nothing judged."""
    da, db = describe(a), describe(b)
    return {"n": da["n"], "mean": da["mean"], "sd": da["sd"],
            "n_ref": db["n"], "mean_ref": db["mean"], "sd_ref": db["sd"]}


# The overhead a headline verdict judges, least noisy first: the time inside the gateway on the
# wire (packet capture, µs), then latency minus the mock's own time for the same request, then
# the client-observed latency minus the mock's set latency (which carries the client's and the
# mock's jitter too).
OVERHEAD_FIGURES = ("wire_in_gateway_p50_us", "net_overhead_p50_ms", "overhead_vs_mock_p50_ms")
# figures only some runs measure (capture off, multi-host, …): judged only where both sides have them
OPTIONAL_FIGURES = OVERHEAD_FIGURES[:-1]


def measured(run_summary_df: pd.DataFrame, system: str, name: str) -> bool:
    """Whether a figure was measured in enough of a system's completed runs to be tested as
    well as its runs allow: in at least two (or in its only one)."""
    if name not in run_summary_df.columns:
        return False
    done = run_summary_df[(run_summary_df["system"] == system)
                          & (run_summary_df["status"] == "completed")]
    have = int(done[name].astype("float64").notna().sum())
    return have >= 1 and have >= min(2, len(done))


def overhead_figure(run_summary_df: pd.DataFrame, system: str, reference: str) -> str:
    """The first of OVERHEAD_FIGURES measured for both ``system`` and ``reference``; the
    client-observed figure when neither of the others was."""
    for name in OPTIONAL_FIGURES:
        if (measured(run_summary_df, system, name)
                and measured(run_summary_df, reference, name)):
            return name
    return OVERHEAD_FIGURES[-1]


def overhead_figures(run_summary_df: pd.DataFrame, reference: str) -> dict[str, str]:
    """Per system other than the reference, the overhead figure its verdict uses."""
    systems = pd.unique(run_summary_df["system"]) if len(run_summary_df) else ()
    return {s: overhead_figure(run_summary_df, s, reference) for s in systems if s != reference}


COMPARE_COLUMNS = ["system", "reference", "metric", "n", "n_ref", "mean", "sd", "mean_ref",
                   "sd_ref", "ratio", "ratio_sd", "diff", "diff_low", "diff_high", "t", "p_value", "outcome", "basis"]


def compare(run_summary_df: pd.DataFrame, reference: str,
            metrics: Iterable[str] = COMPARE_METRICS, floor: str | None = None) -> pd.DataFrame:
    """Every other system against ``reference``, per metric, over completed runs. The floor's
    overhead vs itself is not compared (it is zero by construction)."""
    df = run_summary_df
    if reference not in set(df["system"]):
        raise KeyError(f"reference system {reference!r} has no runs in this study "
                       f"(systems: {sorted(set(df['system']))})")
    done = df[df["status"] == "completed"]
    ref = done[done["system"] == reference]
    rows = []
    for system in pd.unique(df["system"]):
        if system == reference:
            continue
        sub = done[done["system"] == system]
        for m in metrics:
            if m not in df.columns or (m in OPTIONAL_FIGURES and not (
                    measured(df, system, m) and measured(df, reference, m))):
                continue
            v = asdict(verdict(sub[m].astype("float64").tolist(),
                               ref[m].astype("float64").tolist(), m))
            if m.startswith(FLOOR_OVERHEAD) and floor is not None and floor in (system, reference):
                v.update(outcome=Outcome.NO_CLEAR_DIFFERENCE, basis=Basis.NOT_COMPARED,
                         ratio=math.nan, ratio_sd=math.nan)
            rows.append({"system": system, "reference": reference, "metric": m, **v})
    return pd.DataFrame(rows, columns=COMPARE_COLUMNS)


def system_labels(run_summary_df: pd.DataFrame) -> pd.DataFrame:
    """Per system: capacity only when every completed run is capacity; the reasons with run ids."""
    rows = []
    for system in pd.unique(run_summary_df["system"]):
        sub = run_summary_df[run_summary_df["system"] == system]
        done = sub[sub["status"] == "completed"]
        reasons = []
        for _, r in sub.iterrows():
            if r["label_reasons"]:
                reasons.extend(f"{r['run_id']}: {x}" for x in str(r["label_reasons"]).split("; "))
        if not len(done):
            label = Label.FAILED
        elif all(x is Label.CAPACITY for x in done["label"]):
            label = Label.CAPACITY
        else:
            label = Label.BEHAVIOUR
        rows.append({"system": system, "label": label, "runs": int(len(sub)),
                     "completed": int(len(done)), "reasons": reasons})
    return pd.DataFrame(rows, columns=["system", "label", "runs", "completed", "reasons"])


def roles(study: Study, **overrides) -> Roles:
    """The study's roles (harness/model/roles.py), its reference resolved among the systems that
    ran; the given overrides win."""
    ran = {r.system for r in study.runs}
    return Roles.of(study.manifest, ran=tuple(s for s in study.systems if s in ran), **overrides)
