"""After a run, in one step: the load generator's raw rows consolidated (sorted, the whole load's
users, the phase), joined with the providers' request log (harness.run.identity) and the wire
capture (harness.run.wire), and written as requests.parquet (the load generator's raw files are
kept beside it; the capture only when the study asks for it: its figures are in the table).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from harness.files.store import stored_frame
from harness.files.study_files import RunFiles
from harness.model.manifests import IdentityCheck, WireCheck
from harness.model.plan import RunSpec
from harness.model.schema import MOCK_REQUESTS, REQUESTS
from harness.model.truncation import TRUNCATED, Answering, answering, truncated
from harness.run.identity import join_requests
from harness.run.wire import wire_times

# The columns of requests.parquet the joins fill (NaN where a row has no match): from the
# providers' request log, and from the capture (stored name -> harness.run.wire's name).
IDENTITY_COLUMNS = ("mock_service_ms", "net_overhead_ms")
WIRE_COLUMNS = {"wire_request_path_us": "request_path_us",
                "wire_response_path_us": "response_path_us",
                "wire_in_gateway_us": "in_gateway_us", "wire_mock_us": "mock_wire_us"}
PHASE_STARTS = (("ramp_start_t_unix_s", "ramp"), ("hold_start_t_unix_s", "hold"),
                ("hold_end_t_unix_s", "tail"))


@dataclass(frozen=True)
class WireSource:
    """The run's wire capture (harness.run.wire_window.WireWindow's check) and the ports its
    packets are read by; gateway_port None when the client called the mock directly. ``keep``:
    the capture stays once its wire times are read (the wire.keep_capture setting)."""
    check: WireCheck
    mock_port: int
    gateway_port: int | None
    keep: bool = False


@dataclass(frozen=True)
class Consolidated:
    rows: pd.DataFrame                 # what requests.parquet holds
    identity: IdentityCheck | None     # None: no providers' log to join with
    wire: WireCheck | None             # None: no capture given


def consolidate(run_dir: Path, run_id: str, system: str, phases: dict,
                mock: pd.DataFrame | None = None, capture: WireSource | None = None,
                stream: bool = False) -> Consolidated:
    """Raw CSVs -> consolidated -> joined with ``mock`` (the providers' rows of the load, as
    mock_requests gives them) and ``capture`` -> requests.parquet, each silent truncation
    judged a failure (harness.model.truncation; ``stream``: the run streamed)."""
    run = RunFiles(run_dir)
    raw = run.read_raw_requests().sort_values("start_t_unix_s", kind="stable").reset_index(drop=True)
    answer = answering(raw, mock)
    raw = judge_truncations(raw, answer, stream)
    start_t = raw["start_t_unix_s"].to_numpy()
    columns, identity_check = identity(raw, mock)
    wire_columns, wire_check = (wire(raw, run_dir, capture) if capture is not None
                                else (_unmatched(len(raw), WIRE_COLUMNS), None))
    frame = stored_frame(REQUESTS, raw, run_id=run_id, system=system,
                         users=_users_at(start_t, raw, run.users_history()).astype("int32"),
                         phase=phase_of(start_t, phases), content_chars_sent=answer.sent_chars,
                         **columns, **wire_columns)
    run.write_requests(frame)
    return Consolidated(frame, identity_check, wire_check)


def judge_truncations(raw: pd.DataFrame, answer: Answering, stream: bool) -> pd.DataFrame:
    """``raw`` with each silent truncation a failure of kind and class ``truncated``, its
    error saying what was missing."""
    cut = truncated(raw, answer, stream)
    if not cut.any():
        return raw
    raw = raw.copy()
    done = raw["stream_done"].fillna(False).astype(bool).to_numpy()
    got = pd.to_numeric(raw["content_chars"], errors="coerce").to_numpy(dtype="float64")
    short = ~np.isnan(answer.sent_chars) & (got < answer.sent_chars)
    why = np.where(stream & ~done, "a 200 without its dialect's terminal event",
                   np.where(short, "a 200 with less content than the provider sent",
                            "a 200 from an answer the provider broke off"))
    raw.loc[cut, "error_kind"] = TRUNCATED
    raw.loc[cut, "error_class"] = TRUNCATED
    raw.loc[cut, "error"] = why[cut]
    raw.loc[cut, "error_body_dialect"] = "none"
    return raw


def phase_of(start_t: np.ndarray, phases: dict) -> np.ndarray:
    """Label each request by the phase it started in."""
    labels = np.full(len(start_t), "warmup", dtype=object)
    for key, name in PHASE_STARTS:
        if key in phases:
            labels[start_t >= phases[key]] = name
    return labels


def _users_at(start_t: np.ndarray, raw: pd.DataFrame, history: pd.DataFrame | None) -> np.ndarray:
    """Users running in the whole load generator when each request started. One process knows
    it exactly; with several, each knows only its own, so the master's 1-second record is used."""
    one_process = raw["worker_pid"].nunique() <= 1 and raw["process_users"].notna().all()
    if one_process or history is None:
        return raw["process_users"].fillna(0).to_numpy()
    try:
        t = history["t_unix_s"].to_numpy(dtype="float64")
        counts = history["users"].to_numpy()
        idx = np.clip(np.searchsorted(t, start_t, side="right") - 1, 0, len(t) - 1)
        return counts[idx] if len(t) else np.zeros(len(start_t))
    except ValueError:
        return raw["process_users"].fillna(0).to_numpy()


