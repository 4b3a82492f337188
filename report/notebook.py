"""notebooks/report.ipynb, generated from the report's own section list (report.sections.SECTIONS):
a cell per section, in page order, its comment the section's docstring. A new section needs no
edit here; tests/test_report.py fails while the committed notebook is not the generated one.

    python -m report.notebook          # writes notebooks/report.ipynb
"""
from __future__ import annotations

import inspect
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from report.build import write
from report.sections import REPO_DIR, SECTIONS

NOTEBOOK = REPO_DIR / "notebooks" / "report.ipynb"
KERNEL = {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                         "name": "python3"},
          "language_info": {"name": "python"}}

PARAMETERS = '''\
# Parameters (papermill): the study directory, the reference system ("" = the study's own),
# and the users bin width of the ramp curves.
study_dir = ""
reference = ""
bin_users = 50'''

SETUP = '''\
# The report of one study, generated from report/sections.py (python -m report.notebook): every
# number and plot comes from harness/stats through report/ (data, tables, plots, sections), so
# this notebook and `python -m harness report STUDY_DIR` show the same thing.
from IPython.display import HTML, display

from report import build

if not study_dir:
    raise ValueError("set study_dir, e.g. papermill -p study_dir artifacts/<study-id>")
data = build.collect(study_dir, reference=reference or None, bin_users=int(bin_users))'''


def report_notebook() -> nbformat.NotebookNode:
    """The notebook: its parameters, the study's figures collected once, then each section."""
    cells = [new_code_cell(PARAMETERS, metadata={"tags": ["parameters"]}), new_code_cell(SETUP)]
    for name, function in SECTIONS.items():
        doc = inspect.getdoc(function)
        comment = f"# {doc.splitlines()[0]}\n" if doc else ""
        cells.append(new_code_cell(f'{comment}display(HTML(build.render_section(data, "{name}")))'))
    notebook = new_notebook(cells=cells, metadata=KERNEL)
    for cell, cell_id in zip(notebook.cells, ["parameters", "setup", *SECTIONS]):
        cell["id"] = cell_id.replace("_", "-")   # stable ids: the file changes only with SECTIONS
    return notebook


def notebook_text() -> str:
    return nbformat.writes(report_notebook()) + "\n"


def write_notebook(path: Path = NOTEBOOK) -> Path:
    write(path, notebook_text())
    return path


if __name__ == "__main__":
    print(write_notebook())
