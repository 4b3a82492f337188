"""The gate's history: one record per CPU model and profile under ``baselines/gate/``.

A record says which build was accepted on which machine, and what it measured there: its figures
over the base build it was compared with, and over the reference (nginx) in the same study. It
decides no verdict: the gate compares two builds measured side by side (harness/verdicts/gate.py).
It gives ``python -m harness gate run`` its default base (the accepted commit), and the report
shows it as history. A ratio measured on one CPU model is never a yardstick on another.

File versions (``schema_version``; the reader refuses any other and migrates older ones):

* 1: ``baselines/gate.json``, one file for every machine: the candidate's ratios to the
  reference (``figures``), judged against the next study's. Migrated to 2 with its ratios kept
  as ``head_vs_reference`` and no ``head_vs_base``.
* 2: one file per CPU model and profile, ``baselines/gate/<profile>-<cpu-model>.json``
  (format: baselines/README.md).
"""
from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Mapping

from harness.files.atomic import write_atomic
from harness.model.config import REPO_DIR
from harness.model.errors import UserError
from harness.model.formats import GATE_RECORD, UnknownVersionError
from harness.verdicts import rules

GATE_RECORD_VERSION = GATE_RECORD.version
HISTORY_DIR = REPO_DIR / "baselines" / "gate"
# Version 1's figure names -> the run_summary metric each was a ratio of.
_V1_FIGURES = {"throughput_ratio": "throughput_rps", "overhead_p50_ratio": "overhead_vs_mock_p50_ms",
               "overhead_p95_ratio": "overhead_vs_mock_p95_ms",
               "cpu_ms_per_request_ratio": "cpu_ms_per_request"}
_REQUIRED = ("profile", "machine", "commit", "study_id", "head_vs_base", "head_vs_reference")


class HistoryError(UserError, ValueError):
    """A record that cannot be read; the message names the file and what to do."""


def record_name(profile: str, cpu_model: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", (cpu_model or "unknown cpu").lower()).strip("-")
    return f"{profile}-{slug}.json"


def same_cpu(a: Mapping, b: Mapping) -> bool:
    """Two machines' facts name the same CPU model and core count."""
    return (str(a.get("cpu_model") or "?") == str(b.get("cpu_model") or "?")
            and a.get("cpu_count") == b.get("cpu_count"))


def machine_text(m: Mapping) -> str:
    return (f"{m.get('cpu_model') or 'unknown CPU'}, {m.get('cpu_count') or '?'} cores, "
            f"kernel {m.get('kernel') or 'unknown'}")


def migrate(data: dict, source: str) -> dict:
    """A record of any known version, as version 2."""
    try:
        version = GATE_RECORD.check(data.get("schema_version"), source)
    except UnknownVersionError as exc:
        raise HistoryError(str(exc)) from None
    if version == GATE_RECORD_VERSION:
        return data
    # version 1, the only older one
    figures = data.get("figures") or {}
    return {
        "schema_version": GATE_RECORD_VERSION,
        "profile": data.get("profile", "gate"),
        "machine": {**(data.get("machine") or {}), "kernel": (data.get("machine") or {}).get("kernel")},
        "commit": data.get("commit", "unknown"),
        "base_commit": "",
        "study_id": data.get("study_id", "?"),
        "created_t_unix_s": data.get("created_t_unix_s"),
        "head": data.get("candidate"), "base": None, "reference": data.get("reference"),
        "head_vs_base": {},
        "head_vs_reference": {_V1_FIGURES[k]: {"mean": v.get("mean"), "sd": v.get("sd"),
                                               "n": v.get("n"), "ratios": []}
                              for k, v in figures.items() if k in _V1_FIGURES},
        "migrated_from": 1,
    }


def read_record(path: str | Path) -> dict:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise HistoryError(f"{path}: not a readable gate record ({exc})") from None
    if not isinstance(data, dict):
        raise HistoryError(f"{path}: not a gate record (a JSON object)")
    data = migrate(data, str(path))
    missing = [k for k in _REQUIRED if k not in data]
    if missing or not isinstance(data.get("machine"), dict):
        raise HistoryError(f"{path}: missing or bad {', '.join(missing) or 'machine'}")
    return {**data, "path": str(path)}


def records(history_dir: str | Path = HISTORY_DIR) -> list[dict]:
    """Every record there, newest first (by when it was written)."""
    found = [read_record(p) for p in sorted(Path(history_dir).glob("*.json"))]
    return sorted(found, key=lambda r: -(r.get("created_t_unix_s") or 0.0))


def for_machine(machine: Mapping, profile: str,
                history_dir: str | Path = HISTORY_DIR) -> tuple[dict | None, bool]:
    """(the record to show or take a base from, whether it is this CPU model's): this CPU
    model's record of the profile, else the newest of the profile from any machine."""
    of_profile = [r for r in records(history_dir) if r.get("profile") == profile]
    mine = [r for r in of_profile if same_cpu(r["machine"], machine)]
    if mine:
        return mine[0], True
    return (of_profile[0], False) if of_profile else (None, False)


def _ratio_json(r: rules.PairedRatio) -> dict:
    return {"mean": None if math.isnan(r.mean) else r.mean,
            "sd": None if math.isnan(r.sd) else r.sd, "n": r.n, "ratios": list(r.ratios)}


def make_record(study, head: str, base: str, reference: str | None,
                head_vs_base: tuple[rules.PairedRatio, ...],
                head_vs_reference: tuple[rules.PairedRatio, ...], now: float | None = None) -> dict:
    m = study.manifest
    systems = m.systems
    return {
        "schema_version": GATE_RECORD_VERSION,
        "profile": m.config.profile,
        "machine": {k: m.machine.get(k) for k in ("cpu_model", "cpu_count", "kernel", "hostname")},
        "commit": systems[head].source_commit if head in systems and systems[head].source_commit
        else (m.git_commit or "unknown"),
        "base_commit": systems[base].source_commit if base in systems else "",
        "study_id": m.study_id or study.path.name,
        "created_t_unix_s": time.time() if now is None else now,
        "head": head, "base": base, "reference": reference,
        "head_vs_base": {r.metric: _ratio_json(r) for r in head_vs_base if r.measured},
        "head_vs_reference": {r.metric: _ratio_json(r) for r in head_vs_reference if r.measured},
    }


def write_record(record: Mapping, history_dir: str | Path = HISTORY_DIR) -> Path:
    path = Path(history_dir) / record_name(record["profile"], record["machine"].get("cpu_model") or "")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps({k: v for k, v in record.items() if k != "path"}, indent=2) + "\n")
    return path
