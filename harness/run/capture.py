"""A bounded tcpdump capture of a run's client->gateway and gateway->mock connections.

The capture only records; :mod:`harness.run.wire` parses the pcap after the run.

    cap = Capture("/run/dir/wire.pcap", ports=[gateway_port, mock_port]).start()
    sampler.add_role("capture", cap.pid)          # its CPU is part of the run's cost
    ...                                            # the capture window (e.g. 20 s of the hold)
    result = cap.stop()                            # SIGINT: tcpdump completes the file

What is captured: TCP segments to or from any of ``ports`` that carry payload (no bare
ACKs, SYNs or FINs), each cut to ``snaplen_bytes`` (link + IP + TCP headers included:
about 66 bytes on ``lo``).  The wire parser needs, per HTTP message, its first bytes and
the request id, so the id must sit within the first ``snaplen - 66`` bytes of the request:
the load generator sends ``x-request-id`` as the first header (and ``[rid:<id>]`` early in
the body for gateways that rewrite headers); raise ``snaplen_bytes`` for gateways that
move it further.  The payload filter reads the IPv4 header: IPv4 only.

libpcap hands packets to tcpdump in blocks, at least once a second: packets of the last
second before tcpdump gets SIGINT would be lost, so ``stop`` waits ``settle_s`` (1.1 s)
before it.  Everything sent before ``stop`` is called is then in the file (and nothing
is lost silently: tcpdump's own "dropped by kernel" count is reported).
``immediate=True`` (``--immediate-mode``) removes the wait at the price of a wake-up per
packet.

tcpdump runs in its own process group (a Ctrl-C meant for the harness must not cut the
file short) and gets SIGINT if the harness dies (PR_SET_PDEATHSIG).  It also stops by
itself after ``max_duration_s`` (``-G``/``-W 1``, checked as packets arrive), so a capture
never outlives its window by much even if ``stop`` is never called.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass

LINK_HEADERS_BYTES = 66  # Ethernet (lo) 14 + IPv4 20 + TCP 32 (timestamps)
BLOCK_TIMEOUT_S = 1.1    # libpcap's TPACKET_V3 block timeout (1 s) plus a margin

# the TCP payload length, from the IPv4 total length minus both headers' lengths
_PAYLOAD_FILTER = "(((ip[2:2] - ((ip[0]&0xf)<<2)) - ((tcp[12]&0xf0)>>2)) != 0)"

_STATS = {
    "packets_captured": re.compile(r"(\d+) packets? captured"),
    "packets_received_by_filter": re.compile(r"(\d+) packets? received by filter"),
    "packets_dropped_by_kernel": re.compile(r"(\d+) packets? dropped by kernel"),
}


class CaptureError(RuntimeError):
    """tcpdump is missing, may not capture, or failed."""


@dataclass
class CaptureResult:
    pcap_path: str
    pcap_bytes: int
    duration_s: float                  # start() returned -> tcpdump exited
    packets_captured: int | None       # tcpdump's own counts (None if it printed none)
    packets_received_by_filter: int | None
    packets_dropped_by_kernel: int | None
    cpu_s: float | None                # tcpdump's user + system CPU time
    returncode: int


def bpf_filter(ports) -> str:
    """Payload-carrying TCP segments to or from any of ``ports``."""
    ports = sorted({int(p) for p in ports})
    if not ports:
        raise ValueError("at least one port to capture")
    return f"tcp and ({' or '.join(f'port {p}' for p in ports)}) and {_PAYLOAD_FILTER}"


def syn_filter(port: int) -> str:
    """Connection attempts at ``port`` and how it answered them: SYNs to it (without ACK), and
    its SYN-ACKs (accepted) and resets (refused). Read by harness.files.pcap.refused_syns."""
    port = int(port)
    return (f"(tcp dst port {port} and (tcp[tcpflags] & (tcp-syn|tcp-ack)) == tcp-syn) or "
            f"(tcp src port {port} and (tcp[tcpflags] & (tcp-syn|tcp-rst)) != 0)")


def _pdeathsig_int() -> None:  # runs in the child before exec
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGINT, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Capture:
    """One tcpdump subprocess writing ``pcap_path``; see the module docstring."""

    def __init__(self, pcap_path: str, ports, interface: str = "lo", snaplen_bytes: int = 2048,
                 buffer_kib: int = 65536, max_duration_s: float = 60.0, immediate: bool = False,
                 tcpdump: str = "tcpdump", filter_text: str = ""):
        self.pcap_path = os.path.abspath(pcap_path)
        self.log_path = self.pcap_path + ".log"
        # ``filter_text``: another capture's filter (syn_filter); default: the wire's payloads
        self.filter = filter_text or bpf_filter(ports)
        self.interface = interface
        self.snaplen_bytes = int(snaplen_bytes)
        self.buffer_kib = int(buffer_kib)
        self.max_duration_s = float(max_duration_s)
        self.immediate = bool(immediate)
        self.tcpdump = tcpdump
        self._proc: subprocess.Popen | None = None
        self._t_start = 0.0
        self._rusage = None

    def argv(self, exe: str) -> list[str]:
        argv = [exe, "-i", self.interface, "-n", "-s", str(self.snaplen_bytes),
                "-B", str(self.buffer_kib), "--time-stamp-precision", "nano", "-w", self.pcap_path,
                "-G", str(max(1, int(self.max_duration_s + 0.999))), "-W", "1"]
        if self.immediate:
            argv.append("--immediate-mode")
        if os.geteuid() == 0:
            argv += ["-Z", "root"]  # keep writing where root can (tcpdump would drop to its own user)
        return argv + [self.filter]

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self, ready_timeout_s: float = 10.0) -> "Capture":
        """Start tcpdump and return once it is capturing; raises CaptureError."""
        exe = shutil.which(self.tcpdump) or (self.tcpdump if os.path.isfile(self.tcpdump) else None)
        if exe is None:
            raise CaptureError(f"{self.tcpdump!r} not found: install Debian's tcpdump "
                               "(scripts/install-test-deps.sh) or pass its path")
        os.makedirs(os.path.dirname(self.pcap_path), exist_ok=True)
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(self.argv(exe), stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True,
                                          preexec_fn=_pdeathsig_int)
        deadline = time.monotonic() + ready_timeout_s
        while True:
            text = self._log_text()
            if "listening on" in text:
                self._t_start = time.monotonic()
                return self
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self._kill()
                why = "exited" if self._proc.returncode is not None else "not capturing"
                hint = ""
                if "permission" in text.lower() or "not permitted" in text.lower():
                    hint = " (capturing needs root or CAP_NET_RAW + CAP_NET_ADMIN on tcpdump)"
                raise CaptureError(f"tcpdump {why} after {ready_timeout_s:g} s{hint}: "
                                   f"{' '.join(self.argv(exe))}\n{text.strip()}")
            time.sleep(0.02)

    def _log_text(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def _reap(self, timeout_s: float) -> bool:
        """Wait for tcpdump (keeping its resource usage); True once it is reaped."""
        proc = self._proc
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere
                proc.returncode = proc.returncode if proc.returncode is not None else -1
                return True
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                self._rusage = rusage
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)

    def _kill(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            try:
                os.kill(self._proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reap(10.0)

    def stop(self, timeout_s: float = 10.0, settle_s: float | None = None) -> CaptureResult:
        """Wait ``settle_s`` (default: 1.1 s, 0 in immediate mode) so that libpcap hands
        over its last block, SIGINT tcpdump (it completes the pcap), wait for it, and
        report its counts."""
        if self._proc is None:
            raise CaptureError("capture was not started")
        if self._proc.returncode is None:
            if settle_s is None:
                settle_s = 0.0 if self.immediate else BLOCK_TIMEOUT_S
            time.sleep(max(0.0, settle_s))
            try:
                os.kill(self._proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
            if not self._reap(timeout_s):
                self._kill()
                raise CaptureError(f"tcpdump did not stop within {timeout_s:g} s of SIGINT; killed")
        duration_s = time.monotonic() - self._t_start
        text = self._log_text()
        counts = {}
        for key, rx in _STATS.items():
            m = rx.search(text)
            counts[key] = int(m.group(1)) if m else None
        if self._proc.returncode not in (0, -signal.SIGINT) or not os.path.exists(self.pcap_path):
            raise CaptureError(f"tcpdump failed (exit {self._proc.returncode}):\n{text.strip()}")
        ru = self._rusage
        return CaptureResult(
            pcap_path=self.pcap_path, pcap_bytes=os.path.getsize(self.pcap_path), duration_s=duration_s,
            cpu_s=(ru.ru_utime + ru.ru_stime) if ru is not None else None,
            returncode=self._proc.returncode, **counts)

    def __enter__(self) -> "Capture":
        return self.start()

    def __exit__(self, *exc) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._kill()
