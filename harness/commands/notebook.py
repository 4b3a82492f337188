"""Run a study through its notebook: papermill executes notebooks/head_to_head.ipynb, then the
report is built. What `make study` runs.

    python -m harness notebook --profile standard                   # every system
    python -m harness notebook --profile smoke --gateways direct,nginx --set runs_per_gateway=1

Parameters are checked before anything starts; the executed notebook is written into the
study directory next to the artifacts it produced.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time

from harness.commands.options import add_study_options, study_config
from harness.model.config import REPO_DIR, parse_overrides

HELP = "run a study through notebooks/head_to_head.ipynb (papermill), then build its report"
NOTEBOOK = REPO_DIR / "notebooks" / "head_to_head.ipynb"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_study_options(parser)
    parser.add_argument("--no-report", action="store_true", help="skip building report.html")


def notebook_parameters(config, overrides: dict) -> dict:
    """The notebook's papermill parameters for `config`: the named ones explicitly, every other
    field given on the command line through `overrides`."""
    explicit = {"profile": config.profile, "gateways": list(config.gateways),
                "study_id": config.study_id, "out_dir": config.out_dir}
    return {**explicit, "overrides": {k: v for k, v in overrides.items() if k not in explicit}}


def run(args: argparse.Namespace) -> int:
    # checked here so that a bad parameter is named before Jupyter starts; the notebook's
    # run_study checks again in its own process, as any study does when it starts
    from harness.run.preflight import preflight
    config = preflight(study_config(args)).config
    import papermill

    from harness.files.study_files import StudyFiles
    # papermill relays the notebook's output (the study's progress lines) through logging.
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    study_dir = config.study_dir
    study_dir.mkdir(parents=True, exist_ok=True)
    executed = StudyFiles(study_dir).notebook_path
    print(f"study {config.study_id}: {', '.join(config.gateways)} ({config.profile} profile)",
          flush=True)
    start = time.monotonic()
    try:
        papermill.execute_notebook(str(NOTEBOOK), str(executed),
                                   parameters=notebook_parameters(config, parse_overrides(args.set)),
                                   log_output=True, progress_bar=False, cwd=str(REPO_DIR / "notebooks"))
    except papermill.PapermillExecutionError as exc:
        print(f"error: the study notebook failed: {exc.ename}: {exc.evalue}\n"
              f"executed notebook: {executed}", file=sys.stderr)
        return 1
    manifest = StudyFiles(study_dir).read_manifest()
    report = ""
    if not args.no_report:
        from report.build import build_report
        report = str(build_report(study_dir))
    print(f"\nstudy {manifest.status} in {(time.monotonic() - start) / 60:.1f} min")
    print(f"  artifacts: {study_dir}")
    print(f"  notebook:  {executed}")
    if report:
        print(f"  report:    {report}")
    return 0 if manifest.status == "completed" else 1
