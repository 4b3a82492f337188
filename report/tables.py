"""The report's tables, built from the statistics' numbers and outcomes. Which metrics a table
shows is a tuple of names here; each column's heading, unit and digits come from the registry."""
from __future__ import annotations

from typing import Any

import pandas as pd

from harness.model.metrics import metric
from harness.stats.across import OVERHEAD_FIGURES, describe
from harness.stats.count_table import instructions_of
from harness.stats.definitions import ERROR_KINDS
from harness.stats.feature_cost import FEATURE_METRICS, STREAM_METRICS
from harness.stats.open_loop import OPEN_LOOP_BOUNDS_MS
from harness.stats.outcomes import Basis, Label, Outcome
from harness.stats.sizing import sizing as sizing_of
from report import format as F
from report.data import ReportData
from report.grid import Cell, Part, Row, Table, cell, number, table

# The tail (p95) lives in the verdicts and stability tables: the headline fits 1,280 px.
HEADLINE_METRICS = ("throughput_rps", "overhead_vs_mock_p50_ms", "net_overhead_p50_ms",
                    "wire_in_gateway_p50_us", "cpu_ms_per_request", "rss_peak_bytes", "errors_total")
# The published head-to-head (report/publish.py): the net overhead's median and tail, which take
# the mock's own time per request out, in place of the client-observed median.
PUBLISHED_METRICS = ("throughput_rps", "net_overhead_p50_ms", "net_overhead_p99_ms",
                     "wire_in_gateway_p50_us", "cpu_ms_per_request", "rss_peak_bytes",
                     "errors_total")
# the headline's verdicts: throughput, and the overhead figure each system's verdict uses
# (harness.stats.across.overhead_figure: wire, else net, else client-observed)
OVERHEAD = "overhead"
HEADLINE_VERDICTS = ("throughput_rps", OVERHEAD)
NOT_RUN_REASON_CHARS = 60
UNSTABLE_MARK = "⚠"          # beside a figure whose runs disagree (UNSTABLE_COV)
HEADLINE_REASON_CHARS = 28     # the headline's verdict column is narrow: it must fit 1,280 px
STABILITY_METRICS = ("throughput_rps", "overhead_vs_mock_p50_ms", "overhead_vs_mock_p95_ms",
                     "overhead_vs_direct_p50_ms", "overhead_vs_direct_p95_ms", "latency_p99_ms",
                     "cpu_ms_per_request", "rss_peak_bytes", "rss_steady_bytes")
RUNS_METRICS = ("window_s", "requests_in_window", "throughput_rps", "latency_p50_ms",
                "latency_p99_ms", "overhead_vs_mock_p50_ms", "overhead_vs_mock_p95_ms",
                "overhead_vs_direct_p50_ms", "cpu_ms_per_request")
LIMITS_METRICS = ("rss_idle_bytes", "rss_peak_bytes", "rss_steady_bytes", "rss_recovered_bytes",
                  "locust_cpu_peak_percent", "mock_cpu_peak_percent", "mock_hold_p99_ms",
                  "load_avg_before", "other_cpu_mean_percent")
STREAM_TABLE = ("streams", "failed_streams", "silent_truncations", "ttfb_p50_ms", "ttft_p50_ms", "ttft_p99_ms",
                "ttft_overhead_p50_ms", "gap_p50_ms", "gap_p99_ms", "gap_overhead_p99_ms",
                "chunks_mean", "done_share")
STEP_METRICS = ("offered_rps", "achieved_rps", "scheduled", "unsent", "failed",
                "from_intended_p50_ms", "from_intended_p99_ms", "from_start_p50_ms",
                "from_start_p99_ms", "schedule_lag_p99_ms", "p99_added_ms")
SELF_OVERHEAD = (("self_overhead_p50_ms", "overhead_vs_mock_p50_ms", "self_overhead_gap_p50_ms"),
                 ("self_overhead_p95_ms", "overhead_vs_mock_p95_ms", "self_overhead_gap_p95_ms"))
