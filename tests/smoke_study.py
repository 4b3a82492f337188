"""The smoke study the integration tests that only read one share: the floor, nginx and Sluice
at the smoke profile, with a short wire capture, run once a session (tests/conftest.py's
``smoke_study`` fixture, started by the first test that asks for it). A test that needs other
settings runs its own study."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # imported when a study runs: the unit tests' collection does not pay for it
    from harness.run.study import StudyResult

SYSTEMS = ("direct", "nginx", "sluice")
# 6 s of hold: six one-second bins for the multi-host comparison (tests/test_multihost.py runs
# its own study with these settings); the capture 3 s of it, from its second second.
SETTINGS = {"hold_s": 6.0, "max_hold_s": 12.0, "seed": 3, "wire_capture_s": 3.0,
            "wire_capture_offset_s": 1.0}


@dataclass(frozen=True)
class SmokeStudy:
    result: StudyResult
    lines: tuple[str, ...]      # the progress lines it printed

    @property
    def study_dir(self) -> Path:
        return self.result.study_dir

    def run_dir(self, system: str) -> Path:
        return self.study_dir / "runs" / system / "1"


def run_smoke_study(out_dir: Path) -> SmokeStudy:
    from harness.model.config import from_profile
    from harness.run.preflight import preflight
    from harness.run.study import run_study
    lines: list[str] = []
    config = from_profile("smoke", gateways=list(SYSTEMS), out_dir=str(out_dir), **SETTINGS)
    return SmokeStudy(run_study(preflight(config), progress=lines.append), tuple(lines))
