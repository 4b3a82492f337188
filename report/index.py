"""The study index: ARTIFACTS_DIR/index.html lists every study directory under it (date,
profile, systems, status, git commit, a link to its report), newest first. Rebuilt after each
report, so it never needs editing by hand."""
from __future__ import annotations

from pathlib import Path

from markupsafe import Markup

from harness.files.atomic import write_atomic
from harness.files.readers import ArtifactError
from harness.files.study_files import StudyFiles
from report import format as F
from report.grid import Cell, Part, cell, table
from report.sections import render, style

INDEX_NAME = "index.html"


def studies(artifacts_dir: Path) -> list[dict]:
    """Every readable study manifest directly under ``artifacts_dir``, newest first; a directory
    whose manifest is not a study's (a suite's, a broken one) is left out."""
    out = []
    for directory in sorted(p for p in Path(artifacts_dir).glob("*") if p.is_dir()):
        try:
            m = StudyFiles(directory).read_manifest()
        except (ArtifactError, OSError, ValueError):
            continue
        report = directory / "report.html"
        out.append({"dir": directory.name, "manifest": m,
                    "href": f"{directory.name}/report.html" if report.is_file() else ""})
    return sorted(out, key=lambda s: -(s["manifest"].started_t_unix_s or 0.0))


def index_table(artifacts_dir: Path):
    rows = []
    for s in studies(artifacts_dir):
        m = s["manifest"]
        name = m.study_id or s["dir"]
        link = Cell((Part(name, href=s["href"]),)) if s["href"] else cell(f"{name} (no report)")
        rows.append([F.when(m.started_t_unix_s), link, m.config.profile,
                     ", ".join(m.systems) or F.DASH, cell(m.status, span=f"tag {m.status}"),
                     (m.git_commit or "?")[:12]])
    return table(["started", "study", "profile", "systems", "status", "git commit"], rows,
                 "index-table")


def build_index(artifacts_dir: str | Path) -> Path:
    """Write ARTIFACTS_DIR/index.html and return its path."""
    artifacts_dir = Path(artifacts_dir)
    out = artifacts_dir / INDEX_NAME
    body = render("index.html.j2", index=index_table(artifacts_dir))
    write_atomic(out, render("page.html.j2", title="study index",
                             sections=[Markup(style()), Markup(body)], title_prefix="Sluice"))
    return out
