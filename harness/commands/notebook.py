"""Run a study through its notebook: the study is cleared here (its preflight: every parameter,
system and this machine's probes), then papermill executes notebooks/head_to_head.ipynb with that
result handed on, which runs the study, builds its report and shows the report's sections. What
`make study` runs.

    python -m harness notebook --profile standard                   # every system
    python -m harness notebook --profile smoke --gateways direct,nginx --set runs_per_gateway=1

Bad parameters are named before Jupyter starts; the executed notebook is written into the study
directory next to the artifacts it produced.
"""
from __future__ import annotations

import argparse
import time

from harness.commands.options import add_study_options, study_config

HELP = "run a study through notebooks/head_to_head.ipynb (papermill), with its report"
NOTEBOOK = "head_to_head.ipynb"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_study_options(parser)
    parser.add_argument("--no-report", action="store_true", help="skip building report.html")


def run(args: argparse.Namespace) -> int:
    from harness.commands.executing import execute
    from harness.files.study_files import StudyFiles
    from harness.run.preflight import preflight
    from report.build import REPORT_NAME
    cleared = preflight(study_config(args))
    config = cleared.config
    files = StudyFiles(config.study_dir)
    executed = files.notebook_path
    print(f"study {config.study_id}: {', '.join(config.gateways)} ({config.profile} profile)",
          flush=True)
    start = time.monotonic()
    if not execute(NOTEBOOK, executed, cleared, with_report=not args.no_report):
        return 1
    manifest = files.read_manifest()
    report = config.study_dir / REPORT_NAME
    print(f"\nstudy {manifest.status} in {(time.monotonic() - start) / 60:.1f} min")
    print(f"  artifacts: {config.study_dir}")
    print(f"  notebook:  {executed}")
    if not args.no_report and report.is_file():
        print(f"  report:    {report}")
    return 0 if manifest.status == "completed" else 1
