"""The provider-fault lane's tables: a study's figures per window, and a suite's per system and
configuration. Which figures each shows is a tuple here; how each is shown, the registry's."""
from __future__ import annotations

import pandas as pd

from harness.model.metrics import metric
from report import format as F
from report.grid import Cell, Part, Row, Table, cell, number, table
from report.tables import short

FAULT_WINDOW_METRICS = ("success_share", "amplification", "added_p50_ms", "added_p99_ms",
                        "client_dialect_share", "partial_streams")


def dialect_cell(share: float, error_responses: int, missing: str) -> Cell:
    """The share of error bodies in the client's dialect; its tooltip says of how many error
    responses, or why there is none (no error response, or an artifact that never judged them)."""
    if F.isnan(share):
        return Cell((Part(F.DASH),), "n", title=missing or "no error response to judge")
    return Cell((Part(F.value(share, "client_dialect_share")),), "n",
                title=f"of {error_responses:g} error responses (status ≥ 400)")


def faults(per_window: pd.DataFrame, per_run: pd.DataFrame, systems: list[str],
           missing_dialect: str = "") -> Table:
    """One scenario: per run, its before/during/after windows; a system measured once says so.
    ``missing_dialect``: why the artifact judged no error body ("" when it did)."""
    order = {s: i for i, s in enumerate(systems)}
    runs_of = per_run.groupby("system")["run_id"].nunique()
    rows = []
    for r in sorted(per_run.to_dict("records"), key=lambda r: (order.get(r["system"], 99), r["run_index"])):
        name = r["run_id"] + ("" if r["run_status"] == "completed" else f" ({r['run_status']})")
        if runs_of.get(r["system"], 0) == 1:
            name += " (single run)"
        recovery = (F.value(r["recovery_s"], "recovery_s", unit=True) if r["recovered"]
                    else "did not recover in the window")
        run_cell = Cell((Part(name), Part(F.configuration(r["resilience"], r["resilience_note"]),
                                          small=True, br=True)))
        rss = {w["window"]: w["rss_peak_bytes"] for w in
               per_window[per_window["run_id"] == r["run_id"]].to_dict("records")}
        for w in per_window[per_window["run_id"] == r["run_id"]].to_dict("records"):
            mix = ", ".join(f"{code}: {n}" for code, n in w["status_counts"].items())
            first = w["window"] == "before"
            figures = [dialect_cell(w[m], w["error_responses"], missing_dialect)
                       if m == "client_dialect_share" else number(F.value(w[m], m))
                       for m in FAULT_WINDOW_METRICS]
            rows.append(Row((run_cell if first else cell(""), cell(w["window"]),
                             number(w["requests"]), *figures, cell(mix or F.DASH),
                             number(F.value(rss.get(w["window"]), "rss_peak_bytes")),
                             cell(recovery if first else ""),
                             cell(("yes" if r["stayed_up"] else "no") if first else "")),
                            "" if w["window"] != "during" else "during"))
    return table(["run", "window", "requests", *(F.heading(m) for m in FAULT_WINDOW_METRICS),
                  "status codes (count)", F.heading("rss_peak_bytes"), F.heading("recovery_s"),
                  "stayed up"], rows, "faults-table", wide=True)


# A faults suite's configuration column wraps: a reason or note may take two lines or three there.
FAULT_NOTE_CHARS = 60
# The provider-fault lane across a suite: (system_figures name, metric, window shown) in order.
# "sent during": the requests sent in the fault window, each with every attempt it caused,
# whenever that landed (harness/stats/fault_requests.py).
FAULT_SUITE_FIGURES = (("success_before", "success_share", "before"),
                       ("success_during", "success_share", "sent during"),
                       ("success_after", "success_share", "after"),
                       ("amplification_during", "amplification", "sent during"),
                       ("excess_amplification", "excess_amplification", "sent during"),
                       ("tts_p99_ms", "tts_p99_ms", "sent during"),
                       ("added_p50_during_ms", "added_p50_ms", "during"),
                       ("attempts_after_window_share", "attempts_after_window_share", ""),
                       ("client_dialect_during", "client_dialect_share", "during"),
                       ("recovery_s", "recovery_s", ""),
                       ("failback_s", "failback_s", ""),
                       ("partial_streams_during", "partial_streams", "during"),
                       ("rss_peak_bytes", "rss_peak_bytes", ""))


