"""The published results: from the newest complete standard study (and the newest complete suite
of each lane, LANES, where it exists) write artifacts/published/, the one part of artifacts/
that is committed, and the README's Results block from it.

    python -m harness publish [--check]

The page is made of the report's own sections (report.sections, the suite templates): the
head-to-head first, then the counting lane, the fault and in-flight suites, then the study's
other sections; no number is formatted here. Beside it: the tables behind it as Parquet, the
manifests, the SHA-256 and size of every file of the source study (the raw files stay local)
and publication.json (harness.model.formats.PUBLICATION, read by harness.files.readers).
"""
from __future__ import annotations

import datetime as dt
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from markupsafe import Markup

from harness.files.readers import read_publication, read_published_table
from harness.files.store import (
    copy_file,
    read_text,
    sha256_file,
    write_frame,
    write_json,
    write_text,
)
from harness.files.study_files import StudyFiles, SuiteFiles
from harness.model.dialects import ERROR_BODY_PREFIX_BYTES
from harness.model.errors import UserError
from harness.model.formats import PUBLICATION
from harness.model.manifests import StudyManifest
from harness.model.plan import RunSpec
from harness.model.suite import SuiteManifest
from harness.stats.count_table import instructions_of
from harness.stats.definitions import UNSTABLE_COV
from harness.stats.fault_lane import RECOVERY_MS, RECOVERY_SHARE
from harness.stats.machines import machine_fields
from report import format as F
from report import sections as S
from report import suite_data
from report.data import ReportData, collect
from report.sections import REPO_DIR, render
from report.suite_report import inflight_context, scenario_sections
from report.tables import PUBLISHED_METRICS, UNSTABLE_MARK, headline

ARTIFACTS_DIR = REPO_DIR / "artifacts"
PUBLISHED = "published"
PAGE = "index.html"
README = REPO_DIR / "README.md"
README_START, README_END = "<!-- results:start -->", "<!-- results:end -->"
NOTHING_PUBLISHED = ("No published results yet: `make study`, then `make publish` "
                     "([Publishing results](docs/publishing.md)).")
MAX_BYTES = 5 * 2**20            # what a publication may weigh in the repository
README_LINES = 40                # the Results block's budget
# The suites a publication takes, by name (notebooks/suites/<name>.toml), each with its kind
# (suite_kind): the newest complete suite of each name is its lane.
LANES = {"faults": "faults", "faults-extra": "faults", "inflight": "inflight"}
LANE_NAMES = {"faults": "Fault lane", "faults-extra": "Fault lane, the other scenarios",
              "inflight": "In-flight lane"}
# The study report's sections the page shows after the lanes (the raw files' links stay out:
# the raw files are not published).
AFTER_LANES = ("banner", "summary", "plots", "gateway_time", "verdicts", "stability", "runs",
               "methodology")
PANDAS_LINE = 'pd.read_parquet("artifacts/published/{name}")'


class PublishError(UserError, RuntimeError):
    """Nothing that can be published: each candidate with what it lacks, a line each."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))


# --- what is complete ----------------------------------------------------------------------------

def study_problems(study_dir: Path) -> list[str]:
    """What keeps a study from being published (empty: complete): its status, every runnable
    system's runs done, its counting lane run with every system counted or its reason."""
    files = StudyFiles(study_dir)
    m = files.read_manifest()
    problems = [] if m.status == "completed" else [f"status {m.status}" + (f" ({m.reason})"
                                                                          if m.reason else "")]
    planned = {p.run_id: p.system for p in m.plan}
    done = {r.run_id for r in m.runs if r.status in ("completed", "failed")}
    for name, info in m.systems.items():
        if not info.runnable:
            if not info.not_runnable_reason:
                problems.append(f"{name}: not runnable, without a reason")
            continue
        runs = [r for r, s in planned.items() if s == name]
        missing = [r for r in runs if r not in done]
        if not runs:
            problems.append(f"{name}: no run planned")
        elif missing:
            problems.append(f"{name}: {len(runs) - len(missing)} of {len(runs)} runs done")
    counts = files.read_counts()
    if counts is None:
        problems.append("its counting lane did not run (no counts.json)")
    else:
        listed = {b.get("label") for b in counts["builds"]}
        unlisted = [s for s in m.systems if s not in listed]
        if unlisted:
            problems.append(f"its counting lane lists neither a count nor a reason for "
                            f"{', '.join(unlisted)}")
    return problems


