"""The performance regression gate: one system's figures, as ratios to the reference measured in
the same study, against a committed baseline (baselines/gate.json, documented in baselines/README.md).

    python -m harness gate check   STUDY_DIR [--baseline baselines/gate.json]
    python -m harness gate refresh STUDY_DIR [--baseline baselines/gate.json]

``check`` exits 0 when no figure regressed, 1 when at least one did (one ``FAIL`` line each),
2 on bad input (no baseline, a study without the candidate or the reference, failed runs of
either, a figure that cannot be computed). ``refresh`` writes the baseline from a study; it is
the only thing that ever writes it, and ``check`` never calls it.

The figures, for the candidate (the study's ``config.gate_system``, e.g. sluice) relative to the
reference (its ``config.reference_system``, e.g. nginx) in the same study, over completed runs
(``--candidate`` and ``--reference`` override them):

* ``throughput_ratio``          candidate / reference throughput (higher is better);
* ``overhead_p50_ratio``        candidate / reference median overhead vs the mock (lower is better);
* ``overhead_p95_ratio``        the same at p95 (lower is better);
* ``cpu_ms_per_request_ratio``  candidate / reference CPU-ms per request (lower is better);
* ``rss_peak_bytes``            the candidate's peak RSS in bytes, absolute (lower is better).

Why ratios: on a shared 2-core machine the absolute numbers move with whatever else the machine
does (another developer's build, the load generator's own CPU). nginx, measured in the same study
and interleaved round by round with the candidate, feels the same disturbance, so the ratio
cancels most of it. Peak RSS is the exception: it hardly depends on the machine's load and a
ratio to nginx's (a different architecture) would add nginx's noise for nothing.

Overheads vs the mock can be near 0 ms (nginx adds well under a millisecond), so a ratio to them
can explode or change sign. The reference's overhead is floored at ``OVERHEAD_EPSILON_MS``
(0.05 ms, about the resolution of the latency measurement on this machine) before dividing; every
output line that used the floor says so.

A figure fails when it is worse than the baseline, in its bad direction only, by more than
``max(min_threshold, sd_multiple × the baseline's relative sd)`` (defaults 10% and 3): the 10%
floor matches the report's verdict rule (a difference under 10% is never called a difference),
and three standard deviations of the accepted run keep a noisy figure from failing by chance.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from harness.checks.inputs import CheckInputError, floor_of, require_completed
from harness.model.config import REPO_DIR
from harness.model.metrics import metric
from harness.model.roles import Roles
from harness.run.atomic import write_atomic
from harness.stats.across import describe, ratio_with_sd
from harness.stats.loading import ArtifactError, Study, load_study
from harness.stats.metrics import OVERHEAD_EPSILON_MS
from harness.stats.runs import run_summary
from report.format import value as show_value

SCHEMA_VERSION = 1
DEFAULT_BASELINE = REPO_DIR / "baselines" / "gate.json"
MIN_THRESHOLD = 0.10        # a figure never fails for less than 10 % ...
SD_MULTIPLE = 3.0           # ... nor for less than 3 × the baseline's relative sd
MIN_PAIRED_ROUNDS = 2       # fewer paired rounds than this: ratio of means instead

EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2


class GateInputError(CheckInputError):
    """The gate cannot judge: bad or missing input. The message says what to do (exit code 2)."""


@dataclass(frozen=True)
class FigureDef:
    """A gate figure; its words, better direction and whether it can be ~0 are its metric's."""
    name: str               # key in the baseline file
    metric: str             # run_summary column (in the metric registry)
    kind: str               # "ratio" (candidate / reference) or "absolute" (candidate only)

    @property
    def label(self) -> str:
        return metric(self.metric).label + (" ratio" if self.kind == "ratio" else "")

    @property
    def direction(self) -> str:
        return metric(self.metric).better.value

    @property
    def floor_reference(self) -> bool:
        """The reference is floored at OVERHEAD_EPSILON_MS before dividing (an overhead)."""
        return self.kind == "ratio" and metric(self.metric).near_zero


