"""The one family of errors that mean "the user's input is wrong": a parameter, a file, a
directory or an artifact given to the harness. Every command reports one as exit code 2 and
one ``error:`` line per problem, before anything starts (harness/commands/__init__.py); an
error outside this family is a fault of the harness or of the machine, and keeps its traceback.

Standard library only, and nothing else from harness: every layer raises these.
"""
from __future__ import annotations


class UserError(Exception):
    """The user's input (parameters, files, directories, artifacts) is wrong; the message says
    which and, where it can, what to do."""

    def lines(self) -> list[str]:
        """The problems, one per line, as the command line prints them."""
        return [line.strip() for line in str(self).splitlines() if line.strip()] or [
            type(self).__name__]
