"""The counting lane: every system of a study counted once (plain relay and a streamed answer),
instructions and system calls per request, under Valgrind and strace (harness/run/count_system.py).

These figures do not depend on the CPU model or on the machine's noise, as CPU time does. A
system Valgrind cannot run, or that did not run in the study, is kept with the reason.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from harness.files.study_files import StudyFiles
from harness.model.count_cases import LANE_CASES, Sizes
from harness.model.gateway_spec import GatewaySpec
from harness.remote.machine import this_machine
from harness.run.count_system import BuildCount, count_system, write_counts


def run_count_lane(specs: dict[str, GatewaySpec], versions: dict[str, str],
                   skipped: dict[str, str], commit: str, study_dir: Path, sizes: Sizes,
                   progress: Callable[[str], None] = print) -> Path:
    """Count each entry of ``specs`` in LANE_CASES into ``study_dir``/counts.json; an entry in
    ``skipped`` is kept with its reason. Never raises for one system's failure."""
    files = StudyFiles(study_dir)
    counted = []
    for entry, spec in specs.items():
        if entry in skipped:
            counted.append(BuildCount(entry, spec.name, "", commit, (), sizes,
                                      failed=f"not run in this study: {skipped[entry]}"))
            continue
        t = time.monotonic()
        build = count_system(spec, LANE_CASES, files.count_dir, entry, versions.get(entry, ""),
                             commit, sizes, progress=lambda line: progress(f"counting lane: {line}"))
        counted.append(build)
        progress(f"counting lane: {entry} "
                 + (f"not counted: {build.failed}" if build.failed else "counted")
                 + f" ({time.monotonic() - t:.0f} s)")
    write_counts(files.counts_path, counted, this_machine(), "lane")
    return files.counts_path
