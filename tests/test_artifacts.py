"""The artifact model: one column registry behind every table, typed manifests, schema versions
checked by every reader, version 1 migrated with the same figures, and the documentation
generated from the registry."""
from __future__ import annotations

import ast
import dataclasses
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from synthetic import make_study

from harness import stats as A
from harness.files.store import (
    REQUEST_SCHEMA,
    SAMPLE_SCHEMA,
    hash_run_files,
    write_atomic,
    write_table,
)
from harness.host.sampling import Sampler
from harness.model import formats as F
from harness.model.config import REPO_DIR
from harness.model.manifests import ManifestError, RunManifest, StudyManifest
from harness.model.migrate import LACKED
from harness.model.schema import MOCK_REQUESTS, REQUESTS, SAMPLES
from harness.run import consolidate
from harness.run.run import _write_samples
from report import tables
from report.data import collect

V1_FIXTURE = Path(__file__).parent / "fixtures" / "studies" / "v1-smoke"
V2_FIXTURE = V1_FIXTURE.with_name("v2-smoke")
FIGURES = ("run_summary", "system_summary", "compare", "head_to_head_table")
# The request columns a version-2 file may lack (gained while 2 was current, or since).
LATE_V2_COLUMNS = LACKED["requests"][2]
# Columns version 1 gained without a new number: a version-1 file may lack them.
LATE_V1_COLUMNS = ("ttfb_ms", "ttft_ms", "chunks", "chunk_gaps_ms", "stream_done",
                   "intended_start_t_unix_s", "offered_rate_per_s", "step_index",
                   "waited_for_user", "inflight_requests", "host")


def figures(study: A.Study) -> dict[str, pd.DataFrame]:
    rs = A.run_summary(study)
    return {"run_summary": rs, "system_summary": A.system_summary(rs),
            "compare": A.compare(rs, reference="nginx"),
            "head_to_head_table": tables.headline(collect(study.path)).frame()}


def assert_same_figures(a: A.Study, b: A.Study) -> None:
    fa, fb = figures(a), figures(b)
    for name in FIGURES:
        pd.testing.assert_frame_equal(fa[name], fb[name], check_exact=True, obj=name)


def write_as_current(src: Path, dst: Path) -> Path:
    """A current-version copy of a study: every manifest and table rewritten by the current writers
    from what the loader made of them, run file hashes recomputed."""
    shutil.copytree(src, dst)
    study = A.load_study(dst)
    for run in study.runs:
        run_dir = study.run_dirs[run.run_id]
        for table, frame in ((REQUESTS, study.requests), (SAMPLES, study.samples)):
            rows = frame[frame["run_id"] == run.run_id].reset_index(drop=True)
            write_table(run_dir / table.file, rows, table)
        mock = json.loads((run_dir / "mock_stats.json").read_text())
        (run_dir / "mock_stats.json").write_text(json.dumps({**mock, "schema_version": F.MOCK_STATS.version}))
        write_atomic(run_dir / "manifest.json",
                     dataclasses.replace(run, files=hash_run_files(run_dir)).to_json())
    write_atomic(dst / "manifest.json", study.manifest.to_json())
    return dst


# --- one registry --------------------------------------------------------------------------------

def test_the_docs_column_tables_are_the_registry():
    page = (REPO_DIR / "docs" / "artifacts.md").read_text()
    for table in (REQUESTS, SAMPLES, MOCK_REQUESTS):
        assert table.markdown() in page, (
            f"docs/artifacts.md: the {table.file} table differs from harness/model/schema.py; "
            f"paste {table.name.upper()}.markdown() there")


def test_parquet_schemas_and_dtypes_come_from_the_registry():
    assert REQUEST_SCHEMA.names == REQUESTS.names
    assert SAMPLE_SCHEMA.names == SAMPLES.names
    study = A.load_study(V1_FIXTURE)
    assert list(study.requests.columns) == [*REQUESTS.names, "run_status"]
    assert list(study.samples.columns) == [*SAMPLES.names, "run_status"]
    for name, dtype in REQUESTS.pandas_dtypes.items():
        if dtype not in ("str", "object"):
            assert str(study.requests[name].dtype) == dtype, name


def test_the_load_generator_writes_exactly_the_raw_columns():
    """The load generator's row is a dict keyed by the registry's raw names (its header)."""
    tree = ast.parse((REPO_DIR / "harness" / "run" / "loadgen" / "rows.py").read_text())
    rows = [node.args[0] for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "attr", "") == "writerow" and node.args
            and isinstance(node.args[0], ast.Dict)
            and ast.unparse(node.func.value) == "self.writer"]
    assert len(rows) == 1
    assert [k.value for k in rows[0].keys] == REQUESTS.raw_names


