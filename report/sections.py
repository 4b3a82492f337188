"""The sections of a study's report, in order: each gathers what its template
(templates/<name>.html.j2) shows and renders it. The notebook displays the same sections."""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Callable

import jinja2
import pandas as pd
from markupsafe import Markup, escape
from scipy import stats

from harness.model import config as config_mod
from harness.model.dialects import ERROR_BODY_PREFIX_BYTES
from harness.model.metrics import metric
from harness.stats.definitions import DEFINITIONS
from harness.stats.fault_lane import (
    RECOVERY_MS,
    RECOVERY_SHARE,
)
from harness.stats.inflight_abandon import ABANDON_DEFINITIONS
from harness.stats.inflight_lane import INFLIGHT_DEFINITIONS
from harness.stats.inflight_limits import planned_open
from harness.stats.loading import cpu_count, mock_latency_ms
from harness.stats.machines import machine_fields
from harness.stats.open_loop import OPEN_LOOP_DEFINITIONS, is_open_loop
from harness.stats.outcomes import Label
from harness.stats.sizing import (
    DEFAULT_REPLICA_CORES,
    DEFAULT_REPLICA_GIB,
    HOURS_PER_MONTH,
    concurrency_sizing,
)
from harness.stats.streaming import (
    BUFFERED_FIRST_TOKEN_SHARE,
    BUFFERED_GAP_SHARE,
)
from report import fault_tables, inflight_tables, plots, summary, tables
from report import format as F
from report.data import ReportData
from report.grid import rows_of, table

HERE = Path(__file__).resolve().parent
REPO_DIR = HERE.parent
# The methodology's settings table: these StudyConfig sections, each setting by its path
# (`section.name`, as a suite file names it), then the run's own timings.
CONFIG_SECTIONS = ("load", "request", "mock")
CONFIG_RUN_SETTINGS = ("idle_s", "cooldown_s", "gateway_workers", "ready_timeout_s")


def config_rows(cfg: dict) -> list[tuple[str, Any]]:
    """(path, value) of every setting the methodology's table shows that the config has."""
    names = [*(name for section in CONFIG_SECTIONS for name in config_mod.SECTIONS[section]),
             *CONFIG_RUN_SETTINGS]
    return [(config_mod.path_of(name), cfg[name]) for name in names if name in cfg]


ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                         undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
ENV.filters.update(num=F.num, when=F.when, gib=F.gib)


def render(template: str, **ctx: Any) -> str:
    return ENV.get_template(template).render(**ctx)


def style() -> str:
    """The CSS every section uses, inlined: the report is one self-contained file."""
    return "<style>\n" + (HERE / "style.css").read_text(encoding="utf-8") + "</style>\n"


def section_style(data: ReportData) -> str:
    """The CSS every other section uses."""
    return style()


def section_header(data: ReportData) -> str:
    """The study: its id, status, profile, times, systems, reference and machine."""
    m = data.study.manifest
    facts = machine_fields(m.machine)
    return render("header.html.j2", study_id=m.study_id or data.study.path.name,
                  status=m.status, reason=m.reason, profile=m.config.profile,
                  started=m.started_t_unix_s, ended=m.ended_t_unix_s,
                  systems=data.study.systems, reference=data.reference,
                  machine=F.machine_line(facts), machine_full=F.machine_line(facts, short=False),
                  placement=F.placement_text(m.config))