def _runs_text(runs: int) -> str:
    return "1 run: no spread" if runs == 1 else f"{runs} runs"


def _fault_figure(r: dict, name: str, m: str) -> Cell:
    """'mean ± sd' over the row's runs ('mean' for one); the runs it rests on in the tooltip,
    or why there is no figure."""
    d = {k: r[f"{name}_{k}"] for k in ("n", "mean", "sd")}
    n = 0 if F.isnan(d["n"]) else int(d["n"])
    share = metric(m).unit == "%"
    # counts and times at three significant digits ('2403', not '2402.9': the unit is in the
    # heading); a share keeps its decimal, so 99.97% never reads as a whole 100%
    text = F.mean_sd(d, m, n=False, compact=not share)
    if n and share:   # a share's heading carries no unit: its value does
        mean, _, sd = text.partition(" ± ")
        text = f"{mean}%" + (f" ± {sd}" if sd else "")
    if n:
        title = f"over {_runs_text(n)}" if n == 1 else f"mean ± sd over {n} runs"
    elif name == "client_dialect_during":
        title = r["dialect_missing"] or "no error response to judge"
    else:
        title = ""
    recovered, runs = int(r["recovered"]), int(r["runs"])
    if name == "failback_s" and not F.isnan(r.get("failed_back")) and int(r["failed_back"]) < runs:
        back = int(r["failed_back"])
        text = f"{text} ({back} of {runs})" if n else "not back"
        title = f"{back} of {runs} runs back on the primary within the hold"
    if name == "recovery_s" and recovered < runs:
        text = f"{text} ({recovered} of {runs})" if n else "not recovered"
        title = (f"{recovered} of {runs} runs recovered within the hold"
                 + (f"; {title} that did" if n else ""))
    return Cell((Part(text),), "n", title=title)


def fault_suite(rows: pd.DataFrame, table_id: str) -> Table:
    """One scenario of a faults suite: per system (in the given order) and configuration asked,
    its figures over its runs ('mean ± sd', one run marked as such), the configuration that ran
    (recommended, or as shipped and why) with the cell's other axis values; a system that did
    not run once per reason, with it."""
    out, shown_not_run = [], set()
    for r in rows.to_dict("records"):
        who = Cell((Part(r["system"], strong=True), Part(f" {r['kind']}", small=True)))
        if r["not_run"]:
            if (r["system"], r["not_run"]) in shown_not_run:
                continue
            shown_not_run.add((r["system"], r["not_run"]))
            not_run = Cell((Part("not run", "tag not run"),
                            Part(f": {short(r['not_run'], FAULT_NOTE_CHARS)}", small=True)),
                           title=r["not_run"])
            out.append(Row((who, not_run, cell("0"),
                            *(number(F.DASH) for _ in FAULT_SUITE_FIGURES), cell(F.DASH))))
            continue
        ran = F.configuration(r["resilience"], r["resilience_note"])
        asked = "" if ran == "recommended" or r["asked"] != "recommended" else "asked: recommended"
        small = tuple(Part(x, small=True, br=True) for x in (asked, r["axes"]) if x)
        shown = short(ran, FAULT_NOTE_CHARS)
        config = Cell((Part(shown), *small), title=ran if ran != shown else "")
        runs, up = int(r["runs"]), int(r["stayed_up"])
        figures = [_fault_figure(r, name, m) for name, m, _ in FAULT_SUITE_FIGURES]
        stayed = "yes" if up == runs else "no" if not up else f"{up} of {runs}"
        out.append(Row((who, config, cell(_runs_text(runs)), *figures[:-1], cell(stayed),
                        figures[-1]), "" if up == runs else "failed"))
    headings = [F.heading(m, window) for _, m, window in FAULT_SUITE_FIGURES]
    return table(["system", "configuration", "runs", *headings[:-1], "stayed up", headings[-1]],
                 out, table_id, wide=True)
