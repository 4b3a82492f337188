"""Publish the study's answer into the repository, or check what is published.

    python -m harness publish [--study artifacts/<study-id>] [--profile standard]
    python -m harness publish --check

writes artifacts/published/ (the one committed part of artifacts/) from the newest complete
study of the profile (every runnable system's runs done, its counting lane run with every system
counted or its reason) and the newest complete suite of each lane (faults, faults-extra,
inflight, by the suite's name) under artifacts/suites/, marks the rows whose comparison key the
tree would no longer produce, then rewrites the README's Results block from it
(report/publish.py). A study that is not complete is
refused with what it lacks.

--check only reads and prints: each published system's comparison key against what the tree
would run now, the stale ones with the reason. It exits 0 whatever it finds (re-running a study
is not a CI job); the next publish writes the marks.
"""
from __future__ import annotations

import argparse
from pathlib import Path

HELP = "publish the newest complete study into artifacts/published/, or --check it"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true",
                        help="only read the publication and print its stale rows, with the reason")
    parser.add_argument("--study", default=None, metavar="DIR",
                        help="publish this study (it must be complete) instead of the newest one")
    parser.add_argument("--profile", default="standard",
                        help="the profile of the study to publish (default: standard)")
    parser.add_argument("--artifacts", default=None, metavar="DIR",
                        help="where the studies and suites are (default: artifacts/)")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="the publication (default: artifacts/published/)")
    parser.add_argument("--readme", default=None, metavar="FILE",
                        help="the README whose Results block is rewritten (default: README.md)")


def run(args: argparse.Namespace) -> int:
    from harness.files.store import tree_bytes
    from harness.files.study_files import StudyFiles
    from harness.run.staleness import stale_systems
    from report import publish as P
    from report.format import size

    artifacts = Path(args.artifacts) if args.artifacts else P.ARTIFACTS_DIR
    out = Path(args.out) if args.out else artifacts / P.PUBLISHED
    if args.check:
        return check(out, stale_systems)
    readme = Path(args.readme) if args.readme else P.README
    problems = argument_problems(args, readme)
    if problems:   # before anything is read into the publication or written
        raise P.PublishError(problems)
    study = Path(args.study) if args.study else P.newest_complete_study(artifacts, args.profile)
    lanes = P.newest_complete_suites(artifacts)
    stale = stale_systems(StudyFiles(study).read_manifest().config, P.recorded_specs(study))
    pub = P.publish(study, lanes, stale, out, readme)
    print(f"published study {pub['standard']['study_id']} into {out} "
          f"({size(tree_bytes(out))}); README Results block rewritten: {readme}")
    for name in P.LANES:
        lane = pub["lanes"][name]
        print(f"  {P.LANE_NAMES[name]}: " + (f"suite {lane['suite_id']}" if "suite_id" in lane
                                             else lane["not_run"]))
    for system, why in stale.items():
        print(f"  stale: {system}: {why}")
    if tree_bytes(out) > P.MAX_BYTES:
        print(f"warning: {out} weighs more than {size(P.MAX_BYTES)}")
    return 0


def argument_problems(args: argparse.Namespace, readme: Path) -> list[str]:
    """Each bad parameter, named: a profile that is none, a study directory without a study,
    a README without its Results block (found only after the publication was written)."""
    from harness.files.study_files import StudyFiles
    from harness.model.profiles import PROFILES
    from report import publish as P

    problems = []
    if args.profile not in PROFILES:
        problems.append(f"--profile {args.profile!r}: not a profile; choose one of "
                        f"{', '.join(sorted(PROFILES))}")
    if args.study and not StudyFiles(Path(args.study)).manifest_path.is_file():
        problems.append(f"--study {args.study}: no study manifest in it")
    try:
        P.readme_block_in(readme)
    except P.PublishError as exc:
        problems.append(f"--readme {exc}")
    return problems


def check(out: Path, stale_systems) -> int:
    """Print each published system's key against the tree's; always 0."""
    from harness.model.formats import PUBLICATION
    from report import publish as P

    if not (out / PUBLICATION.file).is_file():
        print(f"nothing published in {out}")
        return 0
    pub, manifest, specs = P.published_specs(out)
    stale = stale_systems(manifest.config, specs)
    print(f"published study {pub['standard']['study_id']} against this tree:")
    for row in pub["standard"]["systems"]:
        name = row["system"]
        if name in stale:
            print(f"  {name}: stale: {stale[name]}")
        elif name in specs:
            print(f"  {name}: current")
        else:
            print(f"  {name}: no run ({row['not_runnable_reason'] or 'not run'})")
    return 0
