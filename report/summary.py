"""The report's answer in words: one sentence per headline finding that passed its verdict test,
each linked to its row in the verdicts table, and the one-line account of what limited the study;
for a faults suite, per scenario, which system fared best while the provider failed.
Generated from the statistics' outcomes only: nothing here is written by hand per study."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import pandas as pd
from markupsafe import Markup, escape

from harness.model.metrics import metric
from harness.model.roles import FLOOR
from harness.stats.definitions import OFFERED_SHARE
from harness.stats.fault_lane import system_figures
from harness.stats.fault_requests import WASTE_EXCESS, frontier
from harness.stats.keeping_up import keeping_up
from harness.stats.outcomes import Basis, Label, Outcome
from harness.stats.sizing import sizing
from report import format as F
from report.data import ReportData
from report.tables import (
    HEADLINE_METRICS,
    OVERHEAD_SOURCE,
    overhead_of,
    overhead_why,
    verdict_anchor,
)


@dataclass(frozen=True)
class Sentence:
    text: str
    href: str = ""     # the evidence
    cls: str = ""
    title: str = ""    # the test's numbers, as a tooltip


def _finding(r: pd.Series) -> Sentence:
    m = metric(r["metric"])
    word = F.verdict_word(r["outcome"], m)
    if r["basis"] is Basis.DIFFERENCE:
        how = F.figure_interval(r["diff"], r["diff_low"], r["diff_high"], m)
    else:
        how = F.times(r["ratio"])
    source = OVERHEAD_SOURCE.get(r["metric"])
    label = f"overhead ({source})" if source else m.label   # which overhead figure, in a word
    title = f"Welch p = {r['p_value']:.2g}: {F.verdict_reason(r)}"
    if source:
        title = f"{_capital(overhead_why(r['metric']))}. {title}"
    return Sentence(f"{word[:1].upper()}{word[1:]}: {label} {how}.",
                    f"#{verdict_anchor(r['system'], r['metric'])}", F.verdict_class(r["outcome"]),
                    title)


def headline_rows(data: ReportData) -> pd.DataFrame:
    """The comparison's rows the summary speaks of: the headline figures, of the overhead
    figures only the one each system's verdict uses (tables.overhead_of)."""
    c = data.comparison
    if c is None or not len(c):
        return c
    chosen = [m not in OVERHEAD_SOURCE or m == overhead_of(data, s)
              for s, m in zip(c["system"], c["metric"])]
    return c[c["metric"].isin(HEADLINE_METRICS) & pd.Series(chosen, index=c.index)]


def findings(data: ReportData) -> list[tuple[str, list[Sentence]]]:
    """Per system in the study's order, the headline figures whose verdict against the
    reference passed its test (better or worse)."""
    if data.comparison is None or data.reference is None:
        return []
    c = headline_rows(data)
    passed = c[c["outcome"] != Outcome.NO_CLEAR_DIFFERENCE]
    order = {m: i for i, m in enumerate(HEADLINE_METRICS)}
    out = []
    for system in [s for s in data.study.systems if s in set(passed["system"])]:
        rows = passed[passed["system"] == system].sort_values("metric", key=lambda x: x.map(order))
        out.append((system, [_finding(r) for _, r in rows.iterrows()]))
    return out


def cost(data: ReportData) -> str:
    """One sentence: each sized system's estimated monthly cost at the planned load (its cores
    are in the sizing table), marked when its runs showed behaviour rather than capacity."""
    frame = sizing(data.rs, data.study.systems, data.prices, data.load_rps)
    if not len(frame):
        return ""
    behaviour = set(data.labels.loc[data.labels["label"] == Label.BEHAVIOUR, "system"]
                    if len(data.labels) else ())
    every = behaviour >= set(frame["system"])
    parts = [f"{r['system']} ${r['usd_month']:,.0f}"
             + (" (behaviour)" if r["system"] in behaviour and not every else "")
             for r in frame.to_dict("records")]
    return (f"Estimated cost at {data.load_rps:,.0f} req/s, per month"
            + (" (behaviour: what each system did here)" if every else "") + ": "
            + ", ".join(parts) + ".")


def fault_sentences(data: ReportData) -> list[Sentence]:
    """A fault study's first sentences, per scenario: who succeeded most and wasted least while
    the provider failed, and who is on the frontier (fault_findings, over this study's runs)."""
    if data.fault_runs.empty:
        return []
    figures = system_figures(data.fault_windows, data.fault_runs)
    scenario = {r["system"]: r["scenario"] for r in data.fault_runs.to_dict("records")}
    meta = data.study.manifest.systems
    rows = figures.assign(
        scenario=figures["system"].map(scenario), asked=data.study.manifest.config.resilience,
        axes="", not_run="", role=[meta[s].role if s in meta else "" for s in figures["system"]],
        kind=[meta[s].kind if s in meta else "" for s in figures["system"]])
    return [f for _, g in rows.groupby("scenario", sort=False)
            for f in fault_findings(g, "#faults")]