def _studies(artifacts: Path) -> list[tuple[Path, StudyManifest]]:
    """Every study directly under ``artifacts``, newest first."""
    out = []
    for path in sorted(artifacts.glob("*/manifest.json")):
        if path.parent.name in (PUBLISHED, "suites"):
            continue
        out.append((path.parent, StudyFiles(path.parent).read_manifest()))
    return sorted(out, key=lambda x: x[1].started_t_unix_s or 0.0, reverse=True)


def newest_complete_study(artifacts: Path, profile: str = "standard") -> Path:
    """The newest complete study of ``profile``; PublishError naming each newer one's gaps."""
    refused = []
    for path, m in _studies(artifacts):
        if m.config.profile != profile:
            continue
        problems = study_problems(path)
        if not problems:
            return path
        refused.append(f"{path}: not complete: {'; '.join(problems)}")
    raise PublishError(refused or [f"{artifacts}: no study of profile {profile!r}"])


def suite_kind(m: SuiteManifest) -> str:
    """faults | inflight | "" (a suite of neither lane)."""
    if any(e.scenario for e in m.cells):
        return "faults"
    if any((e.config or {}).get("inflight_steps") for e in m.cells):
        return "inflight"
    return ""


def suite_problems(suite_dir: Path) -> list[str]:
    m = SuiteFiles(suite_dir).read_manifest()
    problems = [] if m.status == "completed" else [f"status {m.status}"]
    problems += [f"{e.cell_id}: {e.status}" for e in m.cells
                 if e.status not in ("completed", "excluded")]
    return problems


def newest_complete_suites(artifacts: Path) -> dict[str, Path | str]:
    """Per lane (LANES): the newest complete suite of its name and kind, or why there is none."""
    found: dict[str, list[tuple[float, Path, list[str]]]] = {k: [] for k in LANES}
    for path in sorted((artifacts / "suites").glob("*/manifest.json")):
        m = SuiteFiles(path.parent).read_manifest()
        if m.name in found and suite_kind(m) == LANES[m.name]:
            found[m.name].append((m.started_t_unix_s, path.parent, suite_problems(path.parent)))
    out: dict[str, Path | str] = {}
    for lane, suites in found.items():
        complete = [p for _, p, problems in sorted(suites, reverse=True) if not problems]
        if complete:
            out[lane] = complete[0]
        elif suites:
            _, path, problems = max(suites)
            out[lane] = f"not run to completion: {path.name} is not complete ({'; '.join(problems)})"
        else:
            out[lane] = f"not run: no suite named {lane} under artifacts/suites/"
    return out


def recorded_specs(study_dir: Path) -> dict[str, RunSpec | None]:
    """Each system's recorded run spec (its first completed run's; else its first run's), for
    the stale check; a system without a run manifest is left out."""
    runs = [run for _, run in StudyFiles(study_dir).run_manifests()]
    out: dict[str, RunSpec | None] = {}
    for run in sorted(runs, key=lambda r: r.status != "completed"):
        out.setdefault(run.system, run.spec)
    return out


# --- the page ------------------------------------------------------------------------------------

def provenance(m: StudyManifest, label: str, ident: str) -> dict:
    """What a section of the page names: its id, date, machine, commit and pinned versions."""
    return {"label": label, "id": ident, "started": m.started_t_unix_s, "ended": m.ended_t_unix_s,
            "machine": F.machine_line(machine_fields(m.machine), short=False),
            "commit": m.git_commit or "unknown",
            "systems": [f"{name} {info.version or '?'}" for name, info in m.systems.items()],
            "packages": [f"{k} {v}" for k, v in sorted(m.versions.items())]}


@dataclass(frozen=True, eq=False)
class Lane:
    """A suite lane on the page (LANES): its suite's figures, or why it is not there."""
    lane: str
    suite: suite_data.SuiteData | None
    why_not: str = ""

    @property
    def kind(self) -> str:
        return LANES[self.lane]


