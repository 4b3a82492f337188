"""Build the self-contained HTML report of a study directory.

    python -m harness report STUDY_DIR [--via-notebook] [--reference SYSTEM] [--bin-users 50]

writes STUDY_DIR/report.html: every number computed once by harness.stats from the raw rows and
samples (report.data.collect), every plot embedded as a base64 PNG, every raw artifact linked by
a relative path. The built Report keeps its sections' HTML: the study notebook shows them, not a
second computation. notebooks/report.ipynb shows the same sections (report/notebook.py generates
it from SECTIONS; ``--via-notebook`` executes it with papermill and exports it with nbconvert,
code cells left out).

The report is made of: report.data (the numbers), report.tables and report.format (numbers to
text, through the metric registry), report.plots, report.sections with templates/ and style.css.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import jinja2

from harness.files.atomic import write_atomic
from harness.files.study_files import StudyFiles
from harness.stats.definitions import DEFAULT_BIN_USERS
from report.data import ReportData, collect
from report.index import build_index
from report.sections import REPO_DIR, SECTIONS, render_page, render_section, render_sections

REPORT_NAME = "report.html"

__all__ = ["REPORT_NAME", "Report", "ReportData", "SECTIONS", "build_report", "collect",
           "render_report_html", "render_section", "write_report"]


@dataclass(frozen=True, repr=False)
class Report:
    """A report as built: where it was written, and its sections' HTML in page order (what a
    notebook displays: the report itself, not a second rendering)."""
    path: Path
    sections: dict[str, str]

    def _repr_html_(self) -> str:
        return "".join(self.sections.values())

    def __repr__(self) -> str:
        return f"Report({str(self.path)!r})"


def render_report_html(study_dir: str | Path, reference: str | None = None,
                       bin_users: int = DEFAULT_BIN_USERS, verify: bool = True,
                       **sizing: float) -> str:
    """The whole self-contained HTML page of a study (``sizing``: collect's prices and load)."""
    return render_page(collect(study_dir, reference=reference, bin_users=bin_users, verify=verify,
                               **sizing))


def write(path: Path, text: str) -> None:
    write_atomic(path, text)


def write_report(data: ReportData, out: str | Path | None = None) -> Report:
    """Render the report of figures already collected and write it (default:
    STUDY_DIR/report.html, which also refreshes the study index of its parent directory:
    report/index.py)."""
    sections = render_sections(data)
    study_dir = data.study.path.resolve()
    path = Path(out) if out is not None else study_dir / REPORT_NAME
    write(path, render_page(data, sections))
    if out is None:   # the report sits in the study: the index of its neighbours links it
        build_index(study_dir.parent)
    return Report(path, sections)


def build_report(study_dir: str | Path, reference: str | None = None,
                 bin_users: int = DEFAULT_BIN_USERS, out: str | Path | None = None,
                 **sizing: float) -> Report:
    """Collect the figures of ``study_dir`` once and write its report (write_report); ``sizing``
    passes collect's prices and planned load."""
    return write_report(collect(study_dir, reference=reference, bin_users=bin_users, **sizing),
                        out)


# --- through the notebook ------------------------------------------------------------------------

_NB_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


def build_report_via_notebook(study_dir: str | Path, reference: str | None = None,
                              bin_users: int = DEFAULT_BIN_USERS,
                              out: str | Path | None = None) -> Path:
    """Execute the report notebook (generated from SECTIONS) with papermill and export it with
    nbconvert, code cells left out, default prices; returns the HTML file written (default:
    STUDY_DIR/report.html)."""
    import nbformat
    import papermill
    from nbconvert import HTMLExporter

    from report.notebook import write_notebook

    study_dir = Path(study_dir).resolve()
    out_path = Path(out) if out is not None else study_dir / REPORT_NAME
    with tempfile.TemporaryDirectory(prefix="sluice-report-") as tmp:
        executed = Path(tmp) / "report.ipynb"
        papermill.execute_notebook(
            str(write_notebook(Path(tmp) / "generated.ipynb")), str(executed),
            kernel_name="python3", cwd=str(REPO_DIR),
            parameters={"study_dir": str(study_dir), "reference": reference or "",
                        "bin_users": int(bin_users)},
            progress_bar=False, log_output=False)
        nb = nbformat.read(str(executed), as_version=4)
    for cell in nb.cells:   # warnings on stderr are not part of the report
        if cell.get("cell_type") == "code":
            cell["outputs"] = [o for o in cell.get("outputs", [])
                               if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]
    study_id = StudyFiles(study_dir).read_manifest().study_id or study_dir.name
    nb.metadata["title"] = f"Sluice report: {study_id}"
    exporter = HTMLExporter(template_name="lab", exclude_input=True, exclude_input_prompt=True,
                            exclude_output_prompt=True,
                            extra_loaders=[jinja2.DictLoader({"sluice_report.html.j2": _NB_TEMPLATE})])
    exporter.template_file = "sluice_report.html.j2"
    html, _ = exporter.from_notebook_node(nb)
    write(out_path, html)
    if out is None:
        build_index(study_dir.parent)
    return out_path
