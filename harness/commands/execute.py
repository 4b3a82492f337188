"""The study command: execute the study notebook with papermill, then build the report.

    python -m harness.commands.execute --profile standard --gateways all

Parameters are checked before anything starts; the executed notebook is written into the
study directory next to the artifacts it produced.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time

from harness.model import config as config_mod
from harness.model.config import REPO_DIR, ConfigError
from harness.run.store import read_json

NOTEBOOK = REPO_DIR / "notebooks" / "head_to_head.ipynb"


def parse(argv: list[str]) -> tuple[dict, config_mod.StudyConfig]:
    parser = argparse.ArgumentParser(prog="python -m harness.commands.execute", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="standard", choices=sorted(config_mod.PROFILES))
    parser.add_argument("--gateways", default=None,
                        help="comma-separated system names, or 'all' (every folder under gateways/);"
                             " default: the profile's systems, else all")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="override any StudyConfig field, e.g. --set runs_per_gateway=1")
    parser.add_argument("--no-report", action="store_true", help="skip building report.html")
    args = parser.parse_args(argv)
    overrides = config_mod.parse_overrides(args.set)
    gateways = args.gateways or (None if "gateways" in config_mod.PROFILES[args.profile] else "all")
    config = config_mod.from_profile(args.profile, gateways=gateways, **overrides).with_study_id()
    config_mod.validate(config)
    explicit = {"profile": args.profile, "gateways": list(config.gateways),
                "study_id": config.study_id, "out_dir": config.out_dir}
    params = {**explicit, "overrides": {k: v for k, v in overrides.items() if k not in explicit}}
    return {"params": params, "report": not args.no_report}, config


def main(argv: list[str] | None = None) -> int:
    try:
        options, config = parse(sys.argv[1:] if argv is None else argv)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import papermill
    # papermill relays the notebook's output (the study's progress lines) through logging.
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    study_dir = config.study_dir
    study_dir.mkdir(parents=True, exist_ok=True)
    executed = study_dir / "head_to_head.ipynb"
    print(f"study {config.study_id}: {', '.join(config.gateways)} ({config.profile} profile)",
          flush=True)
    start = time.monotonic()
    try:
        papermill.execute_notebook(str(NOTEBOOK), str(executed), parameters=options["params"],
                                   log_output=True, progress_bar=False, cwd=str(REPO_DIR / "notebooks"))
    except papermill.PapermillExecutionError as exc:
        print(f"error: the study notebook failed: {exc.ename}: {exc.evalue}\n"
              f"executed notebook: {executed}", file=sys.stderr)
        return 1
    manifest = read_json(study_dir / "manifest.json")
    report = ""
    if options["report"]:
        from report.build import build_report
        report = str(build_report(study_dir))
    print(f"\nstudy {manifest['status']} in {(time.monotonic() - start) / 60:.1f} min")
    print(f"  artifacts: {study_dir}")
    print(f"  notebook:  {executed}")
    if report:
        print(f"  report:    {report}")
    return 0 if manifest["status"] == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