def lane_html(lane: Lane) -> str:
    """A suite lane's section: its provenance and the suite report's own table for it."""
    if lane.suite is None:
        return render("published_lane.html.j2", name=LANE_NAMES[lane.lane], lane=lane.lane,
                      why_not=lane.why_not, about=None, body="")
    m = lane.suite.manifest
    first = lane.suite.cells[0][1].study.manifest if lane.suite.cells else None
    about = provenance(first, "suite", m.suite_id) if first is not None else None
    if about is not None:
        about.update(started=m.started_t_unix_s, ended=m.ended_t_unix_s)
    body = (render("suite_faults.html.j2", faults=scenario_sections(lane.suite),
                   share=f"{RECOVERY_SHARE:.0%}", slack=f"{RECOVERY_MS:g}",
                   prefix=f"{ERROR_BODY_PREFIX_BYTES // 1024} KiB")
            if lane.kind == "faults" else
            render("suite_inflight.html.j2", **inflight_context(lane.suite)))
    return render("published_lane.html.j2", name=LANE_NAMES[lane.lane], lane=lane.lane,
                  why_not="", about=about, body=Markup(body))


def page_sections(data: ReportData, stale: dict[str, str], lanes: list[Lane],
                  tables: list[str], raw: dict) -> dict[str, str]:
    """The published page's sections in order: the answer first."""
    m = data.study.manifest
    out = {"style": S.style(),
           "publication": render("published.html.j2", about=provenance(m, "study", m.study_id),
                                 stale=sorted(stale.items())),
           "headline": S.headline_html(data, PUBLISHED_METRICS, stale),
           "lanes": render("published_lanes.html.j2", lanes=lane_sentences(data, lanes)),
           "counts": S.section_counts(data)}
    out.update({f"lane-{lane.lane}": lane_html(lane) for lane in lanes})
    out.update({name: S.render_section(data, name) for name in AFTER_LANES})
    out["files"] = render("published_files.html.j2", tables=tables, line=PANDAS_LINE,
                          raw_files=raw["files"], raw_bytes=F.size(raw["bytes"]))
    return out


def lane_sentences(data: ReportData, lanes: list[Lane]) -> list[str]:
    """One sentence per lane: the head-to-head, the counting lane, the suites."""
    m = data.study.manifest
    ran = [s for s, i in m.systems.items() if i.runnable]
    skipped = [f"{s} ({i.not_runnable_reason})" for s, i in m.systems.items() if not i.runnable]
    out = [f"Head-to-head: study {m.study_id}, profile {m.config.profile}, {len(ran)} systems "
           f"run {m.config.runs_per_gateway} times each"
           + (f"; not runnable: {', '.join(skipped)}" if skipped else "") + "."]
    counts = data.counts
    counted = [s for s in m.systems if instructions_of(counts, s) is not None]
    # a system that could not run has its reason in the sentence before: not said twice
    missing = [f"{s} (not runnable)" if not m.systems[s].runnable else
               f"{s} ({'; '.join(x for x in counts[counts['system'] == s]['missing'] if x)})"
               for s in m.systems if s not in counted]
    out.append(f"Counting lane: {len(counted)} of {len(m.systems)} systems counted under Valgrind"
               + (f"; not counted: {', '.join(missing)}" if missing else "") + ".")
    for lane in lanes:
        if lane.suite is None:
            out.append(f"{LANE_NAMES[lane.lane]}: {lane.why_not}.")
            continue
        # a combination the suite excludes is no cell of it
        cells = [e for e in lane.suite.manifest.cells if e.status != "excluded"]
        out.append(f"{LANE_NAMES[lane.lane]}: suite {lane.suite.manifest.suite_id}, "
                   f"{sum(e.status == 'completed' for e in cells)} of {len(cells)} cells run.")
    return out


# --- writing -------------------------------------------------------------------------------------

def raw_files(study_dir: Path) -> dict:
    """Every file of the source study with its size and SHA-256."""
    files = [{"path": p.relative_to(study_dir).as_posix(), "size_bytes": p.stat().st_size,
              "sha256": sha256_file(p)} for p in sorted(study_dir.rglob("*")) if p.is_file()]
    return {"files": files, "bytes": sum(f["size_bytes"] for f in files)}


