"""Which study entries run from another commit, and which get extra environment: the study's
``builds`` ("ENTRY=REF") and ``system_env`` ("ENTRY:NAME=VALUE") items, parsed and checked.

Two builds of one system side by side in one study is how the regression gate compares a
candidate with its base on one machine (as asv's ``continuous`` does): ``sluice~base`` runs
gateways/sluice as committed at the base commit, ``sluice`` runs this working tree.
"""
from __future__ import annotations

import re
from typing import Sequence

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def build_refs(items: Sequence[str]) -> dict[str, str]:
    """{entry: git ref} from "ENTRY=REF" items (assumed valid: see ``problems``)."""
    return dict(item.split("=", 1) for item in items)


def system_env(items: Sequence[str]) -> dict[str, dict[str, str]]:
    """{entry: {NAME: VALUE}} from "ENTRY:NAME=VALUE" items (assumed valid)."""
    out: dict[str, dict[str, str]] = {}
    for item in items:
        entry, assignment = item.split(":", 1)
        name, value = assignment.split("=", 1)
        out.setdefault(entry, {})[name] = value
    return out


def problems(builds: Sequence[str], env: Sequence[str], entries: Sequence[str]) -> list[str]:
    """One line per bad item, naming the parameter."""
    out = []
    seen = set()
    for item in builds:
        entry, eq, ref = item.partition("=")
        if not eq or not entry or not ref.strip():
            out.append(f"builds: expected ENTRY=REF (e.g. sluice~base=HEAD~1), got {item!r}")
        elif entry not in entries:
            out.append(f"builds: {entry!r} is not one of the study's systems {list(entries)}")
        elif entry in seen:
            out.append(f"builds: {entry!r} is given twice")
        else:
            seen.add(entry)
    for item in env:
        entry, colon, assignment = item.partition(":")
        name, eq, _ = assignment.partition("=")
        if not colon or not eq or not entry:
            out.append(f"system_env: expected ENTRY:NAME=VALUE (e.g. sluice:SLUICE_TEST_DELAY_MS=1), "
                       f"got {item!r}")
        elif entry not in entries:
            out.append(f"system_env: {entry!r} is not one of the study's systems {list(entries)}")
        elif not _ENV_NAME.match(name):
            out.append(f"system_env: {name!r} is not an environment variable name")
    return out
