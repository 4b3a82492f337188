"""The report's answer in words: one sentence per headline finding that passed its verdict test,
each linked to its row in the verdicts table, and the one-line account of what limited the study.
Generated from the statistics' outcomes only: nothing here is written by hand per study."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import pandas as pd

from harness.model.metrics import metric
from harness.stats.outcomes import Basis, Label, Outcome
from harness.stats.keeping_up import keeping_up
from harness.stats.metrics import OFFERED_SHARE
from harness.stats.sizing import sizing
from report import format as F
from report.data import ReportData
from report.tables import HEADLINE_METRICS, verdict_anchor


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
        unit = f" {m.unit}" if m.unit and m.unit != "%" else ""
        how = (f"{F.signed(r['diff'], m)}{unit} (95% CI {F.signed(r['diff_low'], m)}"
               f" to {F.signed(r['diff_high'], m)})")
    else:
        how = F.times(r["ratio"])
    return Sentence(f"{word[:1].upper()}{word[1:]}: {m.label} {how}.",
                    f"#{verdict_anchor(r['system'], r['metric'])}", F.verdict_class(r["outcome"]),
                    f"Welch p = {r['p_value']:.2g}: {F.verdict_reason(r)}")


def findings(data: ReportData) -> list[tuple[str, list[Sentence]]]:
    """Per system in the study's order, the headline figures whose verdict against the
    reference passed its test (better or worse)."""
    if data.comparison is None or data.reference is None:
        return []
    c = data.comparison
    passed = c[c["metric"].isin(HEADLINE_METRICS) & (c["outcome"] != Outcome.NO_CLEAR_DIFFERENCE)]
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


def undecided(data: ReportData) -> tuple[list[str], list[str]]:
    """Systems compared with no headline finding, and those with too few runs for any."""
    if data.comparison is None:
        return [], []
    c = data.comparison[data.comparison["metric"].isin(HEADLINE_METRICS)]
    found = {s for s, _ in findings(data)}
    too_few = [s for s in data.study.systems if s in set(c["system"]) and s not in found
               and (c[c["system"] == s]["basis"] == Basis.TOO_FEW_RUNS).all()]
    none = [s for s in data.study.systems if s in set(c["system"]) and s not in found
            and s not in too_few]
    return none, too_few


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
