"""The HTML report: its numbers against a recomputation from the raw Parquet files and its
structure (a real browser rendering it and the papermill path through notebooks/report.ipynb:
test_report_integration.py)."""
from __future__ import annotations

import json
import math
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from synthetic import RunParams, make_study

from harness.commands import main as cli
from harness.model.quantities import with_spread
from report import build, tables
from report import format as F
from report.data import collect

REPO_DIR = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    return make_study(tmp_path_factory.mktemp("report"))


@pytest.fixture(scope="module")
def report_path(syn):
    return build.build_report(syn.path).path


@pytest.fixture(scope="module")
def html(report_path):
    return report_path.read_text(encoding="utf-8")


class _Tables(HTMLParser):
    """Cell texts of every <table id=...>, row by row."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._id = None
        self._row = None
        self._cell = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and a.get("id"):
            self._id = a["id"]
            self.tables[self._id] = []
        elif self._id and tag == "tr":
            self._row = []
        elif self._id and tag in ("td", "th"):
            self._cell = []
        elif self._cell is not None and tag == "br":
            self._cell.append("\n")

    def handle_endtag(self, tag):
        if tag == "table":
            self._id = None
        elif self._id and tag in ("td", "th") and self._cell is not None:
            self._row.append(" ".join("".join(self._cell).split(" ")).strip())
            self._cell = None
        elif self._id and tag == "tr" and self._row is not None:
            self.tables[self._id].append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _tables(html: str) -> dict[str, list[list[str]]]:
    p = _Tables()
    p.feed(html)
    return p.tables


def _headline(html: str) -> dict[str, dict[str, str]]:
    rows = _tables(html)["headline-table"]
    header = [h.split("\n")[0].strip() for h in rows[0]]
    return {r[0].split()[0]: dict(zip(header, r)) for r in rows[1:]}


def _fmt(values, digits):
    """A headline cell: 'mean ± sd' (the run count is its own column, the CI in a tooltip)."""
    v = np.asarray(values, dtype=float)
    if v.mean() != 0:   # at most three significant digits, whole digits all kept
        digits = min(digits, max(0, 2 - int(np.floor(np.log10(abs(v.mean()))))))
    if v.size == 1:
        return f"{v[0]:.{digits}f}"
    return f"{v.mean():.{digits}f} ± {v.std(ddof=1):.{digits}f}"


def _fmt_each(values, unit):
    """A headline cell of a time or a size: 'mean ± sd' in the unit that suits the mean."""
    v = np.asarray(values, dtype=float)
    return with_spread(v.mean(), v.std(ddof=1) if v.size > 1 else None, unit)


def _recompute(study_dir: Path) -> dict[str, dict[str, list[float]]]:
    """The headline figures per system and completed run, from the Parquet files and the run
    manifests with plain pandas: independent of harness.stats."""
    manifest = json.loads((study_dir / "manifest.json").read_text())
    out: dict[str, dict[str, list[float]]] = {}
    for entry in manifest["runs"]:
        run_dir = study_dir / entry["dir"]
        run = json.loads((run_dir / "manifest.json").read_text())
        if run["status"] != "completed":
            continue
        rows = pd.read_parquet(run_dir / "requests.parquet")
        samples = pd.read_parquet(run_dir / "samples.parquet")
        ph = run["phases"]
        window = ph["hold_end_t_unix_s"] - ph["hold_start_t_unix_s"]
        hold = rows[rows.phase == "hold"]
        ok = hold[hold.error_kind == ""]
        mock_ms = run["spec"]["mock"]["mock_latency_ms"]
        fig = out.setdefault(run["system"], {})
        fig.setdefault("throughput", []).append(len(ok) / window)
        fig.setdefault("p50", []).append(ok.latency_ms.median() - mock_ms)
        fig.setdefault("p95", []).append(np.percentile(ok.latency_ms, 95) - mock_ms)
        fig.setdefault("errors", []).append(float((rows.error_kind != "").sum()))
        sysm = samples[samples.role == "system"].sort_values("t_unix_s")
        if len(sysm):
            cpu = (np.interp(ph["hold_end_t_unix_s"], sysm.t_unix_s, sysm.cpu_seconds_total)
                   - np.interp(ph["hold_start_t_unix_s"], sysm.t_unix_s, sysm.cpu_seconds_total))
            fig.setdefault("cpu", []).append(cpu * 1000 / len(hold))
            fig.setdefault("rss", []).append(sysm.rss_bytes.max() / 2**20)
    return out


def test_headline_numbers_match_a_recomputation_from_requests_parquet(syn, html):
    table = _headline(html)
    truth = _recompute(syn.path)
    rs = collect(syn.path).rs
    assert set(truth) == {"direct", "nginx", "sluice", "litellm"}
    for system, fig in truth.items():
        row = table[system]
        assert row["throughput (req/s)"] == _fmt(fig["throughput"], 1), system
        assert row["median overhead vs mock"] == _fmt_each(fig["p50"], "ms"), system
        done = rs[(rs.system == system) & (rs.status == "completed")]  # p95: not a headline column
        assert np.allclose(done.overhead_vs_mock_p95_ms, fig["p95"]), system
        assert row["errors (requests)"].startswith(_fmt(fig["errors"], 1)), system
        if "cpu" in fig:
            assert row["CPU time per request"] == _fmt_each(fig["cpu"], "ms"), system
            assert row["peak RSS"] == _fmt_each(fig["rss"], "MiB"), system
        else:
            assert row["CPU time per request"] == "—"
    # the failed litellm run is not averaged: two completed runs
    assert table["litellm"]["runs done"] == "2/3"
    assert "slower" in table["litellm"]["vs nginx"] and table["nginx"]["vs nginx"] == "reference"


def test_headline_table_from_the_registry(syn):
    t = tables.headline(collect(syn.path)).frame().set_index("system")
    assert list(t.index) == ["direct", "nginx", "sluice", "litellm"]
    thr = [syn.expected[f"nginx-{i}"]["throughput_rps"] for i in (1, 2, 3)]
    assert t.loc["nginx", F.heading("throughput_rps")] == (
        f"{np.mean(thr):.0f} ± {np.std(thr, ddof=1):.0f}")       # three significant digits
    assert t.loc["litellm", "runs done"] == "2/3"
    assert t.loc["nginx", "vs nginx"] == "reference"
    assert "req/s: slower ×0.34" in t.loc["litellm", "vs nginx"]
    assert t.loc["direct", F.heading("cpu_ms_per_request", each_unit=True)] == "—"
    assert t.loc["nginx", F.heading("rss_peak_bytes", each_unit=True)] == "48.0 ± 0.0 MiB"
    assert t.loc["nginx", "result"] == "capacity"


def test_mean_sd():
    assert F.mean_sd({"n": 3, "mean": 1.23456, "sd": 0.1}, "latency_p50_ms") == "1.23 ± 0.10 (n=3)"
    assert F.mean_sd({"n": 1, "mean": 5.0, "sd": math.nan}, "throughput_rps") == "5.0 (n=1)"
    assert F.mean_sd({"n": 2, "mean": 2**21, "sd": 0.0}, "rss_peak_bytes") == "2.0 ± 0.0 (n=2)"
    assert F.mean_sd({"n": 0, "mean": math.nan, "sd": math.nan}, "throughput_rps") == "—"


def test_every_run_is_listed_and_the_failed_one_as_failed(syn, html):
    runs = _tables(html)["runs-table"]
    by_id = {r[0]: r for r in runs[1:]}
    assert set(by_id) == set(syn.expected)
    assert by_id["litellm-2"][2].startswith("FAILED: system exited with code 1")
    assert by_id["litellm-2"][6] == "—"                       # no window figures for it
    assert by_id["nginx-2"][6] == f"{syn.expected['nginx-2']['throughput_rps']:.1f}"
    assert '<tr class="failed">' in html


def test_report_sections_and_self_containment(syn, html, report_path):
    for anchor in ("banner", "headline-table", "ci-note", "verdicts", "stability", "runs-table",
                   "plot-throughput", "plot-overhead", "plot-rss", "plot-runs",
                   "self-overhead-table", "methodology", "artifacts"):
        assert f'id="{anchor}"' in html, anchor
    assert html.count('class="plot"') >= 5
    assert html.count("data:image/png;base64,") >= 5
    assert "http://" not in html and "https://" not in html and "<script" not in html
    # the banner says behaviour first, the machine's size, and each reason
    assert "Behaviour, not capacity." in html and "<strong>2 CPU cores</strong>" in html
    assert "litellm-3: 6 failed requests (3 http, 2 timeout, 1 connection)" in html
    assert "sluice-1: Locust printed its high-CPU warning" in html
    # the wide-intervals note, with the t factor for 3 runs
    assert "Few runs, wide intervals." in html and "4.30 × sd/√3" in html
    # methodology comes from the manifests
    for fact in ("Linux 6.1.0-synthetic", "Synthetic CPU @ 2.0GHz", "0123456789abcdef", "1.22.1",
                 "mock_latency_ms", "litellm-1 → nginx-1", "2025-10-09"):
        assert fact in html, fact
    # self-reported overhead beside the client-observed one, with the explanation
    assert "Why the two differ." in html
    # every artifact link is relative and points at a file (or directory) of the study
    hrefs = [h for h in _hrefs(html) if not h.startswith("#")]
    assert len(hrefs) > 12 * 10
    for h in hrefs:
        assert not os.path.isabs(h) and ":" not in h, h
        assert (report_path.parent / h).exists(), h
    assert "pd.read_parquet" in html


def _hrefs(html: str) -> list[str]:
    class P(HTMLParser):
        def __init__(self):
            super().__init__()
            self.out = []

        def handle_starttag(self, tag, attrs):
            if tag == "a" and dict(attrs).get("href"):
                self.out.append(dict(attrs)["href"])
    p = P()
    p.feed(html)
    return p.out


def test_cli_builds_the_report(syn, tmp_path, capsys):
    out = tmp_path / "cli.html"
    assert cli(["report", str(syn.path), "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out) and 'id="headline-table"' in out.read_text()


def test_cli_refuses_a_changed_artifact(tmp_path, capsys):
    s = make_study(tmp_path)
    (s.path / "runs" / "nginx" / "1" / "system.log").write_text("edited\n")
    assert cli(["report", str(s.path)]) == 2
    assert "runs/nginx/1/system.log" in capsys.readouterr().err
    assert not (s.path / "report.html").exists()


def test_report_of_a_study_where_nothing_completed(tmp_path):
    s = make_study(tmp_path, params={"sluice": [RunParams(failed=True)]}, status="failed")
    html = build.build_report(s.path).path.read_text()
    assert "No system completed a run" in html and "This study is failed" in html
    assert "<strong>FAILED</strong>: system exited with code 1" in html


def test_report_without_the_reference_system(tmp_path):
    params = {"sluice": [RunParams(overhead_ms=o) for o in (0.4, 0.5, 0.6)],
              "direct": [RunParams(overhead_ms=o, cpu_cores=None) for o in (0.2, 0.25, 0.3)]}
    s = make_study(tmp_path, params=params)
    html = build.build_report(s.path).path.read_text()
    assert "reference for verdicts: <strong>sluice</strong>" in html   # nginx did not run


def test_notebook_is_committed_without_outputs():
    nb = json.loads((REPO_DIR / "notebooks" / "report.ipynb").read_text())
    assert any("parameters" in c.get("metadata", {}).get("tags", []) for c in nb["cells"])
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None


def test_the_committed_notebook_is_the_one_generated_from_the_sections():
    from report import notebook
    assert notebook.NOTEBOOK.read_text() == notebook.notebook_text(), (
        "notebooks/report.ipynb is stale: run `python -m report.notebook`")
    source = "".join("".join(c["source"]) for c in notebook.report_notebook().cells)
    assert tuple(re.findall(r'render_section\(data, "(\w+)"\)', source)) == tuple(build.SECTIONS)


def test_a_negative_reference_overhead_is_compared_as_a_difference(tmp_path):
    """The reference's overhead vs direct is below zero (nginx faster than the floor's mean):
    the ratio is undefined, yet LiteLLM's seconds of overhead must read as slower."""
    from harness.stats.outcomes import Basis, Outcome
    params = {"direct": [RunParams(overhead_ms=o, span_ms=10.0, cpu_cores=None)
                         for o in (0.60, 0.62, 0.64)],
              "nginx": [RunParams(overhead_ms=o, span_ms=10.0, cpu_cores=0.2)
                        for o in (0.40, 0.42, 0.44)],
              "litellm": [RunParams(overhead_ms=o, span_ms=10.0, cpu_cores=1.5)
                          for o in (3000.0, 3150.0, 3300.0)]}
    s = make_study(tmp_path, params=params)
    data = collect(s.path, reference="nginx")
    c = data.comparison.set_index(["system", "metric"]).loc[("litellm", "overhead_vs_direct_p50_ms")]
    assert c["mean_ref"] < 0 and c["p_value"] < 0.05
    assert c["basis"] is Basis.DIFFERENCE and c["outcome"] is Outcome.WORSE
    assert c["diff_low"] > 0 and c["diff"] == pytest.approx(c["mean"] - c["mean_ref"])
    reason = F.verdict_reason(c.to_dict() | {"metric": "overhead_vs_direct_p50_ms"})
    assert "difference +" in reason and "off 1" not in reason
    rows = [r for r in _tables(build.build_report(s.path).path.read_text())["verdicts-table"]
            if r[0] == "litellm" and r[1] == F.heading("overhead_vs_direct_p50_ms")]
    assert rows and rows[0][7] == "slower"