def test_sampler_rows_are_the_raw_sample_columns(tmp_path):
    sampler = Sampler(tmp_path / "samples.csv", host="h")
    sampler.start()
    sampler.stop()
    header = (tmp_path / "samples.csv").read_text().splitlines()[0].split(",")
    assert header == SAMPLES.raw_names
    assert all(list(row) == SAMPLES.raw_names for row in sampler.rows)


def test_the_locust_side_imports_nothing_heavy():
    """Every Locust process imports the load generator's modules (and through them the registry
    and the dialects' error shapes): nothing heavy."""
    code = ("import sys, harness.run.bodies, harness.run.loadgen.rows, "
            "harness.run.loadgen.request_ids, harness.run.loadgen.schedule, "
            "harness.run.loadgen.shapes, harness.run.loadgen.users; "
            "print(sorted(m for m in ('pandas', 'pyarrow', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO_DIR, env={"PYTHONPATH": str(REPO_DIR)}, check=True)
    assert out.stdout.strip() == "[]"


def test_consolidating_v1_raw_files_gives_the_tables_v1_wrote(tmp_path):
    """The registry's casts turn the raw CSVs into exactly what the version-1 harness stored."""
    for system in ("direct", "nginx"):
        run_dir = tmp_path / system
        shutil.copytree(V1_FIXTURE / "runs" / system / "1", run_dir)
        manifest = json.loads((run_dir / "manifest.json").read_text())
        consolidate.consolidate(run_dir, manifest["run_id"], system, manifest["phases"])
        spec = type("Spec", (), {"run_id": manifest["run_id"], "system": system})
        _write_samples(run_dir, spec)
        for table in (REQUESTS, SAMPLES):
            old = pq.read_table(V1_FIXTURE / "runs" / system / "1" / table.file)
            new = pq.read_table(run_dir / table.file)
            assert new.schema.metadata[b"schema_version"] == str(F.TABLE_FORMATS[table.name].version).encode()
            # the columns version 2 gained are missing in v1's raw files: left empty
            added = [n for n in (LATE_V2_COLUMNS if table is REQUESTS else ()) if n not in old.column_names]
            if added:
                assert all(new.column(n).null_count == len(new) or
                           set(new.column(n).to_pylist()) <= {""} for n in added)
                new = new.drop_columns(added)
            assert old.schema.remove_metadata() == new.schema.remove_metadata()
            assert old.equals(new), f"{system} {table.file}"


# --- versions and migration ----------------------------------------------------------------------

def test_v1_fixture_and_its_v2_copy_give_identical_figures(tmp_path):
    v1 = A.load_study(V1_FIXTURE)
    assert json.loads((V1_FIXTURE / "manifest.json").read_text())["schema_version"] == 1
    v2_dir = write_as_current(V1_FIXTURE, tmp_path / "v2")
    assert json.loads((v2_dir / "manifest.json").read_text())["schema_version"] == F.STUDY_MANIFEST.version
    v2 = A.load_study(v2_dir)
    # version 1 predates the identity and wire columns: they load as missing
    assert v1.missing_columns == {1: {"requests": LATE_V2_COLUMNS}}
    assert v2.missing_columns == {}
    assert v1.manifest == v2.manifest
    assert ([dataclasses.replace(r, files={}) for r in v1.runs]
            == [dataclasses.replace(r, files={}) for r in v2.runs])
    assert_same_figures(v1, v2)
    assert figures(v1)["run_summary"]["requests_in_window"].tolist() == [12, 12]


def test_synthetic_v1_and_v2_give_identical_figures(tmp_path):
    v1 = A.load_study(make_study(tmp_path / "a", schema_version=1).path)
    v2 = A.load_study(make_study(tmp_path / "b").path)
    assert_same_figures(v1, v2)


def test_columns_an_older_version_lacked_are_missing_and_reported(tmp_path):
    made = make_study(tmp_path / "old", schema_version=1, without_columns=LATE_V1_COLUMNS)
    old = A.load_study(made.path)
    assert old.missing_columns == {1: {
        "requests": LATE_V1_COLUMNS[:9], "samples": ("inflight_requests", "host")}}
    assert old.samples["host"].isna().all() and old.requests["ttfb_ms"].isna().all()
    assert old.requests["chunks"].isna().all()          # missing, not a plausible 0
    assert old.not_measured("samples", "host") == (
        "not measured in samples table version 1 (samples.host)")
    assert old.not_measured("requests", "latency_ms") == ""
    assert_same_figures(old, A.load_study(make_study(tmp_path / "new").path))


def test_a_v2_table_without_a_column_is_refused(tmp_path):
    made = make_study(tmp_path, without_columns=("host",))
    with pytest.raises(A.ArtifactError, match=r"samples.parquet: missing columns \['host'\]"):
        A.load_study(made.path, verify=False)


@pytest.mark.parametrize("target", ["manifest.json", "runs/nginx/1/manifest.json",
                                    "runs/nginx/1/mock_stats.json"])
def test_an_unknown_json_version_is_refused_in_one_line(tmp_path, target):
    made = make_study(tmp_path)
    path = made.path / target
    path.write_text(json.dumps({**json.loads(path.read_text()), "schema_version": 9}))
    with pytest.raises(A.ArtifactError) as info:
        A.load_study(made.path, verify=False)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message and "schema_version 9" in message
    assert "known: 1, 2" in message


def test_an_unknown_parquet_version_is_refused(tmp_path):
    made = make_study(tmp_path)
    path = made.path / "runs" / "nginx" / "1" / "requests.parquet"
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata({b"schema_version": b"7"}), path)
    with pytest.raises(A.ArtifactError, match=r"requests.parquet \(Parquet metadata\): "
                                              r"requests table schema_version 7 is not one"):
        A.load_study(made.path, verify=False)