def undecided(data: ReportData) -> tuple[list[str], list[str]]:
    """Systems compared with no headline finding, and those with too few runs for any."""
    if data.comparison is None:
        return [], []
    c = headline_rows(data)
    found = {s for s, _ in findings(data)}
    too_few = [s for s in data.study.systems if s in set(c["system"]) and s not in found
               and (c[c["system"] == s]["basis"] == Basis.TOO_FEW_RUNS).all()]
    none = [s for s in data.study.systems if s in set(c["system"]) and s not in found
            and s not in too_few]
    return none, too_few


def _some(names: list[str], of: int, noun: str = "systems") -> str:
    """'litellm and mlflow', or '4 of 7 systems' when naming them all would not fit a line."""
    if len(names) > 3:
        return f"{len(names)} of {of} {noun}"
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def banner_line(kind: str, behaviour: list[str], n_measured: int, cores: int | None,
                study_status: str = "completed", unstable: list[str] = (),
                failed_runs: int = 0) -> Markup:
    """The banner's one line: what a reader must know before trusting the table (the study's
    state, behaviour or capacity, unstable run sets, runs that failed), each said once, for
    every system at once where it holds for all; the reasons go under "Why". ``behaviour`` and
    ``unstable``: the systems concerned."""
    parts = []
    if study_status != "completed":
        parts.append(Markup("<strong>This study is {}.</strong> The figures cover the runs that "
                            "completed.").format(study_status))
    machine = f"on this {cores}-core machine" if cores is not None else "on this machine"
    if kind == Label.FAILED.value:
        parts.append(Markup("<strong>No system completed a run</strong>: there is nothing to "
                            "compare."))
    elif kind == Label.BEHAVIOUR.value and len(behaviour) >= n_measured:
        parts.append(Markup("<strong>Behaviour, not capacity.</strong> Read every figure as how "
                            "the system behaved {}, not as the most it can do.").format(machine))
    elif kind == Label.BEHAVIOUR.value:
        parts.append(Markup("<strong>Behaviour, not capacity.</strong> For {}, read the figures "
                            "as how the system behaved {}.").format(
                                _some(list(behaviour), n_measured), machine))
    else:
        parts.append(Markup("<strong>Capacity.</strong> For every system, nothing but the system "
                            "limited the result."))
    if unstable and len(unstable) >= n_measured:
        parts.append("Every system's run set is unstable: the intervals are wide.")
    elif unstable:
        parts.append(f"Unstable run sets: {_some(list(unstable), n_measured)}.")
    if failed_runs:
        parts.append(f"{failed_runs} run{'s' if failed_runs != 1 else ''} did not complete and "
                     f"{'are' if failed_runs != 1 else 'is'} never averaged.")
    return Markup(" ").join(p if isinstance(p, Markup) else escape(p) for p in parts)


def reason_gist(reason: str) -> str:
    """What a run-level reason says, without its numbers: the words after its colon when it has
    one ('… 2.10 on 2 cores: the machine was already busy'), else the reason with its figures
    and parenthesised limits left out, so equal causes count together."""
    if ": " in reason:
        return reason.rsplit(": ", 1)[1]
    return re.sub(r"\s+", " ", re.sub(r"\([^)]*\)|\d[\d.,]*%?", "", reason)).strip()


def limits(labels: pd.DataFrame) -> list[tuple[str, int]]:
    """Each distinct reason a run was behaviour, with how many runs share it, most shared first."""
    counts: Counter[str] = Counter()
    for reasons in labels["reasons"] if len(labels) else ():
        per_run: dict[str, set[str]] = {}
        for r in reasons:
            run_id, _, why = r.partition(": ")
            per_run.setdefault(run_id, set()).add(reason_gist(why))
        for gists in per_run.values():
            counts.update(gists)
    return counts.most_common()


def kept_up(data: ReportData) -> str:
    """One sentence: at the top of the ramp, which systems served the load they were offered and
    which did not (with the share the worst run served, and any failed runs)."""
    frame = keeping_up(data.rs, data.study.systems)
    if not len(frame):
        return ""
    behind = frame[frame["kept_up_runs"] < frame["runs"]]

    def why(r) -> str:
        failed = r["runs"] - r["completed"]
        parts = [f"{r['served_share_min']:.0%}"] if r["completed"] else []
        if failed:
            parts.append(f"{failed} of {r['runs']} runs failed")
        return f"{r['system']} ({'; '.join(parts)})"

    users = data.study.manifest.config.users
    head = (f"At {users:,} users (≈ {frame['offered_rps'].mean():,.0f} req/s offered; kept up = "
            f"every run served ≥ {OFFERED_SHARE:.0%} of it)")
    if not len(behind):
        return f"{head}, every system kept up."
    late = [why(r) for _, r in behind.iterrows()]
    late = late[0] if len(late) == 1 else ", ".join(late[:-1]) + " and " + late[-1]
    if len(behind) == len(frame):
        return f"{head}, no system kept up; the worst run served: {late}."
    return f"{head}, every system kept up but {late} (the worst run's share served)."