def test_large_ratios_read_as_times():
    assert F.times(1958.83) == "×1,959" and F.times(4.23) == "×4.2" and F.times(1.083) == "×1.08"


def test_cov_of_a_near_zero_quantity_is_left_out():
    from harness.stats.across import describe
    assert math.isnan(describe([-0.3, 0.1, 0.4], near_zero=True)["cov"])
    assert not describe([-0.3, 0.1, 0.4], near_zero=True)["unstable"]
    assert describe([5.0, 6.0, 7.0], near_zero=True)["cov"] == pytest.approx(1 / 6)


def test_sizing_from_cpu_time_and_memory_at_given_prices(syn, tmp_path):
    from harness.stats.sizing import HOURS_PER_MONTH, Prices, sizing
    data = collect(syn.path, vcpu_hour_usd=0.05, gb_hour_usd=0.01, load_rps=2000)
    got = sizing(data.rs, data.study.systems, data.prices, data.load_rps).set_index("system")
    assert "direct" not in got.index      # no system process: no CPU time to size
    done = data.rs[(data.rs.system == "nginx") & (data.rs.status == "completed")]
    cores = done.cpu_ms_per_request.mean() * 2
    gib = done.rss_steady_bytes.mean() / 2**30
    assert got.loc["nginx", "cores"] == pytest.approx(cores)
    assert got.loc["nginx", "usd_month"] == pytest.approx((cores * 0.05 + gib * 0.01) * HOURS_PER_MONTH)
    assert got.loc["litellm", "n"] == 2    # the failed run is not sized
    assert data.prices == Prices(0.05, 0.01, "given on the command line")
    out = tmp_path / "priced.html"
    assert cli(["report", str(syn.path), "-o", str(out), "--vcpu-hour-usd", "0.05",
                "--gb-hour-usd", "0.01", "--load-rps", "2000"]) == 0
    html = out.read_text()
    rows = {r[0]: r for r in _tables(html)["sizing-table"][1:]}
    assert rows["nginx"][5].startswith(f"${got.loc['nginx', 'usd_month']:,.0f}")
    assert "Sizing and cost at 2,000 req/s" in html and "$0.05 per vCPU-hour" in html
    assert "Behaviour, not capacity, for" in html and "Assumptions:" in html