GATEWAY_TIME = (*(f"wire_{part}_p{q}_us" for part in ("request_path", "response_path", "in_gateway")
                  for q in (50, 95, 99)),
                "wire_join_rate", "identity_match_rate", "net_overhead_p50_ms",
                "self_overhead_p50_ms")
UNSTABLE = f" {UNSTABLE_MARK} unstable"


def short(text: str, limit: int = NOT_RUN_REASON_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _summary_of(summary: pd.DataFrame, system: str, name: str) -> dict | None:
    d = summary[(summary["system"] == system) & (summary["metric"] == name)]
    return d.iloc[0].to_dict() if len(d) else None


def _label_tag(label: Label | str) -> Cell:
    text = label.value if isinstance(label, Label) else str(label)
    return cell(text, span=f"tag {text}") if isinstance(label, Label) else cell(text)


def _version(data: ReportData, system: str) -> str:
    meta = data.study.manifest.systems.get(system)
    version = meta.version if meta else ""
    for r in data.study.runs:
        if version:
            break
        if r.system == system:
            version = r.version
    return version


# --- the head-to-head table ----------------------------------------------------------------------

# Which overhead figure a verdict used, in a word: the headline and the summary say it.
OVERHEAD_SOURCE = {"wire_in_gateway_p50_us": "wire", "net_overhead_p50_ms": "net",
                   "overhead_vs_mock_p50_ms": "client"}
# The headline's verdict column names its figures briefly; the verdicts table has them whole.
_VERDICT_SHORT = {"throughput_rps": "req/s",
                  **{m: f"overhead ({w})" for m, w in OVERHEAD_SOURCE.items()}}


def overhead_of(data: ReportData, system: str) -> str:
    """The overhead figure ``system``'s verdict uses (the client-observed one when none was
    chosen: the reference, or a report without a comparison)."""
    return data.overhead.get(system, OVERHEAD_FIGURES[-1])


def overhead_why(name: str) -> str:
    """Why a verdict used this overhead figure, for a tooltip."""
    if name == OVERHEAD_FIGURES[-1]:
        return (f"overhead from {metric(name).label}: neither the wire nor the net overhead was "
                "measured for both this system and the reference")
    return (f"overhead from {metric(name).label}, the least noisy overhead figure measured for "
            "both this system and the reference")


def headline_verdicts(data: ReportData, system: str) -> tuple[str, ...]:
    """The metrics of ``system``'s headline verdicts, the overhead slot resolved."""
    return tuple(overhead_of(data, system) if m == OVERHEAD else m for m in HEADLINE_VERDICTS)


def _verdict_part(v: pd.Series, m: str, br: bool) -> Part:
    """'overhead (wire): slower ×2.1', 'req/s: ≈' (no clear difference), 'too few runs' when
    no test ran; the metric's whole words in the verdicts table."""
    if v["basis"] is Basis.TOO_FEW_RUNS:
        word = Basis.TOO_FEW_RUNS.value
    elif v["outcome"] is Outcome.NO_CLEAR_DIFFERENCE:
        word = "≈"
    else:
        word = F.verdict_word(v["outcome"], m)
        if v["basis"] is Basis.TESTED:
            word += f" {F.times(v['ratio'])}"
    return Part(f"{_VERDICT_SHORT.get(m, metric(m).label)}: {word}", F.verdict_class(v["outcome"]),
                br=br)


def verdict_anchor(system: str, name: str) -> str:
    """The id of a verdicts-table row, which the summary links to."""
    return f"verdict-{system}-{name}"


def headline(data: ReportData, metrics: tuple[str, ...] = HEADLINE_METRICS,
             stale: dict[str, str] | None = None) -> Table:
    """One row per system: each of ``metrics`` 'mean ± sd' over completed runs (n, the CI and
    the CoV in its tooltip; flagged when unstable), the result label and the verdicts against
    the reference. Narrow enough for a 1,280 px screen: detail goes to tooltips. ``stale``:
    system -> why the tree would no longer run what it measured (a published row)."""
    stale = stale or {}
    ref, rs, summary = data.reference, data.rs, data.summary
    systems_meta = data.study.manifest.systems
    comp = (data.comparison.set_index(["system", "metric"]) if data.comparison is not None
            else None)
    labels = data.labels.set_index("system") if len(data.labels) else None
    counted = len(data.counts) > 0
    headings = [cell(F.heading(m, each_unit=True)) for m in metrics]
    count_at = metrics.index("cpu_ms_per_request") + 1
    if counted:   # beside CPU time, the count that does not depend on the machine's noise
        headings.insert(count_at, cell("instr./req (counted)"))
    columns = [cell("system"), cell("runs done"), *headings, cell("result"), cell(f"vs {ref}")]
    rows = []
    for system in data.study.systems:
        meta = systems_meta.get(system)
        # kind and version in the tooltip: one line a system keeps the table on the first screen
        title = f"{meta.kind if meta else ''} · {_version(data, system)}"
        name = (Cell((Part(system, strong=True), Part(" stale", "tag stale")),
                     title=f"{title} · stale: {stale[system]}") if system in stale
                else Cell((Part(system, strong=True),), title=title))
        sub = rs[rs["system"] == system] if len(rs) else rs
        if not len(sub):
            why = (meta.not_runnable_reason if meta else "") or "no runs"
            # a long reason (an installer's error) would push the table off the first screen:
            # its start here, all of it in the tooltip and the methodology's systems table
            rows.append(Row((name, number("0/0"), *(number(F.DASH) for _ in headings),
                             Cell((Part("not run", "tag not run"),), title=why),
                             Cell((Part(short(why, HEADLINE_REASON_CHARS), small=True),),
                                  "verdict", title=why)),
                            id=f"headline-{system}"))
            continue
        n_done = int((sub["status"] == "completed").sum())
        figures = []
        for m in metrics:
            d = _summary_of(summary, system, m)
            unstable = bool(d and d["unstable"]) and m != "errors_total"
            figures.append(Cell((*_spread_parts(F.mean_sd_each(d, m) if d else F.DASH),
                                 *((Part(f" {UNSTABLE_MARK}", "unstable"),) if unstable else ())),
                                "n unstable" if unstable else "n",
                                title=F.spread(d, m) if d else ""))
        if counted:
            figures.insert(count_at, _counted_cell(data, system))
        if system == ref:
            verdicts = Cell((Part("reference"),), "verdict")
        elif comp is not None:
            shown = [x for x in headline_verdicts(data, system) if (system, x) in comp.index]
            parts = [_verdict_part(comp.loc[(system, m)], m, br=bool(i))
                     for i, m in enumerate(shown)]
            overhead = overhead_of(data, system)
            verdicts = Cell(tuple(parts) or (Part(F.DASH),), "verdict",
                            title=overhead_why(overhead) if overhead in shown else "")
        else:
            verdicts = Cell((Part(F.DASH),), "verdict")
        label = labels.loc[system, "label"] if labels is not None and system in labels.index else ""
        rows.append(Row((name, number(f"{n_done}/{len(sub)}"), *figures, _label_tag(label),
                         verdicts), id=f"headline-{system}"))
    return Table(tuple(columns), tuple(rows), "headline-table")


def _spread_parts(text: str) -> tuple[Part, ...]:
    """A headline figure in two parts, so a narrow screen breaks it before its spread ("2.02" over
    "± 0.17 ms"), never inside it; the text is unchanged."""
    mean, sep, rest = text.partition(" ± ")
    return (Part(text),) if not sep else (Part(f"{mean} "), Part(f"± {rest}", "spread"))


def _counted_cell(data: ReportData, system: str) -> Cell:
    """The plain relay's instructions per request from the counting lane, or why there is none."""
    n = instructions_of(data.counts, system)
    if n is not None:
        return Cell((Part(F.figure(n)),), "n", title=f"{n:,.0f} instructions per "
                    "request under Valgrind (the counting lane)")
    sel = data.counts[data.counts["system"] == system]
    why = "; ".join(x for x in sel["missing"] if x) or "not counted"
    return Cell((Part(F.DASH),), "n", title=why)


def _counted(x, fmt: str) -> str:
    return F.DASH if x is None or pd.isna(x) else fmt.format(x)


def counts(data: ReportData) -> Table:
    """The counting lane: per system and case, instructions and system calls per request (and
    allocator calls, RSS); a system that could not be counted keeps its reason."""
    frame = data.ordered(data.counts) if len(data.counts) else data.counts
    rows = []
    for r in frame.to_dict("records"):
        if not r["case"]:
            rows.append(Row((cell(r["system"], strong=True), cell(F.DASH),
                             *(number(F.DASH) for _ in range(6)),
                             Cell((Part(r["missing"], small=True),), title=r["missing"]))))
            continue
        rows.append(Row((cell(r["system"], strong=True), cell(r["case"]),
                         number(_counted(r["instructions_per_request"], "{:,.0f}")),
                         *(number(_counted(r[f"{k}_per_request"], "{:.2f}"))
                           for k in ("reads", "writes", "sends", "waits")),
                         number(_counted(r["allocations_per_request"], "{:,.1f}")),
                         Cell((Part(r["missing"], small=True),), title=r["missing"]))))
    return Table((cell("system"), cell("case"), cell("instructions/req"), cell("reads/req"),
                  cell("writes/req"), cell("sends/req"), cell("waits/req (timing)"),
                  cell("allocator calls/req"), cell("missing")), tuple(rows), "counts-table")


def sizing(data: ReportData) -> Table:
    """Per system: cores needed at the planned load (mean ± sd, 95% CI), its steady memory and
    the monthly cost at the given prices (its interval from the cores' CI), with the result
    label: a behaviour run set sizes what the system did here, not what it needs at most."""
    frame = sizing_of(data.rs, data.study.systems, data.prices, data.load_rps)
    labels = data.labels.set_index("system") if len(data.labels) else None
    rows = []
    for r in frame.to_dict("records"):
        cores = F.mean_sd({"n": r["n"], "mean": r["cores"], "sd": r["cores_sd"]}, "cores", n=False)
        ci = (F.DASH if F.isnan(r["cores_high"]) else
              f"{F.value(r['cores_low'], 'cores')} – {F.value(r['cores_high'], 'cores')}")
        cost = f"${r['usd_month']:,.0f}"
        if not F.isnan(r["usd_month_high"]):
            cost += f" (${r['usd_month_low']:,.0f} – ${r['usd_month_high']:,.0f})"
        label = labels.loc[r["system"], "label"] if labels is not None else ""
        rows.append([cell(r["system"], strong=True), number(int(r["n"])), number(cores),
                     number(ci),
                     number(F.mean_sd({"n": r["n"], "mean": r["memory_gib"],
                                       "sd": r["memory_gib_sd"]}, "memory_gib", n=False)),
                     number(cost), _label_tag(label)])
    return table(["system", "runs", F.heading("cores"), "95% CI", F.heading("memory_gib"),
                  F.heading("usd_month") + " (95% CI)", "result"], rows, "sizing-table")


# --- verdicts and stability ----------------------------------------------------------------------

def verdicts(data: ReportData) -> Table | None:
    if data.comparison is None:
        return None
    rows = []
    for _, r in data.ordered(data.comparison).iterrows():
        m = metric(r["metric"])
        used = r["metric"] in OVERHEAD_FIGURES and r["metric"] == overhead_of(data, r["system"])
        name = (Cell((Part(F.heading(m)), Part("the headline's overhead verdict", small=True,
                                               br=True)), title=overhead_why(r["metric"]))
                if used else F.heading(m))
        rows.append(Row(tuple(x if isinstance(x, Cell) else cell(x) for x in [
                     r["system"], name, m.better.value,
                     number(F.mean_sd({"n": r["n"], "mean": r["mean"], "sd": r["sd"]}, m)),
                     number(F.mean_sd({"n": r["n_ref"], "mean": r["mean_ref"], "sd": r["sd_ref"]}, m)),
                     number(F.effect(r, m)),
                     number(F.DASH if F.isnan(r["p_value"]) else f"{r['p_value']:.3g}"),
                     cell(F.verdict_word(r["outcome"], m), F.verdict_class(r["outcome"])),
                     F.verdict_reason(r)]), id=verdict_anchor(r["system"], r["metric"])))
    return table(["system", "metric", "better when", "this system", data.reference,
                  "ratio or difference", "Welch p", "verdict", "why"], rows, "verdicts-table", wide=True)


def stability(data: ReportData) -> Table:
    rows = []
    s = data.summary
    for name in STABILITY_METRICS:
        sub = s[s["metric"] == name] if len(s) else s
        m = metric(name)
        for _, r in (data.ordered(sub) if len(sub) else sub).iterrows():
            if int(r["n"]) == 0:
                continue
            v = lambda col, r=r, m=m: F.value(r[col], m)  # noqa: E731
            unstable = bool(r["unstable"])
            rows.append([F.heading(m), r["system"], number(int(r["n"])), number(v("mean")),
                         number(v("sd")), number(f"{v('min')} – {v('max')}"),
                         number(f"{v('ci95_low')} – {v('ci95_high')}"),
                         cell(("—" if F.isnan(r["cov"]) else F.pct(r["cov"]))
                              + (UNSTABLE if unstable else ""), "n unstable" if unstable else "n"),
                         number(int(r["n_not_completed"]))])
    return table(["metric", "system", "n", "mean", "sd", "min – max", "95% CI", "CoV",
                  "not completed"], rows, "stability-table", wide=True)


# --- every run -----------------------------------------------------------------------------------

def _order_label(run: pd.Series, zero_based: bool) -> str:
    rnd, pos = run.get("round"), run.get("position")
    if F.isnan(rnd) or F.isnan(pos):
        return F.DASH
    return f"{int(rnd)}.{int(pos) + (1 if zero_based else 0)}"


def runs(data: ReportData) -> tuple[Table, Table]:
    """Every run's window figures, then its memory and what else could have limited it."""
    rs = data.rs
    zero_based = bool(len(rs)) and "position" in rs and (rs["position"] == 0).any()
    main, limits = [], []
    for _, r in rs.iterrows():
        done = r["status"] == "completed"
        cls = "ok" if done else "failed"
        status = (cell(r["status"]) if done else
                  Cell((Part(str(r["status"]).upper(), strong=True), Part(f": {r.get('reason', '')}"))))
        figures = [number(F.value(r.get(m), m) if done else F.DASH) for m in RUNS_METRICS]
        errors = " / ".join(str(int(r[f"errors_{k}"])) for k in ERROR_KINDS)
        main.append(Row((cell(r["run_id"]), number(_order_label(r, zero_based)), status,
                         _label_tag(r["label"]), *figures, number(errors),
                         number(F.value(r["inflight_at_stop"], "inflight_at_stop"))), cls))
        reasons = [x for x in str(r["label_reasons"]).split("; ") if x]
        limits.append(Row((cell(r["run_id"]),
                           *(number(F.value(r.get(m), m)) for m in LIMITS_METRICS),
                           Cell(tuple(Part(x, br=bool(i)) for i, x in enumerate(reasons)) or (Part(""),))),
                          cls))
    errors_heading = "errors " + " / ".join(k[0] for k in ERROR_KINDS)
    return (table(["run", "order", "status", "result", *(F.heading(m) for m in RUNS_METRICS),
                   errors_heading, F.heading("inflight_at_stop")], main, "runs-table", wide=True),
            table(["run", *(F.heading(m) for m in LIMITS_METRICS), "why not capacity"], limits,
                  "runs-limits-table", wide=True))


# --- the lanes -----------------------------------------------------------------------------------

def _run_name(r: Any) -> str:
    return r["run_id"] + ("" if r["status"] == "completed" else f" ({r['status']})")


def streaming(stream: pd.DataFrame) -> Table:
    rows = []
    for _, r in stream.iterrows():
        mode = "BUFFERED" if r["buffered"] else ("bunched" if r["bunched"] else "no")
        rows.append([_run_name(r), *(number(F.value(r[m], m)) for m in STREAM_TABLE), mode])
    return table(["run", *(F.heading(m) for m in STREAM_TABLE), "buffered?"], rows,
                 "streaming-table")


def open_loop(cap: pd.DataFrame, floor: str | None,
              bounds_ms: tuple[float, ...] = OPEN_LOOP_BOUNDS_MS) -> Table:
    """Per system (``cap``: open_loop_capacity over those bounds), 'mean ± sd (n=…)' of the
    highest rate sustained under each bound and of the rate where it stopped keeping up."""
    sustained, stopped = metric("sustained_rps"), metric("stopped_at_rps")
    rows = []
    for _, r in cap.iterrows():
        row: list[Any] = [r["system"], number(r["runs"])]
        for b in bounds_ms:
            row.append(number(F.mean_sd({k: r[f"sustained_{b:g}ms_rps_{k}"]
                                         for k in ("n", "mean", "sd")}, sustained)))
        stop = F.mean_sd({k: r[f"stopped_at_rps_{k}"] for k in ("n", "mean", "sd")}, stopped)
        if r["runs_kept_up_throughout"]:
            kept = (f"{r['runs_kept_up_throughout']} of {r['runs']} runs kept up to "
                    f"{r['highest_offered_rps']:g}")
            stop = kept if stop == F.DASH else f"{stop}; {kept}"
        if r["floor_also_stopped"]:
            stop += f" ({floor} stopped there too: the machine's limit)"
        rows.append(row + [number(stop)])
    return table(["system", "runs",
                  *(F.heading(sustained, f"with p99 added ≤ {b:g} ms") for b in bounds_ms),
                  F.heading(stopped)], rows, "open-loop-table")


def open_loop_steps(steps: pd.DataFrame) -> Table:
    rows = []
    for r in steps.sort_values(["system", "run_index", "offered_rps"]).to_dict("records"):
        rows.append(Row((cell(_run_name(r)), *(number(F.value(r[m], m)) for m in STEP_METRICS),
                         cell("yes" if r["kept_up"] else "no"), cell(r["reasons"])),
                        "ok" if r["kept_up"] else "failed"))
    return table(["run", *(F.heading(m) for m in STEP_METRICS), "kept up", "why not"], rows,
                 "open-loop-steps-table", wide=True)


def feature_cost_table(cost: pd.DataFrame, order: list[str]) -> Table:
    """Per system@feature, what it adds over the same system's passthrough ('mean ± sd'), and its
    median latency over the floor in the same dialect."""
    shown = [m for m in FEATURE_METRICS + STREAM_METRICS if m in set(cost["metric"])]
    present = set(cost.loc[~cost["is_floor"], "system"])
    cpu = metric("cpu_ms_per_request")
    rows = []
    for system in [s for s in order if s in present]:
        sub = cost[cost["system"] == system].set_index("metric")
        first = sub.iloc[0]
        row: list[Any] = [system, first["dialect"], number(round(first["request_bytes"] / 1024)),
                          str(bool(first["stream"])), number(int(first["n"]))]
        for m in shown:
            r = sub.loc[m]
            row.append(number("reference" if first["is_passthrough"] else
                              F.mean_sd({"n": r["n"], "mean": r["added_mean"], "sd": r["added_sd"]}, m)))
        row.append(number(F.value(sub.loc["latency_p50_ms", "vs_floor_mean"], "latency_p50_ms")))
        row.append(F.DASH if first["is_passthrough"] else
                   F.verdict_word(sub.loc[cpu.name, "outcome"], cpu))
        rows.append(row)
    return table(["system", "dialect", "body (KiB)", "stream", "runs",
                  *(F.heading(m, "added") for m in shown),
                  F.heading("latency_p50_ms", "over the floor"), f"verdict ({cpu.label})"],
                 rows, "feature-cost-table")


def feature_cost_details(cost: pd.DataFrame) -> Table:
    rows = []
    for r in cost[~(cost["is_passthrough"] | cost["is_floor"])].to_dict("records"):
        m = metric(r["metric"])
        rows.append([r["system"], F.heading(m), number(F.value(r["mean"], m)),
                     number(F.value(r["passthrough_mean"], m)), number(F.value(r["added_mean"], m)),
                     F.verdict_word(r["outcome"], m),
                     F.verdict_reason({**r, "n_ref": r["n_passthrough"],
                                       "mean_ref": r["passthrough_mean"]})])
    return table(["system", "metric", "feature mean", "passthrough mean", "added", "verdict",
                  "why"], rows, "feature-cost-details")


def self_overhead_rows(data: ReportData) -> list[dict]:
    """Per system that reported its own overhead: describe() of each figure over completed runs."""
    rs = data.rs
    if not len(rs):
        return []
    done = rs[(rs["status"] == "completed") & (rs["self_overhead_rows"] > 0)]
    out = []
    for system in [s for s in data.study.systems if s in set(done["system"])]:
        g = done[done["system"] == system]
        rec: dict[str, Any] = {"system": system, "n": int(len(g))}
        for own, client, gap in SELF_OVERHEAD:
            rec[own], rec[client] = describe(g[own]), describe(g[client])
            rec[gap] = describe((g[client] - g[own]).astype("float64"))
        rec["mock_hold_excess_p50_ms"] = describe(
            (g["mock_hold_p50_ms"] - g["mock_latency_ms"]).astype("float64"))
        out.append(rec)
    return out


def self_overhead(rows: list[dict]) -> Table:
    names = [m for trio in SELF_OVERHEAD for m in trio] + ["mock_hold_excess_p50_ms"]
    headings = {"overhead_vs_mock_p50_ms": "client-observed p50",
                "overhead_vs_mock_p95_ms": "client-observed p95"}
    return table(["system", "runs", *(headings.get(m) or F.heading(m) for m in names)],
                 [[r["system"], number(r["n"]), *(number(F.mean_sd(r[m], m)) for m in names)]
                  for r in rows], "self-overhead-table")


def gateway_time_rows(data: ReportData) -> list[dict]:
    """Per system: describe() of each GATEWAY_TIME figure over completed runs, and why the wire
    figures are missing where they are."""
    rs = data.rs
    if not len(rs) or "wire_in_gateway_p50_us" not in rs:
        return []
    done = rs[rs["status"] == "completed"]
    out = []
    for system in [s for s in data.study.systems if s in set(done["system"])]:
        g = done[done["system"] == system]
        rec: dict[str, Any] = {"system": system, "n": int(len(g))}
        for m in GATEWAY_TIME:
            rec[m] = describe(g[m].astype("float64"))
        why = sorted({r for r in g["wire_reason"] if r})
        if not why and not g["wire_in_gateway_p50_us"].notna().any():
            mock_us = describe(g["wire_mock_p50_us"].astype("float64"))
            why = [f"no system between the client and the mock (the mock on the wire: p50 "
                   f"{F.mean_sd(mock_us, 'wire_mock_p50_us')} µs)"]
        rec["note"] = "; ".join(why)
        out.append(rec)
    return out


def gateway_time(rows: list[dict]) -> Table:
    return table(["system", "runs", *(F.heading(m) for m in GATEWAY_TIME), "wire figures missing"],
                 [[r["system"], number(r["n"]), *(number(F.mean_sd(r[m], m)) for m in GATEWAY_TIME),
                   r["note"]] for r in rows], "gateway-time-table", wide=True)


def suite_cells(frame: pd.DataFrame, metrics: tuple[str, ...], table_id: str) -> Table:
    """A suite's per-cell table: the text columns as they are, then each metric present
    (``{metric}_n``, ``_mean``, ``_sd`` columns) as 'mean ± sd (n=…)'."""
    shown = [m for m in metrics if f"{m}_mean" in frame.columns]
    stats_cols = {f"{m}_{k}" for m in shown for k in ("n", "mean", "sd")}
    text = [c for c in frame.columns if c not in stats_cols]
    rows = [[*(str(r[c]) for c in text),
             *(number(F.mean_sd({k: r[f"{m}_{k}"] for k in ("n", "mean", "sd")}, m)) for m in shown)]
            for r in frame.to_dict("records")]
    return table([*text, *(F.heading(m) for m in shown)], rows, table_id, wide=True)
