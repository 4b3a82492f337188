"""A real tiny study with the wire capture on (the session's shared smoke study:
tests/smoke_study.py): every successful row matched once at the mock, the wire joins both
connections, the report shows the time inside the gateway; with the capture off the wire
figures are missing with the reason."""
import json

import pandas as pd
import pytest

from harness.commands import main
from harness.model.config import from_profile
from harness.run.preflight import preflight
from harness.run.study import run_study

pytestmark = pytest.mark.integration


def _run(study_dir, system):
    d = study_dir / "runs" / system / "1"
    return json.loads((d / "manifest.json").read_text()), pd.read_parquet(d / "requests.parquet")


@pytest.mark.parametrize("system", ["direct", "nginx", "sluice"])
def test_every_successful_row_matches_one_mock_row(smoke_study, system):
    manifest, rows = _run(smoke_study.study_dir, system)
    assert manifest["status"] == "completed", manifest["reason"]
    identity = manifest["checks"]["identity"]
    assert identity["match_rate"] == 1.0 and identity["client_without_mock"] == 0
    assert identity["mock_without_client"] == 0 and identity["ids_seen_more_than_once"] == 0
    ok = rows[rows["error_kind"] == ""]
    assert ok["request_id"].is_unique and ok["net_overhead_ms"].notna().all()
    assert (smoke_study.study_dir / "runs" / system / "1" / "mock_requests.parquet").is_file()


@pytest.mark.parametrize("system", ["nginx", "sluice"])
def test_the_wire_joins_both_connections(smoke_study, system):
    manifest, rows = _run(smoke_study.study_dir, system)
    wire = manifest["wire"]
    assert wire["captured"] and wire["join_rate"] >= 0.95, wire
    assert wire["cpu_s"] is not None and wire["pcap_kept_reason"] and not wire["pcap_file"]
    assert not (smoke_study.study_dir / "runs" / system / "1" / "wire.pcap").exists()  # read, gone
    timed = rows["wire_in_gateway_us"].dropna()
    assert len(timed) >= 10 and (timed > 0).all()


def test_the_floor_has_only_the_mock_wire_time(smoke_study):
    manifest, rows = _run(smoke_study.study_dir, "direct")
    assert manifest["wire"]["captured"]
    assert rows["wire_mock_us"].notna().any() and rows["wire_in_gateway_us"].isna().all()


def test_the_report_shows_the_time_inside_the_gateway(smoke_study, tmp_path):
    out = tmp_path / "report.html"     # beside it: the shared study is only read
    assert main(["report", str(smoke_study.study_dir), "-o", str(out)]) == 0
    html = out.read_text()
    assert 'id="gateway-time"' in html and "in-gateway time p50 (wire)" in html
    assert "x-gateway-overhead-us" in html


def test_capture_off_leaves_the_wire_figures_missing_with_the_reason(tmp_path):
    config = from_profile("smoke", gateways=["nginx"], out_dir=str(tmp_path), wire_capture_s=0)
    result = run_study(preflight(config), progress=lambda line: None)
    manifest, rows = _run(result.study_dir, "nginx")
    assert manifest["status"] == "completed"
    assert manifest["wire"] == {**manifest["wire"], "captured": False,
                                "reason": "not captured: wire_capture_s = 0"}
    assert rows["wire_in_gateway_us"].isna().all() and rows["net_overhead_ms"].notna().all()
    assert not (result.study_dir / "runs" / "nginx" / "1" / "wire.pcap").exists()


def test_a_capture_asked_for_stays_beside_its_figures(tmp_path):
    config = from_profile("smoke", gateways=["nginx"], out_dir=str(tmp_path), wire_capture_s=2.0,
                          wire_capture_offset_s=1.0, hold_s=4.0, wire_keep_capture=True)
    result = run_study(preflight(config), progress=lambda line: None)
    manifest, rows = _run(result.study_dir, "nginx")
    assert manifest["status"] == "completed", manifest["reason"]
    assert manifest["wire"]["pcap_file"] == "wire.pcap" and not manifest["wire"]["pcap_kept_reason"]
    assert (result.study_dir / "runs" / "nginx" / "1" / "wire.pcap").is_file()
    assert rows["wire_in_gateway_us"].notna().any()
