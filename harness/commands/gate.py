"""The performance regression gate (what `make gate` and CI run): two builds, one machine.

    python -m harness gate                  # the same as `gate run` with no options
    python -m harness gate run [--base REF] [--head-env NAME=VALUE ...] [--set NAME=VALUE ...]
    python -m harness gate judge   GATE_DIR
    python -m harness gate refresh GATE_DIR

`run` (the default) builds the base commit's system in a worktree beside this tree (the base:
--base REF, else the newest commit accepted in any CPU model's record under baselines/gate/:
the counts do not depend on the machine), counts the base twice and the head once (counts.json) and judges the counts;
then it runs the short timed study (timed/) and judges its latency
(harness/verdicts/gate.py): 0 ok; 1 a figure regressed or a run failed; 2 bad input. --head-env
sets an environment variable of the head build alone (SLUICE_TEST_DELAY_MS=1,
SLUICE_TEST_BURN_ITERATIONS=N, SLUICE_TEST_EXTRA_WRITE=1 slow it on purpose: the gate must
fail). `judge` judges an existing gate directory; `refresh` writes this CPU model's record from
one that passed, deliberately (baselines/README.md).
"""
from __future__ import annotations

import argparse
import sys
import time

from harness.model.config import ConfigError

HELP = "the regression gate: two builds counted, then timed side by side (or judge / refresh a gate)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Defaults are resolved in the actions: importing the gate here would slow every --help.
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    run_p = sub.add_parser("run", help="build the base, count both builds, time them, judge (default)")
    judge_p = sub.add_parser("judge", help="judge a gate directory: head build against base build "
                                           "(exit 0 ok, 1 regression, 2 bad input)")
    refresh_p = sub.add_parser("refresh", help="write this CPU model's record from a gate that passed")
    run_p.add_argument("--base", default=None, metavar="REF",
                       help="git ref of the base build (default: the accepted commit in "
                            "baselines/gate/)")
    run_p.add_argument("--head-env", action="append", default=[], metavar="NAME=VALUE",
                       help="environment of the head build alone (e.g. SLUICE_TEST_DELAY_MS=1)")
    run_p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                       help="override a field of the gate profile's StudyConfig")
    for p in (run_p, judge_p, refresh_p):
        p.add_argument("--history-dir", default=None,
                       help="the gate records (default: baselines/gate)")
    for p in (judge_p, refresh_p):
        p.add_argument("study_dir", help="artifacts/<gate-id> (or an older gate study)")
        p.add_argument("--head", default=None, help="head entry (default: the study's gate_system)")
        p.add_argument("--base", default=None,
                       help="base entry (default: the study's gate_base_system)")


def run(args: argparse.Namespace) -> int:
    from harness.verdicts import gate, history
    history_dir = getattr(args, "history_dir", None) or history.HISTORY_DIR
    if args.action == "judge":
        result = gate.judge(args.study_dir, history_dir, args.head, args.base)
    elif args.action == "refresh":
        result = gate.refresh(args.study_dir, history_dir, args.head, args.base)
    else:
        return run_gate(history_dir, getattr(args, "base", None), getattr(args, "head_env", []),
                        getattr(args, "set", []))
    return shown(result)


def shown(result) -> int:
    """Print a verdict and return its exit code; one that could not be made is bad input,
    raised for the command line to report (exit 2)."""
    from harness.verdicts import gate
    if result.exit_code == gate.EXIT_BAD_INPUT:
        raise gate.GateInputError(result.text)
    print(result.text)
    return result.exit_code


