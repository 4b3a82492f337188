"""Run a study in this process, without Jupyter: the same study the notebook command runs
(its preflight, once; install, every run interleaved, the study manifest), without its report.

    python -m harness study --profile smoke --gateways direct,nginx
    python -m harness study --set topology=examples/topologies/two-hosts.toml
"""
from __future__ import annotations

import argparse

from harness.commands.options import add_study_options, study_config

HELP = "run a study in this process (no Jupyter); the library call is harness.run.study.run_study"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_study_options(parser)


def run(args: argparse.Namespace) -> int:
    from harness.run.preflight import preflight
    from harness.run.study import run_study
    result = run_study(preflight(study_config(args)))
    return 0 if result.status == "completed" else 1
