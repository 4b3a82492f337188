"""Every kind of artifact the harness writes, each with its own format version.

A file carries its kind's version (``schema_version`` in JSON, in the Parquet metadata); the
one reader of each kind checks it against ``reads`` and refuses any other with one line naming
the file, the version found and the versions known. A version older than ``version`` is brought
up to it by harness.model.migrate, the only place that knows the older versions; each change
of a format is a new version there and a recorded file of the older one under tests/fixtures/
(tests/test_formats.py loads every one). artifacts/README.md lists the versions.

Standard library only: the Locust processes import harness.model.schema, which imports this.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.model.errors import UserError


class UnknownVersionError(UserError, ValueError):
    """An artifact written in a format this harness does not know (newer, or not ours)."""


@dataclass(frozen=True)
class Format:
    kind: str                 # what the file is, for messages
    file: str                 # its name (in a study, run or suite directory, or baselines/gate/)
    version: int              # the version this harness writes
    reads: tuple[int, ...]    # the versions it reads; older ones are migrated
    changes: str              # what each version changed, newest last

    def check(self, found, source: str) -> int:
        """``found`` as an int when this harness reads it; else UnknownVersionError."""
        if isinstance(found, bool) or found not in self.reads:
            raise UnknownVersionError(
                f"{source}: {self.kind} schema_version {found!r} is not one this harness reads "
                f"(known: {', '.join(map(str, self.reads))})")
        return int(found)


STUDY_MANIFEST = Format(
    "study manifest", "manifest.json", 4, (1, 2, 3, 4),
    "1: systems without roles (the folder name implied one); 2: each system's role; 3: no "
    "fault_lead_s (the load arms the faults when it starts); 4: the floor's and the hop's kind "
    "is control")
RUN_MANIFEST = Format(
    "run manifest", "manifest.json", 4, (1, 2, 3, 4),
    "1: keys of several spellings; 2: one spelling and type per key; 3: no spec.mock.fault_lead_s; "
    "4: the spec's parts hold their settings' names, the spec its system's files and the "
    "instruments (key recipe 3); the floor's and the hop's kind is control")
REQUESTS_TABLE = Format(
    "requests table", "requests.parquet", 5, (1, 2, 3, 4, 5),
    "1: before streaming and open-loop columns; 2: may lack the identity, wire and error-body "
    "columns (added while 2 was current); 3: no error_class; 4: no abandoned_t_unix_s, "
    "content_chars, retry_after_s, content_chars_sent (no truncated verdict); 5: every column")
SAMPLES_TABLE = Format(
    "samples table", "samples.parquet", 2, (1, 2),
    "1: may lack inflight_requests and host; 2: every column")
MOCK_REQUESTS_TABLE = Format(
    "mock requests table", "mock_requests.parquet", 4, (2, 3, 4),
    "before 2: no file (the raw logs under mock-stats/ are read instead); 2: may lack "
    "provider (always the primary then); 3: no content_chars_sent, frames_sent, "
    "client_closed_t_unix_ns, ended (missing); 4: every column")
MOCK_STATS = Format(
    "mock stats", "mock_stats.json", 2, (1, 2), "1 and 2: the same keys")
FAULT_SCHEDULE = Format(
    "fault schedule", "faults.json", 2, (2,), "2: schedule, seed, epoch_unix_s")
SUITE_MANIFEST = Format(
    "suite manifest", "manifest.json", 3, (2, 3),
    "2: the suite file, its axes and one entry per cell; 3: no fault_lead_s in the cells' configs")
PROBES_TABLE = Format(
    "probes table", "probes.parquet", 1, (1,), "1: every column")
GATE_RECORD = Format(
    "gate record", "<profile>-<cpu-model>.json", 2, (1, 2),
    "1: baselines/gate.json, one for every machine, ratios to the reference; 2: one per CPU "
    "model and profile, head against base and against the reference")

COUNTS = Format(
    "counts", "counts.json", 1, (1,),
    "1: per build (head, base, base~2, or a system), per case: instructions, allocator calls and "
    "system calls by name per request, RSS, statuses; the sizes and the machine")

PUBLICATION = Format(
    "publication", "publication.json", 1, (1,),
    "1: the standard study (its systems, keys, stale marks and raw files' SHA-256 and sizes), "
    "the fault and in-flight suites or why not, the tables written beside it")

# The Parquet tables by schema table name (harness.model.schema.TABLES).
TABLE_FORMATS = {"requests": REQUESTS_TABLE, "samples": SAMPLES_TABLE,
                 "mock_requests": MOCK_REQUESTS_TABLE, "probes": PROBES_TABLE}
FORMATS = (STUDY_MANIFEST, RUN_MANIFEST, REQUESTS_TABLE, SAMPLES_TABLE, MOCK_REQUESTS_TABLE, PROBES_TABLE,
           MOCK_STATS, FAULT_SCHEDULE, SUITE_MANIFEST, GATE_RECORD, COUNTS, PUBLICATION)
