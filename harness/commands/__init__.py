"""The command line: `python -m harness <command>`, one module per command in this package.

Each command module has HELP (one line), add_arguments(parser) and run(args) -> exit code.
Heavy imports (papermill, pandas, the runner) happen inside run(), so `--help` stays quick.
Exit codes: 0 success, 1 the thing ran and failed (a study not completed, a regression), 2 bad
input (parameters, files, directories, artifacts: any harness.model.errors.UserError), reported
as one `error:` line per problem before anything starts.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from harness.model.errors import UserError

# In the order `--help` lists them.
COMMANDS = ("notebook", "study", "suite", "report", "publish", "install", "gate", "aa", "soak", "mock")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m harness", description=__doc__.split("\n\n")[0],
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"harness.commands.{name}")
        p = sub.add_parser(name, help=module.HELP, description=module.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        p.set_defaults(run=module.run)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return args.run(args)
    except UserError as exc:     # bad input, whichever command and layer found it
        for line in exc.lines():
            print(f"error: {line}", file=sys.stderr)
        return 2
