"""The in-flight lane's report on a synthetic lane: the generated sentences, the tables, and the
sizing section's planned concurrency."""
from __future__ import annotations

from synthetic_inflight import lane

from harness.stats.sizing import concurrency_sizing
from report import inflight_tables


def test_the_sentences_say_what_each_system_holds_and_why_one_stops():
    text = inflight_tables.sentences(lane(), ["direct", "lean", "capped"])
    assert text[1] == "lean holds 5,000 open requests in 130 MiB."
    assert text[2].startswith("capped holds 1,000 in 58 MiB and stops at 2,500: connection-pool cap")
    assert "at most 100 open upstream requests" in text[2]


def test_the_tables_have_a_row_per_system_and_step_and_per_system():
    steps = inflight_tables.steps_table(lane(), ["direct", "lean", "capped"])
    assert len(steps.rows) == 8
    assert [r.cells[-1].text for r in steps.rows][-2:] == ["held", "failed"]
    stops = inflight_tables.stops_table(lane(), ["direct", "lean", "capped"])
    assert [r[0].text for r in ([row.cells for row in stops.rows])] == ["direct", "lean", "capped"]
    assert stops.rows[1].cells[3].text == "18.0 (R² 1.00, 3 points)"


def test_the_planned_concurrency_table_names_the_deciding_limit():
    frame = concurrency_sizing(lane(), load_rps=1000.0, latency_s=10.0)
    grid = inflight_tables.concurrency_table(frame, ["direct", "lean", "capped"])
    lean = next(r.cells for r in grid.rows if r.cells[0].text == "lean")
    assert lean[1].text == "10,000" and lean[2].text == "220 MiB (extrapolated beyond 5,000)"
    assert lean[4].text == "2" and lean[5].text == "the highest step measured"


def test_every_run_shows_the_requests_it_held_open_at_the_client_and_the_mock():
    grid = inflight_tables.runs_table(lane())
    capped = [r.cells for r in grid.rows if r.cells[0].text == "capped-1"]
    assert [c.text for c in capped[0]] == ["capped-1", "1,000", "1000", "1", "1000", "1000", "held"]
    assert capped[1][3].text == "1" and capped[1][4].text == "100" and capped[1][-1].text == "not held"


def test_a_suite_shows_each_in_flight_cell_with_its_sentences(monkeypatch):
    from harness.model.suite import CellEntry
    from report import suite_data as S
    from report import suite_report
    entry = CellEntry("cell-02", {"request.stream": True}, "k" * 64, "", "completed", "cell-02")
    monkeypatch.setattr(S, "inflight_lanes", lambda suite: [(entry, lane())])
    (section,) = suite_report.inflight_sections("unused")
    assert section["axes"] == "request.stream = true"
    assert section["sentences"][1] == "lean holds 5,000 open requests in 130 MiB."
    assert [r.cells[0].text for r in section["stops"].rows] == ["direct", "lean", "capped"]
