"""Install systems under test ahead of a study (the study does the same on its own).

    python -m harness install               # every runnable system under gateways/
    python -m harness install litellm nginx

Idempotent: each system's declared check decides whether its install step runs. A failed
install names the system and its command, and the others go on.
"""
from __future__ import annotations

import argparse
import time

from harness.model.config import GATEWAYS_DIR, REPO_DIR, known_gateways

HELP = "install systems under test into .cache/ (idempotent)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("systems", nargs="*", default=["all"], metavar="SYSTEM",
                        help="folder names under gateways/, or 'all' (default)")


def run(args: argparse.Namespace) -> int:
    from harness.model.gateway_spec import load_gateway_spec
    from harness.run.systems import install, read_version
    names = known_gateways(GATEWAYS_DIR) if args.systems == ["all"] else args.systems
    failed = []
    for name in names:
        spec = load_gateway_spec(name)
        if not spec.runnable:
            print(f"{name}: not runnable here ({spec.not_runnable_reason})", flush=True)
            continue
        start = time.monotonic()
        result = install(spec, REPO_DIR / ".cache" / "install-logs" / f"{name}.log")
        took = f"{time.monotonic() - start:.0f} s"
        if result.ok:
            print(f"{name}: {result.message} ({read_version(spec)}, {took})", flush=True)
        else:
            print(f"{name}: FAILED: {result.message}", flush=True)
            failed.append(name)
    return 1 if failed else 0
