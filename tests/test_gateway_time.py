"""Time inside the system, on synthetic data: the identity and wire columns a run gets after its
load (harness/run/consolidate.py), their per-run figures (harness/stats/gateway_time.py), the
manifest types, the request ids in the bodies and the parameters."""
import dataclasses
import json
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from harness.model.config import StudyConfig
from harness.model.manifests import IdentityCheck, RunChecks, RunManifest, WireCheck
from harness.model.metrics import METRICS
from harness.model.migrate import LACKED
from harness.model.migrate import table as migrate_table
from harness.model.schema import MOCK_REQUESTS, REQUESTS
from harness.run import consolidate, wire_window
from harness.run.bodies import RID_SLOT, chat_body
from harness.stats import gateway_time
from harness.stats.runs import _identity_problem
from mocks.request_log import REQUEST_LOG_COLUMNS
from tests.synthetic_manifests import small_run_manifest
from tests.test_config import problems_of
from tests.test_identity import T0_NS, _mock, _mock_row

PHASES = {"warmup_start_t_unix_s": 100.0, "hold_start_t_unix_s": 110.0, "hold_end_t_unix_s": 120.0}


def _client(ids, latency_ms=61.0, kinds=None):
    kinds = kinds or [""] * len(ids)
    return pd.DataFrame({"request_id": ids, "latency_ms": [latency_ms] * len(ids),
                         "error_kind": kinds, "start_t_unix_s": [1800.0 + i for i in range(len(ids))]})


def test_identity_columns_and_check_count_every_anomaly():
    client = _client(["a", "b", "c", "d"])
    mock = _mock([_mock_row("a", T0_NS), _mock_row("b", T0_NS + 1), _mock_row("b", T0_NS + 2),
                  _mock_row("x", T0_NS + 3)])
    columns, check = consolidate.identity(client, mock)
    assert columns["mock_service_ms"][:2] == pytest.approx([60.18, 60.18])
    assert columns["net_overhead_ms"][0] == pytest.approx(61.0 - 60.18)
    assert np.isnan(columns["net_overhead_ms"][2:]).all()        # c and d: never at the mock
    assert (check.client_ok, check.matched, check.matched_once) == (4, 2, 1)
    assert (check.client_without_mock, check.mock_without_client, check.ids_seen_more_than_once) \
        == (2, 1, 1)
    assert check.client_without_mock_ids == ("c", "d") and check.mock_without_client_ids == ("x",)
    assert check.ids_seen_more_than_once_ids == ("b",)
    assert check.match_rate == pytest.approx(0.25) and not check.ok
    assert "2 successful row(s) the mock never saw" in _identity_problem(
        SimpleNamespace(checks=RunChecks(identity=check), spec=None))


def test_under_provider_faults_a_repeated_id_is_a_retry_not_an_identity_problem():
    ids = ["a", "b"]
    mock = _mock([_mock_row("a", T0_NS), _mock_row("a", T0_NS + 1), _mock_row("b", T0_NS + 2)])
    _, check = consolidate.identity(_client(ids), mock)
    assert check.ids_seen_more_than_once == 1 and check.amplification == 1.5 and not check.ok
    plain = small_run_manifest("nginx-1", "nginx", 1, PHASES)
    faulted = plain.__class__(**{**vars(plain), "spec": dataclasses.replace(
        plain.spec, mock=dataclasses.replace(plain.spec.mock, fault_scenario="failover"))})
    for run, problem in ((plain, "identity: 1 id(s) the mock saw more than once"), (faulted, "")):
        assert _identity_problem(dataclasses.replace(run, checks=RunChecks(identity=check))) == problem
    # other anomalies stay problems under faults
    _, lost = consolidate.identity(_client(["a", "c"]), mock)
    assert _identity_problem(dataclasses.replace(faulted, checks=RunChecks(identity=lost))) == \
        "identity: 1 successful row(s) the mock never saw, 1 mock row(s) no client sent"