# --- the provider-fault lane across a suite ---------------------------------------------------

def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _who(r: dict) -> str:
    """A system's name, with the configuration it ran when that is not the one asked."""
    ran = F.configuration(r["resilience"], r["resilience_note"]).split(":")[0]
    asked = "recommended" if r["asked"] == "recommended" else "as shipped"
    return r["system"] if ran == asked else f"{r['system']} ({ran})"


def _runs(*counts: int) -> str:
    if all(n == 1 for n in counts):
        return "1 run each: no spread" if len(counts) > 1 else "1 run: no spread"
    return "n = " + " and ".join(str(n) for n in counts)


def _leaders(ranked: list[dict], name: str, m: str, highest: bool) -> list[dict]:
    """The rows whose figure, as shown, is the best one (ties stay together)."""
    best = (max if highest else min)(r[f"{name}_mean"] for r in ranked)
    return [r for r in ranked if F.value(r[f"{name}_mean"], m) == F.value(best, m)]


def fault_findings(rows: pd.DataFrame, href: str = "") -> list[Sentence]:
    """One scenario of a faults suite (report.fault_tables.fault_suite's rows), per cell (each value of
    the resilience axis asked, and of any other axis): which system had the highest success
    share during the fault, which the lowest amplification, and each in-house system against
    the best other one (highest success, then fewest provider requests). The floor, the client
    straight to the provider, is no contender (it neither retries nor fails over): it is quoted
    beside them. From the figures only."""
    out = []
    several = rows["asked"].nunique() > 1
    for (asked, axes), g in rows.groupby(["asked", "axes"], sort=False):
        ran = [r for r in g.to_dict("records") if not r["not_run"] and r["success_during_n"] > 0]
        ranked = [r for r in ran if r["role"] != FLOOR]
        if not ranked:
            continue
        label = "recommended configurations" if asked == "recommended" else "as shipped"
        where = ", ".join(x for x in (label if several else "", axes) if x)
        lead = f"{where}, " if where else ""
        floor = next((r for r in ran if r["role"] == FLOOR), None)
        for name, m, highest, words in (
                ("success_during", "success_share", True, "highest success during the fault"),
                ("amplification_during", "amplification", False,
                 "fewest provider requests per client request during the fault")):
            best = _leaders(ranked, name, m, highest)
            runs = _runs(*(int(r["runs"]) for r in best))
            text = (f"{lead}{words}: {' and '.join(_who(r) for r in best)} "
                    f"{F.value(best[0][f'{name}_mean'], m)} ({runs})")
            if floor is not None:
                text += f"; the floor ({floor['system']}): {F.value(floor[f'{name}_mean'], m)}"
            out.append(Sentence(_capital(text) + ".", href))
        out += _frontier_findings(ranked, lead, href)
        others = sorted((r for r in ranked if r["kind"] != "in-house"),
                        key=lambda r: (-r["success_during_mean"], r["amplification_during_mean"]))
        for house in (r for r in ranked if r["kind"] == "in-house"):
            if not others:
                break
            o = others[0]
            share = (house["success_during_mean"] - o["success_during_mean"]) * 100
            amp = house["amplification_during_mean"] - o["amplification_during_mean"]
            out.append(Sentence(_capital(
                f"{lead}{_who(house)} against {_who(o)}, the best other system: success during "
                f"the fault {F.value(house['success_during_mean'], 'success_share')} vs "
                f"{F.value(o['success_during_mean'], 'success_share')} ({share:+.1f} points), "
                f"provider requests per client request "
                f"{F.value(house['amplification_during_mean'], 'amplification')} vs "
                f"{F.value(o['amplification_during_mean'], 'amplification')} "
                f"({F.signed(amp, metric('amplification'))}) "
                f"({_runs(int(house['runs']), int(o['runs']))})."), href))
    return out


def _frontier_findings(ranked: list[dict], lead: str, href: str) -> list[Sentence]:
    """Who no other system beats on all of success, excess amplification and p99 time to
    success; who wasted attempts (excess above WASTE_EXCESS)."""
    rows = [{**r, "success": r["success_during_mean"], "excess": r["excess_amplification_mean"],
             "tts_p99": r["tts_p99_ms_mean"]} for r in ranked]
    out = []
    best = frontier(rows)
    if best:
        out.append(Sentence(_capital(
            f"{lead}on the frontier (no other system better on success, wasted attempts and p99 "
            f"time to success at once): {', '.join(_who(r) for r in best)}."), href))
    wasteful = [r for r in rows if not F.isnan(r["excess"]) and r["excess"] > WASTE_EXCESS]
    if wasteful:
        out.append(Sentence(_capital(
            f"{lead}attempts beyond what the success needed (more than {WASTE_EXCESS:g} per "
            "request): " + ", ".join(f"{_who(r)} {F.value(r['excess'], 'excess_amplification')}"
                                     for r in wasteful) + "."), href))
    return out