FIGURES: tuple[FigureDef, ...] = (
    FigureDef("throughput_ratio", "throughput_rps", "ratio"),
    FigureDef("overhead_p50_ratio", "overhead_vs_mock_p50_ms", "ratio"),
    FigureDef("overhead_p95_ratio", "overhead_vs_mock_p95_ms", "ratio"),
    FigureDef("cpu_ms_per_request_ratio", "cpu_ms_per_request", "ratio"),
    FigureDef("rss_peak_bytes", "rss_peak_bytes", "absolute"),
)
FIGURES_BY_NAME = {f.name: f for f in FIGURES}


@dataclass(frozen=True)
class Figure:
    """One figure measured in one study."""
    name: str
    mean: float
    sd: float               # NaN when it cannot be estimated (one round / one run)
    n: int                  # paired rounds, or runs (the fewer of the two systems') otherwise
    direction: str
    method: str             # "paired by round", "ratio of means", "absolute"
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"mean": self.mean, "sd": None if math.isnan(self.sd) else self.sd, "n": self.n,
                "direction": self.direction, "method": self.method}


# --- checking the study's runs -------------------------------------------------------------------

def check_runs(rs: pd.DataFrame, candidate: str, reference: str, study_id: str = "") -> None:
    """Raise GateInputError unless both systems ran and every run of them completed."""
    require_completed(rs, (("candidate", candidate), ("reference", reference)), GateInputError,
                      f"study {study_id}" if study_id else "the study",
                      "the gate needs both in one study",
                      "the gate judges only whole studies of both systems, rerun it")


# --- the figures ---------------------------------------------------------------------------------

def paired_rounds(rs: pd.DataFrame, candidate: str, reference: str) -> list:
    """Rounds in which both systems have a completed run, sorted."""
    if "round" not in rs.columns:
        return []
    done = rs[(rs["status"] == "completed") & rs["round"].notna()]
    c = set(done.loc[done["system"] == candidate, "round"])
    r = set(done.loc[done["system"] == reference, "round"])
    return sorted(c & r)


def _round_label(rounds: Sequence) -> str:
    vals = [str(int(x)) if isinstance(x, (int, float, np.integer, np.floating)) and float(x).is_integer()
            else str(x) for x in rounds]
    return ("round " if len(vals) == 1 else "rounds ") + ", ".join(vals)


def compute_figures(rs: pd.DataFrame, candidate: str, reference: str,
                    epsilon_ms: float = OVERHEAD_EPSILON_MS,
                    figures: Iterable[FigureDef] = FIGURES) -> dict[str, Figure]:
    """Every gate figure from a run_summary table (completed runs only).

    Pairing by round. The plan interleaves the systems round by round, so the candidate's and
    the reference's runs of one round ran minutes apart under the same conditions of this shared
    machine (whoever else was using it, thermal state, page cache). A ratio per round cancels
    those common conditions before they are averaged; the sd over rounds is then the sd of the
    ratio itself, which is what the threshold needs. When fewer than two rounds hold both
    systems (no ``round`` recorded, one run each, runs out of step), the ratio is the ratio of
    the two systems' means with its sd propagated to first order from both sds
    (``harness.stats.across.ratio_with_sd``): less tight, since the common conditions are not cancelled, but
    defined. The method used is recorded per figure.

    Raises GateInputError when a figure has no value at all (e.g. no CPU samples)."""
    done = rs[rs["status"] == "completed"]
    cand = done[done["system"] == candidate]
    ref = done[done["system"] == reference]
    rounds = paired_rounds(rs, candidate, reference)
    paired = len(rounds) >= MIN_PAIRED_ROUNDS
    out: dict[str, Figure] = {}
    for fd in figures:
        notes: list[str] = []
        if fd.kind == "absolute":
            d = describe(cand[fd.metric].astype("float64"))
            fig = Figure(fd.name, d["mean"], d["sd"], d["n"], fd.direction, "absolute", tuple(notes))
        elif paired:
            ratios, floored, undefined = [], [], []
            for rnd in rounds:
                c = cand.loc[cand["round"] == rnd, fd.metric].astype("float64").mean()
                r = ref.loc[ref["round"] == rnd, fd.metric].astype("float64").mean()
                if fd.floor_reference and not math.isnan(r) and r < floor_of(fd.metric, epsilon_ms):
                    floored.append(rnd)
                    r = floor_of(fd.metric, epsilon_ms)
                if math.isnan(c) or math.isnan(r) or r <= 0:
                    undefined.append(rnd)
                    continue
                ratios.append(c / r)
            if floored:
                notes.append(f"{reference} overhead floored at {epsilon_ms:g} ms in "
                             f"{_round_label(floored)}")
            if undefined and ratios:
                notes.append(f"undefined in {_round_label(undefined)}, left out")
            d = describe(ratios)
            fig = Figure(fd.name, d["mean"], d["sd"], d["n"], fd.direction, "paired by round",
                         tuple(notes))
        else:
            dc = describe(cand[fd.metric].astype("float64"))
            dr = describe(ref[fd.metric].astype("float64"))
            mean_r = dr["mean"]
            if fd.floor_reference and not math.isnan(mean_r) and mean_r < floor_of(fd.metric, epsilon_ms):
                notes.append(f"{reference} mean overhead {mean_r:.3g} ms floored at "
                             f"{epsilon_ms:g} ms")
                mean_r = epsilon_ms
            if math.isnan(mean_r) or mean_r <= 0:
                ratio = sd = math.nan
            else:
                ratio, sd = ratio_with_sd(dc["mean"], dc["sd"], mean_r, dr["sd"])
            fig = Figure(fd.name, ratio, sd, min(dc["n"], dr["n"]), fd.direction,
                         "ratio of means", tuple(notes))
        if fig.n == 0 or math.isnan(fig.mean):
            raise GateInputError(
                f"cannot compute the {fd.label}: no completed run of "
                f"{candidate!r}{'' if fd.kind == 'absolute' else f' and {reference!r}'} has a "
                f"{fd.metric} value (see run_summary's reasons, e.g. cpu_reason)")
        out[fd.name] = fig
    return out


