"""The project's words, one per idea (TERMS), and the words retired in their favour (RETIRED):
the one place that lists them. The docs' glossary is written from here; tests/test_glossary.py
fails on a retired word in the code and the documents; a retired parameter given to a study is
refused, naming the one that replaced it (harness.model.config.from_profile)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Term:
    word: str
    means: str


@dataclass(frozen=True)
class Retired:
    word: str          # as it was written
    use: str           # what says it now
    why: str
    pattern: str       # a regular expression that finds the word in the sense retired
    parameter: bool = False   # a study parameter: refused when given, naming ``use`` (and, as a
                              # notebook's parameter, found by its name)


TERMS: tuple[Term, ...] = (
    Term("system", "anything measured: one folder under `gateways/` with its `gateway.toml` (a "
         "gateway, or `direct`: no gateway), as a study entry `folder[~label][@feature]`"),
    Term("kind", "what a system is (`gateway.toml`'s `kind`): `control` (measured for the others "
         "to be compared with, not as a product: the floor and the hop), `in-house` (Sluice) or "
         "`competitor`"),
    Term("role", "what a system is *for* in a study: the floor or the hop (its `gateway.toml`'s "
         "`role`), or from the study's settings the reference, the A/A pair, the gate's head and "
         "base (`harness.model.roles.Roles`); never read from a name"),
    Term("floor", "the system every added latency is measured from: `direct` (role `floor`), the "
         "load generator calling the mock itself; `overhead_vs_direct_*` is the overhead vs the "
         "floor"),
    Term("hop", "one plain proxy hop in front of the mock: `nginx` (role `hop`), the usual "
         "reference"),
    Term("reference", "the system verdicts compare the others with: `reference_system` when it "
         "ran, else the first system that ran (`Roles.reference`; `--reference` overrides)"),
    Term("process role", "which program of a run a process is: `system`, `mock`, "
         "`locust_master`/`locust-worker`, `capture`; where it runs (the topology's `[roles]`), "
         "its CPUs and niceness (`placement`), its samples' `role` column. Recorded file formats "
         "keep the word; `role` in `harness/host/`, `harness/remote/`, `run/limits` and `model/` "
         "`topology`, `affinity`, `inflight` is a process role, and `Roles` (`model/roles`) a "
         "system's"),
    Term("run", "one system, once, in one study: `RunSpec` (planned) → `RunRecord` (done) → its "
         "directory and manifest"),
    Term("run spec parts", "a run's `load`, `mock` and `wire` (`harness.model.run_parts`): each "
         "field the study setting of the same name"),
    Term("study", "every run of a plan, interleaved in rounds, in one directory "
         "(`artifacts/<study-id>/`)"),
    Term("suite, cell", "a base configuration and axes; each combination (a cell) is a whole "
         "study"),
    Term("lane", "one question a study answers (the fault lane, the in-flight lane, the counting "
         "lane, …), a module of `harness/stats/` each"),
    Term("comparison key", "what decides that two runs (or cells) measured the same thing and may "
         "be compared: `<recipe version>:<SHA-256>` (a bare SHA-256: recipe 1)"),
    Term("instruments", "the load generator and the mock: their limits are labelled as theirs, "
         "never a system's"),
    Term("gate, base", "the regression gate judges the head build of Sluice against the base "
         "build (the same system from the base commit); its records are under `baselines/gate/`"),
)

RETIRED: tuple[Retired, ...] = (
    Retired("baseline", "floor",
            "the floor had a second name; as a system's kind the floor and the hop are `control`. "
            "`baselines/` (the gate's records) and the gate's base commit keep their names",
            r"(?i)(?<![a-z])baseline(?![a-z])"),
    Retired("runs", "runs_per_gateway",
            "the study notebook spelled runs_per_gateway a second way",
            r"-p\s+runs\s|--set\s+runs=|\bruns_per_gateway\s*=\s*runs\b",
            parameter=True),
)


def retired_parameter(name: str) -> str | None:
    """The parameter that replaced a retired one; None when ``name`` was never retired."""
    return next((r.use for r in RETIRED if r.parameter and r.word == name), None)
