"""Which system plays which part in a study, read from its manifest, never from a system's name.

* floor: the system whose gateway.toml says ``role = "floor"`` (the client straight to the
  mock), called plainly: a floor called as a feature (``folder@feature``) is the feature-cost
  lane's floor for its dialect, not the study's;
* reference: the system verdicts compare with: ``config.reference_system`` when it ran, else the
  first system that ran (given the systems that ran; the setting alone without them);
* A/A pair: two copies of one system that must agree (``config.aa_pair``);
* gate system: the system the regression gate judges (``config.gate_system``), the head build;
* gate base: the same system built from the base commit, which the gate compares it with
  (``config.gate_base_system``).

A command-line flag overrides what the manifest says.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from harness.model.manifests import StudyManifest

FLOOR = "floor"


@dataclass(frozen=True)
class Roles:
    floor: str | None
    floors: tuple[str, ...]              # every system with the floor role, features included
    reference: str | None
    aa_pair: tuple[str, str] | None
    gate_system: str | None
    gate_base: str | None = None

    @classmethod
    def of(cls, manifest: "StudyManifest", *, ran: Sequence[str] | None = None,
           floor: str | None = None, reference: str | None = None,
           aa_pair: Sequence[str] | None = None, gate_system: str | None = None,
           gate_base: str | None = None) -> "Roles":
        """``ran``: the systems that ran, in the study's order (None: the settings alone)."""
        config = manifest.config
        floors = tuple(name for name, meta in manifest.systems.items() if meta.role == FLOOR)
        plain = [name for name in floors if "@" not in name]
        pair = tuple(aa_pair or config.aa_pair or ())
        if pair and len(pair) != 2:
            raise ValueError(f"an A/A pair is two systems, got {list(pair)}")
        if not reference:
            reference = config.reference_system or None
            if ran is not None and reference not in ran:
                reference = ran[0] if ran else None
        return cls(floor=floor or (plain[0] if plain else None), floors=floors,
                   reference=reference,
                   aa_pair=pair or None,  # type: ignore[arg-type]
                   gate_system=gate_system or config.gate_system or None,
                   gate_base=gate_base or config.gate_base_system or None)