# --- the threshold and the judgement -------------------------------------------------------------

def relative_sd(mean: float, sd: float | None) -> float:
    """sd / |mean|; NaN when the sd is unknown."""
    if sd is None or mean is None or math.isnan(sd) or math.isnan(mean) or mean == 0:
        return math.nan
    return abs(sd) / abs(mean)


def threshold(mean: float, sd: float | None, min_threshold: float = MIN_THRESHOLD,
              sd_multiple: float = SD_MULTIPLE) -> tuple[float, float]:
    """(threshold, the baseline's relative sd): max(min_threshold, sd_multiple × sd/|mean|).
    An unknown sd (a baseline of one round) leaves the floor."""
    rel = relative_sd(mean, sd)
    if math.isnan(rel):
        return min_threshold, rel
    return max(min_threshold, sd_multiple * rel), rel


def _pct(x: float, signed: bool = False) -> str:
    if math.isnan(x):
        return "n/a"
    digits = 1 if abs(x) < 0.1 else 0
    text = f"{x:{'+' if signed else ''}.{digits}%}"
    return text.replace(".0%", "%")


def _value(fd: FigureDef, v: float) -> str:
    return show_value(v, fd.metric, unit=True) if fd.kind == "absolute" else f"{v:.3f}"


def short_commit(commit: str) -> str:
    commit = str(commit or "unknown")
    dirty = commit.endswith("-dirty")
    core = commit[: -len("-dirty")] if dirty else commit
    return core[:12] + ("-dirty" if dirty else "")


@dataclass(frozen=True)
class Judgement:
    name: str
    label: str
    current: float
    baseline: float
    change: float           # current / baseline − 1
    threshold: float
    rel_sd: float
    failed: bool
    line: str


def judge(current: Figure, base: Mapping[str, Any], baseline_meta: Mapping[str, Any] | None = None,
          min_threshold: float = MIN_THRESHOLD, sd_multiple: float = SD_MULTIPLE) -> Judgement:
    """Compare one figure with its baseline entry; fails only when worse in its bad direction."""
    fd = FIGURES_BY_NAME[current.name]
    meta = baseline_meta or {}
    bmean = float(base["mean"])
    bsd = base.get("sd")
    bsd = math.nan if bsd is None else float(bsd)
    if not bmean > 0:
        raise GateInputError(f"the baseline's {fd.label} is {bmean!r}, not a positive number; "
                             "refresh the baseline from a sound study")
    thr, rel = threshold(bmean, bsd, min_threshold, sd_multiple)
    change = current.mean / bmean - 1.0
    worse = change > thr if current.direction == "lower" else change < -thr
    sd_txt = (f"{sd_multiple:g}×sd {_pct(rel)}" if not math.isnan(rel)
              else f"{sd_multiple:g}×sd unknown, n={base.get('n', '?')}")
    line = (f"{'FAIL' if worse else 'ok'} {fd.label} {_value(fd, current.mean)} vs baseline "
            f"{_value(fd, bmean)} ({_pct(change, signed=True)}, threshold {_pct(thr)} = "
            f"max({_pct(min_threshold)}, {sd_txt})) — baseline from commit "
            f"{short_commit(meta.get('commit', ''))} (study {meta.get('study_id', '?')})")
    if current.notes:
        line += "; " + "; ".join(current.notes)
    return Judgement(current.name, fd.label, current.mean, bmean, change, thr, rel, worse, line)