def test_study_index_lists_every_study(tmp_path):
    a = make_study(tmp_path, study_id="study-a")
    make_study(tmp_path, study_id="study-b", status="interrupted")
    (tmp_path / "suites").mkdir()
    build.build_report(a.path)
    rows = _tables((tmp_path / "index.html").read_text())["index-table"]
    assert rows[0] == ["started", "study", "profile", "systems", "status", "git commit"]
    by_name = {r[1].split(" ")[0]: r for r in rows[1:]}
    assert set(by_name) == {"study-a", "study-b"}
    assert by_name["study-b"][1] == "study-b (no report)" and by_name["study-b"][4] == "interrupted"
    assert set(by_name["study-a"][3].split(", ")) == {"direct", "nginx", "sluice", "litellm"}
    assert 'href="study-a/report.html"' in (tmp_path / "index.html").read_text()


def test_compare_two_studies_where_the_keys_match(tmp_path, capsys):
    base = {"direct": [RunParams(overhead_ms=o, cpu_cores=None) for o in (0.2, 0.25, 0.3)],
            "sluice": [RunParams(overhead_ms=o, cpu_cores=0.15) for o in (0.45, 0.5, 0.55)]}
    a = make_study(tmp_path, study_id="a", params=base)
    slower = {**base, "sluice": [RunParams(overhead_ms=o, cpu_cores=0.15) for o in (5.0, 5.2, 5.4)],
              "nginx": [RunParams(overhead_ms=0.8, cpu_cores=0.2) for _ in range(3)]}
    b = make_study(tmp_path, study_id="b", params=slower)
    assert cli(["report", "--compare", str(a.path), str(b.path)]) == 0
    out = Path(capsys.readouterr().out.strip())
    assert out == b.path.resolve() / "compare-a.html"
    t = _tables(out.read_text())
    rows = {(r[0], r[1]): r for r in t["suite-compare-table"][1:]}
    assert rows[("sluice", F.heading("overhead_vs_mock_p50_ms"))][-2] == "slower"
    assert rows[("direct", F.heading("throughput_rps"))][-2] == "no clear difference"
    assert [r[0] for r in t["compare-apart"][1:]] == ["nginx"]


