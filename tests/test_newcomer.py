"""A newcomer's three tasks, each done here as CONTRIBUTING.md says: a metric
in three files, a report section in two, a gateway in its own folder only. Each test makes the
change the way a contributor would (the edits as monkeypatches, the folder in a copy of
gateways/) and checks that the study and the report pick it up with nothing else touched."""
from __future__ import annotations

import shutil

import jinja2
import pytest
from synthetic import make_study

from harness.model import metrics as registry
from harness.model.config import GATEWAYS_DIR, from_profile, known_gateways
from harness.model.gateway_spec import load_gateway_spec
from harness.model.plan import make_plan
from harness.run.preflight import preflight
from harness.run.run import instruments
from harness.stats import runs
from harness.stats.loading import load_study
from report import sections, tables
from report.data import collect


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    return make_study(tmp_path_factory.mktemp("newcomer"))


def test_a_metric_is_three_files(study, monkeypatch):
    # 1. harness/stats/runs.py: the figure, in a group of FIGURE_GROUPS
    def _sent_per_second(v: runs.RunView) -> dict:
        return {"sent_per_s": len(v.window) / (v.hold_end - v.hold_start)}
    monkeypatch.setattr(runs, "FIGURE_GROUPS", (*runs.FIGURE_GROUPS, _sent_per_second))
    # 2. harness/model/metrics.py: how it is named and shown
    monkeypatch.setitem(registry.METRICS, "sent_per_s",
                        registry.Metric("sent_per_s", "requests sent", "req/s",
                                        registry.Better.HIGHER, 1))
    # 3. report/tables.py: the table that shows it
    monkeypatch.setattr(tables, "RUNS_METRICS", (*tables.RUNS_METRICS, "sent_per_s"))
    summary = runs.run_summary(load_study(study.path))
    done = summary["status"] == "completed"
    assert (summary.loc[done, "sent_per_s"] > 0).all()
    html = sections.render_section(collect(study.path), "runs")
    assert "requests sent" in html and "req/s" in html


def test_a_report_section_is_two_files(study, monkeypatch):
    # 1. report/templates/<name>.html.j2: what it shows
    loader = jinja2.ChoiceLoader([jinja2.DictLoader({"demo.html.j2": (
        '<div class="sluice-report" id="demo"><h2>Demo</h2>{{ n }} runs</div>')}),
        sections.ENV.loader])
    monkeypatch.setattr(sections.ENV, "loader", loader)

    # 2. report/sections.py: the function, and its line in SECTIONS (page order)
    def section_demo(data) -> str:
        return sections.render("demo.html.j2", n=len(data.study.runs))
    monkeypatch.setattr(sections, "SECTIONS", {**sections.SECTIONS, "demo": section_demo})
    # (notebooks/report.ipynb is generated from SECTIONS: `python -m report.notebook` adds its
    #  cell; tests/test_report.py fails while the committed notebook is stale)
    data = collect(study.path)
    page = sections.render_page(data)
    assert f'id="demo"><h2>Demo</h2>{len(data.study.runs)} runs</div>' in page
    assert page.index('id="demo"') > page.index('id="artifacts"')   # last in SECTIONS, last shown


def test_a_gateway_is_its_own_folder(tmp_path):
    """A copy of gateways/ with one more folder: the study knows it, validates it and plans its
    runs, from its gateway.toml alone."""
    gateways = tmp_path / "gateways"
    shutil.copytree(GATEWAYS_DIR, gateways, ignore=shutil.ignore_patterns(
        "venv", "bin", "build", "_compiled", "__pycache__", "*.so", "node_modules"))
    shutil.copytree(GATEWAYS_DIR / "nginx", gateways / "newcomer",
                    ignore=shutil.ignore_patterns("__pycache__"))
    toml = gateways / "newcomer" / "gateway.toml"
    toml.write_text(toml.read_text().replace('name = "nginx"', 'name = "newcomer"')
                    .replace('role = "hop"', 'role = "system"'))
    assert "newcomer" in known_gateways(gateways)
    spec = load_gateway_spec("newcomer", gateways)
    assert spec.name == "newcomer" and spec.role == "system"
    config = from_profile("smoke", gateways=["direct", "newcomer"], gateways_dir=str(gateways),
                          out_dir=str(tmp_path / "out"))
    preflight(config)
    plan = make_plan(config, {name: load_gateway_spec(name, gateways) for name in config.gateways},
                     instruments())
    assert {r.system for r in plan} == {"direct", "newcomer"}