def test_a_clean_join_is_ok_and_no_problem():
    ids = [f"r{i}" for i in range(3)]
    _, check = consolidate.identity(_client(ids), _mock([_mock_row(i, T0_NS + n) for n, i in enumerate(ids)]))
    assert check.ok and check.match_rate == 1.0 and check.amplification == 1.0
    assert _identity_problem(SimpleNamespace(checks=RunChecks(identity=check))) == ""


def test_mock_rows_before_the_load_are_left_out():
    log = _mock([_mock_row("pre", 99 * 10**9), _mock_row("a", 101 * 10**9)])
    spec = small_run_manifest("nginx-1", "nginx", 1, PHASES).spec
    frame = consolidate.mock_requests({"primary": log}, spec, 100.0)
    assert list(frame.columns) == MOCK_REQUESTS.names and frame["request_id"].tolist() == ["a"]
    assert (frame["run_id"] == "nginx-1").all() and (frame["provider"] == "primary").all()


def test_both_providers_rows_in_one_table_in_body_end_order():
    primary = _mock([_mock_row("pre", 99 * 10**9), _mock_row("a", 101 * 10**9),
                     _mock_row("c", 103 * 10**9)])
    standby = _mock([_mock_row("a", 102 * 10**9), _mock_row("b", 104 * 10**9)])
    spec = small_run_manifest("sluice-1", "sluice", 1, PHASES).spec
    frame = consolidate.mock_requests({"primary": primary, "standby": standby}, spec, 100.0)
    assert list(zip(frame["request_id"], frame["provider"])) == [
        ("a", "primary"), ("a", "standby"), ("c", "primary"), ("b", "standby")]
    _, check = consolidate.identity(_client(["a", "b", "c"]), frame)
    assert check.amplification == pytest.approx(4 / 3) and check.client_without_mock == 0


def test_a_mock_requests_file_from_before_the_standby_reads_as_primary():
    frame = pd.DataFrame({c: ["x"] for c in MOCK_REQUESTS.names if c != "provider"})
    for version in (2,):
        out, missing = migrate_table(frame.copy(), MOCK_REQUESTS, version, "old.parquet")
        assert list(out.columns) == MOCK_REQUESTS.names and out["provider"].tolist() == ["primary"]
        assert "provider" not in missing


def test_mock_requests_table_is_the_mock_log():
    assert [c.name for c in MOCK_REQUESTS.raw] == [c for c, _ in REQUEST_LOG_COLUMNS]


def test_no_capture_leaves_wire_columns_missing_with_the_reason(tmp_path):
    check = WireCheck(captured=False, reason="not captured: wire_capture_s = 0")
    columns, out = consolidate.wire(_client(["a", "b"]), tmp_path, consolidate.WireSource(check, 1, 2))
    assert out == check
    assert set(columns) == set(consolidate.WIRE_COLUMNS)
    assert all(np.isnan(v).all() and len(v) == 2 for v in columns.values())


def test_an_unreadable_capture_is_missing_not_invented(tmp_path):
    (tmp_path / "wire.pcap").write_bytes(b"not a pcap")
    check = WireCheck(captured=True, pcap_file="wire.pcap", pcap_bytes=10)
    columns, out = consolidate.wire(_client(["a"]), tmp_path, consolidate.WireSource(check, 1, 2))
    assert not out.captured and out.reason.startswith("capture not readable")
    assert np.isnan(columns["wire_in_gateway_us"]).all()


def test_capture_not_possible_says_why():
    spec = small_run_manifest("nginx-1", "nginx", 1, PHASES).spec
    assert wire_window.capture_not_possible(spec) == "not captured: wire_capture_s = 0"


def _ok_rows(n=100):
    i = np.arange(n, dtype="float64")
    return pd.DataFrame({"net_overhead_ms": 1.0 + i / 100, "wire_in_gateway_us": 200.0 + i,
                         "wire_request_path_us": 100.0 + i, "wire_response_path_us": 100.0 + 0 * i,
                         "wire_mock_us": 60000.0 + i})


