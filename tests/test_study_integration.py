"""A real tiny study: the mock, the systems and Locust as native processes, artifacts checked
(the session's shared smoke study: tests/smoke_study.py)."""
import json

import pandas as pd
import pyarrow.parquet as pq
import pytest
from smoke_study import SETTINGS, SYSTEMS

from harness.commands import main
from harness.files.store import REQUEST_SCHEMA, SAMPLE_SCHEMA, sha256_file
from harness.model import formats as F
from harness.model.config import ConfigError, from_profile
from harness.run.preflight import preflight
from harness.run.study import run_study

pytestmark = pytest.mark.integration


def test_study_completes_with_every_run(smoke_study):
    result = smoke_study.result
    assert result.status == "completed", smoke_study.lines
    assert [r.status for r in result.records] == ["completed"] * len(SYSTEMS), \
        [r.reason for r in result.records]
    manifest = json.loads((result.study_dir / "manifest.json").read_text())
    assert manifest["schema_version"] == F.STUDY_MANIFEST.version and manifest["status"] == "completed"
    assert manifest["config"]["seed"] == SETTINGS["seed"] and len(manifest["plan"]) == len(SYSTEMS)
    assert manifest["systems"]["nginx"]["version"][0].isdigit()
    assert manifest["machine"]["cpu_count"] >= 1 and manifest["machine"]["kernel"]


def test_progress_names_system_run_users_and_requests(smoke_study):
    text = "\n".join(smoke_study.lines)
    assert "nginx run 1" in text and "users" in text and "requests" in text and "remaining" in text


@pytest.mark.parametrize("system", SYSTEMS)
def test_raw_rows_match_the_mock_count(smoke_study, system):
    d = smoke_study.run_dir(system)
    manifest = json.loads((d / "manifest.json").read_text())
    rows = pd.read_parquet(d / "requests.parquet")
    ok = rows[(rows.status_code == 200) & (rows.error_kind == "")]
    assert len(rows) > 10
    assert manifest["checks"]["pre_request"]["mock_saw_it"]
    assert manifest["checks"]["mock_count"] == len(ok) == manifest["checks"]["successful_rows"]
    assert manifest["checks"]["count_match"] is True
    assert ok.mock_request_id.str.len().gt(0).all()
    assert ok.mock_request_id.is_unique
    assert set(rows.phase) >= {"warmup", "ramp", "hold"}
    # The mock held each request for its set latency; the client saw at least that.
    assert ok.latency_ms.min() >= 59.0
    assert 59.0 <= manifest["mock"]["hold_ms_p50"] <= 75.0


def test_a_study_keeps_one_copy_of_each_fact_and_says_its_size(smoke_study, tmp_path):
    for system in SYSTEMS:
        d = smoke_study.run_dir(system)
        assert (d / "mock_requests.parquet").is_file() and list((d / "mock-stats").iterdir())
        assert not list(d.glob("mock*-stats/requests-*.csv")), "the raw logs beside their table"
        assert not (d / "wire.pcap").exists(), "a capture nobody asked to keep"
    assert smoke_study.lines[-1].endswith("on disk)"), smoke_study.lines[-1]
    out = tmp_path / "report.html"     # the report reads the tables alone
    assert main(["report", str(smoke_study.study_dir), "-o", str(out)]) == 0
    assert 'id="headline"' in out.read_text()


def test_parquet_schemas_and_hashes(smoke_study):
    d = smoke_study.run_dir("nginx")
    assert pq.read_schema(d / "requests.parquet").remove_metadata() == REQUEST_SCHEMA
    assert pq.read_schema(d / "samples.parquet").remove_metadata() == SAMPLE_SCHEMA
    assert pq.read_metadata(d / "requests.parquet").metadata[b"schema_version"] == str(F.REQUESTS_TABLE.version).encode()
    manifest = json.loads((d / "manifest.json").read_text())
    assert {"requests.parquet", "samples.parquet", "mock_stats.json", "system.log"} <= set(manifest["files"])
    for name, digest in manifest["files"].items():
        assert sha256_file(d / name) == digest


def test_samples_cover_each_role(smoke_study):
    samples = pd.read_parquet(smoke_study.run_dir("nginx") / "samples.parquet")
    # `capture`: tcpdump during the wire capture
    assert set(samples.role) == {"system", "mock", "locust", "machine", "capture"}
    system = samples[samples.role == "system"]
    assert system.rss_bytes.max() > 1_000_000 and system.pid_count.max() >= 2  # master + worker
    assert system.cpu_seconds_total.is_monotonic_increasing
    direct = pd.read_parquet(smoke_study.run_dir("direct") / "samples.parquet")
    assert "system" not in set(direct.role)  # nothing runs between client and mock


def test_phases_are_ordered(smoke_study):
    phases = json.loads((smoke_study.run_dir("nginx") / "manifest.json").read_text())["phases"]
    order = ["warmup_start_t_unix_s", "ramp_start_t_unix_s", "hold_start_t_unix_s",
             "hold_end_t_unix_s", "load_end_t_unix_s"]
    assert [phases[k] for k in order] == sorted(phases[k] for k in order)
    assert phases["hold_end_t_unix_s"] - phases["hold_start_t_unix_s"] >= 3.0


def test_bad_parameters_fail_before_anything_starts(tmp_path, capsys):
    assert main(["study", "--profile", "smoke", "--gateways", "direct,nope", "--set", "users=0",
                 "--set", f"out_dir=\"{tmp_path}\""]) == 2
    err = capsys.readouterr().err
    assert "gateways: unknown gateway 'nope'" in err and "users: must be at least 1" in err
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ConfigError):
        run_study(preflight(from_profile("smoke", mock_latency_ms=-1, out_dir=str(tmp_path))))
