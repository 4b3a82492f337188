"""A system's own words about the limit it met, as evidence for the in-flight lane's stop: from its
runs' ``limit_lines`` (the lines its gateway.toml's [limits] declares, found in its logs after each
run: harness/files/limit_logs.py), the first declared pattern that matched by the end of a step,
its first line quoted with its count."""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from harness.files.limit_logs import ELLIPSIS, excerpt
from harness.model.manifests import RunManifest

# Characters of the line quoted in the evidence.
EVIDENCE_CHARS = 120


def evidence(runs: Iterable[RunManifest], step_ends: Mapping[str, float]) -> str:
    """The evidence of ``runs`` (one system's) at one step, e.g. ``nginx-error.log:
    "2026/12/01 21:31:12 [alert] 7#7: 8192 worker_connections are not enough, …" (×1,204)``:
    the first declared pattern with a line in a run of ``step_ends`` (run_id -> the end of that
    step's window in the run), its first line quoted (from the first such run, in the order
    given), its count summed over those runs ("in N runs" when more than one; "at least" when a
    log was longer than what was read of it). A line after the step's end (the stop, the
    cool-down) does not count; a line without a time counts, since it cannot be placed. "" when
    no declared line was found."""
    found: dict[str, list] = {}        # pattern -> [LimitLine, ...], patterns in declared order
    for run in runs:
        end = step_ends.get(run.run_id)
        if end is None:
            continue
        for line in run.limit_lines:
            seen = found.setdefault(line.pattern, [])
            if line.count > 0 and (line.t_unix_s is None or line.t_unix_s < end):
                seen.append(line)
    pattern, lines = next(((p, ls) for p, ls in found.items() if ls), ("", []))
    if not lines:
        return ""
    first = lines[0]
    total = sum(line.count for line in lines)
    count = (("at least " if any(line.partial for line in lines) else "") + f"×{total:,}"
             + (f" in {len(lines)} runs" if len(lines) > 1 else ""))
    return f'{first.log}: "{_quoted(first.line, pattern)}" ({count})'


def _quoted(line: str, pattern: str) -> str:
    """The stored line cut to EVIDENCE_CHARS around the pattern's match (its start when the
    stored line no longer shows the match), keeping the ellipses of its earlier cut."""
    head, tail = line.startswith(ELLIPSIS), line.endswith(ELLIPSIS)
    body = line[len(ELLIPSIS) if head else 0:len(line) - len(ELLIPSIS) if tail else len(line)]
    match = re.search(pattern, body)
    start, end = (match.start(), match.end()) if match else (0, 0)
    cut = excerpt(body, start, end, EVIDENCE_CHARS)
    return ((ELLIPSIS if head and not cut.startswith(ELLIPSIS) else "") + cut
            + (ELLIPSIS if tail and not cut.endswith(ELLIPSIS) else ""))
