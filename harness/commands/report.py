"""Build the self-contained HTML report of a study directory, or of a suite directory.

    python -m harness report artifacts/<study-id> [--via-notebook] [--reference nginx]
    python -m harness report artifacts/suites/<suite-id> [--compare artifacts/suites/<other>]
    python -m harness report artifacts/<study-b> --compare artifacts/<study-a>

writes DIR/report.html (report/build.py for a study, report/suite_report.py for a suite, which also
writes each cell's report when it is missing, from the figures the suite's tables read) and prints
its path.
"""
from __future__ import annotations

import argparse
from pathlib import Path

HELP = "build report.html of a study (or a suite) directory"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", help="artifacts/<study-id>, or artifacts/suites/<suite-id>")
    parser.add_argument("--via-notebook", action="store_true",
                        help="a study: execute notebooks/report.ipynb with papermill and export it")
    parser.add_argument("--reference", default=None,
                        help="a study: reference system for verdicts (default: the study's own)")
    parser.add_argument("--bin-users", type=int, default=None,
                        help="a study: users per bin of the ramp curves")
    parser.add_argument("-o", "--out", default=None, help="a study: output file "
                        "(default: DIR/report.html)")
    parser.add_argument("--vcpu-hour-usd", type=float, default=None,
                        help="a study: USD per vCPU-hour for the sizing section's monthly cost "
                        "(default: AWS Fargate on-demand, see harness/stats/sizing.py)")
    parser.add_argument("--gb-hour-usd", type=float, default=None,
                        help="a study: USD per GB-hour of memory (default: AWS Fargate on-demand)")
    parser.add_argument("--load-rps", type=float, default=None,
                        help="a study: the load the sizing section plans for (default 1000 req/s)")
    parser.add_argument("--planned-latency-s", type=float, default=None,
                        help="a study: the latency of each planned call; with --load-rps, the "
                        "requests the sizing section plans to hold open (default 10 s)")
    parser.add_argument("--compare", default=None, metavar="OTHER_DIR",
                        help="compare with another suite (or study) where the keys are equal: "
                        "writes DIR/compare-<OTHER>.html for a study")


def run(args: argparse.Namespace) -> int:
    directory = Path(args.directory)
    from harness.files.study_files import is_suite
    if is_suite(directory):
        from report.suite_report import build_suite_report
        print(build_suite_report(directory, args.compare).path)
        return 0
    if args.compare:
        from report.compare import build_compare
        print(build_compare(args.compare, directory, out=args.out))
        return 0
    if args.via_notebook:   # the notebook's own prices and load: the sizing options do not apply
        from harness.stats.definitions import DEFAULT_BIN_USERS
        from report.build import build_report_via_notebook
        print(build_report_via_notebook(directory, args.reference,
                                        args.bin_users or DEFAULT_BIN_USERS, args.out))
        return 0
    from report.build import build_report
    extra = {k: v for k, v in (("bin_users", args.bin_users),
                               ("vcpu_hour_usd", args.vcpu_hour_usd),
                               ("gb_hour_usd", args.gb_hour_usd),
                               ("load_rps", args.load_rps),
                               ("planned_latency_s", args.planned_latency_s)) if v is not None}
    print(build_report(directory, reference=args.reference, out=args.out, **extra).path)
    return 0