def _copy_manifests(source: Path, into: Path) -> list[str]:
    out = []
    for p in sorted(source.rglob("*.json")):
        if p.name in ("manifest.json", "counts.json"):
            target = into / p.relative_to(source)
            copy_file(p, target)
            out.append(target)
    return out


def _shown(path: Path) -> str:
    try:
        return path.resolve().relative_to(REPO_DIR).as_posix()
    except ValueError:
        return str(path)


def publish(study_dir: Path, lanes: dict[str, Path | str], stale: dict[str, str],
            out: Path, readme: Path | None = None) -> dict:
    """Write the publication of ``study_dir`` (complete: PublishError otherwise) and the suites
    in ``lanes`` (LANES: lane -> its suite's directory, or why none) into ``out``, replacing
    what was there, then the README's Results block; returns the publication."""
    problems = study_problems(study_dir)
    if problems:
        raise PublishError([f"{study_dir}: not complete: {'; '.join(problems)}"])
    data = collect(study_dir)
    m = data.study.manifest
    suites = [Lane(k, suite_data.collect_suite(v)) if isinstance(v, Path) else Lane(k, None, v)
              for k, v in lanes.items()]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".published-", dir=out.parent))
    tmp.chmod(0o755)     # mkdtemp's 0700 would become the published folder's
    try:
        frames = {"headline": headline(data, PUBLISHED_METRICS, stale).frame(),
                  "summary": data.summary, "runs": data.rs, "counts": data.counts}
        for lane in suites:
            if lane.suite is not None and lane.kind == "faults":
                frames[lane.lane] = suite_data.fault_table(lane.suite)[0]
            elif lane.suite is not None:
                frames[lane.lane] = pd.concat(
                    [x.table.assign(cell=e.cell_id) for e, x in suite_data.inflight_lanes(lane.suite)],
                    ignore_index=True)
        tables = []
        for name, frame in frames.items():
            write_frame(tmp / f"{name}.parquet", frame, PUBLICATION)
            tables.append(f"{name}.parquet")
        manifests = [p.relative_to(tmp).as_posix()
                     for p in _copy_manifests(study_dir, tmp / "manifests" / "study")]
        for lane in suites:
            if lane.suite is not None:
                manifests += [p.relative_to(tmp).as_posix() for p in
                              _copy_manifests(lane.suite.path, tmp / "manifests" / lane.lane)]
        raw = raw_files(study_dir)
        sections = page_sections(data, stale, suites, tables, raw)
        write_text(tmp / PAGE, render("page.html.j2", title_prefix="Sluice results",
                                      title=m.study_id,
                                      sections=[Markup(h) for h in sections.values()]))
        publication = {
            "published_t_unix_s": time.time(), "page": PAGE,
            "standard": _standard(data, stale, study_dir, raw),
            "lanes": {"counting": {"ran": True},
                      **{lane.lane: ({"suite_id": lane.suite.manifest.suite_id,
                                      "source": _shown(lane.suite.path),
                                      "started_t_unix_s": lane.suite.manifest.started_t_unix_s,
                                      "ended_t_unix_s": lane.suite.manifest.ended_t_unix_s}
                                     if lane.suite is not None else {"not_run": lane.why_not})
                         for lane in suites}},
            "sentences": lane_sentences(data, suites),
            "tables": tables, "manifests": manifests}
        write_json(tmp / PUBLICATION.file, publication, PUBLICATION)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    if readme is not None:
        write_readme_block(readme, out)
    return read_publication(out / PUBLICATION.file)


