"""The in-flight lane at tiny scale with the real processes: direct and nginx holding 100, then
200 requests open, each held 2 s by the mock; the open-file limit recorded, the open requests
reached at the client and at the mock agreeing, and the lane's figures computed from the study."""
import math

import pytest

from harness.model.config import from_profile
from harness.run.preflight import preflight
from harness.run.study import run_study
from harness.stats.inflight_lane import inflight_steps
from harness.stats.inflight_limits import slopes, summary, where_it_stops
from harness.stats.loading import load_study

pytestmark = [pytest.mark.integration, pytest.mark.slow]   # ~90 s: two systems holding 100, then 200 requests open


@pytest.fixture(scope="module")
def tiny_lane(tmp_path_factory):
    out = tmp_path_factory.mktemp("artifacts")
    config = from_profile("inflight", gateways=["direct", "nginx"], out_dir=str(out), seed=3,
                          runs_per_gateway=1, inflight_steps=(100, 200), inflight_hold_s=2.0,
                          inflight_step_s=12.0, users=200, locust_processes=1, mock_workers=1,
                          warmup_s=2.0, idle_s=1.0, cooldown_s=1.0, request_timeout_s=10.0)
    lines = []
    result = run_study(preflight(config), progress=lines.append)
    return result, lines


def test_every_run_completes_with_its_limits_recorded(tiny_lane):
    result, lines = tiny_lane
    assert [r.status for r in result.records] == ["completed", "completed"], \
        [r.reason for r in result.records]
    study = load_study(result.study_dir)
    for run in study.runs:
        assert run.limits is not None and run.limits.open_files_asked == 0
        assert run.limits.open_files_by_role["mock"] >= 1024
        assert run.limits.open_files_by_role["locust"] >= 1024
        assert run.limits.port_range


def test_each_step_is_held_with_the_client_and_the_mock_agreeing(tiny_lane):
    result, _ = tiny_lane
    steps = inflight_steps(load_study(result.study_dir))
    assert sorted(steps["target_open"].unique()) == [100, 200]
    assert steps["ran"].all(), steps.to_dict("records")
    for rec in steps.to_dict("records"):
        assert rec["client_open_mean"] >= 0.9 * rec["target_open"], rec
        assert rec["open_agree"], rec
        assert rec["failed"] == 0, rec
        assert rec["added_p50_ms"] >= 0 and rec["requests_per_connection"] >= 1
    table = summary(steps, floor="direct")
    assert set(table["label"]) <= {"held", "failed", "instruments' limit"}
    stops = where_it_stops(table, cores=2.0)
    assert set(stops["system"]) == {"direct", "nginx"}
    nginx = slopes(steps).get("nginx")   # both steps held open, no failure (above): two points
    assert nginx is not None and nginx.points == 2
    # a connection carries one request at a time: nginx held each step's requests open on as many
    # upstream connections (the step's requests and the mock's connections are counted over
    # windows of different clocks, so they are not compared with each other)
    ngx = steps[steps["system"] == "nginx"]
    assert (ngx["upstream_connections"] >= 0.9 * ngx["target_open"]).all()
    assert not math.isnan(ngx["rss_mib"].iloc[0])


def test_the_report_shows_the_lane_and_sizes_at_the_planned_concurrency(tiny_lane):
    from markupsafe import escape

    from report.build import collect
    from report.inflight_tables import sentences
    from report.sections import render_section
    result, _ = tiny_lane
    data = collect(result.study_dir, planned_latency_s=2.0, load_rps=100.0)
    lane_html = render_section(data, "inflight")
    assert "In-flight lane" in lane_html and "open requests" in lane_html
    said = [s for s in sentences(data.inflight, data.study.systems) if s.startswith("nginx ")]
    assert len(said) == 1 and str(escape(said[0])) in lane_html, said
    sizing_html = render_section(data, "sizing")
    assert "100 req/s × 2 s = 200 open requests" in sizing_html
