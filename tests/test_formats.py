"""Every artifact kind has its own format version, one reader that checks it, and a recorded file
of every version it reads: each is read here through that reader (pyperf's and asv's rule: a
reader refuses a version it does not know and migrates the older ones)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.files import readers
from harness.files.store import parquet_version
from harness.model import formats as F
from harness.model.schema import MOCK_REQUESTS, PROBES, REQUESTS, SAMPLES
from harness.verdicts import history

TESTS = Path(__file__).parent
V1 = TESTS / "fixtures" / "studies" / "v1-smoke"
V2 = TESTS / "fixtures" / "studies" / "v2-smoke"
V3 = TESTS / "fixtures" / "studies" / "v3-smoke"
V1_RUN, V2_RUN, V3_RUN = (v / "runs" / "nginx" / "1" for v in (V1, V2, V3))


def _table(table):
    return lambda path: readers.read_table(path, table)[0]


# format -> (reader, {version: a recorded file of that version})
RECORDED = {
    F.STUDY_MANIFEST: (readers.read_study_manifest, {1: V1 / "manifest.json", 2: V2 / "manifest.json",
                                                      3: V3 / "manifest.json"}),
    F.RUN_MANIFEST: (readers.read_run_manifest, {1: V1_RUN / "manifest.json", 2: V2_RUN / "manifest.json",
                                                 3: V3_RUN / "manifest.json"}),
    # version 3: the direct run of a real smoke study, written just before error_class existed
    F.REQUESTS_TABLE: (_table(REQUESTS), {1: V1_RUN / "requests.parquet", 2: V2_RUN / "requests.parquet",
                                          3: TESTS / "data" / "requests-v3.parquet",
                                          # version 4: that file with error_class, written by the
                                          # harness just before the content columns existed
                                          4: TESTS / "data" / "requests-v4.parquet"}),
    F.SAMPLES_TABLE: (_table(SAMPLES), {1: V1_RUN / "samples.parquet", 2: V2_RUN / "samples.parquet"}),
    # version 3: a real mock's log (unary, stream and a 429), written just before the content
    # and ending columns existed
    F.MOCK_REQUESTS_TABLE: (lambda path: readers.read_mock_requests(path.parent),
                            {2: V2_RUN / "mock_requests.parquet",
                             3: TESTS / "data" / "mock-requests-v3" / "mock_requests.parquet"}),
    # version 1 is the first: no older file to read
    F.PROBES_TABLE: (_table(PROBES), {}),
    F.MOCK_STATS: (readers.read_mock_stats, {1: V1_RUN / "mock_stats.json", 2: V2_RUN / "mock_stats.json"}),
    F.FAULT_SCHEDULE: (readers.read_fault_schedule, {2: TESTS / "data" / "faults-v2.json"}),
    F.SUITE_MANIFEST: (lambda path: readers.read_suite_manifest(path.parent),
                       {2: TESTS / "fixtures" / "suites" / "v2-smoke" / "manifest.json"}),
    F.COUNTS: (readers.read_counts, {1: TESTS / "data" / "counts-v1.json"}),
    # version 1: a synthetic study's publication (tests/test_publish.py), with a fault suite
    F.PUBLICATION: (readers.read_publication, {1: TESTS / "data" / "publication-v1.json"}),
    F.GATE_RECORD: (history.read_record, {1: TESTS / "data" / "gate-record-v1.json",
                                          2: TESTS / "data" / "gate-record-v2.json"}),
}


def _stamp(path: Path) -> int:
    if path.suffix == ".parquet":
        return parquet_version(path)
    return json.loads(path.read_text())["schema_version"]


def test_every_format_is_listed_with_its_recorded_files():
    assert set(RECORDED) == set(F.FORMATS)


@pytest.mark.parametrize("fmt", F.FORMATS, ids=lambda f: f.kind)
def test_every_older_version_has_a_recorded_file_that_reads(fmt):
    reader, files = RECORDED[fmt]
    older = {v for v in fmt.reads if v < fmt.version}
    assert older <= set(files), f"{fmt.kind}: no recorded file of version {sorted(older - set(files))}"
    for version, path in files.items():
        assert _stamp(path) == version, path
        assert reader(path) is not None


@pytest.mark.parametrize("fmt", [f for f in F.FORMATS if f.file.endswith(".json")
                                 and f is not F.GATE_RECORD], ids=lambda f: f.kind)
def test_a_version_it_does_not_read_is_refused_in_one_line(fmt, tmp_path):
    reader, files = RECORDED[fmt]
    source = files[max(files)]
    path = tmp_path / source.name
    path.write_text(json.dumps({**json.loads(source.read_text()), "schema_version": 99}))
    with pytest.raises(readers.ArtifactError) as info:
        reader(path)
    assert "\n" not in str(info.value) and "schema_version 99" in str(info.value)
    assert str(path) in str(info.value) and fmt.kind in str(info.value)


def test_older_tables_come_up_to_the_current_columns():
    for table, fmt in ((REQUESTS, F.REQUESTS_TABLE), (SAMPLES, F.SAMPLES_TABLE)):
        for path in RECORDED[fmt][1].values():
            frame, version, missing = readers.read_table(path, table)
            assert list(frame.columns) == table.names and version == _stamp(path)
    mock = readers.read_mock_requests(V2_RUN)
    assert list(mock.columns) == MOCK_REQUESTS.names and set(mock["provider"]) == {"primary"}


def test_older_mock_requests_have_what_the_mock_sent_missing_never_invented():
    """Versions 2 and 3 predate content_chars_sent, frames_sent, client_closed_t_unix_ns and
    ended: they load as missing (not 0, not "complete"), and the reader says so."""
    new = ("content_chars_sent", "frames_sent", "client_closed_t_unix_ns", "ended")
    for version, path in RECORDED[F.MOCK_REQUESTS_TABLE][1].items():
        frame, found, missing = readers.read_table(path, MOCK_REQUESTS)
        assert found == version and len(frame) > 0 and set(new) <= set(missing)
        assert list(frame.columns) == MOCK_REQUESTS.names
        for name in new:
            assert frame[name].isna().all(), (version, name)
        assert (frame["status_code"] > 0).all()  # the columns it had are kept


def test_a_mock_requests_file_of_an_unknown_version_is_refused(tmp_path):
    """mock_requests.parquet goes through its reader: one of version 7 is refused."""
    import pyarrow.parquet as pq
    table = pq.read_table(V2_RUN / "mock_requests.parquet")
    assert table.num_rows > 0
    pq.write_table(table.replace_schema_metadata({b"schema_version": b"7"}),
                   tmp_path / "mock_requests.parquet")
    with pytest.raises(readers.ArtifactError, match="mock requests table schema_version 7"):
        readers.read_mock_requests(tmp_path)


def test_version_3_manifests_come_up_with_the_parts_named_as_their_settings():
    """Run manifest 3 -> 4: the spec's mock and wire fields by their settings' names, the load's
    two derived fields gone; the floor's and the hop's kind is control in both manifests."""
    raw = json.loads((V3_RUN / "manifest.json").read_text())
    run = readers.read_run_manifest(V3_RUN / "manifest.json")
    assert run.spec.mock.mock_latency_ms == raw["spec"]["mock"]["latency_ms"]
    assert run.spec.mock.mock_response_tokens == raw["spec"]["load"]["max_tokens"]
    assert run.spec.wire.wire_capture_offset_s == raw["spec"]["wire"]["offset_s"]
    assert (raw["kind"], run.kind) == ("baseline", "control")
    study = readers.read_study_manifest(V3 / "manifest.json")
    assert {info.kind for info in study.systems.values()} == {"control"}
