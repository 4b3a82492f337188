"""What a statistic concludes, as values: the report chooses the words and the colours."""
from __future__ import annotations

from enum import Enum


class Outcome(Enum):
    """A verdict against a reference, in the metric's better direction."""
    BETTER = "better"
    WORSE = "worse"
    NO_CLEAR_DIFFERENCE = "no clear difference"


class Basis(Enum):
    """How a verdict was reached."""
    TESTED = "tested"                    # Welch's t-test and the 10 % rule were applied
    TOO_FEW_RUNS = "too few runs"        # fewer than two completed runs on a side
    DIFFERENCE = "difference"            # the ratio is undefined or its reference near zero:
                                         # Welch's test on the difference and its 95% CI
    NOT_COMPARED = "not compared"        # an overhead measured against the floor, for the floor


class Label(Enum):
    """What a run (or a system's run set) measured."""
    CAPACITY = "capacity"     # nothing but the system limited it
    BEHAVIOUR = "behaviour"   # something else did too: the reasons say what
    FAILED = "failed"         # it did not complete