def test_figures_from_the_columns_and_the_manifest():
    run = SimpleNamespace(
        checks=RunChecks(identity=IdentityCheck(
            client_rows=100, client_ok=100, client_without_id=0, mock_rows=100, mock_without_id=0,
            matched=100, matched_once=100, client_without_mock=0, mock_without_client=0,
            ids_seen_more_than_once=0, amplification=1.0, match_rate=1.0)),
        wire=WireCheck(captured=True, join_rate=0.98, cpu_s=0.25))
    mock = _mock([_mock_row(f"r{i}", T0_NS + i, over_us=100 + i) for i in range(100)])
    f = gateway_time.figures(run, _ok_rows(), mock)
    assert f["net_overhead_p50_ms"] == pytest.approx(1.495)
    assert f["wire_in_gateway_p50_us"] == pytest.approx(249.5)
    assert f["wire_response_path_p99_us"] == pytest.approx(100.0)
    assert f["identity_match_rate"] == 1.0 and f["wire_join_rate"] == 0.98
    assert f["capture_cpu_s"] == 0.25 and f["wire_reason"] == "" and f["identity_reason"] == ""
    # own time = lag 0.05 + over (0.1..0.199) + write 0.03 ms
    assert f["mock_own_p99_ms"] == pytest.approx(0.05 + 0.19801 + 0.03, abs=1e-3)
    for name in f:
        if not name.endswith("_reason"):
            assert name in METRICS, name


def test_figures_missing_say_why():
    nan_rows = _ok_rows().assign(**{c: math.nan for c in _ok_rows().columns})
    run = SimpleNamespace(checks=RunChecks(identity_missing_reason="the mock did not start"),
                          wire=WireCheck(captured=False, reason="not captured: multi-host topology"))
    f = gateway_time.figures(run, nan_rows, None)
    assert math.isnan(f["net_overhead_p50_ms"]) and math.isnan(f["wire_in_gateway_p50_us"])
    assert f["identity_reason"] == "the mock did not start"
    assert f["wire_reason"] == "not captured: multi-host topology"
    old = SimpleNamespace(checks=RunChecks(), wire=None)
    f = gateway_time.figures(old, nan_rows, None)
    assert f["wire_reason"] == f["identity_reason"] == "not measured in this artifact version"


def test_a_capture_that_kept_no_upstream_id_says_so():
    """A system whose request head outgrows the bytes each packet keeps: its requests to the
    mock are seen, none with an id, and the reason names the setting to raise."""
    nan_rows = _ok_rows().assign(**{c: math.nan for c in _ok_rows().columns if c.startswith("wire")})
    lost = WireCheck(captured=True, snaplen_bytes=512, upstream_requests=3724,
                     upstream_requests_without_id=3724, joined=0, join_rate=0.0)
    run = SimpleNamespace(checks=RunChecks(), wire=lost)
    reason = gateway_time.figures(run, nan_rows, None)["wire_reason"]
    assert "none of its 3,724 requests to the mock showed an id" in reason
    assert "first 512 bytes" in reason and "wire_snaplen_bytes" in reason
    run = SimpleNamespace(checks=RunChecks(), wire=dataclasses.replace(
        lost, upstream_requests_without_id=3000))
    assert gateway_time.figures(run, nan_rows, None)["wire_reason"] == \
        "no request of the measured window was joined on the wire"


def test_manifest_round_trip_and_older_manifests_load():
    run = small_run_manifest("nginx-1", "nginx", 1, PHASES)
    identity = IdentityCheck(client_rows=1, client_ok=1, client_without_id=0, mock_rows=1,
                             mock_without_id=0, matched=1, matched_once=1, client_without_mock=0,
                             mock_without_client=0, ids_seen_more_than_once=0, amplification=1.0,
                             match_rate=1.0)
    wire = WireCheck(captured=True, pcap_file="wire.pcap", join_rate=1.0)
    full = RunManifest.from_json(
        run.__class__(**{**vars(run), "wire": wire,
                         "checks": RunChecks(identity=identity)}).to_json())
    assert full.wire == wire and full.checks.identity == identity
    data = json.loads(run.to_json())
    data.pop("wire")
    data["checks"].pop("identity")
    older = RunManifest.from_json(json.dumps(data))
    assert older.wire is None and older.checks.identity is None