def section_banner(data: ReportData) -> str:
    """Behaviour or capacity, with the reasons."""
    m = data.study.manifest
    cores = cpu_count(data.study)
    systems = [{"system": r["system"], "label": r["label"].value, "runs": int(r["runs"]),
                "completed": int(r["completed"]), "reasons": list(r["reasons"])}
               for _, r in (data.ordered(data.labels) if len(data.labels) else data.labels).iterrows()]
    ran = {s["system"] for s in systems}
    for name, meta in m.systems.items():
        if name not in ran:
            systems.append({"system": name, "label": "not run", "runs": 0, "completed": 0,
                            "reasons": [f"not run: {meta.not_runnable_reason or 'no runs'}"]})
    measured = [s for s in systems if s["completed"] > 0]
    behaviour = [s for s in measured if s["label"] == Label.BEHAVIOUR.value]
    kind = (Label.FAILED if not measured else Label.BEHAVIOUR if behaviour else Label.CAPACITY)
    unstable, unstable_systems = [], []
    if len(data.summary):
        u = data.summary[(data.summary["unstable"]) & (data.summary["metric"] != "errors_total")]
        for system, g in u.groupby("system", sort=False):
            unstable_systems.append(system)
            unstable.append(f"{system}: " + ", ".join(
                f"{metric(mm).label} (CoV {c:.0%})" for mm, c in zip(g["metric"], g["cov"])))
    failed_runs = [r for r in data.study.runs if r.status != "completed"]
    cores = None if math.isnan(cores) else int(cores)
    line = summary.banner_line(kind.value, [s["system"] for s in behaviour], len(measured), cores,
                               m.status, unstable_systems, len(failed_runs))
    return render("banner.html.j2", kind=kind.value, line=line, limits=summary.limits(data.labels),
                  cores=cores, n_behaviour=len(behaviour),
                  n_measured=len(measured), systems=systems, study_status=m.status,
                  study_reason=m.reason, unstable=unstable, failed_runs=failed_runs)


def section_summary(data: ReportData) -> str:
    """The first screen: what the study found, in sentences."""
    none, too_few = summary.undecided(data)
    faults = summary.fault_sentences(data)
    # a fault study's subject is the fault: its first sentences say what it did, not a cost
    return render("summary.html.j2", findings=summary.findings(data), reference=data.reference,
                  none=none, too_few=too_few, cost="" if faults else summary.cost(data),
                  kept_up=summary.kept_up(data), faults=faults)


def section_headline(data: ReportData) -> str:
    """The head-to-head table and the verdict column."""
    return headline_html(data)


def headline_html(data: ReportData, metrics: tuple[str, ...] = tables.HEADLINE_METRICS,
                  stale: dict[str, str] | None = None) -> str:
    """The head-to-head section with ``metrics`` (the publication's own), rows whose key went
    stale marked (tables.headline)."""
    ns = [int(x) for x in data.summary[data.summary["metric"] == "throughput_rps"]["n"]
          if int(x) >= 1] if len(data.summary) else []
    planned = data.study.manifest.config.runs_per_gateway
    n_typ = max(set(ns), key=ns.count) if ns else int(planned or 3)
    k = float(stats.t.ppf(0.975, n_typ - 1)) if n_typ >= 2 else math.nan
    mock_ms = sorted({x for x in data.rs.get("mock_latency_ms", pd.Series(dtype=float)).dropna()})
    return render("headline.html.j2", headline=tables.headline(data, metrics, stale),
                  reference=data.reference,
                  n=n_typ, k=k, mock_ms=[f"{x:g}" for x in mock_ms] or ["?"])


def section_sizing(data: ReportData) -> str:
    """What each system needs for a planned load: cores, memory, monthly cost."""
    behaviour = [] if not len(data.labels) else [
        r["system"] for _, r in data.labels.iterrows() if r["label"] is Label.BEHAVIOUR]
    concurrency = None if data.inflight.empty else inflight_tables.concurrency_table(
        concurrency_sizing(data.inflight, data.load_rps, data.planned_latency_s, data.prices),
        data.study.systems)
    return render("sizing.html.j2", sizing=tables.sizing(data), prices=data.prices,
                  load=f"{data.load_rps:,.0f}", hours=HOURS_PER_MONTH, behaviour=behaviour,
                  concurrency=concurrency, latency_s=f"{data.planned_latency_s:g}",
                  open_requests=f"{planned_open(data.load_rps, data.planned_latency_s):,.0f}",
                  replica=f"{DEFAULT_REPLICA_CORES:g} vCPU and {DEFAULT_REPLICA_GIB:g} GiB")


def section_verdicts(data: ReportData) -> str:
    """Every metric against the reference: ratio, Welch p, verdict."""
    return render("verdicts.html.j2", verdicts=tables.verdicts(data), reference=data.reference)


def section_stability(data: ReportData) -> str:
    """Mean, sd, CI and CoV across runs."""
    return render("stability.html.j2", stability=tables.stability(data), floor=data.roles.floor)


def section_runs(data: ReportData) -> str:
    """Every run, failed ones shown as failed."""
    main, limits = tables.runs(data)
    return render("runs.html.j2", runs=main, limits=limits)


