"""The A/A check: the study measuring itself.

One study runs the same system twice under two names (e.g. ``nginx`` and ``nginx~aa``: a name
with a ``~suffix`` runs the same gateway folder under another name); the study's
``config.aa_pair`` names them. Two copies of one system must look alike; if they do not, the
differences the study reports between *different* systems, and the gate's verdict between two
builds, cannot be trusted on this machine right now.

    python -m harness aa STUDY_DIR [--a A] [--b B]

exits 0 when the check passes, 1 when the noise is too high, 2 on bad input.

It judges by the gate's own rules (harness/verdicts/rules.py): per round, the second copy's figure
over the first's; over the rounds, the mean of those ratios must be within the figure's limit of
1 (CPU-ms per request, throughput, peak RSS: 5 %; wire in-gateway p50, net overhead p50: 10 %),
in either direction. A figure neither copy measured is reported and not judged; tails are
reported with their spread, never judged. The outcome is "pass" or "noise too high on this
machine right now", with the reasons; it is never presented as a comparison of the two names.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.model.roles import Roles
from harness.verdicts import rules
from harness.verdicts.inputs import VerdictInputError, require_completed

PASS = "pass"
NOISE_TOO_HIGH = "noise too high on this machine right now"
MIN_ROUNDS = 2
# The figures it judges and their limits: the gate's (rules.GATED).
DEFAULT_METRICS: tuple[str, ...] = tuple(r.metric for r in rules.GATED)

EXIT_PASS, EXIT_NOISE, EXIT_BAD_INPUT = 0, 1, 2


class AAInputError(VerdictInputError):
    """The A/A check cannot be made from this input (exit code 2)."""


@dataclass(frozen=True)
class AAResult:
    a: str
    b: str
    outcome: str                        # PASS or NOISE_TOO_HIGH
    reasons: tuple[str, ...]            # why the noise is too high (empty on a pass)
    judged: tuple[rules.Judged, ...]    # b / a per figure
    tails: tuple[rules.PairedRatio, ...] = ()

    @property
    def passed(self) -> bool:
        return self.outcome == PASS

    @property
    def exit_code(self) -> int:
        return EXIT_PASS if self.passed else EXIT_NOISE

    def lines(self) -> list[str]:
        out = [f"A/A check ({self.a} and {self.b}, the same system twice): {self.outcome}"]
        if not self.passed:
            out.append("  the study's own noise is too high to compare here; reasons:")
            out += [f"  - {r}" for r in self.reasons]
        out.append("  per figure, paired by round (must be within its limit of 1, either way):")
        out += [f"  {rules.line(j, 'NOISY', j.outside)}" for j in self.judged]
        out += [f"  {rules.tail_line(t)}" for t in self.tails]
        return out

    @property
    def text(self) -> str:
        return "\n".join(self.lines())


def require_pair(rs: pd.DataFrame, a: str, b: str) -> None:
    """Raise AAInputError unless both copies ran, completed, in at least MIN_ROUNDS rounds."""
    if a == b:
        raise AAInputError(f"the two copies must have different names, got {a!r} twice")
    require_completed(rs, (("", a), ("", b)), AAInputError, "this study",
                      f"an A/A study runs one system under two names, e.g. --gateways {a},{a}~aa",
                      "rerun the study", MIN_ROUNDS)
    paired = rules.paired_rounds(rs, a, b)
    if len(paired) < MIN_ROUNDS:
        raise AAInputError(f"{a} and {b} completed runs together in {len(paired)} round(s); the "
                           f"A/A check pairs them by round and needs at least {MIN_ROUNDS}")


def judge(run_summary_df: pd.DataFrame, a: str, b: str,
          by: tuple[rules.Rule, ...] = rules.GATED) -> AAResult:
    """The A/A verdict over a run_summary table, judged ``by`` these rules (raises AAInputError
    on bad input)."""
    rs = run_summary_df
    require_pair(rs, a, b)
    judged = rules.judge_all(rs, b, a, by)
    if not any(not j.missing for j in judged):
        raise AAInputError(f"no figure of {a} and {b} could be paired: "
                           + "; ".join(f"{j.rule.label}: {j.missing}" for j in judged))
    reasons = tuple(f"{j.rule.label}: the two copies differ by {rules.pct(j.change, True)} "
                    f"(paired by round; more than {rules.pct(j.rule.max_change)})"
                    for j in judged if j.outside)
    return AAResult(a, b, NOISE_TOO_HIGH if reasons else PASS, reasons, judged,
                    rules.tails(rs, b, a))


def pair(manifest, a: str | None = None, b: str | None = None) -> tuple[str, str]:
    """The two copies: the study's ``config.aa_pair``, each overridden when given."""
    study_pair = Roles.of(manifest).aa_pair or (None, None)
    a, b = a or study_pair[0], b or study_pair[1]
    if not a or not b:
        raise AAInputError("this study names no A/A pair (config.aa_pair) and --a/--b were not "
                           "both given")
    return a, b