def _standard(data: ReportData, stale: dict[str, str], study_dir: Path, raw: dict) -> dict:
    m = data.study.manifest
    systems = []
    for name, info in m.systems.items():
        runs = [r for r in m.runs if r.system == name]
        keys = sorted({r.comparison_key for r in runs if r.comparison_key})
        sel = data.counts[data.counts["system"] == name] if len(data.counts) else data.counts
        systems.append({
            "system": name, "kind": info.kind, "version": info.version,
            "runnable": info.runnable, "not_runnable_reason": info.not_runnable_reason,
            "runs": len(runs), "completed": sum(r.status == "completed" for r in runs),
            "comparison_key": keys[0] if len(keys) == 1 else ", ".join(keys),
            "stale": stale.get(name, ""),
            "instructions_per_request": {c: instructions_of(data.counts, name, c)
                                         for c in ("plain", "stream")},
            "not_counted": "; ".join(x for x in sel["missing"] if x) if len(sel) else "not listed"})
    return {"study_id": m.study_id, "source": _shown(study_dir), "profile": m.config.profile,
            "started_t_unix_s": m.started_t_unix_s, "ended_t_unix_s": m.ended_t_unix_s,
            "git_commit": m.git_commit, "machine": machine_fields(m.machine),
            "versions": dict(m.versions), "systems": systems,
            "raw_bytes": raw["bytes"], "raw_files": raw["files"]}


# --- the README's Results block ------------------------------------------------------------------

def _md(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", "; ")


def readme_block(published: Path) -> str:
    """The README's Results block (between the markers, exclusive) from ``published``: the
    head-to-head table, one sentence per lane, the machine, the date and the page's link; the
    fixed NOTHING_PUBLISHED while nothing is published."""
    path = Path(published) / PUBLICATION.file
    if not path.is_file():
        return NOTHING_PUBLISHED
    pub = read_publication(path)
    std = pub["standard"]
    table = read_published_table(Path(published) / "headline.parquet")
    table = table.drop(columns=[c for c in table.columns if c == "result" or c.startswith("vs ")])
    date = dt.datetime.fromtimestamp(std["ended_t_unix_s"] or 0, dt.timezone.utc).date()
    machine = F.machine_line(std["machine"], short=False)
    link = _link(Path(published), pub["page"])
    lines = [f"Measured on {machine}, {date}, study `{std['study_id']}` at commit "
             f"`{(std['git_commit'] or 'unknown')[:12]}`: [the published page]({link}) "
             "(mean ± sd over runs).", "",
             "| " + " | ".join(_md(c) for c in table.columns) + " |",
             "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(_md(v) for v in row) + " |" for row in table.itertuples(index=False)]
    if table.map(lambda v: UNSTABLE_MARK in str(v)).to_numpy().any():
        lines.append(f"\n{UNSTABLE_MARK}: the runs disagree (coefficient of variation "
                     f"≥ {UNSTABLE_COV:.0%}); read the spread before the mean.")
    lines.append("")
    lines += [f"- {_md(s)}" for s in pub["sentences"]]
    stale = [f"{s['system']} ({s['stale']})" for s in std["systems"] if s["stale"]]
    if stale:
        lines.append(f"- Stale (the tree no longer runs what was measured): {_md(', '.join(stale))}.")
    return "\n".join(lines)


def _link(published: Path, page: str) -> str:
    try:
        return (published.resolve() / page).relative_to(REPO_DIR).as_posix()
    except ValueError:
        return f"{PUBLISHED}/{page}"


def readme_block_in(readme: Path) -> str:
    """The block as the README holds it (between the markers, stripped)."""
    try:
        text = read_text(readme)
    except OSError as exc:
        raise PublishError([f"{readme}: cannot read it ({exc.strerror})"]) from None
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        raise PublishError([f"{readme}: no {README_START} ... {README_END} block"])
    return text[start + len(README_START):end].strip("\n")


def write_readme_block(readme: Path, published: Path) -> None:
    text = read_text(readme)
    readme_block_in(readme)   # the markers are there
    start, end = text.find(README_START) + len(README_START), text.find(README_END)
    write_text(readme, text[:start] + "\n" + readme_block(published) + "\n" + text[end:])


def published_specs(published: Path) -> tuple[dict, StudyManifest, dict[str, RunSpec | None]]:
    """A publication, its study's manifest and each system's recorded run spec, from the
    manifests it holds: what ``publish --check`` compares with the tree."""
    pub = read_publication(Path(published) / PUBLICATION.file)
    study = Path(published) / "manifests" / "study"
    return pub, StudyFiles(study).read_manifest(), recorded_specs(study)