def test_who_kept_up_with_the_offered_load():
    from types import SimpleNamespace

    from harness.stats.keeping_up import keeping_up
    from report.summary import kept_up
    rs = pd.DataFrame([
        {"system": "nginx", "status": "completed", "throughput_rps": 890.0, "offered_rps": 900.0},
        {"system": "nginx", "status": "completed", "throughput_rps": 880.0, "offered_rps": 900.0},
        {"system": "litellm", "status": "completed", "throughput_rps": 450.0, "offered_rps": 900.0},
        {"system": "litellm", "status": "completed", "throughput_rps": 700.0, "offered_rps": 900.0},
        {"system": "mlflow", "status": "failed", "throughput_rps": np.nan, "offered_rps": 900.0},
        {"system": "mlflow", "status": "completed", "throughput_rps": 860.0, "offered_rps": 900.0}])
    frame = keeping_up(rs, ["nginx", "litellm", "mlflow", "absent"]).set_index("system")
    assert list(frame.index) == ["nginx", "litellm", "mlflow"]
    assert frame.loc["nginx", "kept_up_runs"] == 2
    assert frame.loc["litellm", "kept_up_runs"] == 0
    assert frame.loc["litellm", "served_share_min"] == pytest.approx(0.5)
    assert (frame.loc["mlflow", "completed"], frame.loc["mlflow", "kept_up_runs"]) == (1, 1)
    data = SimpleNamespace(rs=rs, study=SimpleNamespace(
        systems=["nginx", "litellm", "mlflow"],
        manifest=SimpleNamespace(config=SimpleNamespace(users=1000))))
    assert kept_up(data) == (
        "At 1,000 users (≈ 900 req/s offered; kept up = every run served ≥ 90% of it), every "
        "system kept up but litellm (50%) and mlflow (96%; 1 of 2 runs failed) (the worst run's "
        "share served).")
    # a saturation study offers no bound: nothing to say
    assert kept_up(SimpleNamespace(rs=rs.assign(offered_rps=np.nan), study=data.study)) == ""
    everyone = rs[rs["system"] == "nginx"]
    assert kept_up(SimpleNamespace(rs=everyone, study=data.study)).endswith("every system kept up.")


def test_a_new_section_is_a_new_cell_of_the_notebook(monkeypatch):
    from report import notebook, sections

    def section_demo(data) -> str:
        """A demo section."""
        return ""
    monkeypatch.setattr(notebook, "SECTIONS", {**sections.SECTIONS, "demo": section_demo})
    (last,) = notebook.report_notebook().cells[-1:]
    assert last.source == '# A demo section.\ndisplay(HTML(build.render_section(data, "demo")))'
    assert notebook.notebook_text() != notebook.NOTEBOOK.read_text()
