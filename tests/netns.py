"""A few hosts on this machine: network namespaces joined by veth pairs to one bridge.

    with lab(4) as hosts: ...      # hosts[0] holds the bridge; every host reaches every other

Names carry this process's pid, addresses are in 10.231.0.0/24 inside the namespaces only (the
machine's own network is untouched), and everything is deleted afterwards, even on failure.
Also a command: `python -m tests.netns -- python -m harness study ...` runs a study with
`--set topology=...` of a four-host lab (mock, system, Locust master, two workers).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

SUBNET = "10.231.0"
COMMAND_TIMEOUT_S = 20


@dataclass(frozen=True)
class NetnsHost:
    netns: str
    address: str

    @property
    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.netns]


def unavailable() -> str:
    """Why namespaces cannot be made here ('' when they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is missing (scripts/install-test-deps.sh installs it)"
    probe = f"slprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S)
    if made.returncode != 0:
        return f"`ip netns add` fails here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=COMMAND_TIMEOUT_S)
    return ""


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def pids_in(netns: str) -> list[int]:
    done = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S)
    return [int(p) for p in done.stdout.split()]


@contextlib.contextmanager
def lab(count: int):
    """count namespaces; the first holds the bridge and the others hang off it by veth pairs."""
    tag = f"sl{os.getpid()}"
    hosts = [NetnsHost(f"{tag}h{i}", f"{SUBNET}.{i + 1}") for i in range(count)]
    made: list[str] = []
    try:
        for host in hosts:
            _ip("netns", "add", host.netns)
            made.append(host.netns)
            _ip("-n", host.netns, "link", "set", "lo", "up")
        hub = hosts[0].netns
        _ip("-n", hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", hub, "addr", "add", f"{hosts[0].address}/24", "dev", "br0")
        _ip("-n", hub, "link", "set", "br0", "up")
        for i, host in enumerate(hosts[1:], 1):
            _ip("-n", hub, "link", "add", f"v{i}", "type", "veth", "peer", "name", "eth0",
                "netns", host.netns)
            _ip("-n", hub, "link", "set", f"v{i}", "master", "br0")
            _ip("-n", hub, "link", "set", f"v{i}", "up")
            _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", "eth0")
            _ip("-n", host.netns, "link", "set", "eth0", "up")
        yield hosts
    finally:
        for netns in made:
            for pid in pids_in(netns):  # only ours can be in a namespace this process made
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", netns], capture_output=True,
                           timeout=COMMAND_TIMEOUT_S)


def four_host_topology(hosts: list[NetnsHost], workers: int = 2) -> str:
    """The issue's layout: Locust's master beside the harness in hosts[0] (this machine to the
    harness, which runs there), the mock in hosts[1], the system in hosts[2], the workers in
    hosts[3]."""
    master, mock, system, load = hosts[:4]
    lines = ["schema_version = 1", ""]
    for name, host, prefix in (("master", master, []), ("upstream", mock, mock.prefix),
                               ("gateway", system, system.prefix), ("load", load, load.prefix)):
        lines += [f"[hosts.{name}]", f'address = "{host.address}"',
                  "prefix = [" + ", ".join(f'"{p}"' for p in prefix) + "]", ""]
    lines += ["[roles]", 'mock = "upstream"', 'system = "gateway"', 'locust_master = "master"',
              f'locust_workers = [{{ host = "load", count = {workers} }}]', ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "--":
        print("usage: python -m tests.netns -- COMMAND... (run with --set topology=<lab file>)",
              file=sys.stderr)
        return 2
    why = unavailable()
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    with lab(4) as hosts, tempfile.TemporaryDirectory(prefix="sluice-lab-") as tmp:
        topology = Path(tmp) / "topology.toml"
        topology.write_text(four_host_topology(hosts))
        command = [*hosts[0].prefix, *argv[1:], "--set", f"topology={topology}"]
        print("lab:", " ".join(f"{h.netns}={h.address}" for h in hosts), flush=True)
        return subprocess.run(command).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