# --- typed manifests -----------------------------------------------------------------------------

def test_manifests_round_trip_and_refuse_unknown_keys():
    study_text = (V1_FIXTURE / "manifest.json").read_text()
    study = StudyManifest.from_json(study_text)
    assert StudyManifest.from_json(study.to_json()) == study
    run = RunManifest.from_json((V1_FIXTURE / "runs" / "nginx" / "1" / "manifest.json").read_text())
    assert RunManifest.from_json(run.to_json()) == run
    assert run.spec.mock.mock_latency_ms == 60.0 and run.phases.t("hold_start") > 0
    assert math.isnan(RunManifest.from_json(run.to_json().replace(
        '"hold_end_t_unix_s": ' + json.dumps(run.phases.hold_end_t_unix_s),
        '"hold_end_t_unix_s": null')).phases.t("hold_end"))
    data = json.loads(run.to_json())
    data["checks"]["mock_cnt"] = 3
    with pytest.raises(ManifestError, match=r"r.json: checks: unknown key\(s\) \['mock_cnt'\]"):
        RunManifest.from_json(json.dumps(data), source="r.json")
    data = json.loads(run.to_json())
    data["host_before"]["load_avg_1m"] = "high"
    with pytest.raises(ManifestError, match="host_before.load_avg_1m: expected float"):
        RunManifest.from_json(json.dumps(data), source="r.json")


# --- one writer, one parser ----------------------------------------------------------------------

def test_one_atomic_writer_and_one_folder_name_parser():
    """mocks/ keeps its own atomic write: it must not import the harness."""
    sources = [p for d in ("harness", "report") for p in (REPO_DIR / d).rglob("*.py")]
    replacing = [p.name for p in sources
                 if "os.replace(" in p.read_text() or ".replace(path)" in p.read_text()]
    assert replacing == ["atomic.py"]
    splitting = [p.name for p in sources
                 if 'split("@"' in p.read_text() or 'split("~"' in p.read_text()]
    assert splitting == ["gateway_spec.py"]


def test_a_system_that_did_not_run_is_named_with_its_reason(tmp_path):
    made = make_study(tmp_path)
    path = made.path / "manifest.json"
    data = json.loads(path.read_text())
    data["systems"]["ghost"] = {"kind": "competitor", "runnable": False,
                                "not_runnable_reason": "needs a GPU"}
    path.write_text(json.dumps(data))
    headline = tables.headline(collect(made.path))
    assert headline.frame().set_index("system").loc["ghost", "result"] == "not run"
    ghost = next(r for r in headline.rows if r.id == "headline-ghost")
    assert ghost.cells[-2].title == "needs a GPU"    # the reason: in the tag's tooltip ...
    assert ghost.cells[-1].text == "needs a GPU"     # ... and in small print beside it


def test_a_recorded_study_reads_as_it_did():
    """The tables of the recorded version-2 study, as the harness at commit 102e7d9 computed them
    (tests/fixtures/studies/README.md): a refactor of loading or of the figures changes none."""
    recorded = pd.read_pickle(V2_FIXTURE.with_name("v2-smoke-tables.pkl"))
    study = A.load_study(V2_FIXTURE)
    rs = A.run_summary(study)
    now = {"run_summary": rs, "system_summary": A.system_summary(rs),
           "compare": A.compare(rs, reference="nginx"),
           "headline": tables.headline(collect(study.path)).frame()}
    for name, frame in recorded.items():
        pd.testing.assert_frame_equal(now[name], frame, check_exact=True, obj=name)
