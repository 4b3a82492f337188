"""Which machine a study ran on, and whether two studies ran on the same kind of machine.

Figures measured on different CPUs (another model, or another number of cores) differ for
reasons that are not the systems': a comparison of such studies may show them side by side,
never judge them. Data only: the report chooses the words."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

MACHINE_KEYS = ("cpu_model", "cpu_count", "kernel")   # what every figure names
SAME_MACHINE_KEYS = ("cpu_model", "cpu_count")          # what must match for a verdict
UNKNOWN = "unknown"


def _text(value: Any) -> str:
    if value is None or (isinstance(value, str) and not value.strip()):
        return UNKNOWN
    if isinstance(value, float) and value == value and value.is_integer():
        return str(int(value))        # 2.0 and 2 are the same count of cores
    return str(value).strip()


def machine_fields(machine: Mapping[str, Any] | None) -> dict[str, str]:
    """The manifest's ``machine`` dict reduced to MACHINE_KEYS (plus ``os`` when recorded), each
    as text, "unknown" where the manifest does not say."""
    machine = machine or {}
    facts = {k: _text(machine.get(k)) for k in MACHINE_KEYS}
    if machine.get("os"):
        facts["os"] = _text(machine.get("os"))
    return facts


@dataclass(frozen=True)
class MachineMatch:
    """Study A's and study B's machines, and which SAME_MACHINE_KEYS differ between them."""
    a: dict[str, str]
    b: dict[str, str]
    differs: tuple[str, ...]

    @property
    def same(self) -> bool:
        return not self.differs


def same_machine(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> MachineMatch:
    """Whether two manifests' machines have the same CPU model and core count. Values are compared
    as recorded: a fact known on one side and missing on the other counts as a difference (the
    same machine cannot be shown); missing on both sides does not (nothing tells them apart).
    The kernel is reported, not compared: it rarely moves these figures by itself."""
    fa, fb = machine_fields(a), machine_fields(b)
    return MachineMatch(fa, fb, tuple(k for k in SAME_MACHINE_KEYS if fa[k] != fb[k]))
