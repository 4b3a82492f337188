"""Placement per role: the CPUs the load generator, the mock and the system under test are
started on (``taskset -c LIST``), so that on a small machine they stop taking turns on the same
cores, and their scheduling priority (``nice -n N``), so that a role sharing a core with another
is served first. Lists use taskset's syntax: ``0``, ``0-1``, ``0,2``, ``0-7:2``; "" = not pinned.
Niceness runs from -20 (first) to 19 (last); 0 = unchanged; below 0 needs root."""
from __future__ import annotations

import re
from dataclasses import dataclass

TASKSET = "taskset"
NICE = "nice"
# role -> the StudyConfig field that pins it, and the one that sets its niceness
FIELDS = {"load": "cpu_affinity_load", "mock": "cpu_affinity_mock", "system": "cpu_affinity_system"}
NICE_FIELDS = {"load": "nice_load", "mock": "nice_mock", "system": "nice_system"}
_PART = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?\Z")


@dataclass(frozen=True)
class CpuAffinity:
    """Per role, the CPU list its processes start under (children inherit it); "" = any CPU."""
    load: str = ""      # every Locust process (master, workers, --processes children)
    mock: str = ""      # the mock, its supervisor and workers
    system: str = ""    # the system under test and everything it starts

    def is_set(self) -> bool:
        return bool(self.load or self.mock or self.system)


@dataclass(frozen=True)
class Niceness:
    """Per role, the niceness its processes start with (children inherit it); 0 = unchanged."""
    load: int = 0
    mock: int = 0
    system: int = 0

    def is_set(self) -> bool:
        return bool(self.load or self.mock or self.system)


def cpus_of(text: str) -> frozenset[int]:
    """The CPUs a taskset list names; ValueError saying what is wrong otherwise."""
    cpus: set[int] = set()
    for part in text.split(","):
        m = _PART.match(part)
        if m is None:
            raise ValueError(f"{part!r} is not a CPU, a range N-M or a strided range N-M:S")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        stride = int(m.group(3)) if m.group(3) is not None else 1
        if last < first or stride < 1:
            raise ValueError(f"{part!r} is an empty range")
        cpus.update(range(first, last + 1, stride))
    return frozenset(cpus)


def cpu_list(cpus) -> str:
    """CPUs as a compact taskset list (``0-3,6``)."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def problems(values: dict[str, str], available, taskset_found: bool,
             remote_roles: dict[str, str]) -> list[str]:
    """One line per bad setting. values: role -> its list; available: the CPUs this process may
    use; remote_roles: role -> the other host the topology runs it on (pinning is applied and
    checked on this machine only)."""
    out = []
    set_fields = [FIELDS[role] for role, text in values.items() if text]
    if set_fields and not taskset_found:
        out.append(f"{', '.join(set_fields)}: pinning needs {TASKSET} (Debian: util-linux), which "
                   f"is not on PATH; install it or leave the setting empty")
    for role, text in values.items():
        if not text:
            continue
        name = FIELDS[role]
        try:
            cpus = cpus_of(text)
        except ValueError as exc:
            out.append(f"{name}: expected a CPU list as taskset -c takes it (\"0\", \"0-1\", "
                       f"\"0,2\"), got {text!r}: {exc}")
            continue
        outside = cpus - set(available)
        if outside:
            out.append(f"{name}: CPU {cpu_list(outside)} is not available to this process "
                       f"(available: {cpu_list(available)}), got {text!r}")
        if role in remote_roles:
            out.append(f"{name}: the topology runs the {role} role on host {remote_roles[role]!r}; "
                       f"CPU affinity is checked and applied on this machine only")
    return out


def nice_problems(values: dict[str, int], is_root: bool, nice_found: bool) -> list[str]:
    """One line per bad niceness. values: role -> its niceness."""
    out = []
    for role, level in values.items():
        name = NICE_FIELDS[role]
        if not -20 <= level <= 19:
            out.append(f"{name}: niceness runs from -20 to 19, got {level}")
        elif level < 0 and not is_root:
            out.append(f"{name}: a negative niceness (a higher priority) needs root, got {level}")
    if any(values.values()) and not nice_found:
        out.append(f"{', '.join(NICE_FIELDS[r] for r, v in values.items() if v)}: needs {NICE} "
                   "(coreutils) on PATH")
    return out


def pinned(cpus: str, argv: list[str], nice: int = 0) -> list[str]:
    """argv started on ``cpus`` with niceness ``nice`` (taskset and nice exec it: the pid stays
    the process's own), or argv as it is when neither is set."""
    argv = [NICE, "-n", str(nice), *argv] if nice else list(argv)
    return [TASKSET, "-c", cpus, *argv] if cpus else argv
