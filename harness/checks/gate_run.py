"""The CI gate in one command: run a `gate` study, check its own noise (A/A), judge its system.

    python -m harness.checks.gate_run [--baseline baselines/gate.json] [--set NAME=VALUE ...]

The gate study interleaves the reference (nginx), a second copy of it (nginx~aa) and the gated
system (Sluice), as the gate profile's reference_system, aa_pair and gate_system say. The A/A
check on the two copies comes first: when the machine is too noisy right now for two copies of
the same system to agree, the comparison does not decide: the gate prints it for information,
says it is inconclusive and exits 0, since a comparison it cannot trust must not block a
change, nor pass one silently. Otherwise
the gate's verdict decides: 0 ok, 1 a figure regressed, 2 bad input (e.g. no baseline).
"""
from __future__ import annotations

import argparse
import sys
import time

from harness.checks import aa as aa_mod
from harness.checks import gate as gate_mod
from harness.model.config import ConfigError, from_profile, parse_overrides
from harness.run.study import run_study
from harness.stats.loading import load_study
from harness.stats.runs import run_summary

EXIT_INCONCLUSIVE = 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.checks.gate_run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default=str(gate_mod.DEFAULT_BASELINE))
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    overrides = {"study_id": time.strftime("gate-%Y%m%dT%H%M%SZ", time.gmtime()),
                 **parse_overrides(args.set)}
    try:
        result = run_study(from_profile("gate", **overrides))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return gate_mod.EXIT_BAD_INPUT
    if result.status != "completed":
        print(f"gate: the gate study did not complete ({result.status})", file=sys.stderr)
        return gate_mod.EXIT_FAIL
    failed = [r for r in result.records if r.status != "completed"]
    if failed:
        print("gate: FAIL — runs failed: " + "; ".join(f"{r.run_id}: {r.reason.splitlines()[0]}"
                                                    for r in failed))
        return gate_mod.EXIT_FAIL
    study = load_study(result.study_dir)
    try:
        self_check = aa_mod.aa_check(run_summary(study), *aa_mod.pair(study.manifest))
    except aa_mod.AAInputError as exc:
        print(f"gate: the A/A check cannot be made: {exc}", file=sys.stderr)
        return gate_mod.EXIT_BAD_INPUT
    print(self_check.text)
    verdict = gate_mod.check(result.study_dir, args.baseline)
    if not self_check.passed:
        print("gate: INCONCLUSIVE — the study's own noise is too high on this machine right now, "
              "so it does not decide (see the A/A reasons above); for information only:")
        print("\n".join(f"  (informational) {line}" for line in verdict.lines))
        return EXIT_INCONCLUSIVE
    print("\n".join(verdict.lines))
    return verdict.exit_code


if __name__ == "__main__":
    sys.exit(main())