def section_plots(data: ReportData) -> str:
    """Throughput and overhead vs users, RSS over time, runs."""
    figs = [
        ("plot-throughput", plots.plot_throughput(data),
         "Throughput along the ramp: where a curve stops following the offered load, the system "
         "(or the machine) saturates. Bins of users; the last bin is the measured hold."),
        ("plot-overhead", plots.plot_overhead(data),
         "Median overhead (latency − the mock's set latency) as users grow: one panel per system, "
         "each on its own scale, over the floor's band; the p95 and p99 are in the runs table."),
        ("plot-rss", plots.plot_rss(data),
         "Tree-summed RSS of each system over time, every run visible; the shaded band is the "
         "measured window, the dashed line where the load stopped."),
        ("plot-runs", plots.plot_runs(data),
         "The headline figures run by run: the dots are the runs, the black square the mean "
         "with its t-based 95% CI; an axis is logarithmic where the systems span orders of "
         "magnitude."),
    ]
    return render("plots.html.j2", figs=figs)


def section_streaming(data: ReportData) -> str:
    """The streaming lane (shown when the study streamed)."""
    stream = data.stream
    if stream.empty:
        return ""
    return render("streaming.html.j2", streaming=tables.streaming(stream),
                  set_latency=mock_latency_ms(data.study, data.study.runs[0]),
                  chunks=stream["set_chunks"].iloc[0], gap=stream["set_gap_ms"].iloc[0],
                  share=f"{BUFFERED_GAP_SHARE:.0%}", late=f"{BUFFERED_FIRST_TOKEN_SHARE:.0%}",
                  floor=data.roles.floor)


def section_faults(data: ReportData) -> str:
    """When the provider fails (shown when the study injected provider faults)."""
    per_window, per_run = data.fault_windows, data.fault_runs
    if per_run.empty:
        return ""
    scenarios = []
    for name, runs in per_run.groupby("scenario", sort=False):
        first = data.study.run(runs["run_id"].iloc[0]).spec.mock
        scenarios.append({"name": name, "start_s": f"{first.fault_start_s:g}",
                          "duration_s": f"{first.fault_duration_s:g}",
                          "table": fault_tables.faults(per_window[per_window["scenario"] == name], runs,
                                                 data.study.systems, data.study.not_measured(
                                                     "requests", "error_body_dialect"))})
    return render("faults.html.j2", scenarios=scenarios,
                  plot=plots.plot_faults(data, data.fault_timelines),
                  share=f"{RECOVERY_SHARE:.0%}", slack=f"{RECOVERY_MS:g}",
                  prefix=f"{ERROR_BODY_PREFIX_BYTES // 1024} KiB")


def section_open_loop(data: ReportData) -> str:
    """The open-loop lane (shown when the study ran a fixed-rate schedule)."""
    steps = data.open_loop
    if steps.empty:
        return ""
    step_s = next((float(r.spec.load.open_loop_step_s) for r in data.study.runs
                   if is_open_loop(r)), math.nan)
    return render("open_loop.html.j2", summary=tables.open_loop(data.open_loop_capacity, data.roles.floor),
                  steps=tables.open_loop_steps(steps), plot=plots.plot_open_loop(data, steps),
                  step_s=f"{step_s:g}", floor=data.roles.floor,
                  rates=", ".join(f"{r:g}" for r in sorted(steps["offered_rps"].unique())),
                  definitions=list(OPEN_LOOP_DEFINITIONS.items()))


def section_inflight(data: ReportData) -> str:
    """The in-flight lane (shown when the study held requests open in steps)."""
    lane = data.inflight
    if lane.empty:
        return ""
    order = data.study.systems
    first = next(r for r in data.study.runs if r.spec is not None and r.spec.load.inflight_steps)
    return render("inflight.html.j2", sentences=inflight_tables.sentences(lane, order),
                  stops=inflight_tables.stops_table(lane, order),
                  per_step=inflight_tables.steps_table(lane, order), per_run=inflight_tables.runs_table(lane),
                  abandon=inflight_tables.abandon_table(lane, order),
                  abandon_definitions=list(ABANDON_DEFINITIONS.items()),
                  plot=plots.plot_inflight(data, lane.steps), hold_s=f"{lane.hold_s:g}",
                  stream=lane.stream, frame_ms=f"{first.spec.mock.chunk_delay_ms:g}",
                  steps=", ".join(f"{t:,}" for t in sorted(lane.table["target_open"].unique())),
                  definitions=list(INFLIGHT_DEFINITIONS.items()))


