"""The counting lane in a study's report, on synthetic data: its table, the headline's counted
column beside CPU time, and a system that could not be counted keeping its reason."""
from synthetic import make_study

from harness.files.readers import read_counts
from harness.model.count_cases import LANE_SIZES
from harness.run.count_system import BuildCount, CaseCount, write_counts
from harness.stats.count_table import instructions_of, lane_frame
from report import format as F
from report import tables
from report.build import render_section
from report.data import collect

MACHINE = {"cpu_model": "Synthetic CPU", "cpu_count": 2}
COUNTED = "instr./req (counted)"


def _lane(path):
    calls = {"read": 2.0, "write": 2.0, "epoll_wait": 1.5}
    builds = [
        BuildCount("nginx", "nginx", "1.22.1", "c", (
            CaseCount("plain", 61_234.0, 12.0, calls, 9_000_000, {"200": 370}),
            CaseCount("stream", 140_000.0, 30.0, {"read": 13.0, "write": 13.0}, 9_000_000,
                      {"200": 370})), LANE_SIZES),
        BuildCount("sluice", "sluice", "0.1.0", "c", (), LANE_SIZES,
                   failed="under callgrind: sluice did not become ready in 300 s"),
        BuildCount("direct", "direct", "", "c", (), LANE_SIZES,
                   failed="direct starts no process of its own: nothing to count"),
    ]
    write_counts(path / "counts.json", builds, MACHINE, "lane")


def test_the_lane_frame_has_a_row_per_case_and_one_per_system_not_counted(tmp_path):
    _lane(tmp_path)
    frame = lane_frame(read_counts(tmp_path / "counts.json"))
    assert list(frame["system"]) == ["nginx", "nginx", "sluice", "direct"]
    plain = frame.iloc[0]
    assert (plain["reads_per_request"], plain["writes_per_request"],
            plain["waits_per_request"]) == (2.0, 2.0, 1.5)
    assert instructions_of(frame, "nginx") == 61_234.0
    assert instructions_of(frame, "nginx", "stream") == 140_000.0
    assert instructions_of(frame, "sluice") is None
    assert "did not become ready" in frame.iloc[2]["missing"]


def test_the_report_shows_the_counts_beside_cpu_time_and_why_one_is_missing(tmp_path):
    syn = make_study(tmp_path)
    _lane(syn.path)
    data = collect(syn.path)
    headline = tables.headline(data).frame().set_index("system")
    columns = list(headline.columns)
    assert columns.index(COUNTED) == columns.index(F.heading("cpu_ms_per_request", each_unit=True)) + 1
    assert headline.loc["nginx", COUNTED] == "61.2 k"
    assert headline.loc["sluice", COUNTED] == F.DASH
    html = render_section(data, "counts")
    assert "do not depend on the CPU model" in html and "Synthetic CPU" in html
    assert "61,234" in html and "did not become ready in 300 s" in html


def test_a_study_without_the_lane_has_no_counted_column_and_no_section(tmp_path):
    data = collect(make_study(tmp_path).path)
    assert COUNTED not in tables.headline(data).frame().columns
    assert render_section(data, "counts") == ""
