"""What a command hands to the notebook it executes: an object it already made (a study's
preflight, a suite's cleared cells), so that the notebook's kernel neither parses nor checks
anything again.

The object is pickled into a private temporary directory for as long as the notebook runs and is
deleted after it. Pickle, not a versioned artifact: the writer and the reader are the same tree at
the same moment (the command and the kernel it starts), and the file never outlives the command.
"""
from __future__ import annotations

import pickle
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, TypeVar

from harness.model.errors import UserError

T = TypeVar("T")
FILE_NAME = "handoff.pickle"


class HandoffError(UserError, ValueError):
    """The hand-off file named is missing or does not hold what the notebook expects."""


@contextmanager
def handed_off(obj: object) -> Iterator[Path]:
    """The path of a file holding ``obj`` while the block runs (readable by this user alone)."""
    with tempfile.TemporaryDirectory(prefix="sluice-handoff-") as tmp:
        path = Path(tmp) / FILE_NAME
        with open(path, "wb") as f:
            pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
        yield path


def read_handoff(path: str | Path, kind: type[T]) -> T:
    """The ``kind`` object a command handed off in ``path``; HandoffError when there is none."""
    try:
        with open(path, "rb") as f:
            obj = pickle.load(f)
    except OSError as exc:
        raise HandoffError(f"handoff: cannot read {path} ({exc.strerror or exc}): it lives only "
                           "while the command that wrote it runs; leave handoff empty to "
                           "check the parameters here") from None
    if not isinstance(obj, kind):
        raise HandoffError(f"handoff: {path} holds a {type(obj).__name__}, not a {kind.__name__}")
    return obj
