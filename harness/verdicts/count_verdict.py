"""The counting gate's verdict: the head build's counts per request against the base build's.

Counts (harness/run/count_system.py) do not move with the machine's noise, so one count per build
decides in every run, on any CPU model. The base is counted twice, and the two counts must
agree within ``DETERMINISM`` or ``DETERMINISM_FLOOR`` instructions a request, whichever is more:
the determinism guard (a disagreement is a bug of the counting, reported as such).

Per case, head against base (the mean of the base's two counts):

* instructions per request: a rise over ``INSTRUCTIONS_RISE`` fails, a fall is reported;
* system calls per request by name: every change is shown; a rise in reads, writes or sends
  (harness.model.count_cases.IO_FAMILIES) over ``SYSCALL_RISE`` a request fails; waits are shown
  apart, never judged (how often a loop waits depends on timing);
* allocator calls per request and RSS after the last phase: shown; a rise over
  ``ALLOCATION_RISE`` / ``RSS_RISE`` fails.

A case the base counted and the head could not fails the gate; a case neither counted is
shown with its reason.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.model.count_cases import IO_FAMILIES, families

INSTRUCTIONS_RISE = 0.02
ALLOCATION_RISE = 0.05
RSS_RISE = 0.05
SYSCALL_RISE = 0.05          # calls a request: a real extra call is 1.0, timing moves it ~0.002
DETERMINISM = 0.003          # the base's two counts of instructions, per case
# A request's work depends a little on the clock: Sluice formats numbers it measured (the
# overhead header's microseconds, a histogram's bucket), and an integer costs more the more
# digits it has, and an allocation from 257 up (Python caches smaller ones); a key's rpm check
# likely takes another branch once its minute has rolled (the 429's dumps were not kept). Under
# Valgrind those values straddle such edges: on AMD EPYC the base's two counts were up to 196
# instructions a request apart (the 429, 0.66%), 0.10% of a translated request, 0.36% of a 401's
# 21,500. A 2% rise of the 401 is 430.
DETERMINISM_FLOOR = 300


@dataclass(frozen=True)
class CountVerdict:
    failed: tuple[str, ...]          # what regressed
    nondeterministic: tuple[str, ...]
    lines: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.nondeterministic


def _builds(record: dict) -> dict[str, dict]:
    return {b["label"]: b for b in record["builds"]}


def _case(build: dict, name: str) -> dict | None:
    return next((c for c in build.get("cases", ()) if c["case"] == name), None)


def _ratio(head: float | None, base: float | None) -> float | None:
    if head is None or base is None or base == 0:
        return None
    return head / base


def judge(record: dict, head: str = "head", base: str = "base", again: str = "base~2") -> CountVerdict:
    builds = _builds(record)
    missing = [label for label in (head, base, again) if label not in builds]
    if missing:
        return CountVerdict((f"no count of {', '.join(missing)}",), (), (
            f"counts: FAIL — the record has no count of {', '.join(missing)}",))
    h, b, b2 = builds[head], builds[base], builds[again]
    failed, nondet, lines = [], [], []
    for label, build in ((head, h), (base, b), (again, b2)):
        if build.get("failed"):
            failed.append(f"{label} could not be counted")
            lines.append(f"counts: {label} ({build['system']} {build.get('version', '')}) could not "
                         f"be counted: {build['failed']}")
    if failed:
        return CountVerdict(tuple(failed), (), tuple(lines))
    names = [c["case"] for c in b["cases"]]
    for name in names:
        hc, bc, bc2 = _case(h, name), _case(b, name), _case(b2, name)
        if bc.get("missing") and bc.get("instructions_per_request") is None:
            lines.append(f"counts: {name}: not counted ({bc['missing']})")
            continue
        if hc is None or hc.get("instructions_per_request") is None:
            failed.append(f"{name}: not counted in the head")
            lines.append(f"counts: {name}: FAIL — the base was counted, the head was not "
                         f"({(hc or {}).get('missing', 'no such case')})")
            continue
        i_b, i_b2, i_h = (bc["instructions_per_request"], bc2["instructions_per_request"],
                          hc["instructions_per_request"])
        spread = abs(i_b2 / i_b - 1)
        base_i = (i_b + i_b2) / 2
        r = i_h / base_i
        verdict = "ok"
        if abs(i_b2 - i_b) > max(DETERMINISM * i_b, DETERMINISM_FLOOR):
            nondet.append(name)
            verdict = "NOT DETERMINISTIC"
        elif r - 1 > INSTRUCTIONS_RISE:
            failed.append(f"{name}: instructions +{(r - 1):.1%}")
            verdict = "FAIL"
        elif r < 1 - INSTRUCTIONS_RISE:
            verdict = "better"
        lines.append(f"counts: {name}: instructions/request head {i_h:,.0f}, base {i_b:,.0f} and "
                     f"{i_b2:,.0f} (apart {abs(i_b2 - i_b):,.0f}, {spread:.2%}); head/base {r:.4f} ({r - 1:+.2%}): {verdict}")
        lines += _syscall_lines(name, hc, bc, failed)
        for key, label, limit in (("allocations_per_request", "allocator calls/request", ALLOCATION_RISE),
                                  ("rss_bytes", "RSS after the last phase", RSS_RISE)):
            rr = _ratio(hc.get(key), bc.get(key))
            if rr is None:
                lines.append(f"counts: {name}: {label}: not measured"
                             + (f" ({hc.get('missing')})" if hc.get("missing") else ""))
                continue
            worse = rr - 1 > limit
            if worse:
                failed.append(f"{name}: {label} +{rr - 1:.1%}")
            lines.append(f"counts: {name}: {label} head {_num(hc[key])}, base {_num(bc[key])}: "
                         f"{rr - 1:+.2%}" + (" FAIL" if worse else ""))
    if nondet:
        lines.append(f"counts: NOT DETERMINISTIC — the base's two counts differ by more than "
                     f"{DETERMINISM:.1%} and {DETERMINISM_FLOOR} instructions a request in "
                     f"{', '.join(nondet)}: the counting sees something that is not per-request "
                     "work (a timer, the clock, addresses); that is a bug of the counting to fix, "
                     "so no verdict on the counts")
    elif failed:
        lines.append("counts: FAIL — " + "; ".join(failed))
    else:
        lines.append(f"counts: ok — no case's instructions rose over {INSTRUCTIONS_RISE:.0%}, "
                     "nor its reads, writes or sends, allocations or RSS")
    return CountVerdict(tuple(failed), tuple(nondet), tuple(lines))


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:,.2f}"


def _syscall_lines(name: str, hc: dict, bc: dict, failed: list[str]) -> list[str]:
    hs, bs = hc.get("syscalls_per_request") or {}, bc.get("syscalls_per_request") or {}
    fh, fb = families(hs), families(bs)
    judged = [f for f in IO_FAMILIES if fh[f] - fb[f] > SYSCALL_RISE]
    for f in judged:
        failed.append(f"{name}: {f} {fb[f]:.2f} -> {fh[f]:.2f} a request")
    changed = [f"{n} {bs.get(n, 0):.2f} -> {hs.get(n, 0):.2f}" for n in sorted(set(hs) | set(bs))
               if abs(hs.get(n, 0) - bs.get(n, 0)) >= SYSCALL_RISE]
    text = ", ".join(f"{f} {fh[f]:.2f}" for f in (*IO_FAMILIES, "waits"))
    return [f"counts: {name}: system calls/request head {text}"
            + (f"; changed: {'; '.join(changed)}" if changed else "; unchanged")
            + (" FAIL" if judged else "")]
