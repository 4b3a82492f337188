"""What the system itself adds, per request: the identity join with the mock's request log, and
the wire capture during the hold. The capture runs in a thread beside the load; everything
else runs after the run, on its files (harness.run.identity, harness.run.wire).
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from harness.files.store import stored_frame
from harness.files.study_files import PCAP, RunFiles
from harness.model.manifests import IdentityCheck, WireCheck
from harness.model.plan import RunSpec
from harness.model.schema import MOCK_REQUESTS
from harness.run.capture import Capture, CaptureError, CaptureResult
from harness.run.identity import join_requests
from harness.run.wire import wire_times

# A pcap is evidence and is kept, unless it is larger than this (then deleted, with the reason).
PCAP_KEEP_MAX_BYTES = 200 * 1024 * 1024
WIRE_COLUMNS = {"wire_request_path_us": "request_path_us",
                "wire_response_path_us": "response_path_us",
                "wire_in_gateway_us": "in_gateway_us", "wire_mock_us": "mock_wire_us"}
_POLL_S = 0.05


def capture_not_possible(spec: RunSpec) -> str:
    """Why this run cannot be captured, "" when it can."""
    if spec.wire.capture_s <= 0:
        return "not captured: wire_capture_s = 0"
    if spec.topology.source:
        return "not captured: multi-host topology (the capture reads this machine's loopback only)"
    return ""


class WireWindow:
    """tcpdump on the loopback for ``capture_s`` seconds, starting ``offset_s`` into the hold
    (read from the phases file Locust's shape writes), never past the planned hold's end."""

    def __init__(self, spec: RunSpec, run_dir: Path, ports: list[int], interface: str = "lo"):
        self.spec, self.run, self.interface = spec, RunFiles(run_dir), interface
        self.capture = Capture(str(self.run.pcap_path), ports, interface=interface,
                               snaplen_bytes=spec.wire.snaplen_bytes,
                               max_duration_s=spec.wire.capture_s + 5.0)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wire-capture", daemon=True)
        self.window: tuple[float, float] | None = None
        self.result: CaptureResult | None = None
        self.reason = ""

    @property
    def pid(self) -> list[int]:
        """The capture's pid while it runs (the sampler's `capture` role)."""
        return [self.capture.pid] if self.capture.pid is not None else []

    def start(self) -> "WireWindow":
        self._thread.start()
        return self

    def _phase(self, name: str) -> float | None:
        return self.run.phases().get(name)

    def _run(self) -> None:
        wire = self.spec.wire
        while self._phase("hold_start_t_unix_s") is None:
            if self._done.wait(_POLL_S):
                self.reason = "not captured: the load ended before its hold began"
                return
        if self._done.wait(wire.offset_s) or self._phase("hold_end_t_unix_s") is not None:
            self.reason = "not captured: the hold ended before the capture window began"
            return
        length_s = min(wire.capture_s, max(0.0, self.spec.load.hold_s - wire.offset_s)) \
            if not self.spec.load.open_loop_rates_per_s else wire.capture_s
        try:
            self.capture.start()
        except CaptureError as exc:
            self.reason = f"not captured: {str(exc).splitlines()[0]}"
            return
        started = time.time()
        deadline = time.monotonic() + length_s
        while time.monotonic() < deadline and self._phase("hold_end_t_unix_s") is None:
            if self._done.wait(_POLL_S):
                break
        try:
            self.result = self.capture.stop()
            self.window = (started, time.time())
        except CaptureError as exc:
            self.reason = f"not captured: {str(exc).splitlines()[0]}"

    def finish(self) -> WireCheck:
        """Stop (if still capturing) and say what was captured."""
        if self._thread.ident is None:   # never started: the run failed before its load
            return WireCheck(captured=False, reason="not captured: the run failed before its load")
        self._done.set()
        self._thread.join(timeout=30.0)
        if self._thread.is_alive():  # never leave tcpdump behind
            self.capture._kill()
            self.reason = self.reason or "not captured: the capture did not stop within 30 s"
        if self.result is None:
            return WireCheck(captured=False, reason=self.reason or "not captured")
        r = self.result
        return WireCheck(captured=True, interface=self.interface,
                         snaplen_bytes=self.spec.wire.snaplen_bytes,
                         window_start_t_unix_s=self.window[0], window_end_t_unix_s=self.window[1],
                         pcap_file=PCAP, pcap_bytes=r.pcap_bytes,
                         packets_captured=r.packets_captured,
                         packets_dropped_by_kernel=r.packets_dropped_by_kernel, cpu_s=r.cpu_s)


# --- after the run ------------------------------------------------------------------------------

def mock_requests(logs: dict[str, pd.DataFrame], spec: RunSpec,
                  load_start_t_unix_s: float) -> pd.DataFrame:
    """The providers' log rows of the load (the pre-check and warm-up requests came before it),
    in body-end order; ``logs``: provider (primary, standby) -> its request log."""
    log = pd.concat([frame.assign(provider=name) for name, frame in logs.items()],
                    ignore_index=True).sort_values("body_end_t_unix_ns", kind="stable")
    if not math.isnan(load_start_t_unix_s):
        log = log[log["body_end_t_unix_ns"] >= int(load_start_t_unix_s * 1e9)]
    log = log.reset_index(drop=True)
    return stored_frame(MOCK_REQUESTS, log, run_id=spec.run_id, system=spec.system,
                        provider=log["provider"].to_numpy())


def identity(rows: pd.DataFrame, mock: pd.DataFrame) -> tuple[dict, IdentityCheck]:
    """Per-row mock_service_ms / net_overhead_ms (NaN where unmatched) and the join's summary."""
    per_request, summary = join_requests(rows, mock)
    columns = {name: per_request[name].astype("float64").to_numpy()
               for name in ("mock_service_ms", "net_overhead_ms")}
    check = IdentityCheck(**{k: (tuple(v) if isinstance(v, list) else v)
                             for k, v in summary.items()})
    return columns, check


def wire(rows: pd.DataFrame, run_dir: Path, check: WireCheck, mock_port: int,
         gateway_port: int | None) -> tuple[dict, WireCheck]:
    """Per-row wire times (NaN outside the capture or unjoined) and the check completed with
    the join's counts; the pcap is deleted if over PCAP_KEEP_MAX_BYTES."""
    empty = {name: np.full(len(rows), np.nan) for name in WIRE_COLUMNS}
    if not check.captured:
        return empty, check
    run = RunFiles(run_dir)
    pcap = run.named(check.pcap_file)
    try:
        per_request, summary = wire_times(str(pcap), mock_port, gateway_port)
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
                    upstream_ids_seen_more_than_once=summary["upstream_ids_seen_more_than_once"],
                    joined=summary["joined"], join_rate=summary["join_rate"],
                    rows_with_wire_times=with_times)
    if check.pcap_bytes is not None and check.pcap_bytes > PCAP_KEEP_MAX_BYTES:
        run.drop(check.pcap_file)
        check = replace(check, pcap_file="", pcap_kept_reason=(
            f"deleted: {check.pcap_bytes} bytes > {PCAP_KEEP_MAX_BYTES} (PCAP_KEEP_MAX_BYTES)"))
    return columns, check