def test_a_version_2_requests_file_without_the_new_columns_loads_them_missing():
    frame = pd.DataFrame({c: [] for c in REQUESTS.names if c not in LACKED["requests"][2]})
    out, missing = migrate_table(frame, REQUESTS, 2, "old.parquet")
    assert set(missing) == set(LACKED["requests"][2]) and list(out.columns) == REQUESTS.names


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
@pytest.mark.parametrize("size", [0, 32768])
def test_the_id_slot_is_in_the_last_user_message(dialect, size):
    body = chat_body(dialect, "m", 16, False, size, seed=1, rid_slot=True)
    assert body.count(RID_SLOT.encode()) == 1
    last = json.loads(body)["messages"][-1]
    text = last["content"] if isinstance(last["content"], str) else last["content"][-1]["text"]
    assert last["role"] == "user" and text.startswith(RID_SLOT)
    assert RID_SLOT.encode() not in chat_body(dialect, "m", 16, False, size, seed=1)


@pytest.mark.parametrize("field,value", [("wire_capture_s", -1), ("wire_capture_offset_s", -0.5),
                                         ("wire_snaplen_bytes", 64)])
def test_bad_wire_parameters_are_named(tmp_path, field, value):
    from harness.model.config import from_profile
    found = problems_of(from_profile("smoke", out_dir=str(tmp_path), **{field: value}))
    assert any(p.startswith(f"{field}:") for p in found), found


def test_wire_defaults():
    c = StudyConfig()
    assert (c.wire_capture_s, c.wire_capture_offset_s, c.wire_snaplen_bytes) == (20.0, 2.0, 2048)


def _captured(tmp_path):
    from test_wire import GW, MOCK, Pcap, exchange
    p = Pcap()
    exchange(p, 50001, 50101, "a", 0)
    p.write(tmp_path / "wire.pcap")
    check = WireCheck(captured=True, pcap_file="wire.pcap",
                      pcap_bytes=(tmp_path / "wire.pcap").stat().st_size)
    return check, MOCK, GW


@pytest.mark.parametrize("keep", [False, True])
def test_a_capture_is_kept_only_when_asked_once_its_times_are_read(tmp_path, keep):
    check, mock_port, gateway_port = _captured(tmp_path)
    columns, out = consolidate.wire(_client(["a"]), tmp_path,
                                    consolidate.WireSource(check, mock_port, gateway_port, keep))
    assert columns["wire_in_gateway_us"][0] > 0 and out.rows_with_wire_times == 1
    assert (tmp_path / "wire.pcap").is_file() == keep
    assert (out.pcap_file, bool(out.pcap_kept_reason)) == (("wire.pcap", False) if keep
                                                          else ("", True))


def test_the_providers_raw_logs_go_once_their_table_holds_every_row(tmp_path):
    from harness.files.readers import ArtifactError
    from harness.files.study_files import RunFiles
    run = RunFiles(tmp_path)
    log = _mock([_mock_row(f"r{i}", T0_NS + i, seq=i) for i in range(3)])
    stats = [tmp_path / "mock-stats", tmp_path / "mock-standby-stats"]
    for d in stats:
        d.mkdir()
        log.to_csv(d / "requests-9.csv", index=False)
        (d / "stats-9.json").write_text("{}")
    spec = SimpleNamespace(run_id="x-1", system="x")
    rows = consolidate.mock_requests({"primary": log, "standby": log}, spec, math.nan)
    run.write_mock_requests(rows)
    with pytest.raises(ArtifactError, match="holds 6 rows, not the 7 written"):
        run.drop_request_logs(stats, 7)
    assert all((d / "requests-9.csv").is_file() for d in stats)
    run.drop_request_logs(stats, len(rows))
    assert not any((d / "requests-9.csv").exists() for d in stats)
    assert all((d / "stats-9.json").is_file() for d in stats)   # the counters stay
    assert len(run.read_mock_requests()) == 6
