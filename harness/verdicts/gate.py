"""The performance regression gate: two builds of one system on one machine, as asv's
``continuous`` compares two commits, decided on counts and checked on time.

    python -m harness gate judge   GATE_DIR
    python -m harness gate refresh GATE_DIR [--history-dir baselines/gate]

A gate directory (``artifacts/<gate-id>/``) holds:

1. ``counts.json``: instructions, allocator calls and system calls per request of the base build
   (counted twice) and the head build (harness/run/count_system.py), judged by
   harness/verdicts/count_verdict.py. These do not depend on the machine's noise, so they decide;
2. ``timed/``: a short side-by-side study (profile ``gate``: nginx, the base build
   ``sluice~base`` and the head build ``sluice``, interleaved round by round), run after the
   counts whatever they said. It catches what counts cannot see (a sleep, a lock, a blocking call): a
   latency figure (``TIMED_RULES``) fails when every round's head / base ratio is over 25 %
   worse (``every_round``); its other figures are information.

An older gate study alone (with its A/A pair) is still judged as it was: every figure of
rules.GATED, each guarded by the A/A pair's own noise.

No stored number decides a verdict. The history (harness/verdicts/history.py) is printed beside
it: this study's head / reference ratios, and the accepted record of this CPU model (or, from
another CPU model, marked as such: never a yardstick). ``refresh`` writes this CPU model's
record from a gate that passed, deliberately; ``check`` never writes.

Exit codes: 0 ok (or, for an old study, inconclusive), 1 a figure regressed (or a run failed),
2 bad input.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.files.readers import ArtifactError, read_counts
from harness.files.study_files import StudyFiles
from harness.model.metrics import metric
from harness.model.roles import Roles
from harness.stats.loading import Study, load_study
from harness.stats.runs import run_summary
from harness.verdicts import aa, count_verdict, history, rules
from harness.verdicts.inputs import VerdictInputError, require_completed
from harness.verdicts.rules import pct

EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2
MIN_ROUNDS = 2
# The counting gate's timed check: only what counts cannot see (a sleep, a lock, a blocking
# call) shows as latency; a figure fails when every round is over 25 % worse (every_round).
TIMED_RULES = (rules.Rule("net_overhead_p50_ms", 0.25), rules.Rule("wire_in_gateway_p50_us", 0.25))
# Shown as history beside the verdict: the head over the reference in the same study.
HISTORY_METRICS = ("cpu_ms_per_request", "wire_in_gateway_p50_us", "net_overhead_p50_ms",
                   "throughput_rps")


class GateInputError(VerdictInputError):
    """The gate cannot judge: bad or missing input. The message says what to do (exit code 2)."""


@dataclass(frozen=True)
class GateResult:
    exit_code: int
    lines: tuple[str, ...]
    guarded: tuple[rules.Guarded, ...] = ()
    decided: bool = False            # every measured figure decided: no regression hid in noise

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@dataclass(frozen=True)
class Builds:
    """The gate's two entries in a study, and what the manifest says each ran as."""
    head: str
    base: str
    head_commit: str
    base_commit: str
    head_version: str
    base_version: str


def builds_of(study: Study, head: str | None = None, base: str | None = None) -> Builds:
    roles = Roles.of(study.manifest, gate_system=head, gate_base=base)
    if not roles.gate_system or not roles.gate_base:
        raise GateInputError("this study compares no two builds (config.gate_base_system is "
                             "empty): run `python -m harness gate run`, or give --head and --base")
    systems = study.manifest.systems
    info = {name: systems.get(name) for name in (roles.gate_system, roles.gate_base)}
    commit = study.manifest.git_commit or "unknown"
    return Builds(roles.gate_system, roles.gate_base,
                  (info[roles.gate_system] and info[roles.gate_system].source_commit) or commit,
                  (info[roles.gate_base] and info[roles.gate_base].source_commit) or commit,
                  (info[roles.gate_system] and info[roles.gate_system].version) or "unknown",
                  (info[roles.gate_base] and info[roles.gate_base].version) or "unknown")