def count_builds(gate_system: str, base_commit: str, head_env: list[str], gate_dir,
                 sizes=None) -> dict:
    """Count the base build twice and the head build once (base, head, base again: a machine
    that drifted shows in the base's two counts) and write gate_dir/counts.json."""
    from harness.files.readers import read_counts
    from harness.files.study_files import StudyFiles
    from harness.model.count_cases import GATE_CASES, Sizes
    from harness.model.gateway_spec import folder_of, load_gateway_spec
    from harness.remote.machine import this_machine
    from harness.run import builds, count_system
    from harness.run.systems import install, read_version
    sizes = sizes or Sizes()
    files = StudyFiles(gate_dir)   # laid out as a study's counting lane
    name = folder_of(gate_system)
    tree = builds.checkout(base_commit)
    base_spec = load_gateway_spec(name, tree.gateways_dir)
    head_spec = load_gateway_spec(name)
    # each build installed and built as its own gateway.toml says, as a study does
    for label, spec in (("base", base_spec), ("head", head_spec)):
        print(f"gate: installing and building the {label} from {spec.directory}", flush=True)
        installed = install(spec, gate_dir / f"{label}.install.log")
        if not installed.ok:
            raise builds.BuildError(installed.message)
        builds.build(spec, gate_dir / f"{label}.build.log")
    env = dict(item.split("=", 1) for item in head_env)
    from harness.host.processes import free_port
    ports = (free_port(), 0)   # the same for every count: a port reaches hashed keys
    while ports[1] in (0, ports[0]):
        ports = (ports[0], free_port())
    counted = []
    for label, spec, commit, extra in (("base", base_spec, tree.commit, None),
                                       ("head", head_spec, builds.resolve("HEAD"), env),
                                       ("base~2", base_spec, tree.commit, None)):
        t = time.monotonic()
        counted.append(count_system.count_system(spec, GATE_CASES, files.count_dir, label,
                                             read_version(spec), commit, sizes, extra_env=extra,
                                             syscalls=label != "base~2", ports=ports,
                                             progress=lambda line: print(f"gate: {line}", flush=True)))
        print(f"gate: {label} counted in {time.monotonic() - t:.0f} s", flush=True)
    count_system.write_counts(files.counts_path, counted, this_machine(), "gate")
    return read_counts(files.counts_path)


def run_gate(history_dir, base: str | None, head_env: list[str], settings: list[str]) -> int:
    """Resolve the base, count both builds and judge the counts; then the short timed study,
    judged on latency alone."""
    from harness.model.config import REPO_DIR, from_profile, parse_overrides
    from harness.remote.machine import this_machine
    from harness.run.preflight import preflight
    from harness.run.study import run_study
    from harness.verdicts import count_verdict, gate
    t0 = time.monotonic()
    gate_id = time.strftime("gate-%Y%m%dT%H%M%SZ", time.gmtime())
    overrides = {**parse_overrides(settings)}
    probe = from_profile("gate", **overrides)
    problems = []
    if not probe.gate_base_system:
        problems.append("gate_base_system: the gate compares the head build with a base build; "
                        "name the base entry (the gate profile's is sluice~base)")
    bad_env = [item for item in head_env if "=" not in item or not item.split("=", 1)[0]]
    problems += [f"--head-env {item!r}: expected NAME=VALUE" for item in bad_env]
    if problems:
        raise ConfigError(problems)
    if base is None:
        try:
            base, source = gate.base_ref(this_machine(), probe.profile, history_dir)
        except gate.GateInputError as exc:
            raise ConfigError([f"--base: {exc}"]) from None
        print(f"gate: base = {base[:12]}, {source}")
    gate_dir = REPO_DIR / probe.out_dir / gate_id
    gate_dir.mkdir(parents=True, exist_ok=True)
    print(f"gate: {gate_dir}", flush=True)
    record = count_builds(probe.gate_system, base, head_env, gate_dir)
    verdict = count_verdict.judge(record)
    print("\n".join(verdict.lines), flush=True)
    print(f"gate: counted in {time.monotonic() - t0:.0f} s", flush=True)
    if not verdict.ok:    # the timed check still runs: does the latency show it too?
        print("gate: the counts FAIL; the timed check runs all the same, for what it shows")
    config = from_profile("gate", **{
        **overrides, "out_dir": str(gate_dir.relative_to(REPO_DIR)), "study_id": "timed",
        "builds": (*probe.builds, f"{probe.gate_base_system}={base}"),
        "system_env": (*probe.system_env, *(f"{probe.gate_system}:{item}" for item in head_env))})
    result = run_study(preflight(config))
    if result.status != "completed":
        print(f"gate: the timed study did not complete ({result.status})", file=sys.stderr)
        return gate.EXIT_FAIL
    failed = [r for r in result.records if r.status != "completed"]
    skipped = [f"{name}: {why}" for name, why in result.skipped.items()]
    if failed or skipped:
        print("gate: FAIL — runs failed or systems could not run: " + "; ".join(
            [f"{r.run_id}: {r.reason.splitlines()[0]}" for r in failed] + skipped))
        return gate.EXIT_FAIL
    code = shown(gate.judge(result.study_dir, history_dir, timed_only=True))
    failed_by = [what for what, bad in (("the counts", not verdict.ok), ("the timed check", code))
                 if bad]
    print(f"gate: {'FAIL on ' + ' and '.join(failed_by) if failed_by else 'ok'} — counts and "
          f"the timed check, in {time.monotonic() - t0:.0f} s")
    return gate.EXIT_FAIL if failed_by else code
