"""The A/A check of a study: the same system under two names (the study's ``aa_pair``, such as
nginx and nginx~aa) must agree within the gate's limits, paired by round (harness/verdicts/rules.py), or the machine
is too noisy for the study's verdicts right now.

    python -m harness aa artifacts/<study-id> [--a A --b B]

Exit 0 pass, 1 noise too high, 2 bad input (harness/verdicts/aa.py).
"""
from __future__ import annotations

import argparse

HELP = "A/A check of a study: two copies of one system must agree"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Defaults are resolved in run(): importing the check here would slow every command's --help.
    parser.add_argument("study_dir", help="artifacts/<study-id>")
    parser.add_argument("--a", default=None, help="first copy (default: the study's aa_pair)")
    parser.add_argument("--b", default=None, help="second copy (default: the study's aa_pair)")


def run(args: argparse.Namespace) -> int:
    from harness import stats
    from harness.verdicts import aa
    try:
        study = stats.load_study(args.study_dir)
        a, b = aa.pair(study.manifest, args.a, args.b)
        result = aa.judge(stats.run_summary(study), a, b)
    except (stats.ArtifactError, aa.AAInputError) as exc:   # exit 2, with what was attempted
        raise aa.AAInputError(f"A/A check: cannot be made: {exc}") from None
    print(result.text)
    return result.exit_code