def section_feature_cost(data: ReportData) -> str:
    """The feature-cost lane (shown when the study ran system@feature entries)."""
    cost = data.feature_cost
    if cost.empty:
        return ""
    return render("feature_cost.html.j2", summary=tables.feature_cost_table(cost, data.study.systems),
                  details=tables.feature_cost_details(cost),
                  body=", ".join(sorted({f"{b / 1024:g} KiB" if b else "the small default chat"
                                         for b in cost["request_bytes"]})))


def section_self_overhead(data: ReportData) -> str:
    """Self-reported vs client-observed overhead."""
    rows = tables.self_overhead_rows(data)
    headers = {}
    for run in data.study.runs:   # each system's own header, as its gateway.toml declares it
        header = run.request.self_overhead_header if run.request else ""
        if header and run.system in {r["system"] for r in rows}:
            headers.setdefault(run.system, header)
    return render("self_overhead.html.j2", summary=tables.self_overhead(rows),
                  headers=list(headers.items()), plot=plots.plot_self_overhead(data, rows))


def section_gateway_time(data: ReportData) -> str:
    """Time inside the gateway: wire-timed request and response paths, join rates, net overhead."""
    rows = tables.gateway_time_rows(data)
    headers = sorted({(run.system, run.request.self_overhead_header) for run in data.study.runs
                      if run.request and run.request.self_overhead_header})
    return render("gateway_time.html.j2", summary=tables.gateway_time(rows), headers=headers)


def section_counts(data: ReportData) -> str:
    """Work per request, counted: instructions and system calls under Valgrind and strace."""
    if not len(data.counts):
        return ""
    return render("counts.html.j2", counts=tables.counts(data), **data.counts_about)


# The methodology's prose: one file, which the docs' methodology page is built from too
# (scripts/gen_docs.py). Paragraphs of plain text, with `code` and **bold** only.
METHODOLOGY_TEXT = HERE / "methodology.md"


