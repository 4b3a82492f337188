"""The in-flight lane's statistics on synthetic data with known answers: open requests at the
client and at the mock, the RSS slope per 1,000 open with its R², upstream connections and their
reuse, added time, errors by cause, the skip-above-a-failed-step rule, the instruments' label,
where a system stops and why, and the replicas at a planned concurrency."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from synthetic_inflight import lane
from synthetic_inflight import step as _step

from harness.stats import inflight_lane as I
from harness.stats import inflight_limits as L

HOLD_S = 2.0


def _closed_loop(users: int, start: float, end: float, added_ms: float, per_connection: int = 1,
                 failed_every: int = 0, error: str = ""):
    """Client rows and mock rows of `users` users each keeping one request open from `start`
    to `end`, each held HOLD_S by the mock plus `added_ms` in the system; a system reusing each
    upstream connection for `per_connection` requests in turn."""
    rows, mock = [], []
    for u in range(users):
        t, k = start + (u % 10) * 0.01, 0
        while t < end:
            latency_ms = HOLD_S * 1e3 + added_ms
            fail = failed_every and (u * 7 + k) % failed_every == 0
            rows.append({"start_t_unix_s": t, "latency_ms": latency_ms,
                         "error_kind": "connection" if fail else "",
                         "error": error if fail else "", "status_code": 0 if fail else 200,
                         "chunks": 8})
            body_end = t + added_ms / 2e3
            mock.append({"worker_pid": 1, "peer_port": 10000 + u * 100 + k // per_connection,
                         "body_end_t_unix_ns": int(body_end * 1e9),
                         "last_frame_written_t_unix_ns": int((body_end + HOLD_S) * 1e9)})
            t += latency_ms / 1e3
            k += 1
    return pd.DataFrame(rows), pd.DataFrame(mock)


def _samples(start: float, end: float, rss_mib: float, fds: int, cpu_cores: float):
    t = np.arange(start - 2, end + 3, 1.0)
    return pd.DataFrame({"role": "system", "t_unix_s": t, "rss_bytes": rss_mib * I.MIB,
                         "inflight_requests": 199.0, "pid_count": 1,
                         "num_fds": fds, "cpu_percent": cpu_cores * 100.0,
                         "cpu_seconds_total": (t - t[0]) * cpu_cores})


def _window(target: int, end: float) -> dict:
    return {"step_index": 1, "target_open": target, "ran": True,
            "window_start_t_unix_s": end - 2 * HOLD_S, "window_end_t_unix_s": end}


def test_open_counts_counts_intervals_containing_each_time():
    starts, ends = np.array([0.0, 0.5, 1.0]), np.array([2.0, 1.0, 3.0])
    assert list(I.open_counts(starts, ends, np.array([0.25, 0.75, 1.0, 2.5]))) == [1, 2, 2, 1]


def test_a_held_step_reports_open_requests_connections_added_time_and_cpu():
    rows, mock = _closed_loop(200, 1000.0, 1012.0, added_ms=3.0, per_connection=3)
    figures = I.step_figures(rows, mock, _samples(1000.0, 1012.0, 90.0, 450, 0.5),
                             _window(200, 1010.0), HOLD_S * 1e3, stream=True)
    assert figures["client_open_mean"] == pytest.approx(200, abs=1)
    assert figures["mock_open_mean"] == pytest.approx(200, abs=1) and figures["open_agree"]
    assert figures["added_p50_ms"] == pytest.approx(3.0) and figures["added_p99_ms"] == pytest.approx(3.0)
    assert figures["failed"] == 0 and figures["held"]
    assert figures["rss_mib"] == pytest.approx(90.0) and figures["open_fds"] == 450
    assert figures["system_processes"] == 1
    assert figures["system_open_mean"] == 199.0
    # 2 holds of 200 users: 400 requests received, each connection carried 3 in turn
    received = figures["requests_per_connection"] * figures["upstream_connections"]
    assert figures["requests_per_connection"] == pytest.approx(received / figures["upstream_connections"])
    assert 2.0 <= figures["requests_per_connection"] <= 3.0
    # 0.5 cores for 4 s over the ~400 requests that ended in the window
    assert figures["cpu_ms_per_request"] == pytest.approx(2000.0 / 400, rel=0.05)
    assert figures["cpu_ms_per_frame"] == pytest.approx(figures["cpu_ms_per_request"] / 8)


def test_errors_are_counted_by_cause_and_a_step_with_errors_is_not_held():
    rows, mock = _closed_loop(100, 1000.0, 1012.0, added_ms=1.0, failed_every=10,
                              error="ConnectionRefusedError: [Errno 111] Connection refused")
    figures = I.step_figures(rows, mock, _samples(1000.0, 1012.0, 50.0, 200, 0.1),
                             _window(100, 1010.0), HOLD_S * 1e3, stream=False)
    assert figures["errors_connect_refused"] == figures["failed"] > 0
    assert figures["errors_read_timeout"] == figures["errors_reset_before_head"] == 0
    assert not figures["held"]
    assert figures["error_example"] == "ConnectionRefusedError: [Errno 111] Connection refused"


def test_failures_are_counted_by_their_class_and_older_rows_by_their_text():
    """A row's error_class decides; a failed row without one (an artifact from before the
    column: None, or "" from a raw file without it) is classed by its error text."""
    none = {c: 0 for c in I.ERROR_CAUSES}
    causes = I.error_causes(pd.DataFrame({
        "error_kind": ["other", "other", "connection", "http", "http", "other", ""],
        "error_class": ["reset_before_head", "reset_before_head", "connect_timeout", "http_5xx",
                        "bad_body", "a class from the future", ""],
        "error": ["CatchResponseError: HTTP 0"] * 2 + ["RetriesExceeded: timed out", "HTTP 502",
                                                       "HTTP 200 without a body", "x", ""],
        "status_code": [0, 0, 0, 502, 200, 0, 200]}))
    assert causes == {**none, "reset_before_head": 2, "connect_timeout": 1, "http_5xx": 1,
                      "bad_body": 1, "other": 1}
    older = pd.DataFrame({
        "error_kind": ["timeout", "http", "http", "connection", "connection", "other", "other", ""],
        "error": ["read timed out", "HTTP 502", "HTTP 429", "ConnectionResetError",
                  "ConnectionRefusedError: [Errno 111] Connection refused",
                  "CatchResponseError: stream broken after 3 frames: ConnectionResetError", "x", ""],
        "status_code": [0, 502, 429, 0, 0, 200, 0, 200]})
    expected = {**none, "read_timeout": 1, "connect_refused": 1, "http_5xx": 1, "http_4xx": 1,
                "reset_before_head": 1, "reset_during_body": 1, "other": 1}
    assert I.error_causes(older) == expected
    assert I.error_causes(older.assign(error_class=None)) == expected
    assert I.error_causes(older.assign(error_class="")) == expected
    assert I.error_causes(older.iloc[:0]) == none


def test_a_step_stopped_by_errors_cites_the_commonest_class_and_its_count():
    steps = pd.DataFrame([
        _step("direct", 1000, True), _step("direct", 2500, True),
        _step("x", 1000, True),
        _step("x", 2500, False, failed=7600, errors_reset_before_head=7512,
              errors_read_timeout=88, error_example="CatchResponseError: HTTP 0")])
    stop = L.where_it_stops(L.summary(steps, floor="direct"), cores=2.0).set_index("system").loc["x"]
    assert stop["cause"] == "resets before an answer"
    assert stop["evidence"] == "7,512 per run (reset_before_head); e.g. 'CatchResponseError: HTTP 0'"


def test_the_rss_slope_per_1000_open_and_its_r2():
    x = np.array([1000, 2500, 5000, 10000], float)
    exact = L.rss_slope(x, 40.0 + 18.0 * x / 1000)
    assert exact.mib_per_1000 == pytest.approx(18.0) and exact.intercept_mib == pytest.approx(40.0)
    assert exact.r2 == pytest.approx(1.0) and exact.mib_at(10_000) == pytest.approx(220.0)
    noisy = L.rss_slope(x, 40.0 + 18.0 * x / 1000 + np.array([5, -5, 5, -5]))
    assert 0.9 < noisy.r2 < 1.0
    assert math.isnan(L.rss_slope([1000, 1000], [1, 2]).mib_per_1000)


def test_steps_above_a_failed_step_are_not_run():
    assert L.steps_to_run([True, True, False, True]) == [True, True, True, False]
    assert L.steps_to_run([False, True]) == [True, False]
    windows = I.step_windows(100.0, 100.0 + 2 * 40.0, (1000, 2500, 5000), 40.0, 10.0)
    assert [w["ran"] for w in windows] == [True, True, False]
    assert windows[0]["window_start_t_unix_s"] == 100.0 + 40.0 - 10.0   # its last hold


def test_a_step_direct_did_not_hold_is_the_instruments_limit_never_the_systems():
    steps = pd.DataFrame([
        _step("direct", 1000, True), _step("direct", 2500, False, errors_read_timeout=3, failed=3),
        _step("nginx", 1000, True), _step("nginx", 2500, False, errors_read_timeout=9, failed=9),
        _step("slow", 1000, False, added_p99_ms=400.0), _step("slow", 2500, False, ran=False)])
    table = L.summary(steps, floor="direct")
    label = {(r["system"], r["target_open"]): r["label"] for r in table.to_dict("records")}
    assert label[("nginx", 1000)] == "held" and label[("nginx", 2500)] == L.INSTRUMENTS
    assert label[("direct", 2500)] == L.INSTRUMENTS
    assert label[("slow", 1000)] == "failed" and label[("slow", 2500)] == L.NOT_RUN
    stops = L.where_it_stops(table, cores=2.0).set_index("system")
    assert stops.loc["nginx", "highest_held"] == 1000 and stops.loc["nginx", "cause"] == L.INSTRUMENTS
    assert stops.loc["slow", "highest_held"] == 0 and stops.loc["slow", "cause"] == "added latency"


def test_a_step_some_runs_did_not_reach_is_labelled_so_not_failed():
    steps = pd.DataFrame([
        _step("direct", 1000, True), _step("direct", 2500, True),
        _step("x", 1000, True, run=1), _step("x", 2500, True, run=1),
        _step("x", 1000, False, run=2, added_p99_ms=300.0), _step("x", 2500, False, run=2, ran=False)])
    table = L.summary(steps, floor="direct").set_index(["system", "target_open"])
    assert table.loc[("x", 1000), "label"] == "failed"
    assert table.loc[("x", 2500), "label"] == L.PARTLY_RUN and table.loc[("x", 2500), "runs_ran"] == 1


def test_a_run_that_failed_mid_step_held_the_steps_before_and_fails_that_one():
    from types import SimpleNamespace
    rows, mock = _closed_loop(100, 1000.0, 1025.0, added_ms=2.0)
    load = SimpleNamespace(inflight_hold_s=HOLD_S, inflight_steps=(50, 100, 200),
                           inflight_step_s=10.0, stream=False)
    run = SimpleNamespace(
        spec=SimpleNamespace(load=load), run_id="x-1", system="x", run_index=1, status="failed",
        reason="ProcessError: system exited with code 137", failed_t_unix_s=1015.0, limits=None,
        steps_fit=None,
        phases=SimpleNamespace(t=lambda name: {"hold_start": 1000.0}.get(name, math.nan)))
    steps = I.run_steps(run, rows, mock, _samples(1000.0, 1015.0, 300.0, 250, 0.2))
    assert [s["ran"] for s in steps] == [True, True, False]
    assert steps[1]["run_failed"].endswith("code 137") and not steps[1]["held"]
    table = L.summary(pd.DataFrame([_step("direct", t, True) for t in (50, 100, 200)] + steps),
                      floor="direct")
    stop = L.where_it_stops(table, cores=2.0).set_index("system").loc["x"]
    assert stop["stopped_at"] == 100 and stop["cause"] == "the run failed"
    assert "code 137" in stop["evidence"] and "RSS 300 MiB" in stop["evidence"]


def test_a_connection_pool_cap_is_named_with_the_mocks_connection_count():
    steps = pd.DataFrame([
        _step("direct", 1000, True), _step("direct", 2500, True),
        _step("capped", 1000, True),
        _step("capped", 2500, False, mock_open_mean=100.0, mock_open_max=100.0,
              added_p99_ms=20000.0, errors_read_timeout=40, failed=40)])
    stops = L.where_it_stops(L.summary(steps, floor="direct"), cores=2.0).set_index("system")
    assert stops.loc["capped", "highest_held"] == 1000 and stops.loc["capped", "stopped_at"] == 2500
    assert stops.loc["capped", "cause"] == "connection-pool cap"
    assert "at most 100 open upstream" in stops.loc["capped", "evidence"]
    assert stops.loc["direct", "cause"] == "" and math.isnan(stops.loc["direct", "stopped_at"])


def test_a_system_refusing_at_its_own_cap_is_named_by_its_answers_not_as_queueing():
    # Sluice's per-key cap answers 429 at once: the mock sees fewer open than the client, yet
    # nothing queues; its answers name the stop.
    steps = pd.DataFrame([
        _step("direct", 1000, True), _step("direct", 2500, True),
        _step("refuser", 1000, True),
        _step("refuser", 2500, False, mock_open_mean=100.0, mock_open_max=100.0,
              errors_http_4xx=3000, failed=3000, error_example="429 too many in flight")])
    stop = L.where_it_stops(L.summary(steps, floor="direct"), cores=2.0).set_index("system")
    assert stop.loc["refuser", "cause"] == "4xx answers"
    assert "429 too many in flight" in stop.loc["refuser", "evidence"]


def test_a_tree_of_workers_is_at_its_open_file_limit_only_when_requests_failed():
    # the limit is each process's: 20,100 descriptors over three processes with no failure is
    # not a process at 20,000; the stop is what else the step shows (here its added latency)
    direct = [_step("direct", t, True) for t in (5000, 10000)]
    workers = dict(open_fds=20100.0, system_processes=3.0, added_p99_ms=400.0)
    steps = pd.DataFrame([*direct, _step("w", 5000, True),
                          _step("w", 10000, False, **workers)])
    stop = L.where_it_stops(L.summary(steps, floor="direct"), cores=2.0).set_index("system")
    assert stop.loc["w", "cause"] == "added latency"
    steps = pd.DataFrame([*direct, _step("w", 5000, True),
                          _step("w", 10000, False, failed=50, errors_connect_refused=50,
                                **workers)])
    stop = L.where_it_stops(L.summary(steps, floor="direct"), cores=2.0).set_index("system")
    assert stop.loc["w", "cause"] == "open-file limit"
    assert "over 3 processes of a limit of 20000 each" in stop.loc["w", "evidence"]


def test_the_summary_gives_mean_and_sd_over_runs_and_the_slope_over_held_steps():
    steps = pd.DataFrame([_step("x", t, True, run=r, rss_mib=40.0 + 18.0 * t / 1000 + r)
                          for t in (1000, 5000) for r in (1, 2, 3)])
    row = L.summary(steps, floor="x").set_index("target_open").loc[5000]
    assert row["rss_mib_mean"] == pytest.approx(40 + 90 + 2) and row["rss_mib_sd"] == pytest.approx(1.0)
    slope = L.slopes(steps)["x"]
    assert slope.mib_per_1000 == pytest.approx(18.0) and slope.points == 6


def test_no_slope_from_the_runs_of_one_step():
    """Three runs held at 1,000 open, a few requests apart: no MiB per 1,000 from them (a line
    through them once read -723,242 MiB per 1,000)."""
    steps = pd.DataFrame([_step("x", 1000, True, run=r, client_open_mean=998.0 + r,
                                rss_mib=1200.0 - 5 * r) for r in (1, 2, 3)])
    slope = L.slopes(steps)["x"]
    assert math.isnan(slope.mib_per_1000) and slope.points == 3


@pytest.mark.parametrize("cores, slope_mib, held, decides, replicas", [
    (3.2, 18.0, 10000, "CPU", 4),          # 3.2 cores of 1-core replicas
    (0.5, 400.0, 10000, "memory", 2),      # 40 + 4,000 MiB at 10,000 open: 3.9 GiB of 2 GiB
    (0.5, 18.0, 2500, "descriptors", 4),   # each replica holds 2,500 open (it stopped there on
])                                         # its descriptors)
def test_replicas_at_a_planned_concurrency_and_the_limit_that_decides(cores, slope_mib, held,
                                                                      decides, replicas):
    open_requests = L.planned_open(1000.0, 10.0)
    assert open_requests == 10_000
    out = L.replicas_at(open_requests, cores, L.Slope(slope_mib, 40.0, 1.0, 4), held,
                        replica_cores=1.0, replica_gib=2.0, step_limit="descriptors")
    assert out["decides"] == decides and out["replicas"] == replicas


def test_sizing_at_a_planned_concurrency_uses_the_memory_slope_and_the_highest_step_held():
    from harness.stats.sizing import Prices, concurrency_sizing
    out = concurrency_sizing(lane(), load_rps=1000.0, latency_s=10.0).set_index("system")
    lean = out.loc["lean"]
    # 40 MiB + 18 MiB per 1,000 at 10,000 open; held only to 5,000: extrapolated
    assert lean["open_requests"] == 10_000 and lean["memory_gib"] == pytest.approx(220 / 1024)
    assert lean["extrapolated"] and lean["highest_held"] == 5000
    # it held every step: only the highest step measured bounds a replica
    assert lean["cores"] == pytest.approx(0.2) and lean["decides"] == "the highest step measured"
    assert lean["replicas"] == 2
    assert lean["usd_month"] == pytest.approx(2 * Prices().monthly(1.0, 2.0))
    capped = out.loc["capped"]
    assert capped["highest_held"] == 1000 and capped["replicas"] == 10
    assert capped["decides"] == "a configured cap"   # its stop: the mock saw 100 open
    assert "slow" not in out.index


def test_a_system_is_held_within_100_ms_of_directs_added_p99_at_the_same_step():
    steps = pd.DataFrame([
        _step("direct", 1000, False, added_p99_ms=240.0),   # the instruments' tail, under 10%
        _step("direct", 2500, True, added_p99_ms=1450.0),   # of the 10-s hold; above it
        _step("near", 1000, False, added_p99_ms=320.0),     # 80 ms beyond direct's: held
        _step("near", 2500, True, added_p99_ms=1500.0),
        _step("far", 1000, True, added_p99_ms=360.0)])      # 120 ms beyond: not held
    judged = L.judged(steps, floor="direct", hold_s=10.0)
    held = {(r["system"], r["target_open"]): r["held"] for r in judged.to_dict("records")}
    assert held[("near", 1000)] and not held[("far", 1000)]
    assert held[("direct", 1000)] and not held[("direct", 2500)]  # the floor: against the hold
    assert judged.loc[judged["system"] == "near", "added_over_floor_p99_ms"].tolist() == [80.0, 50.0]
    table = L.summary(judged, floor="direct")
    stops = L.where_it_stops(table, cores=2.0).set_index("system")
    assert stops.loc["far", "cause"] == "added latency"
    assert "120 ms beyond direct's" in stops.loc["far", "evidence"]
    # the floor did not hold 2,500: the instruments' limit for everyone, even within 100 ms
    assert stops.loc["near", "highest_held"] == 1000 and stops.loc["near", "cause"] == L.INSTRUMENTS


def test_a_step_whose_descriptors_do_not_fit_is_the_instruments_limit_with_the_reason():
    from types import SimpleNamespace
    rows, mock = _closed_loop(100, 1000.0, 1025.0, added_ms=2.0)
    load = SimpleNamespace(inflight_hold_s=HOLD_S, inflight_steps=(50, 100, 200),
                           inflight_step_s=10.0, stream=False)
    reason = "200 open requests need 1,424 descriptors per system process; its limit is 1,300"
    run = SimpleNamespace(
        spec=SimpleNamespace(load=load), run_id="x-1", system="x", run_index=1,
        status="completed", reason="", failed_t_unix_s=None, limits=None,
        steps_fit=SimpleNamespace(steps_run=2, reason=reason),
        phases=SimpleNamespace(t=lambda name: {"hold_start": 1000.0,
                                               "hold_end": 1020.0}.get(name, math.nan)))
    steps = I.run_steps(run, rows, mock, _samples(1000.0, 1020.0, 300.0, 250, 0.2))
    assert [s["ran"] for s in steps] == [True, True, False] and steps[2]["unfit"] == reason
    table = L.summary(pd.DataFrame([_step("direct", t, True) for t in (50, 100, 200)] + steps),
                      floor="direct").set_index(["system", "target_open"])
    assert table.loc[("x", 200), "label"] == L.INSTRUMENTS
    stop = L.where_it_stops(table.reset_index(), cores=2.0).set_index("system").loc["x"]
    assert stop["stopped_at"] == 200 and stop["cause"] == L.INSTRUMENTS
    assert stop["evidence"] == reason
    assert L.stop_limit(stop["cause"], stop["evidence"]) == "descriptors"


def test_every_failure_class_has_the_words_a_stop_on_it_is_named_by():
    assert set(L.STOP_WORDS) == set(I.ERROR_CAUSES)


def test_a_step_whose_streams_were_cut_short_stops_on_them():
    """A system that ends no stream with its terminal event fails the step on silent truncations,
    and the stop says so (every failure class gets its words)."""
    steps = pd.DataFrame([
        _step("direct", 1000, True), _step("direct", 2500, True),
        _step("mlflow", 1000, False, errors_truncated=1000, failed=1000)])
    stop = L.where_it_stops(L.summary(steps, floor="direct"), cores=2.0).set_index("system")
    assert stop.loc["mlflow", "cause"] == L.STOP_WORDS["truncated"]
    assert stop.loc["mlflow", "evidence"].startswith("1,000 per run (truncated)")


@pytest.mark.parametrize("cause, evidence, limit", [
    ("open-file limit", "19,958 descriptors open of a limit of 20,000", "descriptors"),
    ("connection-pool cap", "the mock saw at most 100 open", "a configured cap"),
    ("CPU", "190% CPU (of 2 cores)", "CPU"),
    ("5xx answers", "40 per run", "its stop (5xx answers)"),
    ("", "", "the highest step measured"),
    (L.INSTRUMENTS, "direct did not hold this step either", "the highest step measured"),
    (L.CLIENT_LIMIT, "3 per run (client_limit)", "the highest step measured"),
])
def test_the_limit_a_stop_names_for_the_sizing(cause, evidence, limit):
    assert L.stop_limit(cause, evidence) == limit


def test_a_declared_log_line_becomes_the_stops_evidence_with_its_count():
    from types import SimpleNamespace

    from harness.model.manifests import LimitLine
    steps = pd.DataFrame([
        _step("direct", 1000, True), _step("direct", 2500, True),
        _step("nginx", 1000, True),
        _step("nginx", 2500, False, errors_reset_before_head=9, failed=9,
              window_end_t_unix_s=2000.0)])
    steps["window_end_t_unix_s"] = steps.get("window_end_t_unix_s").fillna(1000.0)
    alert = LimitLine("worker_connections are not enough", 1204, "nginx-error.log",
                      "2026/12/01 21:31:12 [alert] 7#7: 8192 worker_connections are not enough",
                      t_unix_s=1990.0)
    later = LimitLine("Too many open files", 3, "nginx-error.log", "accept4() failed (24: Too "
                      "many open files)", t_unix_s=2100.0)   # after the step: not its evidence
    runs = [SimpleNamespace(run_id="nginx-1", system="nginx", limit_lines=(alert, later))]
    stops = L.with_own_words(L.where_it_stops(L.summary(steps, floor="direct"), cores=2.0),
                             steps, runs).set_index("system")
    nginx = stops.loc["nginx"]
    assert nginx["cause"] == "resets before an answer"
    assert nginx["evidence"].startswith("9 per run (reset_before_head)")
    assert nginx["own_words"] == ('nginx-error.log: "2026/12/01 21:31:12 [alert] 7#7: 8192 '
                                  'worker_connections are not enough" (×1,204)')
    assert nginx["evidence"].endswith("; its own log: " + nginx["own_words"])
    assert stops.loc["direct", "own_words"] == ""


def test_the_configuration_each_system_ran_is_named_with_why_it_was_not_sized():
    from types import SimpleNamespace as N
    assert L.configuration([N(scale="sized", scale_note="")] * 3) == "sized"
    why = "no connection setting is documented"
    assert L.configuration([N(scale="sized", scale_note=why)]) == f"as shipped: {why}"
    assert L.configuration([N(scale="shipped", scale_note="")]) == "as shipped"


def test_a_system_is_judged_on_its_mean_p99_against_the_floors_and_memory_on_every_open_step():
    steps = pd.DataFrame([
        _step("direct", 1000, True, run=1, added_p99_ms=200.0),
        _step("direct", 1000, True, run=2, added_p99_ms=400.0),
        # run 1 is 150 ms beyond the floor's mean (300), run 2 50 below: 50 ms on the mean
        _step("x", 1000, False, run=1, added_p99_ms=450.0, rss_mib=58.0),
        _step("x", 1000, True, run=2, added_p99_ms=250.0, rss_mib=58.0),
        # slow (far beyond the floor) but every request open: its memory still counts
        _step("x", 5000, False, run=1, added_p99_ms=5000.0, rss_mib=130.0),
        _step("x", 5000, False, run=2, added_p99_ms=5000.0, rss_mib=130.0)])
    steps.loc[steps["system"] == "direct", "target_open"] = 1000
    steps = pd.concat([steps, pd.DataFrame([_step("direct", 5000, True, run=r, added_p99_ms=300.0)
                                            for r in (1, 2)])], ignore_index=True)
    judged = L.judged(steps, floor="direct", hold_s=10.0)
    table = L.summary(judged, floor="direct").set_index(["system", "target_open"])
    assert table.loc[("x", 1000), "label"] == "held"
    assert table.loc[("x", 1000), "added_over_floor_p99_ms_mean"] == pytest.approx(50.0)
    assert table.loc[("x", 5000), "label"] == "failed"
    slope = L.slopes(judged)["x"]
    assert slope.points == 4 and slope.mib_per_1000 == pytest.approx(18.0)
