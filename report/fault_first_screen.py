"""A faults suite's first screen: one table, scenario × system, of the five figures a reader asks
first (success, excess attempts, p99 time to success, silent truncations, retries before the
Retry-After), each row marked on the frontier or dominated (and by whom), then the runs lost
and why. A cell the suite excluded is no lost run: it was never meant to run."""
from __future__ import annotations

import math

import pandas as pd

from harness.model.roles import FLOOR
from harness.stats.fault_requests import frontier
from report import format as F
from report.fault_tables import _fault_figure
from report.grid import Cell, Part, Row, Table, cell, table

# (system_figures name, metric) in the order of the table.
FIRST_SCREEN = (("success_during", "success_share"),
                ("excess_amplification", "excess_amplification"),
                ("tts_p99_ms", "tts_p99_ms"),
                ("silent_truncations", "silent_truncations"),
                ("early_retry_share", "early_retry_share"))


def marks(rows: list[dict]) -> dict[int, str]:
    """Per row index (among ``rows`` of one scenario and configuration), "frontier" or
    "dominated by <systems>"; the floor and rows without the three figures get none."""
    ranked = [{**r, "i": i, "success": r["success_during_mean"],
               "excess": r["excess_amplification_mean"], "tts_p99": r["tts_p99_ms_mean"]}
              for i, r in enumerate(rows) if not r["not_run"] and r["role"] != FLOOR]
    best = frontier(ranked)
    out = {r["i"]: "frontier" for r in best}
    for r in ranked:
        if r["i"] in out or any(math.isnan(r[k]) for k in ("success", "excess", "tts_p99")):
            continue
        by = [b["system"] for b in best if b["success"] >= r["success"]
              and b["excess"] <= r["excess"] and b["tts_p99"] <= r["tts_p99"]]
        out[r["i"]] = "dominated by " + ", ".join(by) if by else "dominated"
    return out


def first_screen(rows: pd.DataFrame, table_id: str = "suite-first-screen") -> Table | None:
    """report.suite_data.fault_table's rows as the first screen's table; None without any."""
    if not len(rows):
        return None
    out = []
    for (scenario, _asked, _axes), g in rows.groupby(["scenario", "asked", "axes"], sort=False):
        recs = g.to_dict("records")
        mark = marks(recs)
        for i, r in enumerate(recs):
            who = Cell((Part(r["system"], strong=True),
                        *((Part(f" {r['axes']}", small=True),) if r["axes"] else ())))
            if r["not_run"]:
                out.append(Row((cell(scenario), who, *(cell(F.DASH, "n") for _ in FIRST_SCREEN),
                                cell("not run")), "failed"))
                continue
            where = "floor: quoted, not ranked" if r["role"] == FLOOR else mark.get(i, "")
            out.append(Row((cell(scenario), who,
                            *(_fault_figure(r, name, m) for name, m in FIRST_SCREEN),
                            cell(where, span="tag" if where == "frontier" else ""))))
    headings = [F.heading(m) for _, m in FIRST_SCREEN]
    return table(["scenario", "system", *headings, "frontier"], out, table_id, wide=True)


def runs_lost(rows: pd.DataFrame, cells) -> list[str]:
    """One line per fault cell that did not complete (its status) and per system without a run
    that reached the hold, or with runs that did not stay up (why); excluded cells are none."""
    out = [f"{e.cell_id} ({e.scenario}): {e.status}" for e in cells
           if e.scenario and not e.excluded and e.status not in ("completed", "excluded")]
    for r in rows.to_dict("records") if len(rows) else ():
        if r["not_run"]:
            out.append(f"{r['system']} in {r['scenario']}: {r['not_run']}")
        elif int(r["stayed_up"]) < int(r["runs"]):
            out.append(f"{r['system']} in {r['scenario']}: {int(r['runs']) - int(r['stayed_up'])} "
                       f"of {int(r['runs'])} runs did not stay up")
    return list(dict.fromkeys(out))