def _load(study_dir: str | Path) -> tuple[Study, pd.DataFrame]:
    try:
        study = load_study(study_dir)
    except ArtifactError as exc:          # IntegrityError included
        raise GateInputError(str(exc)) from None
    return study, run_summary(study)


def _require(rs: pd.DataFrame, b: Builds, sid: str) -> None:
    require_completed(rs, (("head", b.head), ("base", b.base)), GateInputError, f"study {sid}",
                      "the gate compares both builds in one study",
                      "the gate judges only whole studies of both builds, rerun it")
    if len(rules.paired_rounds(rs, b.head, b.base)) < MIN_ROUNDS:
        raise GateInputError(f"study {sid}: {b.head} and {b.base} completed runs together in fewer "
                             f"than {MIN_ROUNDS} rounds; the gate pairs them by round")


def short(commit: str) -> str:
    commit = str(commit or "unknown")
    dirty = commit.endswith("-dirty")
    return commit[: -len("-dirty")][:12] + "-dirty" if dirty else commit[:12]


def _history_lines(study: Study, rs: pd.DataFrame, head: str, history_dir: Path) -> list[str]:
    """This study's head / reference ratios, and the record of this CPU model (or another's,
    marked): history, never a yardstick."""
    out = []
    reference = Roles.of(study.manifest).reference
    if reference and reference in set(rs["system"]):
        for name in HISTORY_METRICS:
            r = rules.paired_ratio(rs, head, reference, name)
            if r.measured:
                out.append(f"history: {head}/{reference} {metric(name).label} "
                           f"{r.mean:.3f} in this study")
    try:
        record, mine = history.for_machine(study.manifest.machine, study.manifest.config.profile,
                                           history_dir)
    except history.HistoryError as exc:
        return out + [f"history: cannot read the records ({exc})"]
    if record is None:
        return out + [f"history: no record in {history_dir} for profile "
                      f"{study.manifest.config.profile!r}"]
    where = ("this CPU model's record" if mine else
             f"a record from another CPU model ({history.machine_text(record['machine'])}): "
             "shown as history only, never a yardstick here")
    cpu = (record.get("head_vs_reference") or {}).get("cpu_ms_per_request") or {}
    figure = (f": {record.get('head')}/{record.get('reference')} CPU time per request "
              f"{cpu['mean']:.3f}" if cpu.get("mean") is not None else "")
    out.append(f"history: {where}, commit {short(record['commit'])} (study "
               f"{record['study_id']}){figure}")
    return out


def _worse_rounds(j: rules.Judged) -> list[bool]:
    """Per round: its ratio worse than the rule's limit, in the figure's bad direction."""
    limit = j.rule.max_change
    return [r - 1 > limit if j.rule.lower_is_better else 1 - r > limit for r in j.ratio.ratios]


def every_round(j: rules.Judged) -> rules.Guarded:
    """The timed check's rule: a figure fails when every round's ratio is worse than its limit.
    On two shared cores one round of a latency figure moves by tens of percent, so one round
    past the limit (or a mean it pulls there) is noise, and two rounds are too few for a t-test
    to call even a steady rise significant; a sleep, a lock or a blocking call in the request
    path is paid in every round."""
    if j.missing:
        return rules.Guarded(j, math.nan, math.nan, rules.NOT_MEASURED)
    return rules.Guarded(j, math.nan, j.rule.max_change,
                         rules.FAIL if all(_worse_rounds(j)) else rules.OK)


def every_round_line(g: rules.Guarded) -> str:
    """The figure's line, with how many of its rounds were worse than the limit."""
    if g.outcome == rules.NOT_MEASURED:
        return rules.guarded_line(g)
    text = rules.guarded_line(g).replace("; no A/A figure guards it", "")
    return (f"{text}; {sum(_worse_rounds(g.judged))} of {g.judged.ratio.n} rounds worse than "
            "that (it fails when every round is)")


def _judged_counts(gate_dir: Path) -> count_verdict.CountVerdict | str:
    """The verdict on a gate directory's counts.json, or why it cannot be read."""
    try:
        return count_verdict.judge(read_counts(StudyFiles(gate_dir).counts_path))
    except ArtifactError as exc:
        return str(exc)


