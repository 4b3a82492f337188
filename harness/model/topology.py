"""Where each role of a run executes: the study's hosts and their command prefixes.

A topology file (TOML, named by the study's `topology` setting) lists hosts and places the
mock, the system under test, the Locust master and Locust's workers on them. A host with an
empty prefix is this machine; any other host runs its processes as `prefix + command`
(`ssh HOST`, `ip netns exec NAME`, ...). No file means everything on this machine, as before.
Every host must see the repository, its venv and the study's out_dir at the same paths.
"""
from __future__ import annotations

import ipaddress
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

from harness.model import toml_schema as T
from harness.model.errors import UserError

TOPOLOGY_VERSION = 1
# The format of a topology file (README: Multi-host runs).
SCHEMA = T.Table(required=("schema_version", "hosts", "roles"), keys={
    "schema_version": T.INT,
    "hosts": T.Table(each=T.Table({"address": T.STR, "prefix": T.STRINGS, "quote": T.BOOL},
                                  required=("address",))),
    "roles": T.Table({"mock": T.STR, "system": T.STR, "locust_master": T.STR,
                      "locust_workers": T.Tables(T.Table({"host": T.STR, "count": T.INT},
                                                         required=("host",)))},
                     required=("mock", "system", "locust_master")),
})


class TopologyError(UserError, ValueError):
    """A topology file that cannot be used; one line per problem."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass(frozen=True)
class Host:
    name: str
    address: str                 # the IPv4 address the other hosts (and this machine) reach it at
    prefix: tuple[str, ...] = ()  # () = this machine
    quote: bool = False          # the prefix hands one command line to a shell (ssh does)

    @property
    def local(self) -> bool:
        return not self.prefix


@dataclass(frozen=True)
class Workers:
    host: str
    count: int


@dataclass(frozen=True)
class Topology:
    hosts: tuple[Host, ...]
    mock: str
    system: str
    locust_master: str
    locust_workers: tuple[Workers, ...] = ()   # () = no master/worker split
    source: str = ""                           # the file it came from ("" = the default)

    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)

    @property
    def worker_count(self) -> int:
        return sum(w.count for w in self.locust_workers)

    def placement(self) -> dict:
        """Where each role runs, part of a run's comparison key: hosts by their address, in the
        file's order (a host's name is a label, and one machine's is its hostname, which must
        not keep two machines' runs apart); prefixes are how to reach them, not where."""
        index = {h.name: i for i, h in enumerate(self.hosts)}
        return {"hosts": [h.address for h in self.hosts], "mock": index[self.mock],
                "system": index[self.system], "locust_master": index[self.locust_master],
                "locust_workers": [[index[w.host], w.count] for w in self.locust_workers]}

    def roles(self) -> dict[str, list[str]]:
        """host name -> the roles it runs ('locust-worker' once per worker process)."""
        placed = {h.name: [] for h in self.hosts}
        placed[self.mock].append("mock")
        placed[self.system].append("system")
        placed[self.locust_master].append("locust-master")
        for w in self.locust_workers:
            placed[w.host] += ["locust-worker"] * w.count
        return {name: roles for name, roles in placed.items() if roles}


def local_topology() -> Topology:
    """Everything on this machine at 127.0.0.1: the study as it ran before topologies."""
    name = socket.gethostname()
    return Topology(hosts=(Host(name, "127.0.0.1"),), mock=name, system=name, locust_master=name)


def load_topology(path: str | Path) -> Topology:
    """Parse and check a topology file; TopologyError lists every problem."""
    path = Path(path)
    try:
        data, _ = T.read(path)
    except T.TomlSchemaError as exc:
        raise TopologyError(exc.problems) from None
    # Keys and types first, then what the values mean, so that every problem is named at once.
    problems = T.problems(data, SCHEMA, path)
    if data.get("schema_version", TOPOLOGY_VERSION) != TOPOLOGY_VERSION:
        problems.append(f"{path}: schema_version must be {TOPOLOGY_VERSION}")
    hosts = _hosts(data.get("hosts"), path, problems)
    names = {h.name for h in hosts}
    roles = data.get("roles") if isinstance(data.get("roles"), dict) else {}

    def placed(role: str) -> str:
        name = roles.get(role)
        if isinstance(name, str) and name not in names:
            problems.append(f"{path}: [roles] {role}: unknown host {name!r}; hosts: {sorted(names)}")
        return name if isinstance(name, str) else ""

    mock, system, master = placed("mock"), placed("system"), placed("locust_master")
    workers = []
    entries = roles.get("locust_workers", [])
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        if not isinstance(entry, dict):
            continue  # named by the schema check
        where = f"{path}: [roles.locust_workers[{i}]]"
        host, count = entry.get("host"), entry.get("count", 1)
        if isinstance(host, str) and host not in names:
            problems.append(f"{where} host: unknown host {host!r}; hosts: {sorted(names)}")
        if isinstance(count, int) and count < 1:
            problems.append(f"{where} count: must be at least 1, got {count}")
        workers.append(Workers(str(host), count if isinstance(count, int) else 0))
    if problems:
        raise TopologyError(problems)
    return Topology(hosts=tuple(hosts), mock=mock, system=system, locust_master=master,
                    locust_workers=tuple(workers), source=str(path.resolve()))


def _hosts(table, path: Path, problems: list[str]) -> list[Host]:
    """The [hosts.NAME] tables whose types are right, with the problems of their values."""
    if isinstance(table, dict) and not table:
        problems.append(f"{path}: [hosts]: no [hosts.NAME] table")
    hosts = []
    for name, entry in (table.items() if isinstance(table, dict) else ()):
        if not isinstance(entry, dict):
            continue  # named by the schema check
        where = f"{path}: [hosts.{name}]"
        address = entry.get("address")
        try:
            if isinstance(address, str):
                ipaddress.IPv4Address(address)
        except ValueError:  # IPv4: it goes into URLs and host:port settings unbracketed
            problems.append(f"{where} address: must be an IPv4 address, got {address!r}")
        prefix = entry.get("prefix", [])
        if not isinstance(prefix, list) or not all(isinstance(p, str) for p in prefix):
            prefix = []  # named by the schema check
        elif not all(prefix):
            problems.append(f"{where} prefix: must not contain empty strings")
        elif prefix and shutil.which(prefix[0]) is None:
            problems.append(f"{where} prefix: command {prefix[0]!r} is not runnable here "
                            f"(not found on PATH)")
        quote = entry.get("quote", False)
        hosts.append(Host(str(name), str(address), tuple(prefix), quote is True))
    if sum(h.local for h in hosts) > 1:
        problems.append(f"{path}: [hosts]: only one host may be this machine (an empty prefix); "
                        f"got {[h.name for h in hosts if h.local]}")
    return hosts


def read_topology(path: str) -> tuple[Topology | None, list[str]]:
    """The study's topology ("" = this machine) and its 'topology: ...' problems (None with
    them), for the study's check: the one place that reads the file before a study starts."""
    try:
        return topology_of(path), []
    except TopologyError as exc:
        return None, [f"topology: {p}" for p in exc.problems]


def topology_of(path: str) -> Topology:
    return load_topology(path) if path else local_topology()


def load_processes(topology: Topology | None, locust_processes: int) -> int:
    """Locust processes that generate load: the workers of a topology, else locust_processes
    (also when the topology could not be read: its problems are reported on their own)."""
    return (topology.worker_count if topology else 0) or locust_processes
