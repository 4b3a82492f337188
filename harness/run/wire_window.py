"""The wire capture during the hold: tcpdump in a thread beside the load. Its packets are joined
with the rows after the run (harness.run.consolidate).
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

from harness.files.study_files import PCAP, RunFiles
from harness.model.manifests import WireCheck
from harness.model.plan import RunSpec
from harness.run.capture import Capture, CaptureError, CaptureResult

_POLL_S = 0.05


def capture_not_possible(spec: RunSpec) -> str:
    """Why this run cannot be captured, "" when it can."""
    if spec.wire.wire_capture_s <= 0:
        return "not captured: wire_capture_s = 0"
    if spec.topology.source:
        return "not captured: multi-host topology (the capture reads this machine's loopback only)"
    return ""


class WireWindow:
    """tcpdump on the loopback for ``wire_capture_s`` seconds, starting ``wire_capture_offset_s``
    into the hold (read from the phases file Locust's shape writes), never past the planned
    hold's end."""

    def __init__(self, spec: RunSpec, run_dir: Path, ports: list[int], interface: str = "lo"):
        self.spec, self.run, self.interface = spec, RunFiles(run_dir), interface
        self.capture = Capture(str(self.run.pcap_path), ports, interface=interface,
                               snaplen_bytes=spec.wire.wire_snaplen_bytes,
                               max_duration_s=spec.wire.wire_capture_s + 5.0)
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
        offset_s = wire.wire_capture_offset_s
        if self._done.wait(offset_s) or self._phase("hold_end_t_unix_s") is not None:
            self.reason = "not captured: the hold ended before the capture window began"
            return
        length_s = min(wire.wire_capture_s, max(0.0, self.spec.load.hold_s - offset_s)) \
            if not self.spec.load.open_loop_rates_per_s else wire.wire_capture_s
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
                         snaplen_bytes=self.spec.wire.wire_snaplen_bytes,
                         window_start_t_unix_s=self.window[0], window_end_t_unix_s=self.window[1],
                         pcap_file=PCAP, pcap_bytes=r.pcap_bytes,
                         packets_captured=r.packets_captured,
                         packets_dropped_by_kernel=r.packets_dropped_by_kernel, cpu_s=r.cpu_s)