# --- the baseline file ---------------------------------------------------------------------------

def make_baseline(study: Study, rs: pd.DataFrame, candidate: str, reference: str,
                  epsilon_ms: float = OVERHEAD_EPSILON_MS,
                  now: float | None = None) -> dict:
    """The baseline dict from a loaded study (raises GateInputError on bad input)."""
    sid = study.manifest.study_id or study.path.name
    check_runs(rs, candidate, reference, sid)
    figs = compute_figures(rs, candidate, reference, epsilon_ms)
    machine = study.manifest.machine
    return {
        "schema_version": SCHEMA_VERSION,
        "candidate": candidate,
        "reference": reference,
        "commit": study.manifest.git_commit or "unknown",
        "study_id": sid,
        "created_t_unix_s": time.time() if now is None else now,
        "profile": study.manifest.config.profile,
        "overhead_epsilon_ms": epsilon_ms,
        "machine": {k: machine.get(k) for k in ("hostname", "cpu_model", "cpu_count")},
        "figures": {name: f.to_json() for name, f in figs.items()},
    }


def write_baseline(path: str | Path, baseline: Mapping) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(baseline, indent=2) + "\n")
    return path


def _refresh_hint(path: Path) -> str:
    return (f"run `python -m harness gate refresh artifacts/<study-id> --baseline {path}` on an "
            "accepted gate study and commit the file")


def read_baseline(path: str | Path) -> dict:
    """Read and validate a baseline file; GateInputError with what to do otherwise."""
    path = Path(path)
    if not path.is_file():
        raise GateInputError(f"no baseline at {path}: the gate has nothing to compare with; "
                             + _refresh_hint(path))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GateInputError(f"{path}: not a readable JSON baseline ({exc}); "
                             + _refresh_hint(path)) from None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        got = data.get("schema_version") if isinstance(data, dict) else None
        raise GateInputError(f"{path}: schema_version {got!r}, this gate reads "
                             f"{SCHEMA_VERSION}; " + _refresh_hint(path))
    problems = [k for k in ("candidate", "reference", "commit", "study_id", "figures")
                if k not in data]
    figures = data.get("figures") if isinstance(data.get("figures"), dict) else {}
    for fd in FIGURES:
        entry = figures.get(fd.name)
        if not isinstance(entry, dict) or not isinstance(entry.get("mean"), (int, float)):
            problems.append(f"figures.{fd.name}")
    if problems:
        raise GateInputError(f"{path}: missing or bad {', '.join(problems)}; "
                             + _refresh_hint(path))
    return data


# --- check and refresh ---------------------------------------------------------------------------

@dataclass(frozen=True)
class GateResult:
    exit_code: int
    lines: tuple[str, ...]
    judgements: tuple[Judgement, ...] = ()

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def _load(study_dir: str | Path) -> tuple[Study, pd.DataFrame]:
    try:
        study = load_study(study_dir)
    except ArtifactError as exc:          # IntegrityError included
        raise GateInputError(str(exc)) from None
    return study, run_summary(study)


def pair(study: Study, candidate: str | None, reference: str | None,
         base: Mapping[str, Any] | None = None) -> tuple[str, str]:
    """(candidate, reference): each as given, else the study's gate_system and reference_system,
    else the baseline's."""
    roles = Roles.of(study.manifest, gate_system=candidate, reference=reference)
    base = base or {}
    candidate = roles.gate_system or base.get("candidate")
    reference = roles.reference or base.get("reference")
    if not candidate or not reference:
        raise GateInputError("the study names no gate_system and reference_system in its config; "
                             "give --candidate and --reference")
    return candidate, reference


