"""Whether a recorded run is what this tree would run now: its comparison key against the key of
the same run planned here (the study's settings, the systems' folders as they are, this mock's
and Locust's versions), and if not, why (the files, instruments or settings that differ). A key
hashes every file the system's folder declares, a variant's too; a run whose key differs only in
files it does not read (a variant its study did not ask for: the in-flight lane's sized
configuration, for a standard run) is still what the tree runs. The published results mark a
row whose key went stale (report/publish.py)."""
from __future__ import annotations

import dataclasses

from harness.model.config import StudyConfig
from harness.model.gateway_spec import GatewaySpecError, folder_of, load_gateway_spec
from harness.model.migrate import same_run
from harness.model.plan import (
    KEY_VERSION,
    NOT_IN_RUN_KEY,
    KeyVersionError,
    RunSpec,
    comparison_key,
    key_version,
    make_plan,
)
from harness.run.run import instruments

# What the reasons name on their own (the files, the instruments), or leave out.
_APART = ("files_sha256", "instruments", "gateway_toml_sha256", "topology", "ready_timeout_s")


def stale_systems(config: StudyConfig, recorded: dict[str, RunSpec | None]) -> dict[str, str]:
    """system -> why its recorded run (``recorded``: its spec, the comparison key in it) is not
    what the tree would run now; a system whose key still matches is left out."""
    out: dict[str, str] = {}
    current: dict[str, RunSpec] = {}
    read: dict[str, tuple[str, ...]] = {}
    specs = {}
    for system, spec in recorded.items():
        if spec is None:
            out[system] = "its run recorded no spec: nothing to compare"
            continue
        try:
            specs[system] = load_gateway_spec(system, config.systems_dir)
        except GatewaySpecError as exc:
            out[system] = f"its folder gateways/{folder_of(system)} cannot be read now ({exc})"
    if specs:
        first = next(s for name, s in recorded.items() if name in specs)
        assert first is not None
        # one system at a time: the plan's order and the other systems change no key
        for system in specs:
            one = dataclasses.replace(config, gateways=(system,), runs_per_gateway=1)
            current[system] = make_plan(one, {system: specs[system]}, instruments(),
                                        topology=first.topology)[0]
            read[system] = specs[system].read_files(config.resilience, config.scale)
    for system, now in current.items():
        then = recorded[system]
        assert then is not None
        try:
            if same_run(then.comparison_key, now) or same_reading(then, now, read[system]):
                continue
        except KeyVersionError as exc:
            out[system] = str(exc)
            continue
        out[system] = why_different(then, now, read[system])
    return {s: out[s] for s in recorded if s in out}


def reading(spec: RunSpec, read: tuple[str, ...]) -> RunSpec:
    """The spec with only the SHA-256 of the files its run reads."""
    return dataclasses.replace(spec, files_sha256={n: h for n, h in spec.files_sha256.items()
                                                   if n in read})


def same_reading(then: RunSpec, now: RunSpec, read: tuple[str, ...]) -> bool:
    """Whether a recorded run of the current key recipe, whose spec is the one its key was made
    from, differs from now's only in declared files neither run reads (``read``: the files a run
    with now's settings reads, by the folder's gateway.toml as it is now, itself one of them)."""
    if (not then.files_sha256 or key_version(then.comparison_key) != KEY_VERSION
            or comparison_key(then) != then.comparison_key):
        return False
    return comparison_key(reading(then, read)) == comparison_key(reading(now, read))


def why_different(then: RunSpec, now: RunSpec, read: tuple[str, ...]) -> str:
    """What differs between a recorded run and the same run planned now, in a line (of the
    files, those the run reads)."""
    parts = []
    then, now = reading(then, read), reading(now, read)
    files_then, files_now = then.files_sha256, now.files_sha256
    if files_then:
        changed = sorted(n for n in files_then.keys() & files_now.keys()
                         if files_then[n] != files_now[n])
        added = sorted(files_now.keys() - files_then.keys())
        removed = sorted(files_then.keys() - files_now.keys())
        for word, names in (("changed", changed), ("new", added), ("gone", removed)):
            if names:
                parts.append(f"files {word}: {', '.join(names)}")
    elif then.gateway_toml_sha256 != now.gateway_toml_sha256:
        parts.append("files changed: gateway.toml")
    for name, value in dataclasses.asdict(then.instruments).items():
        new = getattr(now.instruments, name)
        if value and value != new:
            parts.append(f"{name.removesuffix('_version')} {value} → {new}")
    a, b = then.to_dict(), now.to_dict()
    settings = []
    for k in sorted(a.keys() | b.keys()):
        if k in NOT_IN_RUN_KEY or k in _APART or a.get(k) == b.get(k):
            continue
        x, y = a.get(k), b.get(k)
        if isinstance(x, dict) and isinstance(y, dict):   # a part: name its settings
            settings += [f"{k}.{n}" for n in sorted(x.keys() | y.keys()) if x.get(n) != y.get(n)]
        else:
            settings.append(k)
    if settings:
        parts.append(f"settings: {', '.join(settings)}")
    if then.ready_timeout_s != now.ready_timeout_s:
        parts.append(f"ready timeout {then.ready_timeout_s:g} s → {now.ready_timeout_s:g} s")
    return "; ".join(parts) or (f"its comparison key {then.comparison_key[:14]}… is not the "
                                f"tree's {now.comparison_key[:14]}…")
