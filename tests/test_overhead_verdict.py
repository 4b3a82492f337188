"""The overhead verdict uses the least noisy figure measured for both the system and the
reference: the wire-timed in-gateway p50, else the net overhead p50, else the client-observed
median overhead vs the mock; the report says which, in the headline, the summary and the
verdicts table. Synthetic run-summary frames, no timing."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from synthetic import make_study

from harness.stats import across as A
from harness.stats.outcomes import Basis, Outcome
from report import summary, tables
from report.data import collect

WIRE, NET, CLIENT = A.OVERHEAD_FIGURES
NAN = math.nan


def _rs(figures: dict[str, dict[str, list[float]]]) -> pd.DataFrame:
    """A run_summary frame: per system its completed runs' figures (missing ones NaN)."""
    rows = []
    for system, by_metric in figures.items():
        for i in range(max(len(v) for v in by_metric.values())):
            rows.append({"system": system, "status": "completed", "run_id": f"{system}-{i + 1}",
                         **{m: by_metric.get(m, [NAN] * (i + 1))[i] for m in A.OVERHEAD_FIGURES}})
    return pd.DataFrame(rows)


CLIENT_ONLY = {CLIENT: [0.80, 0.82, 0.78]}
STUDY = {
    "nginx": {WIRE: [100.0, 102.0, 98.0], NET: [0.30, 0.31, 0.29], **CLIENT_ONLY},
    "sluice": {WIRE: [260.0, 262.0, 258.0], NET: [0.50, 0.52, 0.48], CLIENT: [0.9, 0.7, 1.1]},
    "litellm": {NET: [3.0, 3.1, 2.9], CLIENT: [3.5, 3.6, 3.4]},          # no capture
    "mlflow": {CLIENT: [40.0, 41.0, 39.0]},                              # neither
    "tensorzero": {WIRE: [150.0, NAN, NAN], NET: [0.4, 0.41, 0.39], **CLIENT_ONLY},  # 1 of 3
}


def test_each_system_gets_the_least_noisy_figure_measured_for_both():
    assert A.overhead_figures(_rs(STUDY), "nginx") == {
        "sluice": WIRE, "litellm": NET, "mlflow": CLIENT, "tensorzero": NET}


def test_a_figure_the_reference_lacks_is_not_used():
    no_wire = {**STUDY, "nginx": {NET: [0.30, 0.31, 0.29], **CLIENT_ONLY}}
    assert A.overhead_figure(_rs(no_wire), "sluice", "nginx") == NET
    neither = {**STUDY, "nginx": CLIENT_ONLY}
    assert A.overhead_figure(_rs(neither), "sluice", "nginx") == CLIENT


def test_measured_means_in_two_runs_or_the_only_one():
    rs = _rs({"one": {WIRE: [5.0]}, "some": {WIRE: [5.0, NAN, 6.0]}, "few": {WIRE: [5.0, NAN]}})
    assert A.measured(rs, "one", WIRE) and A.measured(rs, "some", WIRE)
    assert not A.measured(rs, "few", WIRE) and not A.measured(rs, "absent", WIRE)
    assert not A.measured(rs.drop(columns=WIRE), "one", WIRE)
    # a failed run's figure does not count
    failed = rs.assign(status=np.where(rs["run_id"] == "some-1", "failed", "completed"))
    assert not A.measured(failed, "some", WIRE)


def test_compare_judges_wire_and_net_only_where_both_have_them():
    c = A.compare(_rs(STUDY), "nginx").set_index(["system", "metric"])
    assert {s for s, m in c.index if m == WIRE} == {"sluice"}
    assert {s for s, m in c.index if m == NET} == {"sluice", "litellm", "tensorzero"}
    assert {s for s, m in c.index if m == CLIENT} == {"sluice", "litellm", "mlflow", "tensorzero"}
    wire = c.loc[("sluice", WIRE)]
    assert wire["outcome"] is Outcome.WORSE and wire["basis"] is Basis.TESTED
    assert wire["ratio"] == pytest.approx(2.6)
    # the noisy client figure alone would not have told them apart
    assert c.loc[("sluice", CLIENT), "outcome"] is Outcome.NO_CLEAR_DIFFERENCE


def test_the_resolution_floor_is_in_the_figures_unit():
    assert A.min_difference(0.0, NET) == pytest.approx(0.005)          # ms
    assert A.min_difference(0.0, WIRE) == pytest.approx(5.0)           # µs: the same 5 µs


# --- what the report says --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The default synthetic study (direct, nginx, sluice, litellm) with wire figures for nginx and
    sluice, net figures for nginx, sluice and litellm, none for direct."""
    base = collect(make_study(tmp_path_factory.mktemp("overhead")).path)
    rs = base.rs.copy()
    done = rs["status"] == "completed"
    for system, wire, net in (("nginx", [100.0, 102.0, 98.0], [0.30, 0.31, 0.29]),
                              ("sluice", [260.0, 262.0, 258.0], [0.50, 0.52, 0.48]),
                              ("litellm", None, [3.0, 3.1])):
        at = done & (rs["system"] == system)
        if wire:
            rs.loc[at, WIRE] = wire
        rs.loc[at, NET] = net
    comparison = A.compare(rs, "nginx", floor="direct")
    return dataclasses.replace(base, rs=rs, summary=A.system_summary(rs, floor="direct"),
                               comparison=comparison, overhead=A.overhead_figures(rs, "nginx"))


def test_the_report_data_names_each_systems_overhead_figure(data):
    assert data.overhead == {"direct": CLIENT, "sluice": WIRE, "litellm": NET}
    # the synthetic study as written has neither wire nor net figures: the client one for all
    assert set(collect(data.study.path).overhead.values()) == {CLIENT}


def test_the_headline_verdict_says_which_figure(data):
    t = tables.headline(data)
    cells = {r.id.removeprefix("headline-"): r.cells[-1] for r in t.rows}
    assert cells["sluice"].text == "req/s: ≈\noverhead (wire): slower ×2.6"
    assert "in-gateway time p50 (wire)" in cells["sluice"].title
    assert cells["litellm"].text.endswith("overhead (net): slower ×10")
    assert "net overhead p50" in cells["litellm"].title
    assert "overhead (client):" in cells["direct"].text
    assert "neither the wire nor the net overhead" in cells["direct"].title
    assert cells["nginx"].text == "reference"


def test_the_summary_sentence_says_which_figure(data):
    said = {system: [s.text for s in sentences] for system, sentences in summary.findings(data)}
    assert "Slower: overhead (wire) ×2.6." in said["sluice"]
    assert "Slower: overhead (net) ×10." in said["litellm"]
    # one overhead finding per system: the client figure is not also reported for sluice
    assert not any("overhead vs mock" in s or "overhead (client)" in s for s in said["sluice"])
    sluice = next(s for system, ss in summary.findings(data) if system == "sluice" for s in ss
                  if "wire" in s.text)
    assert sluice.href == "#verdict-sluice-wire_in_gateway_p50_us"
    assert sluice.title.startswith("Overhead from in-gateway time p50 (wire)")


def test_the_verdicts_table_marks_the_figure_the_headline_used(data):
    t = tables.verdicts(data)
    marked = {r.id for r in t.rows if "the headline's overhead verdict" in r.cells[1].text}
    assert marked == {"verdict-sluice-wire_in_gateway_p50_us", "verdict-litellm-net_overhead_p50_ms",
                      "verdict-direct-overhead_vs_mock_p50_ms"}
