"""The HTML report of a suite: every cell with its axis values and headline figures, the
combinations left out and why, and a link to each cell's own study report.

    python -m harness report SUITE_DIR [--compare OTHER_SUITE_DIR]

writes SUITE_DIR/report.html (and each cell's report.html when it is missing).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.run import suite as S
from harness.run.store import read_json
from report import build

REPORT_NAME = "report.html"


def _table(frame: pd.DataFrame, table_id: str) -> str:
    if frame.empty:
        return "<p>None.</p>"
    return build._render("""
<div class="wide"><table id="{{ table_id }}"><thead><tr>{% for c in columns %}<th>{{ c }}</th>{% endfor %}</tr></thead>
<tbody>{% for r in rows %}<tr>{% for c in columns %}<td>{{ r[c] }}</td>{% endfor %}</tr>{% endfor %}</tbody></table></div>""",
                         table_id=table_id, columns=list(frame.columns),
                         rows=frame.astype(str).to_dict("records"))


def render_suite_html(suite_dir: str | Path, compare_with: str | Path | None = None) -> str:
    suite_dir = Path(suite_dir)
    manifest = read_json(suite_dir / "manifest.json")
    cells = []
    for entry in manifest["cells"]:
        study = suite_dir / entry["dir"] if entry.get("dir") else None
        if study is not None and (study / "manifest.json").is_file() and not (study / REPORT_NAME).is_file():
            build.build_report(study)
        cells.append({**entry, "values": ", ".join(f"{k} = {S._show(v)}" for k, v in entry["values"].items()),
                      "report": f"{entry['dir']}/{REPORT_NAME}" if study is not None
                      and (study / REPORT_NAME).is_file() else ""})
    comparison = apart = None
    if compare_with:
        comparison, apart = S.compare_suites(compare_with, suite_dir)
    body = build._render("""
<div class="sluice-report" id="suite">
<h1>Suite {{ m.name }}</h1>
<p class="sub">{{ m.description }}<br>Suite <code>{{ m.suite_id }}</code>, {{ m.status }}, profile
<code>{{ m.profile }}</code>, from {{ m.started_t_unix_s|when }} to {{ m.get("ended_t_unix_s")|when }}.
Suite file <code>{{ m.suite_file }}</code> (SHA-256 <code>{{ m.suite_file_sha256[:12] }}</code>).</p>
<h2>Cells</h2>
<p>Every combination of the axes; each runnable cell is a whole study with the direct baseline
(the same load straight to the mock), and its comparison key is the SHA-256 of its whole
configuration: two suites are compared only where keys are equal.</p>
<table id="suite-cells-table"><thead><tr><th>cell</th><th>axis values</th><th>status</th>
<th>comparison key</th><th>left out because</th><th>study report</th></tr></thead>
<tbody>{% for c in cells %}<tr class="{{ 'failed' if c.excluded else 'ok' }}"><td>{{ c.cell_id }}</td>
<td>{{ c.values }}</td><td>{{ c.status }}</td><td><code>{{ c.comparison_key[:12] }}</code></td>
<td>{{ c.excluded }}</td><td>{% if c.report %}<a href="{{ c.report }}">{{ c.report }}</a>{% endif %}</td></tr>
{% endfor %}</tbody></table>
<h2>Per cell and system</h2>
<p>Mean ± sd over each system's completed runs in the cell (n = runs); added latency is against
the same cell's direct baseline.</p>
{{ per_cell|safe }}
{% if comparison is not none %}
<h2>Against suite {{ other }}</h2>
<p>Cell by cell where the comparison keys are equal; ratio = this suite / the other, verdict as
in the study report (Welch p &lt; 0.05 and at least 10% apart).</p>
{{ comparison|safe }}
<h3>Not comparable</h3>
{{ apart|safe }}
{% endif %}
</div>""", m=manifest, cells=cells, per_cell=_table(S.suite_table(suite_dir), "suite-table"),
        comparison=None if comparison is None else _table(comparison, "suite-compare-table"),
        apart=None if apart is None else _table(apart, "suite-not-comparable-table"),
        other=str(compare_with))
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>Sluice suite: {manifest['suite_id']}</title>\n</head>\n"
            f"<body>\n{build.STYLE}\n{body}\n</body>\n</html>\n")


def build_suite_report(suite_dir: str | Path, compare_with: str | Path | None = None) -> Path:
    out = Path(suite_dir) / REPORT_NAME
    build._write(out, render_suite_html(suite_dir, compare_with))
    return out
