"""What the A/A check and the gate both need from a study before they judge it: the named
systems ran, every run of them completed, enough of them; and the floor under an overhead."""
from __future__ import annotations

from typing import Sequence

import pandas as pd

from harness.model.errors import UserError
from harness.model.metrics import metric
from harness.stats.definitions import OVERHEAD_EPSILON_MS


class VerdictInputError(UserError, RuntimeError):
    """No verdict can be made from this input (exit code 2)."""


def require_completed(rs: pd.DataFrame, systems: Sequence[tuple[str, str]],
                      error: type[VerdictInputError], where: str, missing_hint: str,
                      failed_hint: str, min_runs: int = 1) -> None:
    """Raise ``error`` unless every system ((what it is to the check, its name) pairs; the
    first may be "") ran, every one of its runs completed and it has at least ``min_runs``
    completed runs."""
    present = [str(s) for s in pd.unique(rs["system"])] if len(rs) else []
    missing = [(role, name) for role, name in systems if name not in present]
    if missing:
        raise error(f"{where} has no runs of "
                    + " and ".join(f"{role} {name!r}".strip() for role, name in missing)
                    + f" (systems in it: {', '.join(present) or 'none'}); {missing_hint}")
    names = [name for _, name in systems]
    bad = rs[rs["system"].isin(names) & (rs["status"] != "completed")]
    if len(bad):
        parts = [f"{r['run_id']} ({r['status']}: {r.get('reason') or 'no reason recorded'})"
                 for _, r in bad.iterrows()]
        raise error(f"{where} has runs that did not complete: {'; '.join(parts)}; {failed_hint}")
    for name in names:
        n = int(((rs["system"] == name) & (rs["status"] == "completed")).sum())
        if n < min_runs:
            raise error(f"{name!r} has {n} completed run(s); the check needs at least {min_runs} "
                        "of each for Welch's t-test")


def floor_of(name: str, epsilon_ms: float = OVERHEAD_EPSILON_MS) -> float:
    """The smallest denominator a relative figure of this metric divides by: ``epsilon_ms`` for
    a metric that can be ~0 (an overhead), else 0."""
    return epsilon_ms if metric(name).near_zero else 0.0