def methodology_paragraphs() -> list[Markup]:
    """METHODOLOGY_TEXT's paragraphs as HTML."""
    blocks = METHODOLOGY_TEXT.read_text(encoding="utf-8").split("\n\n")
    paragraphs = [str(escape(" ".join(b.split()))) for b in blocks if b.strip()]
    return [Markup(re.sub(r"`(.+?)`", r"<code>\1</code>",
                          re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", p))) for p in paragraphs]


def section_methodology(data: ReportData) -> str:
    """How the study was run, generated from its manifests."""
    m = data.study.manifest
    cfg = m.config.to_dict()
    machine = m.machine
    order: dict[Any, list] = {}
    for p in m.plan:
        order.setdefault(p.round, []).append(p)
    rounds = [(k, " → ".join(x.run_id for x in sorted(v, key=lambda x: x.position)))
              for k, v in sorted(order.items())]
    keys = []
    for system in data.study.systems:
        ks = {r.comparison_key for r in data.study.runs if r.system == system}
        ks.discard("")
        if ks:
            keys.append({"system": system, "n": len(ks), "key": ", ".join(sorted(k[:12] for k in ks))})
    versions = [[name, meta.kind, meta.role, meta.version,
                 "yes" if meta.runnable else "no: " + meta.not_runnable_reason, meta.description]
                for name in data.study.systems if (meta := m.systems.get(name))]
    run_versions = sorted({(r.mock_version, r.locust_version) for r in data.study.runs
                           if r.mock_version or r.locust_version}, key=str)
    rs = data.rs
    windows = rs["window_s"].dropna() if len(rs) and "window_s" in rs else pd.Series(dtype=float)
    kernel = machine.get("kernel", "?") + (f" ({machine['os']})" if machine.get("os") else "")
    load_avg = " / ".join(F.num(machine.get(f"load_avg_{w}"), 2) for w in ("1m", "5m", "15m"))
    return render(
        "methodology.html.j2", prose=methodology_paragraphs(), study_id=m.study_id, cfg=cfg,
        commit=m.git_commit or "?", started=m.started_t_unix_s,
        ended=m.ended_t_unix_s,
        machine=rows_of([("host", machine.get("hostname", "?")), ("kernel", kernel),
                         ("CPU", f"{machine.get('cpu_model', '?')}, {machine.get('cpu_count', '?')} cores"),
                         ("memory", F.gib(machine.get("memory_bytes"))),
                         ("Python", machine.get("python", "?")),
                         ("load average at start", f"{load_avg} (1 / 5 / 15 min)")]),
        versions=table(["system", "kind", "role", "version (read from the software)", "runnable",
                        "description"], versions),
        pkg=sorted(m.versions.items()), run_versions=run_versions,
        load=rows_of(config_rows(cfg)
                     + [("runs per system", cfg.get("runs_per_gateway", "?")),
                        ("seed", f"{cfg.get('seed', '?')} (orders the systems within each round)")]),
        windows=[f"{w:g}" for w in sorted(set(round(x, 1) for x in windows))],
        rounds=table(["round", "runs in order"], rounds, numeric=["round"]), keys=keys,
        definitions=list(DEFINITIONS.items()),
        config=rows_of([(k, cfg[k]) for k in sorted(cfg)]))


def _snippet(data: ReportData) -> str:
    try:
        shown = str(data.study.path.resolve().relative_to(REPO_DIR))
    except ValueError:
        shown = str(data.study.path)
    return (HERE / "templates" / "snippet.py.txt").read_text(encoding="utf-8").replace(
        "STUDY_DIR", shown).rstrip("\n")


def section_artifacts(data: ReportData) -> str:
    """Links to every raw artifact, and the pandas snippet that reads them."""
    base = data.study.path
    study_files = [p for p in ("manifest.json", "head_to_head.ipynb") if (base / p).is_file()]
    runs = []
    for run in data.study.runs:
        d = data.study.run_dirs.get(run.run_id)
        if d is None or not d.is_dir():
            runs.append({"run_id": run.run_id, "dir": None, "files": []})
            continue
        files = [{"href": f.relative_to(base).as_posix(), "name": f.relative_to(d).as_posix(),
                  "size": F.size(f.stat().st_size)} for f in sorted(d.rglob("*")) if f.is_file()]
        runs.append({"run_id": run.run_id, "status": run.status,
                     "dir": d.relative_to(base).as_posix() if d.is_relative_to(base) else str(d),
                     "files": files})
    return render("artifacts.html.j2", study_files=study_files, runs=runs, snippet=_snippet(data))


# The study report's sections, in page order: name -> the function that renders it (its template
# is templates/<name>.html.j2). A new section is a function here, a line here and a template.
SECTIONS: dict[str, Callable[[ReportData], str]] = {
    "style": section_style,
    "header": section_header,
    "banner": section_banner,
    "summary": section_summary,
    "headline": section_headline,
    "sizing": section_sizing,
    "plots": section_plots,
    "streaming": section_streaming,
    "faults": section_faults,
    "open_loop": section_open_loop,
    "inflight": section_inflight,
    "feature_cost": section_feature_cost,
    "self_overhead": section_self_overhead,
    "gateway_time": section_gateway_time,
    "counts": section_counts,
    "verdicts": section_verdicts,
    "stability": section_stability,
    "runs": section_runs,
    "methodology": section_methodology,
    "artifacts": section_artifacts,
}


def render_section(data: ReportData, name: str) -> str:
    """One section's HTML (a fragment; the 'style' section carries the CSS the others use)."""
    if name not in SECTIONS:
        raise KeyError(f"unknown section {name!r}; sections: {list(SECTIONS)}")
    return SECTIONS[name](data)


def render_sections(data: ReportData) -> dict[str, str]:
    """Every section's HTML, in page order."""
    return {name: render_section(data, name) for name in SECTIONS}


def render_page(data: ReportData, sections: dict[str, str] | None = None) -> str:
    """The whole self-contained HTML page of a study: its ``sections`` as render_sections made
    them (rendered here when not given)."""
    sections = render_sections(data) if sections is None else sections
    return render("page.html.j2", title=data.study.manifest.study_id or data.study.path.name,
                  sections=[Markup(html) for html in sections.values()])