def judge(study_dir: str | Path, history_dir: str | Path = history.HISTORY_DIR,
          head: str | None = None, base: str | None = None, timed_only: bool = False) -> GateResult:
    """Judge a gate directory (its counts.json, then its timed study ``timed/``), or one gate
    study alone. ``timed_only``: the study is the counting gate's timed check, which fails only
    on a latency figure (``TIMED_RULES``) worse in every round (``every_round``) and shows the
    other figures as information. Never writes anything."""
    path = Path(study_dir)
    if StudyFiles(path).counts_path.is_file():
        verdict = _judged_counts(path)
        if isinstance(verdict, str):
            return GateResult(EXIT_BAD_INPUT, (f"gate: cannot judge: {verdict}",))
        if not StudyFiles(path / "timed").exists():
            if not verdict.ok:
                return GateResult(EXIT_FAIL, (*verdict.lines, "gate: FAIL — on the counts"))
            return GateResult(EXIT_BAD_INPUT, (*verdict.lines, f"gate: cannot judge: {path} has no "
                                               "timed study (timed/): the gate stopped before it"))
        timed = judge(path / "timed", history_dir, head, base, timed_only=True)
        if not verdict.ok:
            return GateResult(EXIT_FAIL, (*verdict.lines, *timed.lines, "gate: FAIL — on the counts"),
                              timed.guarded, timed.decided)
        return GateResult(timed.exit_code, (*verdict.lines, *timed.lines), timed.guarded, timed.decided)
    return _judge_study(path, Path(history_dir), head, base, timed_only)


def _judge_study(study_dir: Path, history_dir: Path, head: str | None, base: str | None,
                 timed_only: bool) -> GateResult:
    try:
        study, rs = _load(study_dir)
        sid = study.manifest.study_id or study.path.name
        b = builds_of(study, head, base)
        _require(rs, b, sid)
        aa_verdict = None
        if Roles.of(study.manifest).aa_pair:
            try:
                aa_verdict = aa.judge(rs, *aa.pair(study.manifest))
            except aa.AAInputError as exc:
                raise GateInputError(f"its A/A pair: {exc}") from None
        judged = rules.judge_all(rs, b.head, b.base, TIMED_RULES if timed_only else rules.GATED)
        if all(j.missing for j in judged):
            raise GateInputError("no figure of the two builds could be paired: "
                                 + "; ".join(f"{j.rule.label}: {j.missing}" for j in judged))
    except GateInputError as exc:
        return GateResult(EXIT_BAD_INPUT, (f"gate: cannot judge: {exc}",))
    m = study.manifest.machine
    lines = [f"gate: study {sid} on {history.machine_text(m)}",
             f"gate: head {b.head} ({short(b.head_commit)}, {b.head_version}) against base "
             f"{b.base} ({short(b.base_commit)}, {b.base_version}), side by side, paired by round"]
    aa_by_metric = {}
    if aa_verdict is not None:
        lines += aa_verdict.lines()
        aa_by_metric = {j.rule.metric: j for j in aa_verdict.judged}
    if timed_only:
        guarded = tuple(every_round(j) for j in judged)
        lines += [every_round_line(g) for g in guarded]
    else:
        guarded = tuple(rules.guard(j, aa_by_metric.get(j.rule.metric)) for j in judged)
        lines += [rules.guarded_line(g) for g in guarded]
    lines += [rules.tail_line(t) for t in rules.tails(rs, b.head, b.base)]
    failed = [g for g in guarded if g.outcome == rules.FAIL]
    undecided = [g for g in guarded if g.outcome == rules.UNDECIDED]
    if timed_only:
        info = [rules.guard(j, aa_by_metric.get(j.rule.metric))
                for j in rules.judge_all(rs, b.head, b.base) if j.rule.metric not in
                {r.metric for r in TIMED_RULES}]
        lines += [f"information: {rules.guarded_line(g)}" for g in info]
    if failed:
        lines.append(f"gate: FAIL — {len(failed)} of {sum(g.outcome != rules.NOT_MEASURED for g in guarded)} "
                     "judged figures regressed: " + ", ".join(g.judged.rule.label for g in failed))
        code = EXIT_FAIL
    elif undecided:
        lines.append("gate: INCONCLUSIVE — undecided: " + "; ".join(
            (f"{g.judged.rule.label} worse by {pct(g.judged.change if g.judged.rule.lower_is_better else -g.judged.change)}"
             f" but not significantly (p = {g.p_value:.2g})") if not math.isnan(g.p_value) else
            f"{g.judged.rule.label}: the A/A pair moved {pct(g.noise)}, more than its limit"
            for g in undecided) + "; this machine is too noisy right now to say those did not "
            "regress, and no figure regressed significantly")
        code = EXIT_OK
    else:
        lines.append("gate: ok — no figure of the head build is worse than the base build's "
                     "beyond its limit")
        code = EXIT_OK
    lines += _history_lines(study, rs, b.head, history_dir)
    return GateResult(code, tuple(lines), guarded, not undecided)