def check(study_dir: str | Path, baseline_path: str | Path = DEFAULT_BASELINE,
          candidate: str | None = None, reference: str | None = None,
          min_threshold: float = MIN_THRESHOLD, sd_multiple: float = SD_MULTIPLE,
          epsilon_ms: float | None = None) -> GateResult:
    """Judge a study against the baseline. Never writes anything."""
    try:
        base = read_baseline(baseline_path)
        study, rs = _load(study_dir)
        candidate, reference = pair(study, candidate, reference, base)
        if (candidate, reference) != (base["candidate"], base["reference"]):
            raise GateInputError(
                f"the baseline {baseline_path} is for {base['candidate']!r} vs "
                f"{base['reference']!r}, not {candidate!r} vs {reference!r}")
        sid = study.manifest.study_id or study.path.name
        profile = study.manifest.config.profile
        if base.get("profile") and profile != base["profile"]:
            raise GateInputError(
                f"study {sid} ran profile {profile!r} but the baseline was measured with "
                f"{base['profile']!r}: ratios at different loads are not comparable; run a "
                f"{base['profile']!r} study (or refresh the baseline deliberately)")
        check_runs(rs, candidate, reference, sid)
        eps = epsilon_ms if epsilon_ms is not None else float(
            base.get("overhead_epsilon_ms", OVERHEAD_EPSILON_MS))
        figs = compute_figures(rs, candidate, reference, eps)
        judgements = [judge(figs[fd.name], base["figures"][fd.name], base, min_threshold,
                            sd_multiple) for fd in FIGURES]
    except GateInputError as exc:
        return GateResult(EXIT_BAD_INPUT, (f"gate: cannot judge: {exc}",))
    methods = sorted({f.method for f in figs.values() if f.method != "absolute"})
    lines = [f"gate: {candidate} vs {reference} in study {sid} "
             f"({', '.join(methods)}; {figs['throughput_ratio'].n} "
             f"{'rounds' if 'paired by round' in methods else 'runs'}) against {baseline_path}"]
    here = study.manifest.machine.get("hostname")
    there = (base.get("machine") or {}).get("hostname")
    if here and there and here != there:
        lines.append(f"note: the baseline was measured on {there}, this study on {here}; the "
                     "ratios travel better than absolute figures, peak RSS least")
    lines += [j.line for j in judgements]
    failed = [j for j in judgements if j.failed]
    if failed:
        lines.append(f"gate: FAIL — {len(failed)} of {len(judgements)} figures regressed: "
                     + ", ".join(j.label for j in failed))
    else:
        lines.append("gate: ok — no figure regressed beyond its threshold")
    return GateResult(EXIT_FAIL if failed else EXIT_OK, tuple(lines), tuple(judgements))


def refresh(study_dir: str | Path, baseline_path: str | Path = DEFAULT_BASELINE,
            candidate: str | None = None, reference: str | None = None,
            epsilon_ms: float = OVERHEAD_EPSILON_MS, now: float | None = None) -> GateResult:
    """Write the baseline from a completed study (deliberately; nothing calls this implicitly)."""
    try:
        study, rs = _load(study_dir)
        status = study.manifest.status
        if status != "completed":
            raise GateInputError(f"study {study.path} is {status!r}, not completed "
                                 f"({study.manifest.reason or 'no reason recorded'}); "
                                 "a baseline comes only from a whole study")
        base = make_baseline(study, rs, *pair(study, candidate, reference), epsilon_ms, now)
    except GateInputError as exc:
        return GateResult(EXIT_BAD_INPUT, (f"gate refresh: refused: {exc}",))
    path = write_baseline(baseline_path, base)
    lines = [f"gate refresh: wrote {path} from study {base['study_id']} "
             f"(commit {base['commit']}, profile {base['profile']!r})"]
    if str(base["commit"]).endswith("-dirty"):
        lines.append("gate refresh: note: that study ran on a tree with uncommitted changes")
    for fd in FIGURES:
        f = base["figures"][fd.name]
        sd = f["sd"]
        sd_txt = f"sd {_pct(relative_sd(f['mean'], sd))}" if sd is not None else "sd unknown"
        lines.append(f"  {fd.label}: {_value(fd, f['mean'])} ({sd_txt}, n={f['n']}, "
                     f"{f['method']}, {fd.direction} is better)")
    return GateResult(EXIT_OK, tuple(lines))

