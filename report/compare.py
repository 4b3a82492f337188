"""Two studies side by side: per system whose runs have the same comparison keys in both (the
same configuration), every compared figure of study B against study A with the study report's
verdict rules (harness.stats.across.verdict); systems whose keys differ are listed, not compared.
Both studies' machines are named; when their CPUs differ (model or core count) the figures are
shown side by side with no verdict (harness.stats.machines.same_machine).

    python -m harness report B --compare A      (or: report --compare A B)

writes B/compare-<A>.html and prints its path."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pandas as pd
from markupsafe import Markup

from harness.files.atomic import write_atomic
from harness.model import migrate
from harness.stats.across import OPTIONAL_FIGURES, measured, side_by_side, verdict
from harness.stats.definitions import COMPARE_METRICS
from harness.stats.loading import Study, load_study
from harness.stats.machines import MachineMatch, same_machine
from harness.stats.runs import run_summary
from report import format as F
from report.grid import table
from report.sections import render, style
from report.suite_report import compare_table, side_by_side_table


def _keys(study: Study, system: str, version: int) -> frozenset[str]:
    """The system's run keys in recipe ``version`` (newer ones re-keyed from their specs)."""
    return frozenset(migrate.run_key_in(version, r.comparison_key, r.spec)
                     for r in study.runs if r.system == system)


def compare_studies(a_dir: str | Path, b_dir: str | Path,
                    ) -> tuple[pd.DataFrame, pd.DataFrame, MachineMatch]:
    """(verdicts of B against A per comparable system and metric, the systems not compared and
    why, the two machines). On different machines the first frame has each side's n, mean and
    sd only: no verdict. Keys recorded with different recipes meet in the older one
    (harness.model.migrate), the newer runs re-keyed from their specs."""
    a, b = load_study(a_dir), load_study(b_dir)
    rs_a, rs_b = run_summary(a), run_summary(b)
    machines = same_machine(a.manifest.machine, b.manifest.machine)
    rows, apart = [], []
    version = migrate.oldest_recipe(r.comparison_key for r in (*a.runs, *b.runs))
    for system in b.systems:
        ka, kb = _keys(a, system, version), _keys(b, system, version)
        if not ka or not kb or ka != kb or "" in ka:
            apart.append({"system": system, "why": "not run in both" if not (ka and kb) else
                          "different configurations (comparison keys differ)"})
            continue
        da = rs_a[(rs_a["system"] == system) & (rs_a["status"] == "completed")]
        db = rs_b[(rs_b["system"] == system) & (rs_b["status"] == "completed")]
        for m in COMPARE_METRICS:
            if m in OPTIONAL_FIGURES and not (measured(rs_a, system, m)
                                              and measured(rs_b, system, m)):
                continue   # a wire or net figure not taken in both: nothing to compare
            if m in da.columns and m in db.columns:
                xb, xa = db[m].astype("float64").tolist(), da[m].astype("float64").tolist()
                figures = asdict(verdict(xb, xa, m)) if machines.same else side_by_side(xb, xa)
                rows.append({"system": system, "metric": m, **figures})
    for system in [s for s in a.systems if s not in b.systems]:
        apart.append({"system": system, "why": f"only in {a.manifest.study_id or a.path.name}"})
    return pd.DataFrame(rows), pd.DataFrame(apart, columns=["system", "why"]), machines


def build_compare(a_dir: str | Path, b_dir: str | Path, out: str | Path | None = None) -> Path:
    a_dir, b_dir = Path(a_dir).resolve(), Path(b_dir).resolve()
    verdicts, apart, machines = compare_studies(a_dir, b_dir)
    out_path = Path(out) if out is not None else b_dir / f"compare-{a_dir.name}.html"
    def shown(frame: pd.DataFrame):
        return (compare_table(frame) if machines.same
                else side_by_side_table(frame, "compare-side-by-side-table"))
    body = render("compare.html.j2", a=a_dir.name, b=b_dir.name,
                  machine_a=F.machine_line(machines.a), machine_b=F.machine_line(machines.b),
                  different=None if machines.same else F.different_machines(machines.a, machines.b),
                  comparison=shown(verdicts) if len(verdicts) else None,
                  apart=table(["system", "why"], apart.itertuples(index=False), "compare-apart"))
    write_atomic(out_path, render("page.html.j2", title=f"{b_dir.name} vs {a_dir.name}",
                                  title_prefix="Sluice comparison",
                                  sections=[Markup(style()), Markup(body)]))
    return out_path