def refresh(study_dir: str | Path, history_dir: str | Path = history.HISTORY_DIR,
            head: str | None = None, base: str | None = None, now: float | None = None) -> GateResult:
    """Write this CPU model's record from a completed gate study, or from a gate directory
    whose counts passed (its timed study, ``timed/``), deliberately."""
    path = Path(study_dir)
    if StudyFiles(path).counts_path.is_file():
        verdict = _judged_counts(path)
        if isinstance(verdict, str):
            return GateResult(EXIT_BAD_INPUT, (f"gate refresh: refused: {verdict}",))
        if not verdict.ok:
            return GateResult(EXIT_BAD_INPUT, (*verdict.lines, "gate refresh: refused: the "
                                               "counts did not pass; a record comes only from "
                                               "a gate that did"))
        study_dir = path / "timed"
    try:
        study, rs = _load(study_dir)
        if study.manifest.status != "completed":
            raise GateInputError(f"study {study.path} is {study.manifest.status!r}, not completed "
                                 f"({study.manifest.reason or 'no reason recorded'}); a record "
                                 "comes only from a whole study")
        b = builds_of(study, head, base)
        _require(rs, b, study.manifest.study_id or study.path.name)
    except GateInputError as exc:
        return GateResult(EXIT_BAD_INPUT, (f"gate refresh: refused: {exc}",))
    reference = Roles.of(study.manifest).reference
    vs_base = tuple(rules.paired_ratio(rs, b.head, b.base, r.metric) for r in rules.GATED)
    vs_ref = (tuple(rules.paired_ratio(rs, b.head, reference, name) for name in HISTORY_METRICS)
              if reference else ())
    record = history.make_record(study, b.head, b.base, reference, vs_base, vs_ref, now)
    path = history.write_record(record, history_dir)
    lines = [f"gate refresh: wrote {path}: commit {short(record['commit'])} accepted on "
             f"{history.machine_text(record['machine'])} (study {record['study_id']})"]
    if str(record["commit"]).endswith("-dirty"):
        lines.append("gate refresh: note: that study ran on a tree with uncommitted changes")
    for name, r in {**record["head_vs_base"], **{f"{k} vs {reference}": v
                                                 for k, v in record["head_vs_reference"].items()}}.items():
        lines.append(f"  {name}: {r['mean']:.3f} (n={r['n']})")
    return GateResult(EXIT_OK, tuple(lines))


def base_ref(machine: dict, profile: str = "gate",
             history_dir: str | Path = history.HISTORY_DIR) -> tuple[str, str]:
    """(the base commit for a gate run, where it came from): the newest accepted commit of the
    profile, whichever CPU model's record holds it. The counts decide, and they do not depend on
    the machine, so a commit accepted on one model is the base on every one (no ratio travels)."""
    try:
        newest = next((r for r in history.records(history_dir) if r.get("profile") == profile),
                      None)
    except history.HistoryError as exc:
        raise GateInputError(str(exc)) from None
    if newest is None:
        raise GateInputError(f"no gate record in {history_dir} to take the base commit from; "
                             "give --base REF (e.g. --base main~1)")
    where = ("this CPU model's record" if history.same_cpu(newest["machine"], machine)
             else f"the record of {newest['machine'].get('cpu_model') or 'another CPU model'}")
    return newest["commit"], f"the newest commit accepted, in {newest['path']} ({where})"
