"""The soak check of a study (profile `soak`): under steady load each system's RSS, open files
and in-flight requests stay flat, and return to idle once the load stops.

    python -m harness study --profile soak --gateways sluice      # the soak study
    python -m harness soak artifacts/<study-id>                   # its verdict, per run

Exit 0 when every run is flat, 1 otherwise (harness/verdicts/soak.py).
"""
from __future__ import annotations

import argparse

HELP = "soak check of a study: memory, open files and in-flight requests stay flat"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("study_dir", help="artifacts/<study-id> of a soak study")


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from harness.stats import load_study
    from harness.verdicts.soak import soak_summary
    table = soak_summary(load_study(args.study_dir))
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(table.to_string(index=False))
    return 0 if (table.verdict == "flat").all() else 1
