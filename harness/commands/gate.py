"""The performance regression gate (what `make gate` and CI run).

    python -m harness gate                  # the same as `gate run` with no options
    python -m harness gate run [--baseline baselines/gate.json] [--set NAME=VALUE ...]
    python -m harness gate check   STUDY_DIR [--baseline baselines/gate.json]
    python -m harness gate refresh STUDY_DIR [--baseline baselines/gate.json]

`run` (the default) runs a `gate` study (the profile's systems interleaved: its reference, a
second copy of it, and the gated system), checks the study's own noise on its A/A pair and then
judges the gated system's figures, as ratios to the reference, against the baseline. When the machine is too noisy right now for two copies of
the same system to agree, the comparison does not decide: it is printed for information, the
gate says it is inconclusive and exits 0, since a comparison it cannot trust must not block a
change, nor pass one silently. Otherwise the verdict decides: 0 ok, 1 a figure regressed, 2 bad
input (e.g. no baseline). `check` judges an existing study; `refresh` writes the baseline from
one, deliberately (harness/checks/gate.py, baselines/README.md).
"""
from __future__ import annotations

import argparse
import sys
import time

from harness.model.config import ConfigError

HELP = "the regression gate: run a gate study and judge it (or check / refresh a study)"
EXIT_INCONCLUSIVE = 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Defaults are resolved in the actions: importing the gate here would slow every --help.
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    run_p = sub.add_parser("run", help="run a gate study, its A/A check, and judge it (default)")
    check_p = sub.add_parser("check", help="judge a study against the baseline (exit 0 ok, "
                                           "1 regression, 2 bad input)")
    refresh_p = sub.add_parser("refresh", help="write the baseline from a study (deliberately)")
    run_p.add_argument("--baseline", default=None, help="baseline file (default: baselines/gate.json)")
    run_p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                       help="override a field of the gate profile's StudyConfig")
    for p in (check_p, refresh_p):
        p.add_argument("study_dir", help="artifacts/<study-id>")
        p.add_argument("--baseline", default=None, help="baseline file (default: baselines/gate.json)")
        p.add_argument("--candidate", default=None,
                       help="candidate system (default: the study's gate_system)")
        p.add_argument("--reference", default=None,
                       help="reference system (default: the study's reference_system)")
        p.add_argument("--epsilon-ms", type=float, default=None,
                       help="floor of the reference's overhead before dividing (default: the "
                            "baseline's, or 0.05 ms)")
    check_p.add_argument("--min-threshold", type=float, default=None,
                         help="smallest threshold, as a fraction (default: 0.10)")
    check_p.add_argument("--sd-multiple", type=float, default=None,
                         help="threshold in baseline sds (default: 3)")


def run(args: argparse.Namespace) -> int:
    from harness.checks import gate
    baseline = getattr(args, "baseline", None) or gate.DEFAULT_BASELINE  # `gate` alone: none given
    if args.action == "check":
        result = gate.check(args.study_dir, baseline, args.candidate, args.reference,
                            _or(args.min_threshold, gate.MIN_THRESHOLD),
                            _or(args.sd_multiple, gate.SD_MULTIPLE), args.epsilon_ms)
    elif args.action == "refresh":
        result = gate.refresh(args.study_dir, baseline, args.candidate, args.reference,
                              _or(args.epsilon_ms, gate.OVERHEAD_EPSILON_MS))
    else:
        return run_gate(baseline, getattr(args, "set", []))
    print(result.text, file=sys.stderr if result.exit_code == gate.EXIT_BAD_INPUT else sys.stdout)
    return result.exit_code


def _or(value, default):
    return default if value is None else value


def run_gate(baseline, settings: list[str]) -> int:
    """A gate study, its A/A self-check on the profile's aa_pair, then the verdict."""
    from harness import stats
    from harness.checks import aa, gate
    from harness.model.config import from_profile, parse_overrides
    from harness.run.study import run_study
    overrides = {"study_id": time.strftime("gate-%Y%m%dT%H%M%SZ", time.gmtime()),
                 **parse_overrides(settings)}
    config = from_profile("gate", **overrides)
    if len(config.aa_pair) != 2:
        raise ConfigError([f"aa_pair: the gate checks its own noise on two copies of one system; "
                           f"got {list(config.aa_pair)}"])
    result = run_study(config)
    if result.status != "completed":
        print(f"gate: the gate study did not complete ({result.status})", file=sys.stderr)
        return gate.EXIT_FAIL
    failed = [r for r in result.records if r.status != "completed"]
    if failed:
        print("gate: FAIL — runs failed: " + "; ".join(f"{r.run_id}: {r.reason.splitlines()[0]}"
                                                    for r in failed))
        return gate.EXIT_FAIL
    study = stats.load_study(result.study_dir)
    self_check = aa.aa_check(stats.run_summary(study), *aa.pair(study.manifest))
    print(self_check.text)
    verdict = gate.check(result.study_dir, baseline)
    if not self_check.passed:
        print("gate: INCONCLUSIVE — the study's own noise is too high on this machine right now, "
              "so it does not decide (see the A/A reasons above); for information only:")
        print("\n".join(f"  (informational) {line}" for line in verdict.lines))
        return EXIT_INCONCLUSIVE
    print("\n".join(verdict.lines))
    return verdict.exit_code
