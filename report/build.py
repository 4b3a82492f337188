"""Build the self-contained HTML report of a study directory.

    python -m harness report STUDY_DIR [--via-notebook] [--reference SYSTEM] [--bin-users 50]

writes STUDY_DIR/report.html: every number computed by harness.stats from the raw rows and
samples, every plot embedded as a base64 PNG, every raw artifact linked by a relative path.
The same sections are what notebooks/report.ipynb displays (``--via-notebook`` executes it with
papermill and exports it with nbconvert, code cells left out).

The report is made of: report.data (the numbers), report.tables and report.format (numbers to
text, through the metric registry), report.plots, report.sections with templates/ and style.css.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import jinja2

from harness.files.atomic import write_atomic
from harness.files.study_files import StudyFiles
from harness.stats.definitions import DEFAULT_BIN_USERS
from report.data import ReportData, collect
from report.index import build_index
from report.sections import REPO_DIR, SECTIONS, render_page, render_section

NOTEBOOK = REPO_DIR / "notebooks" / "report.ipynb"
REPORT_NAME = "report.html"

__all__ = ["ReportData", "SECTIONS", "build_report", "collect", "render_report_html",
           "render_section"]


def render_report_html(study_dir: str | Path, reference: str | None = None,
                       bin_users: int = DEFAULT_BIN_USERS, verify: bool = True,
                       **sizing: float) -> str:
    """The whole self-contained HTML page of a study (``sizing``: collect's prices and load)."""
    return render_page(collect(study_dir, reference=reference, bin_users=bin_users, verify=verify,
                               **sizing))


# --- building ------------------------------------------------------------------------------------

_NB_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


def write(path: Path, text: str) -> None:
    write_atomic(path, text)


def _build_via_notebook(study_dir: Path, out: Path, reference: str | None, bin_users: int) -> None:
    import nbformat
    import papermill
    from nbconvert import HTMLExporter

    with tempfile.TemporaryDirectory(prefix="sluice-report-") as tmp:
        executed = Path(tmp) / "report.ipynb"
        papermill.execute_notebook(
            str(NOTEBOOK), str(executed), kernel_name="python3", cwd=str(REPO_DIR),
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
    write(out, html)


def build_report(study_dir: str | Path, via_notebook: bool = False, reference: str | None = None,
                 bin_users: int = DEFAULT_BIN_USERS, out: str | Path | None = None,
                 **sizing: float) -> Path:
    """Write the report of ``study_dir`` (default: STUDY_DIR/report.html) and return its path.
    Refreshes the parent directory's study index (report/index.py) when the report is
    written into the study. ``via_notebook=True`` executes notebooks/report.ipynb with papermill and exports it with
    nbconvert (no code cells, default prices); otherwise the same sections are rendered directly,
    ``sizing`` passing collect's prices and planned load."""
    study_dir = Path(study_dir).resolve()
    out_path = Path(out) if out is not None else study_dir / REPORT_NAME
    if via_notebook:
        _build_via_notebook(study_dir, out_path, reference, bin_users)
    else:
        write(out_path, render_report_html(study_dir, reference=reference, bin_users=bin_users,
                                           **sizing))
    if out is None:   # the report sits in the study: the index of its neighbours links it
        build_index(study_dir.parent)
    return out_path
