"""The A/A check: the study measuring itself.

One study runs the same system twice under two names (e.g. ``nginx`` and ``nginx~aa``: a name
with a ``~suffix`` runs the same gateway folder under another name); the study's
``config.aa_pair`` names them. Two copies of one system must look
alike; if they do not, the differences the study reports between *different* systems cannot be
trusted on this machine right now.

    python -m harness aa STUDY_DIR [--a A] [--b B] [--metrics m1,m2,...]

exits 0 when the check passes, 1 when the noise is too high, 2 on bad input.

Per metric, over the completed runs of each copy, all of these must hold:

* the verdict of ``harness.stats.across.verdict`` (Welch's t-test + the 10% rule) is "no clear
  difference";
* the two means are within ``max_diff`` (5%) of each other: |mean_a − mean_b| / |mean_b|, the
  denominator floored at ``OVERHEAD_EPSILON_MS`` (0.05 ms) for overheads, which can be near 0;
* optionally (``max_cov``, off by default), each copy's coefficient of variation is below a
  limit: with a large spread the t-test cannot see a 10% difference, so its "no clear
  difference" means less; the CoVs are always printed, and the report flags CoV >= 10%.

The outcome is "pass" or "noise too high on this machine right now", with the reasons. It is
never presented as a comparison of the two names: they are the same system.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Iterable

import pandas as pd

from harness.checks.inputs import CheckInputError, floor_of, require_completed
from harness.model.metrics import metric
from harness.model.roles import Roles
from harness.stats.across import describe, verdict
from harness.stats.metrics import OVERHEAD_EPSILON_MS
from harness.stats.outcomes import Outcome
from report.format import verdict_reason

PASS = "pass"
NOISE_TOO_HIGH = "noise too high on this machine right now"
MAX_DIFF = 0.05
# The criteria are the verdict and the 5% rule. A spread limit per copy is optional
# (--max-cov): at ~1 ms overheads, run-to-run CoV is often above 10% while the two copies'
# means still agree within 5%, and that agreement is what the A/A check is for.
MAX_COV: float | None = None
DEFAULT_METRICS: tuple[str, ...] = ("throughput_rps", "overhead_vs_mock_p50_ms",
                                    "overhead_vs_mock_p95_ms", "cpu_ms_per_request",
                                    "rss_peak_bytes")
MIN_RUNS = 2

EXIT_PASS, EXIT_NOISE, EXIT_BAD_INPUT = 0, 1, 2


class AAInputError(CheckInputError):
    """The A/A check cannot be made from this input (exit code 2)."""


@dataclass(frozen=True)
class AAMetric:
    metric: str
    label: str
    n_a: int
    n_b: int
    mean_a: float
    mean_b: float
    sd_a: float
    sd_b: float
    cov_a: float
    cov_b: float
    rel_diff: float          # |mean_a − mean_b| / max(|mean_b|, floor)
    outcome: Outcome         # the verdict of one copy against the other
    verdict_reason: str
    p_value: float
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class AAResult:
    a: str
    b: str
    outcome: str             # PASS or NOISE_TOO_HIGH
    reasons: tuple[str, ...]  # why the noise is too high (empty on a pass)
    metrics: tuple[AAMetric, ...]
    max_diff: float = MAX_DIFF
    max_cov: float = MAX_COV

    @property
    def passed(self) -> bool:
        return self.outcome == PASS

    @property
    def exit_code(self) -> int:
        return EXIT_PASS if self.passed else EXIT_NOISE

    def lines(self) -> list[str]:
        head = (f"A/A check ({self.a} and {self.b}, the same system twice): {self.outcome}")
        out = [head]
        if not self.passed:
            out.append("  the study's own noise is too high to compare systems here; reasons:")
            out += [f"  - {r}" for r in self.reasons]
        cov_rule = f", each CoV below {self.max_cov:.0%}" if self.max_cov is not None else ""
        out.append("  per metric (must be: no clear difference, means within "
                   f"{self.max_diff:.0%}{cov_rule}):")
        for m in self.metrics:
            out.append(f"  {'ok  ' if m.ok else 'NOISY'} {m.label}: means differ by "
                       f"{_pct(m.rel_diff)}, {_words(m.outcome)} ({m.verdict_reason}), CoV "
                       f"{_pct(m.cov_a)} / {_pct(m.cov_b)}, n={m.n_a}/{m.n_b}")
        return out

    @property
    def text(self) -> str:
        return "\n".join(self.lines())


def _words(outcome: Outcome) -> str:
    # the verdict's own words (faster, more memory, ...) would read as a comparison of systems
    return outcome.value if outcome is Outcome.NO_CLEAR_DIFFERENCE else "a difference was found"


def _pct(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:.1%}"


def check_input(rs: pd.DataFrame, a: str, b: str) -> None:
    """Raise AAInputError unless both copies ran, completed, at least MIN_RUNS times each."""
    if a == b:
        raise AAInputError(f"the two copies must have different names, got {a!r} twice")
    require_completed(rs, (("", a), ("", b)), AAInputError, "this study",
                      f"an A/A study runs one system under two names, e.g. --gateways {a},{a}~aa",
                      "rerun the study", MIN_RUNS)


def aa_check(run_summary_df: pd.DataFrame, a: str, b: str,
             metrics: Iterable[str] = DEFAULT_METRICS, max_diff: float = MAX_DIFF,
             max_cov: float = MAX_COV, epsilon_ms: float = OVERHEAD_EPSILON_MS) -> AAResult:
    """The A/A check over a run_summary table (raises AAInputError on bad input)."""
    rs = run_summary_df
    check_input(rs, a, b)
    done = rs[rs["status"] == "completed"]
    va, vb = done[done["system"] == a], done[done["system"] == b]
    results: list[AAMetric] = []
    reasons: list[str] = []
    for name in metrics:
        if name not in rs.columns:
            raise AAInputError(f"unknown metric {name!r} (run_summary has no such column)")
        label = metric(name).label
        xa = va[name].astype("float64").tolist()
        xb = vb[name].astype("float64").tolist()
        da, db = describe(xa), describe(xb)
        if da["n"] < MIN_RUNS or db["n"] < MIN_RUNS:
            raise AAInputError(f"{label}: {da['n']} and {db['n']} runs have a value "
                               f"({a} and {b}); the A/A check needs at least {MIN_RUNS} each")
        v = verdict(xa, xb, name)
        denom = max(abs(db["mean"]), floor_of(name, epsilon_ms))
        rel = abs(da["mean"] - db["mean"]) / denom if denom > 0 else (
            0.0 if da["mean"] == db["mean"] else math.inf)
        reason = verdict_reason(dataclasses.asdict(v))
        problems = []
        if v.outcome is not Outcome.NO_CLEAR_DIFFERENCE:
            problems.append(f"{label}: the verdict found a difference between two copies of "
                            f"the same system ({reason})")
        if not rel <= max_diff:
            problems.append(f"{label}: the two copies' means differ by {_pct(rel)} "
                            f"(more than {max_diff:.0%})")
        for system, d in ((a, da), (b, db)) if max_cov is not None else ():
            cov = d["cov"]
            # a mean of 0 leaves the CoV undefined; judge the spread by the other checks then
            if not math.isnan(cov) and cov >= max_cov:
                problems.append(f"{label}: {system}'s runs spread too much (CoV {_pct(cov)}, "
                                  f"at least {max_cov:.0%}): a 10% difference could not be seen")
        m = AAMetric(name, label, da["n"], db["n"], da["mean"], db["mean"], da["sd"], db["sd"],
                     da["cov"], db["cov"], rel, v.outcome, reason, v.p_value, tuple(problems))
        reasons.extend(problems)
        results.append(m)
    outcome = PASS if not reasons else NOISE_TOO_HIGH
    return AAResult(a, b, outcome, tuple(reasons), tuple(results), max_diff, max_cov)


def pair(manifest: dict, a: str | None = None, b: str | None = None) -> tuple[str, str]:
    """The two copies: the study's ``config.aa_pair``, each overridden when given."""
    study_pair = Roles.of(manifest).aa_pair or (None, None)
    a, b = a or study_pair[0], b or study_pair[1]
    if not a or not b:
        raise AAInputError("this study names no A/A pair (config.aa_pair) and --a/--b were not "
                           "both given")
    return a, b