def _unmatched(rows: int, names) -> dict:
    return {name: np.full(rows, np.nan) for name in names}


def mock_requests(logs: dict[str, pd.DataFrame], spec: RunSpec,
                  load_start_t_unix_s: float) -> pd.DataFrame:
    """The providers' log rows of the load (the pre-request and warm-up requests came before it),
    in body-end order; ``logs``: provider (primary, standby) -> its request log."""
    log = pd.concat([frame.assign(provider=name) for name, frame in logs.items()],
                    ignore_index=True).sort_values("body_end_t_unix_ns", kind="stable")
    if not math.isnan(load_start_t_unix_s):
        log = log[log["body_end_t_unix_ns"] >= int(load_start_t_unix_s * 1e9)]
    log = log.reset_index(drop=True)
    return stored_frame(MOCK_REQUESTS, log, run_id=spec.run_id, system=spec.system,
                        provider=log["provider"].to_numpy())


def identity(rows: pd.DataFrame, mock: pd.DataFrame | None) -> tuple[dict, IdentityCheck | None]:
    """Per-row IDENTITY_COLUMNS (NaN where unmatched, all NaN without ``mock``) and the join's
    summary."""
    if mock is None:
        return _unmatched(len(rows), IDENTITY_COLUMNS), None
    per_request, summary = join_requests(rows, mock)
    columns = {name: per_request[name].astype("float64").to_numpy() for name in IDENTITY_COLUMNS}
    check = IdentityCheck(**{k: (tuple(v) if isinstance(v, list) else v)
                             for k, v in summary.items()})
    return columns, check


def wire(rows: pd.DataFrame, run_dir: Path, capture: WireSource) -> tuple[dict, WireCheck]:
    """Per-row WIRE_COLUMNS (NaN outside the capture or unjoined) and the check completed with
    the join's counts. The pcap is then deleted (its figures are the columns), unless the
    capture asks for it to be kept; an unreadable one stays, as the evidence of why."""
    check = capture.check
    empty = _unmatched(len(rows), WIRE_COLUMNS)
    if not check.captured:
        return empty, check
    run = RunFiles(run_dir)
    pcap = run.named(check.pcap_file)
    try:
        per_request, summary = wire_times(str(pcap), capture.mock_port, capture.gateway_port)
    except Exception as exc:  # an unreadable capture: the figures are missing, with the reason
        return empty, replace(check, captured=False,
                              reason=f"capture not readable: {type(exc).__name__}: {exc}")
    per_id = per_request[per_request["request_id"].fillna("") != ""]
    per_id = per_id.drop_duplicates("request_id", keep="last").set_index("request_id")
    ids = rows["request_id"].astype("string").fillna("")
    columns = {}
    for name, source in WIRE_COLUMNS.items():
        values = np.array(per_id[source].astype("float64").reindex(ids.to_numpy()), dtype="float64")
        values[(ids == "").to_numpy()] = np.nan
        columns[name] = values
    with_times = int(np.sum(~np.isnan(columns["wire_mock_us"])))
    check = replace(check, client_requests=summary["client_requests"],
                    client_requests_without_id=summary["client_requests_without_id"],
                    upstream_requests=summary["upstream_requests"],
                    upstream_requests_without_id=summary["upstream_requests_without_id"],
                    upstream_ids_seen_more_than_once=summary["upstream_ids_seen_more_than_once"],
                    joined=summary["joined"], join_rate=summary["join_rate"],
                    rows_with_wire_times=with_times)
    if not capture.keep:
        run.drop(check.pcap_file)
        check = replace(check, pcap_file="", pcap_kept_reason=(
            "deleted once its wire times were read (wire.keep_capture = false)"))
    return columns, check
