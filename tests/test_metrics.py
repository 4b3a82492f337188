"""The metric registry is the one source of a figure's words, unit, digits and direction; the
statistics return numbers and outcomes, never display strings."""
from __future__ import annotations

import pandas as pd
import pytest
from synthetic import make_study

from harness import stats as A
from harness.model.metrics import METRICS, Better, metric
from harness.stats.definitions import SUMMARY_METRICS
from harness.verdicts import aa, rules
from report import fault_tables, tables
from report import format as F
from report import suite_data as S
from report.data import collect

# Every list of metrics a table or a check shows: each must be in the registry.
METRIC_LISTS = {
    "summary": SUMMARY_METRICS,
    "headline": tables.HEADLINE_METRICS, "stability": tables.STABILITY_METRICS,
    "runs": tables.RUNS_METRICS, "limits": tables.LIMITS_METRICS,
    "streaming": tables.STREAM_TABLE, "open-loop steps": tables.STEP_METRICS,
    "self overhead": tuple(m for trio in tables.SELF_OVERHEAD for m in trio),
    "suite": S.CELL_METRICS + S.LANE_METRICS, "A/A": aa.DEFAULT_METRICS,
    "gate": tuple(r.metric for r in rules.GATED) + rules.TAILS,
    "faults": fault_tables.FAULT_WINDOW_METRICS,
    "faults suite": tuple(m for _, m, _ in fault_tables.FAULT_SUITE_FIGURES),
}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return collect(make_study(tmp_path_factory.mktemp("registry")).path)


def test_every_figure_the_headline_shows_is_summarised():
    """A headline column reads the summary over runs: a metric left out of it would show a
    column of dashes."""
    for m in (*tables.HEADLINE_METRICS, *tables.PUBLISHED_METRICS):
        assert m in SUMMARY_METRICS, m


@pytest.mark.parametrize("name", list(METRIC_LISTS))
def test_every_metric_a_table_or_check_uses_is_registered(name):
    for m in METRIC_LISTS[name]:
        assert m in METRICS, (name, m)


def test_the_registry_is_consistent():
    for name, m in METRICS.items():
        assert m.name == name and m.label and m.digits >= 0 and m.scale > 0
        assert isinstance(m.better, Better) and len(m.words) == 2
    with pytest.raises(KeyError, match="metric registry"):
        metric("no_such_metric")


def test_every_table_heading_comes_from_the_registry(data):
    """Each column of a table is either one of the few fixed words (system, run, ...) or a
    registry heading: no table names a metric in its own words."""
    fixed = {"system", "runs done", "result", "vs nginx", "metric", "better when",
             "this system", "nginx", "ratio or difference", "Welch p", "verdict", "why", "n", "mean", "sd",
             "min – max", "95% CI", "CoV", "not completed", "run", "order", "status",
             "errors h / t / c / o", "why not capacity"}
    headings = {F.heading(m, each_unit=e) for m in METRICS for e in (False, True)}
    main, limits = tables.runs(data)
    for t in (tables.headline(data), tables.verdicts(data), tables.stability(data), main, limits):
        for c in t.columns:
            assert c.main_text in fixed | headings, (t.id, c.main_text)
    # the digits follow the registry: throughput with one decimal wherever it appears
    thr = tables.stability(data).frame()
    shown = thr[thr["metric"] == F.heading("throughput_rps")]["mean"]
    assert all(len(x.split(".")[1]) == metric("throughput_rps").digits for x in shown)


def _strings(frame: pd.DataFrame, allowed: set[str]) -> list[str]:
    """Values of a statistic's table that are display strings (outside the allowed columns)."""
    out = []
    for col in frame.columns:
        if col in allowed:
            continue
        out += [f"{col}={v!r}" for v in frame[col] if isinstance(v, str)]
    return out


def test_statistics_return_numbers_and_outcomes_not_strings(data):
    names = {"system", "reference", "metric", "run_id"}
    assert not _strings(data.summary, names)
    assert not _strings(data.comparison, names)
    assert all(isinstance(o, A.Outcome) for o in data.comparison["outcome"])
    assert all(isinstance(b, A.Basis) for b in data.comparison["basis"])
    assert all(isinstance(x, A.Label) for x in data.rs["label"])
    assert all(isinstance(x, A.Label) for x in data.labels["label"])
    assert data.summary["unstable"].map(type).eq(bool).all()
    # no figure carries a marker for the report to grep
    for frame in (data.rs, data.summary, data.comparison):
        text = frame.astype(str).to_string()
        assert "⚠" not in text and "±" not in text and "(n=" not in text
