"""Build the self-contained HTML report of a study directory.

    python -m harness report STUDY_DIR [--via-notebook] [--reference nginx] [--bin-users 50]

writes STUDY_DIR/report.html: every number computed by harness.stats from the raw rows and
samples, every plot embedded as a base64 PNG, every raw artifact linked by a relative path.
The same sections are what notebooks/report.ipynb displays (``--via-notebook`` executes it with
papermill and exports it with nbconvert, code cells left out).
"""
from __future__ import annotations

import base64
import datetime as dt
import io
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
import pandas as pd

from harness import stats as A

REPO_DIR = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO_DIR / "notebooks" / "report.ipynb"
REPORT_NAME = "report.html"
MIB = 1024.0 * 1024.0

# The report, in order. The notebook displays these same sections one by one.
SECTIONS = ("style", "header", "banner", "headline", "plots", "streaming", "open_loop", "feature_cost",
            "self_overhead",
            "verdicts", "stability", "runs", "methodology", "artifacts")


# --- the data every section reads ----------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class ReportData:
    study: A.Study
    rs: pd.DataFrame                 # run_summary
    summary: pd.DataFrame            # system_summary (long)
    comparison: pd.DataFrame | None  # compare against the reference (None: no reference)
    labels: pd.DataFrame             # system_labels
    ramp: pd.DataFrame               # ramp_curve
    table: pd.DataFrame              # head_to_head_table
    reference: str | None
    bin_users: int
    colors: dict[str, str]


def collect(study_dir: str | Path, reference: str | None = None,
            bin_users: int = A.DEFAULT_BIN_USERS, verify: bool = True) -> ReportData:
    """Load the study and compute everything the report shows."""
    study = A.load_study(study_dir, verify=verify)
    rs = A.run_summary(study, bin_users=bin_users)
    ref = reference or A.default_reference(study)
    has_runs = len(rs) > 0 and "system" in rs.columns
    summary = A.system_summary(rs) if has_runs else pd.DataFrame(
        columns=["system", "metric", "n", "mean", "sd", "min", "max", "cov", "unstable",
                 "ci95_low", "ci95_high", "ci95_half", "n_not_completed"])
    comparison = (A.compare(rs, reference=ref)
                  if has_runs and ref is not None and ref in set(rs["system"]) else None)
    labels = A.system_labels(rs) if has_runs else pd.DataFrame(
        columns=["system", "label", "runs", "completed", "reasons"])
    ramp = A.ramp_curve(study, bin_users=bin_users)
    table = A.head_to_head_table(study, reference=ref, rs=rs, bin_users=bin_users) if has_runs \
        else A.head_to_head_table(study, reference=ref, rs=pd.DataFrame(
            columns=["system", "status", "label", "label_reasons"]))
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#17becf"]
    colors = {s: palette[i % len(palette)] for i, s in enumerate(study.systems)}
    return ReportData(study=study, rs=rs, summary=summary, comparison=comparison, labels=labels,
                      ramp=ramp, table=table, reference=ref, bin_users=bin_users, colors=colors)


# --- formatting ----------------------------------------------------------------------------------

def _isnan(x: Any) -> bool:
    try:
        return x is None or (isinstance(x, float) and math.isnan(x)) or pd.isna(x)
    except (TypeError, ValueError):
        return False


def num(x: Any, digits: int = 1, scale: float = 1.0, suffix: str = "") -> str:
    if _isnan(x):
        return "—"
    return f"{float(x) / scale:.{digits}f}{suffix}"


def when(t: Any) -> str:
    if _isnan(t):
        return "—"
    return dt.datetime.fromtimestamp(float(t), dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def gib(x: Any) -> str:
    return "—" if _isnan(x) else f"{float(x) / 2**30:.1f} GiB"


_ENV = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined,
                          trim_blocks=True, lstrip_blocks=True)
_ENV.filters.update(num=num, when=when, gib=gib)


def _render(template: str, **ctx: Any) -> str:
    return _ENV.from_string(template).render(**ctx)


# --- plots ---------------------------------------------------------------------------------------

def _png(fig) -> str:
    import matplotlib.pyplot as plt
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _plt():
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    plt.rcParams.update({"font.size": 10, "axes.grid": True, "grid.alpha": 0.3,
                         "axes.spines.top": False, "axes.spines.right": False})
    return plt


def _run_style(status: str, run_index: int) -> dict:
    if status != "completed":
        return {"linestyle": ":", "alpha": 0.6, "marker": "x"}
    return {"linestyle": ("-", "--", "-.", (0, (5, 1)), (0, (3, 1, 1, 1)))[(int(run_index) - 1) % 5],
            "alpha": 0.85, "marker": "o", "markersize": 3}


def _ordered_ramp(data: ReportData) -> pd.DataFrame:
    order = {sname: i for i, sname in enumerate(data.study.systems)}
    r = data.ramp
    return r.assign(_o=r["system"].map(order)).sort_values(["_o", "run_index", "users_bin"],
                                                            kind="mergesort")


def plot_throughput(data: ReportData) -> str | None:
    r = _ordered_ramp(data)
    if not len(r):
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(11, 4.2))
    for (system, run_id), g in r.groupby(["system", "run_id"], sort=False):
        g = g.sort_values("users_bin")
        st = g["status"].iloc[0]
        ax.plot(g["users_mid"], g["throughput_rps"], color=data.colors.get(system, "k"),
                label=f"{run_id}" + ("" if st == "completed" else f" ({st})"),
                **_run_style(st, g["run_index"].iloc[0]))
    ax.set_xlabel(f"users (bins of {data.bin_users}, plotted at the bin's middle)")
    ax.set_ylabel("successful requests / s")
    ax.set_title("Throughput vs users along the ramp and the hold (each run a line)")
    ax.legend(ncol=4, fontsize=8, loc="upper left")
    ax.set_ylim(bottom=0)
    return _png(fig)


def plot_overhead(data: ReportData) -> str | None:
    r = _ordered_ramp(data)
    if not len(r):
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), sharey=False)
    for ax, q in zip(axes, A.PERCENTILES):
        for (system, run_id), g in r.groupby(["system", "run_id"], sort=False):
            g = g.sort_values("users_bin")
            st = g["status"].iloc[0]
            ax.plot(g["users_mid"], g[f"overhead_vs_mock_p{q}_ms"], color=data.colors.get(system, "k"),
                    label=run_id + ("" if st == "completed" else f" ({st})"),
                    **_run_style(st, g["run_index"].iloc[0]))
        ax.set_title(f"p{q} overhead vs mock")
        ax.set_xlabel("users")
    axes[0].set_ylabel("latency − mock's set latency (ms)")
    handles, labels = axes[0].get_legend_handles_labels()
    rows_needed = (len(labels) + 5) // 6
    fig.suptitle("Overhead percentiles vs users (each run a line)")
    fig.tight_layout(rect=(0, 0.035 * rows_needed + 0.02, 1, 1))
    fig.legend(handles, labels, ncol=min(len(labels), 6), fontsize=8, loc="lower center",
               bbox_to_anchor=(0.5, 0.0), frameon=False)
    return _png(fig)


def plot_rss(data: ReportData) -> str | None:
    tl = A.rss_timeline(data.study)
    systems = [s for s in data.study.systems if s in set(tl["system"])]
    if not systems:
        return None
    plt = _plt()
    fig, axes = plt.subplots(len(systems), 1, figsize=(11, 2.3 * len(systems) + 0.6), sharex=True,
                             squeeze=False)
    for ax, system in zip(axes[:, 0], systems):
        g = tl[tl["system"] == system]
        run_ids = [r.get("run_id") for r in sorted(
            (r for r in data.study.runs if r.get("system") == system),
            key=lambda r: r.get("run_index") or 0)]
        for run_id in [x for x in run_ids if x in set(g["run_id"])]:
            gr = g[g["run_id"] == run_id]
            run = data.study.run(run_id)
            st = run.get("status")
            ax.plot(gr["t_rel_s"], gr["rss_bytes"] / MIB, color=data.colors.get(system, "k"),
                    label=run_id + ("" if st == "completed" else f" ({st})"),
                    **{k: v for k, v in _run_style(st, run.get("run_index") or 1).items()
                       if k != "marker"})
        # the measured window of the first completed run of this system, shaded
        for run in data.study.runs:
            if run.get("system") == system and run.get("status") == "completed":
                ph = run.get("phases") or {}
                t0 = ph.get("warmup_start_t_unix_s", ph.get("ramp_start_t_unix_s"))
                if t0 is not None and "hold_start_t_unix_s" in ph and "hold_end_t_unix_s" in ph:
                    ax.axvspan(ph["hold_start_t_unix_s"] - t0, ph["hold_end_t_unix_s"] - t0,
                               color="0.85", alpha=0.5, label="measured window")
                    if "load_end_t_unix_s" in ph:
                        ax.axvline(ph["load_end_t_unix_s"] - t0, color="0.4", lw=0.8, ls="--",
                                   label="load stops")
                break
        ax.set_ylabel("RSS (MiB)")
        ax.set_title(f"{system}", loc="left", fontsize=10)
        ax.legend(fontsize=7, ncol=5, loc="lower right")
        ax.set_ylim(bottom=0)
    axes[-1, 0].set_xlabel("seconds since the load started (negative: idle before the load)")
    fig.suptitle("Resident memory of each system's process tree over time (each run a line)")
    fig.tight_layout()
    return _png(fig)


HEADLINE_PLOT = [("throughput_rps", "throughput (req/s)", 1.0),
                 ("overhead_vs_mock_p50_ms", "median overhead (ms)", 1.0),
                 ("cpu_ms_per_request", "CPU-ms per request", 1.0),
                 ("rss_peak_bytes", "peak RSS (MiB)", MIB)]


def plot_runs(data: ReportData) -> str | None:
    rs = data.rs
    if not len(rs):
        return None
    plt = _plt()
    systems = [s for s in data.study.systems if s in set(rs["system"])]
    fig, axes = plt.subplots(1, len(HEADLINE_PLOT), figsize=(13, 3.6))
    for ax, (metric, title, scale) in zip(axes, HEADLINE_PLOT):
        top = 0.0
        for i, system in enumerate(systems):
            sub = rs[rs["system"] == system]
            done = sub[sub["status"] == "completed"]
            vals = done[metric].astype("float64") / scale
            jitter = np.linspace(-0.12, 0.12, max(len(vals), 1))[:len(vals)]
            ax.scatter(i + jitter, vals, color=data.colors.get(system, "k"), s=18, zorder=3)
            d = A.describe(vals)
            if d["n"] >= 1 and not math.isnan(d["mean"]):
                err = 0 if math.isnan(d["ci95_half"]) else d["ci95_half"]
                ax.errorbar(i + 0.3, d["mean"], yerr=err, fmt="s", color="k", ms=4, capsize=3)
                top = max(top, d["max"], d["mean"] + err)
        ax.set_xticks(range(len(systems)), systems, rotation=30, ha="right")
        ax.set_xlim(-0.5, len(systems) - 0.3)
        ax.set_title(title, fontsize=10)
        ax.set_ylim(0, top * 1.12 if top > 0 else 1.0)
    fig.suptitle("Each completed run (dots) and the mean with its t-based 95% CI (black)")
    fig.tight_layout()
    return _png(fig)


def plot_self_overhead(data: ReportData, rows: list[dict]) -> str | None:
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.4))
    x = np.arange(len(rows))
    w = 0.2
    series = [("client_p50", "client-observed p50", "#1f4e79"), ("self_p50", "self-reported p50", "#8fbce6"),
              ("client_p95", "client-observed p95", "#a0522d"), ("self_p95", "self-reported p95", "#f2b98a")]
    for k, (key, label, color) in enumerate(series):
        ax.bar(x + (k - 1.5) * w, [r[key + "_mean"] for r in rows], w, label=label, color=color)
    ax.set_xticks(x, [r["system"] for r in rows])
    ax.set_ylabel("ms")
    ax.set_title("Self-reported vs client-observed overhead (mean over runs)")
    ax.legend(fontsize=8)
    return _png(fig)


# --- sections ------------------------------------------------------------------------------------

STYLE = """
<style>
/* the doubled class outranks the notebook theme's table rules when exported via nbconvert */
.sluice-report { font-family: -apple-system, "Segoe UI", "DejaVu Sans", Helvetica, Arial, sans-serif;
  color: #1b1f24; max-width: 1360px; margin: 0 auto; padding: 0 20px; line-height: 1.45; }
.sluice-report#artifacts { padding-bottom: 40px; }
.sluice-report h1 { font-size: 1.7em; margin: 0.4em 0 0.1em; }
.sluice-report h2 { font-size: 1.3em; font-weight: 600; margin-top: 1.8em; border-bottom: 1px solid #d0d7de;
  padding-bottom: 4px; }
.sluice-report h3 { font-size: 1.05em; margin-top: 1.3em; }
.sluice-report .sub { color: #57606a; margin: 0 0 1em; }
.sluice-report.sluice-report table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
.sluice-report.sluice-report table th, .sluice-report.sluice-report table td { border: 1px solid #d0d7de; padding: 4px 8px;
  text-align: left; vertical-align: top; }
.sluice-report.sluice-report table th { background: #f6f8fa; font-weight: 600; }
.sluice-report.sluice-report table tbody tr { background: #fff; }
.sluice-report.sluice-report table td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.sluice-report #headline-table { font-size: 0.88em; }
.sluice-report.sluice-report table#headline-table th, .sluice-report.sluice-report table#headline-table td { padding: 4px 6px; }
.sluice-report #headline-table td.verdict { min-width: 11em; }
.sluice-report .wide { overflow-x: auto; }
.sluice-report .wide table { font-size: 0.8em; }
.sluice-report.sluice-report table tr.failed td { background: #fff0f0; color: #82071e; }
.sluice-report .unstable { color: #9a6700; font-weight: 600; }
.sluice-report .banner { border-radius: 6px; padding: 12px 16px; margin: 1em 0; border: 1px solid; }
.sluice-report .banner.behaviour { background: #fff8c5; border-color: #d4a72c; }
.sluice-report .banner.capacity { background: #dafbe1; border-color: #4ac26b; }
.sluice-report .banner.failed { background: #ffebe9; border-color: #ff8182; }
.sluice-report .banner ul { margin: 0.3em 0 0.3em 1.2em; padding: 0; }
.sluice-report .banner li { margin: 0.15em 0; }
.sluice-report .tag { display: inline-block; padding: 0 7px; border-radius: 10px; font-size: 0.85em;
  font-weight: 600; }
.sluice-report .tag.capacity { background: #4ac26b; color: #fff; }
.sluice-report .tag.behaviour { background: #d4a72c; color: #fff; }
.sluice-report .tag.failed { background: #cf222e; color: #fff; }
.sluice-report .tag.not.run { background: #6e7781; color: #fff; }
.sluice-report .note { background: #ddf4ff; border-left: 4px solid #54aeff; padding: 8px 12px;
  margin: 0.8em 0; }
.sluice-report .verdict-better { color: #116329; font-weight: 600; }
.sluice-report .verdict-worse { color: #a40e26; font-weight: 600; }
.sluice-report figure { margin: 1.2em 0; }
.sluice-report figure img { max-width: 100%; border: 1px solid #eaeef2; }
.sluice-report figcaption { color: #57606a; font-size: 0.9em; }
.sluice-report pre { background: #f6f8fa; padding: 10px; overflow-x: auto; font-size: 0.85em; }
.sluice-report code { font-size: 0.9em; }
.sluice-report details { margin: 0.6em 0; }
</style>
"""


def section_style(data: ReportData) -> str:
    return STYLE


def section_header(data: ReportData) -> str:
    m = data.study.manifest
    cfg = m.get("config") or {}
    return _render("""
<div class="sluice-report" id="header">
<h1>Sluice head-to-head: {{ study_id }}</h1>
<p class="sub">Study status <strong>{{ status }}</strong>{% if reason %} ({{ reason }}){% endif %} ·
profile <code>{{ profile }}</code> · {{ started|when }} → {{ ended|when }} ·
systems: {{ systems|join(", ") }} · reference for verdicts: <strong>{{ reference or "none" }}</strong></p>
<p>Every number below is computed from the raw per-request rows (<code>requests.parquet</code>) and
1-second process samples (<code>samples.parquet</code>) of each run by <code>harness/stats/</code>,
never from the load generator's rounded summaries; the <a href="#artifacts">artifacts</a> section
links every file and gives the pandas code that re-derives them.</p>
</div>""", study_id=m.get("study_id") or data.study.path.name, status=m.get("status", "?"),
                   reason=m.get("reason", ""), profile=cfg.get("profile", "?"),
                   started=m.get("started_t_unix_s"), ended=m.get("ended_t_unix_s"),
                   systems=data.study.systems, reference=data.reference)


def _banner_context(data: ReportData) -> dict:
    m = data.study.manifest
    cores = A.cpu_count(data.study)
    systems = []
    order = {sname: i for i, sname in enumerate(data.study.systems)}
    labels = data.labels.assign(_o=data.labels["system"].map(order)).sort_values("_o", kind="mergesort")
    for _, row in labels.iterrows():
        systems.append({"system": row["system"], "label": row["label"],
                        "runs": int(row["runs"]), "completed": int(row["completed"]),
                        "reasons": list(row["reasons"])})
    ran = {s["system"] for s in systems}
    for name, meta in (m.get("systems") or {}).items():
        if name not in ran:
            systems.append({"system": name, "label": "not run", "runs": 0, "completed": 0,
                            "reasons": [f"not run: {meta.get('not_runnable_reason') or 'no runs'}"]})
    measured = [s for s in systems if s["completed"] > 0]
    behaviour = [s for s in measured if s["label"] == "behaviour"]
    if not measured:
        kind = "failed"
    elif behaviour:
        kind = "behaviour"
    else:
        kind = "capacity"
    unstable = []
    if len(data.summary):
        u = data.summary[(data.summary["unstable"]) & (data.summary["metric"] != "errors_total")]
        for system, g in u.groupby("system", sort=False):
            unstable.append(f"{system}: " + ", ".join(
                f"{A.METRICS[mm]['label']} (CoV {c:.0%})" for mm, c in zip(g["metric"], g["cov"])))
    failed_runs = [r for r in data.study.runs if r.get("status") != "completed"]
    return {"kind": kind, "cores": None if math.isnan(cores) else int(cores),
            "n_behaviour": len(behaviour), "n_measured": len(measured), "systems": systems,
            "study_status": m.get("status"), "study_reason": m.get("reason", ""),
            "unstable": unstable, "failed_runs": failed_runs}


def section_banner(data: ReportData) -> str:
    return _render("""
<div class="sluice-report">
<div class="banner {{ kind }}" id="banner" role="note">
{% if study_status != "completed" %}
<p><strong>This study is {{ study_status }}</strong>{% if study_reason %}: {{ study_reason }}{% endif %}.
The figures cover the runs that completed.</p>
{% endif %}
{% if kind == "failed" %}
<p><strong>No system completed a run</strong>: there is nothing to compare. The reasons are below.</p>
{% elif kind == "behaviour" %}
<p><strong>Behaviour, not capacity.</strong> For {{ n_behaviour }} of {{ n_measured }} systems,
something other than the system itself limited the result; read those figures as how the system
behaves under this load on this machine, not as the most it can do.</p>
{% else %}
<p><strong>Capacity.</strong> For every system, nothing but the system limited the result (the
criteria are in the <a href="#methodology">methodology</a>).</p>
{% endif %}
{% if cores is not none and cores <= 4 %}
<p>This machine has <strong>{{ cores }} CPU cores</strong>, shared by the load generator, the mock
and the system under test: on a machine this small most results are behaviour, as expected, and
the CPU-milliseconds per request are the figure that stays comparable.</p>
{% endif %}
<ul>
{% for s in systems %}
<li><strong>{{ s.system }}</strong> <span class="tag {{ s.label }}">{{ s.label }}</span>
{{ s.completed }} of {{ s.runs }} runs completed.
{% if s.reasons %}<ul>{% for r in s.reasons %}<li>{{ r }}</li>{% endfor %}</ul>{% endif %}
</li>
{% endfor %}
</ul>
{% if unstable %}
<p class="unstable">Unstable run sets (CoV ≥ 10%): {{ unstable|join("; ") }}.</p>
{% endif %}
{% if failed_runs %}
<p>Runs that did not complete are listed as such in the <a href="#runs">runs</a> table and are
never averaged: {% for r in failed_runs %}<strong>{{ r.run_id }}</strong> ({{ r.status }}){% if not loop.last %}, {% endif %}{% endfor %}.</p>
{% endif %}
</div>
</div>""", **_banner_context(data))


def _t_factor(n: int) -> float:
    from scipy import stats
    return float(stats.t.ppf(0.975, n - 1)) if n >= 2 else math.nan


def section_headline(data: ReportData) -> str:
    t = data.table
    cols = list(t.columns)
    ns = [int(x) for x in data.summary[data.summary["metric"] == "throughput_rps"]["n"]
          if int(x) >= 1] if len(data.summary) else []
    planned = (data.study.manifest.get("config") or {}).get("runs_per_gateway")
    n_typ = max(set(ns), key=ns.count) if ns else int(planned or 3)
    k = _t_factor(n_typ)
    rows = []
    metric_cols = [c for c in cols if c not in ("system", "kind", "version", "runs", "result")
                   and not c.startswith("vs ")]
    verdict_col = next((c for c in cols if c.startswith("vs ")), None)
    for _, r in t.iterrows():
        def text(c):
            return "" if c is None or _isnan(r[c]) else str(r[c])
        verdicts = []
        for line in (text(verdict_col).split("; ") if verdict_col else []):
            cls = ("worse" if ("slower" in line or "more " in line) else
                   "better" if ("faster" in line or "less " in line) else "none")
            verdicts.append({"text": line, "cls": cls})
        rows.append({"system": text("system"), "kind": text("kind"), "version": text("version"),
                     "runs": text("runs").replace(" completed", ""),
                     "metrics": [{"text": text(c), "unstable": "unstable" in text(c)}
                                 for c in metric_cols],
                     "result": text("result"), "verdicts": verdicts})
    mock_ms = sorted({x for x in data.rs.get("mock_latency_ms", pd.Series(dtype=float)).dropna()})
    return _render("""
<div class="sluice-report" id="headline">
<h2>Head to head</h2>
<div class="wide"><table id="headline-table">
<thead><tr><th>system<br><small>kind · version</small></th><th>runs completed</th>
{% for c in metric_cols %}<th>{{ c }}</th>{% endfor %}<th>result</th><th>{{ verdict_col or "" }}</th></tr></thead>
<tbody>
{% for r in rows %}<tr><td><strong>{{ r.system }}</strong><br><small>{{ r.kind }} · {{ r.version }}</small></td>
<td class="n">{{ r.runs }}</td>
{% for m in r.metrics %}<td class="n{% if m.unstable %} unstable{% endif %}">{{ m.text }}</td>{% endfor %}
<td>{% if r.result in ("capacity", "behaviour", "failed") %}<span class="tag {{ r.result }}">{{ r.result }}</span>{% else %}{{ r.result }}{% endif %}</td>
<td class="verdict">{% for v in r.verdicts %}<span class="verdict-{{ v.cls }}">{{ v.text }}</span>{% if not loop.last %}<br>{% endif %}{% endfor %}</td></tr>
{% endfor %}
</tbody></table></div>
<p>Each figure is the mean ± sample standard deviation over the <em>n</em> completed runs of the
system (failed runs are never averaged). Overhead is the client-observed latency minus the mock's
set latency ({{ mock_ms|join(", ") }} ms), over the measured window only; CPU-ms per request is the
system's process-tree CPU time in the window per request; errors count every failed request of the
run. The last column is the verdict against <strong>{{ reference or "—" }}</strong> for
throughput and median overhead; every metric is in <a href="#verdicts">verdicts</a>.</p>
<div class="note" id="ci-note"><strong>Few runs, wide intervals.</strong>
{% if n >= 2 %}With {{ n }} runs per system the t-based 95% confidence interval of a mean is
mean ± {{ "%.2f"|format(k) }} × sd/√{{ n }} ≈ mean ± {{ "%.1f"|format(k / n ** 0.5) }} sd: wide.
{% else %}With a single completed run per system there is no interval at all (3 runs give
mean ± 4.30 × sd/√3 ≈ mean ± 2.5 sd, already wide) and no verdict can be reached.
{% endif %}A verdict
says "faster" or "slower" only when Welch's t-test gives p &lt; 0.05 <em>and</em> the ratio to the
reference differs from 1 by at least 10%; otherwise it says "no clear difference", which with
{{ n }} runs often means "these runs cannot tell", not "equal". The intervals are in
<a href="#stability">stability</a>.</div>
</div>""", metric_cols=metric_cols, verdict_col=verdict_col, rows=rows,
                   reference=data.reference, n=n_typ, k=k,
                   mock_ms=[f"{x:g}" for x in mock_ms] or ["?"])


def section_verdicts(data: ReportData) -> str:
    c = data.comparison
    rows = []
    if c is not None:
        order = {sname: i for i, sname in enumerate(data.study.systems)}
        c = c.assign(_o=c["system"].map(order)).sort_values("_o", kind="mergesort")
        for _, r in c.iterrows():
            meta = A.METRICS.get(r["metric"], {"label": r["metric"], "unit": ""})
            digits = 3 if "cpu" in r["metric"] else (1 if "rss" in r["metric"] else 2)
            scale = MIB if "bytes" in r["metric"] else 1.0
            rows.append({
                "system": r["system"], "metric": meta["label"], "better": r["better_when"],
                "mean": A.fmt_mean_sd({"n": r["n"], "mean": r["mean"], "sd": r["sd"]}, digits, scale),
                "ref": A.fmt_mean_sd({"n": r["n_ref"], "mean": r["mean_ref"], "sd": r["sd_ref"]},
                                     digits, scale),
                "ratio": ("—" if _isnan(r["ratio"]) else f"{r['ratio']:.3f}" if _isnan(r["ratio_sd"])
                          else f"{r['ratio']:.3f} ± {r['ratio_sd']:.3f}"),
                "p": "—" if _isnan(r["p_value"]) or _isnan(r["ratio"]) else f"{r['p_value']:.3g}",
                "verdict": r["verdict"], "outcome": r["outcome"], "reason": r["reason"]})
    return _render("""
<div class="sluice-report" id="verdicts">
<h2>Verdicts against {{ reference or "—" }}</h2>
{% if not rows %}<p>No reference system ran, so there is nothing to compare against.</p>{% else %}
<p>Ratio = this system's mean / the reference's mean, with its sd propagated from both run sets
(first order). p is Welch's two-sided t-test over the runs. Units: ms, req/s, MiB.</p>
<div class="wide"><table>
<thead><tr><th>system</th><th>metric</th><th>better when</th><th>this system</th><th>{{ reference }}</th>
<th>ratio ± sd</th><th>Welch p</th><th>verdict</th><th>why</th></tr></thead><tbody>
{% for r in rows %}<tr><td>{{ r.system }}</td><td>{{ r.metric }}</td><td>{{ r.better }}</td>
<td class="n">{{ r.mean }}</td><td class="n">{{ r.ref }}</td><td class="n">{{ r.ratio }}</td>
<td class="n">{{ r.p }}</td><td class="verdict-{{ r.outcome }}">{{ r.verdict }}</td><td>{{ r.reason }}</td></tr>
{% endfor %}</tbody></table></div>{% endif %}
</div>""", rows=rows, reference=data.reference)


STABILITY_METRICS = ["throughput_rps", "overhead_vs_mock_p50_ms", "overhead_vs_mock_p95_ms",
                     "overhead_vs_direct_p50_ms", "overhead_vs_direct_p95_ms", "latency_p99_ms",
                     "cpu_ms_per_request", "rss_peak_bytes", "rss_steady_bytes"]


def section_stability(data: ReportData) -> str:
    rows = []
    s = data.summary
    for metric in STABILITY_METRICS:
        sub = s[s["metric"] == metric] if len(s) else s
        if len(sub):
            order = {sname: i for i, sname in enumerate(data.study.systems)}
            sub = sub.assign(_o=sub["system"].map(order)).sort_values("_o", kind="mergesort")
        meta = A.METRICS[metric]
        digits = 3 if "cpu" in metric else (1 if metric in ("throughput_rps",) or "rss" in metric else 2)
        scale = MIB if "bytes" in metric else 1.0
        unit = "MiB" if "bytes" in metric else meta["unit"]
        for _, r in sub.iterrows():
            if int(r["n"]) == 0:
                continue
            rows.append({"metric": f"{meta['label']} ({unit})", "system": r["system"], "n": int(r["n"]),
                         "mean": num(r["mean"], digits, scale), "sd": num(r["sd"], digits, scale),
                         "range": f"{num(r['min'], digits, scale)} – {num(r['max'], digits, scale)}",
                         "ci": f"{num(r['ci95_low'], digits, scale)} – {num(r['ci95_high'], digits, scale)}",
                         "cov": "—" if _isnan(r["cov"]) else f"{r['cov']:.1%}",
                         "unstable": bool(r["unstable"]), "failed": int(r["n_not_completed"])})
    return _render("""
<div class="sluice-report" id="stability">
<h2>Stability across runs</h2>
<p>Per system, over completed runs: mean, sample sd, min–max, the t-based 95% confidence interval
and the coefficient of variation (sd / |mean|); a run set with CoV ≥ 10% is flagged unstable.
Overhead vs direct subtracts the direct baseline's same percentile at the same user count.</p>
<div class="wide"><table>
<thead><tr><th>metric</th><th>system</th><th>n</th><th>mean</th><th>sd</th><th>min – max</th>
<th>95% CI</th><th>CoV</th><th>not completed</th></tr></thead><tbody>
{% for r in rows %}<tr><td>{{ r.metric }}</td><td>{{ r.system }}</td><td class="n">{{ r.n }}</td>
<td class="n">{{ r.mean }}</td><td class="n">{{ r.sd }}</td><td class="n">{{ r.range }}</td>
<td class="n">{{ r.ci }}</td><td class="n{% if r.unstable %} unstable{% endif %}">{{ r.cov }}{% if r.unstable %} ⚠ unstable{% endif %}</td>
<td class="n">{{ r.failed }}</td></tr>
{% endfor %}</tbody></table></div>
</div>""", rows=rows)


def _order_label(run: pd.Series, zero_based: bool) -> str:
    rnd, pos = run.get("round"), run.get("position")
    if _isnan(rnd) or _isnan(pos):
        return "—"
    return f"{int(rnd)}.{int(pos) + (1 if zero_based else 0)}"


def section_runs(data: ReportData) -> str:
    rows = []
    rs = data.rs
    zero_based = bool(len(rs)) and "position" in rs and (rs["position"] == 0).any()
    for _, r in rs.iterrows():
        done = r["status"] == "completed"
        def f(col, digits=2, scale=1.0):
            return num(r.get(col), digits, scale) if done else "—"
        errs = " / ".join(str(int(r[f"errors_{k}"])) for k in A.ERROR_KINDS)
        rows.append({
            "run_id": r["run_id"], "system": r["system"], "order": _order_label(r, zero_based),
            "status": r["status"], "reason": r.get("reason", ""), "label": r["label"], "done": done,
            "thr": f("throughput_rps", 1), "p50": f("latency_p50_ms"), "p99": f("latency_p99_ms"),
            "o50": f("overhead_vs_mock_p50_ms"), "o95": f("overhead_vs_mock_p95_ms"),
            "d50": f("overhead_vs_direct_p50_ms"), "cpu": f("cpu_ms_per_request", 3),
            "idle": num(r["rss_idle_bytes"], 1, MIB), "peak": num(r["rss_peak_bytes"], 1, MIB),
            "steady": num(r["rss_steady_bytes"], 1, MIB),
            "rec": num(r["rss_recovered_bytes"], 1, MIB), "errs": errs,
            "inflight": num(r["inflight_at_stop"], 0), "window": f("window_s", 1),
            "n": int(r["requests_in_window"]) if done else "—",
            "locust": num(r["locust_cpu_peak_percent"], 0, suffix="%"),
            "mockcpu": num(r["mock_cpu_peak_percent"], 0, suffix="%"),
            "other": num(r.get("other_cpu_mean_percent"), 0, suffix="%"),
            "mock99": num(r["mock_hold_p99_ms"], 2), "load": num(r["load_avg_before"], 2),
            "reasons": [x for x in str(r["label_reasons"]).split("; ") if x]})
    return _render("""
<div class="sluice-report" id="runs">
<h2>Every run</h2>
<p>In execution order (round.position). A run that did not complete is shown as failed with its
reason, its window figures are left out (—), and it is never averaged. Errors count the whole run:
http / timeout / connection / other.</p>
<div class="wide"><table id="runs-table">
<thead><tr><th>run</th><th>order</th><th>status</th><th>result</th><th>window (s)</th><th>requests in window</th>
<th>throughput (req/s)</th><th>latency p50 (ms)</th><th>latency p99 (ms)</th><th>overhead p50 vs mock (ms)</th>
<th>overhead p95 vs mock (ms)</th><th>overhead p50 vs direct (ms)</th><th>CPU-ms / request</th>
<th>errors h / t / c / o</th><th>in flight at stop</th></tr></thead>
<tbody>
{% for r in rows %}<tr class="{{ 'ok' if r.done else 'failed' }}">
<td>{{ r.run_id }}</td><td class="n">{{ r.order }}</td>
<td>{% if r.done %}{{ r.status }}{% else %}<strong>{{ r.status|upper }}</strong>: {{ r.reason }}{% endif %}</td>
<td><span class="tag {{ r.label }}">{{ r.label }}</span></td><td class="n">{{ r.window }}</td><td class="n">{{ r.n }}</td>
<td class="n">{{ r.thr }}</td><td class="n">{{ r.p50 }}</td><td class="n">{{ r.p99 }}</td><td class="n">{{ r.o50 }}</td>
<td class="n">{{ r.o95 }}</td><td class="n">{{ r.d50 }}</td><td class="n">{{ r.cpu }}</td>
<td class="n">{{ r.errs }}</td><td class="n">{{ r.inflight }}</td></tr>
{% endfor %}</tbody></table></div>
<h3>Memory and what else could have limited each run</h3>
<p>Memory is the system's process tree: idle before the load, peak over the run, steady (median) in
the window, and the last sample after the load stopped. The other columns are the capacity
criteria (see <a href="#methodology">methodology</a>).</p>
<div class="wide"><table id="runs-limits-table">
<thead><tr><th>run</th><th>RSS idle (MiB)</th><th>RSS peak (MiB)</th><th>RSS steady (MiB)</th>
<th>RSS recovered (MiB)</th><th>Locust CPU peak</th><th>mock CPU peak</th><th>mock hold p99 (ms)</th>
<th>load avg before</th><th>other processes' CPU (mean)</th><th>why not capacity</th></tr></thead>
<tbody>
{% for r in rows %}<tr class="{{ 'ok' if r.done else 'failed' }}"><td>{{ r.run_id }}</td>
<td class="n">{{ r.idle }}</td><td class="n">{{ r.peak }}</td><td class="n">{{ r.steady }}</td>
<td class="n">{{ r.rec }}</td><td class="n">{{ r.locust }}</td><td class="n">{{ r.mockcpu }}</td>
<td class="n">{{ r.mock99 }}</td><td class="n">{{ r.load }}</td><td class="n">{{ r.other }}</td>
<td>{% for x in r.reasons %}{{ x }}{% if not loop.last %}<br>{% endif %}{% endfor %}</td></tr>
{% endfor %}</tbody></table></div>
</div>""", rows=rows)


def section_plots(data: ReportData) -> str:
    figs = [
        ("plot-throughput", plot_throughput(data),
         "Throughput along the ramp: where a curve stops following the offered load, the system "
         "(or the machine) saturates. Bins of users; the last bin is the measured hold."),
        ("plot-overhead", plot_overhead(data),
         "Overhead (latency − the mock's set latency) at p50, p95 and p99 as users grow."),
        ("plot-rss", plot_rss(data),
         "Tree-summed RSS of each system over time, every run visible; the shaded band is the "
         "measured window, the dashed line where the load stopped."),
        ("plot-runs", plot_runs(data),
         "The headline figures run by run: the dots are the runs, the black square the mean "
         "with its t-based 95% CI."),
    ]
    return _render("""
<div class="sluice-report" id="plots">
<h2>Plots</h2>
{% for id, src, caption in figs %}{% if src %}
<figure id="{{ id }}"><img class="plot" alt="{{ caption }}" src="{{ src }}">
<figcaption>{{ caption }}</figcaption></figure>
{% endif %}{% endfor %}
</div>""", figs=figs)


def _self_rows(data: ReportData) -> list[dict]:
    rows = []
    rs = data.rs
    if not len(rs):
        return rows
    done = rs[(rs["status"] == "completed") & (rs["self_overhead_rows"] > 0)]
    for system in [s for s in data.study.systems if s in set(done["system"])]:
        g = done[done["system"] == system]
        rec = {"system": system, "n": int(len(g))}
        for key, col in (("self_p50", "self_overhead_p50_ms"), ("self_p95", "self_overhead_p95_ms"),
                         ("client_p50", "overhead_vs_mock_p50_ms"),
                         ("client_p95", "overhead_vs_mock_p95_ms")):
            d = A.describe(g[col].astype("float64"))
            rec[key + "_mean"], rec[key] = d["mean"], A.fmt_mean_sd(d, 3)
        for q in ("p50", "p95"):
            d = A.describe((g[f"overhead_vs_mock_{q}_ms"] - g[f"self_overhead_{q}_ms"]).astype("float64"))
            rec[f"gap_{q}"] = A.fmt_mean_sd(d, 3)
        d = A.describe((g["mock_hold_p50_ms"] - g["mock_latency_ms"]).astype("float64"))
        rec["mock_excess"] = A.fmt_mean_sd(d, 3)
        rows.append(rec)
    return rows


def section_streaming(data: ReportData) -> str:
    table = A.stream_summary(data.study)
    if table.empty:
        return ""
    return _render("""
<div class="sluice-report" id="streaming">
<h2>Streaming lane</h2>
<p>Every response was an SSE stream: the mock held {{ set_latency }} ms before the head, then sent
{{ chunks }} content frames {{ gap }} ms apart. The load generator timed each frame as it arrived
(Locust alone stops at the headers). Per run, over the measured window's successful streams;
overheads are against the direct baseline's mean. A system whose frames arrive much closer
together than the mock sent them (median gap under {{ share }} of the set gap) buffered the stream
and is marked.</p>
<table id="streaming-table">
<thead><tr><th>run</th><th>streams</th><th>failed</th><th>TTFB p50</th><th>TTFT p50</th><th>TTFT p99</th>
<th>TTFT overhead p50</th><th>gap p50</th><th>gap p99</th><th>gap overhead p99</th><th>frames (mean)</th>
<th>ended with [DONE]</th><th>buffered?</th></tr></thead>
<tbody>{% for r in rows %}<tr><td>{{ r.run_id }}{% if r.status != "completed" %} ({{ r.status }}){% endif %}</td>
<td class="n">{{ r.streams }}</td><td class="n">{{ r.failed_streams }}</td>
<td class="n">{{ r.ttfb_p50_ms|num(2) }}</td><td class="n">{{ r.ttft_p50_ms|num(2) }}</td>
<td class="n">{{ r.ttft_p99_ms|num(2) }}</td><td class="n">{{ r.ttft_overhead_p50_ms|num(2) }}</td>
<td class="n">{{ r.gap_p50_ms|num(2) }}</td><td class="n">{{ r.gap_p99_ms|num(2) }}</td>
<td class="n">{{ r.gap_overhead_p99_ms|num(2) }}</td><td class="n">{{ r.chunks_mean|num(1) }}</td>
<td class="n">{{ (100 * r.done_share)|num(0, suffix="%") }}</td>
<td>{{ "BUFFERED" if r.buffered else ("bunched" if r.bunched else "no") }}</td></tr>{% endfor %}</tbody></table>
<p>All times in ms. TTFB: time to the response head; TTFT: time to the first content frame.
<em>BUFFERED</em>: frames arrived in a burst (median gap under {{ share }} of the set gap) and the
first of them came only at the end of the stream (median at ≥ {{ late }} of its duration): the
stream was held back whole. <em>bunched</em>: frames arrived in bursts but the first came early:
the system fell behind and relayed in batches, which is a load effect, not buffering by design.</p>
</div>""", rows=table.to_dict("records"), set_latency=A.mock_latency_ms(data.study, data.study.runs[0]),
        chunks=table["set_chunks"].iloc[0], gap=table["set_gap_ms"].iloc[0],
        share=f"{A.BUFFERED_GAP_SHARE:.0%}", late=f"{A.BUFFERED_FIRST_TOKEN_SHARE:.0%}")


def plot_open_loop(data: ReportData, steps: pd.DataFrame) -> str | None:
    """p99 added latency and achieved/offered rate vs offered rate, each run a line."""
    if steps.empty:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
    order = {s: i for i, s in enumerate(data.study.systems)}
    steps = steps.assign(_o=steps["system"].map(order)).sort_values(["_o", "run_index", "offered_rps"])
    for (system, run_id), g in steps.groupby(["system", "run_id"], sort=False):
        st = g["status"].iloc[0]
        style = dict(color=data.colors.get(system, "k"), label=run_id + ("" if st == "completed" else f" ({st})"),
                     **_run_style(st, g["run_index"].iloc[0]))
        axes[0].plot(g["offered_rps"], g["p99_added_ms"], **style)
        axes[1].plot(g["offered_rps"], g["achieved_rps"] / g["offered_rps"], **style)
    for b in A.OPEN_LOOP_BOUNDS_MS:
        axes[0].axhline(b, color="#999", linewidth=0.8, linestyle="--")
    axes[0].set_yscale("symlog", linthresh=10)
    axes[0].set_ylabel("p99 added latency vs direct (ms, from the intended start)")
    axes[1].axhline(A.KEPT_UP_SHARE, color="#999", linewidth=0.8, linestyle="--")
    axes[1].set_ylabel("achieved / offered")
    rates = sorted(steps["offered_rps"].unique())
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xticks(rates, [f"{r:g}" for r in rates])
        ax.minorticks_off()
        ax.set_xlabel("offered rate (req/s)")
    axes[0].set_title("p99 added latency per step (dashed: the declared bounds)")
    axes[1].set_title(f"achieved / offered rate (dashed: {A.KEPT_UP_SHARE:.0%})")
    axes[0].legend(ncol=3, fontsize=8, loc="upper left")
    fig.tight_layout()
    return _png(fig)


def section_open_loop(data: ReportData) -> str:
    steps = A.open_loop_steps(data.study)
    if steps.empty:
        return ""
    table = A.open_loop_table(data.study, steps=steps)
    rows = steps.sort_values(["system", "run_index", "offered_rps"]).to_dict("records")
    return _render("""
<div class="sluice-report" id="open-loop">
<h2>Open-loop lane</h2>
<p>A fixed arrival schedule in steps of {{ step_s }} s at {{ rates }} req/s, whatever the system's
answers: each request keeps the time it was meant to start, and latency is counted from then, so a
slow system cannot hide by being sent less (coordinated omission). Per system, mean ± sd over
completed runs. (The headline table above pools every step of a run into one window; this
section is the one to read for an open-loop study.)</p>
<table id="open-loop-table">
<thead><tr>{% for c in columns %}<th>{{ c }}</th>{% endfor %}</tr></thead>
<tbody>{% for r in table %}<tr>{% for c in columns %}<td{% if c != "system" %} class="n"{% endif %}>{{ r[c] }}</td>{% endfor %}</tr>{% endfor %}</tbody></table>
{% if plot %}<figure id="plot-open-loop"><img class="plot" alt="open-loop steps" src="{{ plot }}">
<figcaption>Each run a line, one point per step. Left: p99 latency from the intended start minus the
direct baseline's at the same rate; right: the share of the offered rate served.</figcaption></figure>{% endif %}
<details><summary>Every step of every run</summary>
<div class="wide"><table id="open-loop-steps-table">
<thead><tr><th>run</th><th>offered (req/s)</th><th>achieved (req/s)</th><th>slots</th><th>unsent</th>
<th>failed</th><th>p50 from intended</th><th>p99 from intended</th><th>p50 from start</th>
<th>p99 from start</th><th>schedule lag p99</th><th>p99 added</th><th>kept up</th><th>why not</th></tr></thead>
<tbody>{% for r in rows %}<tr class="{{ 'ok' if r.kept_up else 'failed' }}"><td>{{ r.run_id }}{% if r.status != "completed" %} ({{ r.status }}){% endif %}</td>
<td class="n">{{ r.offered_rps|num(0) }}</td><td class="n">{{ r.achieved_rps|num(1) }}</td>
<td class="n">{{ r.scheduled }}</td><td class="n">{{ r.unsent }}</td><td class="n">{{ r.failed }}</td>
<td class="n">{{ r.from_intended_p50_ms|num(2) }}</td><td class="n">{{ r.from_intended_p99_ms|num(2) }}</td>
<td class="n">{{ r.from_start_p50_ms|num(2) }}</td><td class="n">{{ r.from_start_p99_ms|num(2) }}</td>
<td class="n">{{ r.schedule_lag_p99_ms|num(2) }}</td><td class="n">{{ r.p99_added_ms|num(2) }}</td>
<td>{{ "yes" if r.kept_up else "no" }}</td><td>{{ r.reasons }}</td></tr>{% endfor %}</tbody></table></div>
</details>
<dl>{% for k, v in definitions %}<dt><strong>{{ k }}</strong></dt><dd>{{ v }}</dd>{% endfor %}</dl>
</div>""", table=table.to_dict("records"), columns=list(table.columns), rows=rows,
        plot=plot_open_loop(data, steps), step_s=f"{_step_s(data):g}",
        rates=", ".join(f"{r:g}" for r in sorted(steps["offered_rps"].unique())),
        definitions=list(A.OPEN_LOOP_DEFINITIONS.items()))


def section_feature_cost(data: ReportData) -> str:
    cost = A.feature_cost(data.study, data.rs)
    if cost.empty:
        return ""
    table = A.feature_cost_table(data.study, cost)
    details = cost[cost["verdict"] != "reference"].to_dict("records")
    return _render("""
<div class="sluice-report" id="feature-cost">
<h2>Feature-cost lane</h2>
<p>Each <code>system@feature</code> is the system called as its <code>[features.NAME]</code> in
<code>gateway.toml</code> says, so that one feature is on; all of them ran interleaved in the same
rounds, with request bodies of {{ body }}. Each feature is compared with the same system's
passthrough: "added" is the difference of the two run sets' means, ± the two sds combined, and
the verdict is Welch's t-test with the 10% rule, as everywhere in this report. The last latency
column is against the direct baseline called in the same client dialect.</p>
<table id="feature-cost-table">
<thead><tr>{% for c in columns %}<th>{{ c }}</th>{% endfor %}</tr></thead>
<tbody>{% for r in table %}<tr>{% for c in columns %}<td{% if c != "system" and c != "dialect" %} class="n"{% endif %}>{{ r[c] }}</td>{% endfor %}</tr>{% endfor %}</tbody></table>
<details><summary>Every comparison, with its reason</summary>
<table id="feature-cost-details">
<thead><tr><th>system</th><th>metric</th><th>feature mean</th><th>passthrough mean</th><th>added</th><th>verdict</th><th>why</th></tr></thead>
<tbody>{% for r in details %}<tr><td>{{ r.system }}</td><td>{{ r.metric }}</td><td class="n">{{ r.mean|num(3) }}</td>
<td class="n">{{ r.passthrough_mean|num(3) }}</td><td class="n">{{ r.added_mean|num(3) }}</td>
<td>{{ r.verdict }}</td><td>{{ r.reason }}</td></tr>{% endfor %}</tbody></table>
</details>
</div>""", table=table.to_dict("records"), columns=list(table.columns), details=details,
        body=", ".join(sorted({f"{b / 1024:g} KiB" if b else "the small default chat"
                                for b in cost["request_bytes"]})))


def _step_s(data: ReportData) -> float:
    for run in data.study.runs:
        if A.is_open_loop(run):
            return float(run["spec"]["load"]["open_loop_step_s"])
    return math.nan


def section_self_overhead(data: ReportData) -> str:
    rows = _self_rows(data)
    return _render("""
<div class="sluice-report" id="self-overhead">
<h2>Self-reported vs client-observed overhead</h2>
{% if not rows %}
<p>No system in this study reported its own overhead (a header such as Sluice's
<code>X-Gateway-Overhead-Us</code> or LiteLLM's <code>x-litellm-overhead-duration-ms</code>).</p>
{% else %}
<p>Systems that report their own overhead in a response header (Sluice's
<code>X-Gateway-Overhead-Us</code>, LiteLLM's <code>x-litellm-overhead-duration-ms</code>), beside the
overhead the load generator observed (latency − the mock's set latency), over the same successful
requests of the measured window; mean ± sd over completed runs, in ms.</p>
<table id="self-overhead-table">
<thead><tr><th>system</th><th>runs</th><th>self-reported p50</th><th>client-observed p50</th><th>gap p50</th>
<th>self-reported p95</th><th>client-observed p95</th><th>gap p95</th><th>mock's hold above its setting (p50)</th></tr></thead>
<tbody>{% for r in rows %}<tr><td>{{ r.system }}</td><td class="n">{{ r.n }}</td>
<td class="n">{{ r.self_p50 }}</td><td class="n">{{ r.client_p50 }}</td><td class="n">{{ r.gap_p50 }}</td>
<td class="n">{{ r.self_p95 }}</td><td class="n">{{ r.client_p95 }}</td><td class="n">{{ r.gap_p95 }}</td>
<td class="n">{{ r.mock_excess }}</td></tr>{% endfor %}</tbody></table>
{% if plot %}<figure id="plot-self-overhead"><img class="plot" alt="self-reported vs client-observed overhead" src="{{ plot }}"></figure>{% endif %}
<p><strong>Why the two differ.</strong> A gateway measures its overhead inside its own process,
between reading the request and handing back the response, minus the time it waited on the
upstream. The client sees everything else too: the extra loopback hop and its connection
handling, the time the request waits in the kernel's socket queue and the gateway's event loop
before the gateway starts its clock (which grows under load when, as here, the gateway, the mock
and the load generator share the same cores), relaying the response body back, and the load
generator's own scheduling delay. It also includes the mock's hold beyond its setting (last
column), which is not the gateway's. The gap is the cost the gateway's own header cannot see;
the client-observed figure is the one a user pays.</p>
{% endif %}
</div>""", rows=rows, plot=plot_self_overhead(data, rows))


CONFIG_LOAD_KEYS = ["users", "warmup_users", "warmup_s", "ramp_s", "hold_s", "min_hold_requests",
                    "max_hold_s", "think_time_s", "locust_processes", "request_timeout_s", "idle_s",
                    "cooldown_s", "gateway_workers", "ready_timeout_s"]
CONFIG_MOCK_KEYS = ["mock_latency_ms", "mock_workers", "mock_response_tokens", "stream",
                    "stream_chunks", "chunk_delay_ms"]


def section_methodology(data: ReportData) -> str:
    m = data.study.manifest
    cfg = m.get("config") or {}
    machine = m.get("machine") or {}
    order = {}
    for p in m.get("plan") or []:
        order.setdefault(p.get("round"), []).append(p)
    rounds = [{"round": k, "runs": [x.get("run_id") for x in sorted(v, key=lambda x: x.get("position", 0))]}
              for k, v in sorted(order.items(), key=lambda kv: (kv[0] is None, kv[0]))]
    keys = []
    for system in data.study.systems:
        ks = {r.get("comparison_key") for r in data.study.runs if r.get("system") == system}
        ks.discard(None)
        if ks:
            keys.append({"system": system, "n": len(ks), "key": ", ".join(sorted(k[:12] for k in ks))})
    versions = []
    sys_meta = m.get("systems") or {}
    for name in [x for x in data.study.systems if x in sys_meta]:
        meta = sys_meta[name]
        versions.append({"name": name, "kind": meta.get("kind", ""), "version": meta.get("version", ""),
                         "runnable": meta.get("runnable", True),
                         "why": meta.get("not_runnable_reason", ""),
                         "description": meta.get("description", "")})
    run_versions = sorted({(r.get("mock_version"), r.get("locust_version")) for r in data.study.runs
                           if r.get("mock_version") or r.get("locust_version")}, key=str)
    rs = data.rs
    windows = rs["window_s"].dropna() if len(rs) and "window_s" in rs else pd.Series(dtype=float)
    return _render("""
<div class="sluice-report" id="methodology">
<h2>Methodology</h2>
<p>Generated from <a href="manifest.json">manifest.json</a> and the run manifests.
Study <code>{{ study_id }}</code>, profile <code>{{ cfg.get("profile", "?") }}</code>,
commit <code>{{ commit }}</code>, from {{ started|when }} to {{ ended|when }}.</p>
<h3>Machine</h3>
<table><tbody>
<tr><th>host</th><td>{{ machine.get("hostname", "?") }}</td></tr>
<tr><th>kernel</th><td>{{ machine.get("kernel", "?") }}{% if machine.get("os") %} ({{ machine.get("os") }}){% endif %}</td></tr>
<tr><th>CPU</th><td>{{ machine.get("cpu_model", "?") }}, {{ machine.get("cpu_count", "?") }} cores</td></tr>
<tr><th>memory</th><td>{{ machine.get("memory_bytes")|gib }}</td></tr>
<tr><th>Python</th><td>{{ machine.get("python", "?") }}</td></tr>
<tr><th>load average at start</th><td>{{ machine.get("load_avg_1m")|num(2) }} / {{ machine.get("load_avg_5m")|num(2) }} / {{ machine.get("load_avg_15m")|num(2) }} (1 / 5 / 15 min)</td></tr>
</tbody></table>
<h3>Systems and versions</h3>
<table><thead><tr><th>system</th><th>kind</th><th>version (read from the software)</th><th>runnable</th><th>description</th></tr></thead><tbody>
{% for v in versions %}<tr><td>{{ v.name }}</td><td>{{ v.kind }}</td><td>{{ v.version }}</td>
<td>{{ "yes" if v.runnable else "no: " ~ v.why }}</td><td>{{ v.description }}</td></tr>{% endfor %}
</tbody></table>
<p>Harness software: {% for k, v in pkg %}{{ k }} {{ v }}{% if not loop.last %}, {% endif %}{% endfor %}.
{% for mv, lv in run_versions %}Mock {{ mv }}, Locust {{ lv }}. {% endfor %}</p>
<h3>Load profile and mock</h3>
<table><tbody>
{% for k in load_keys %}{% if k in cfg %}<tr><th>{{ k }}</th><td>{{ cfg[k] }}</td></tr>{% endif %}{% endfor %}
{% for k in mock_keys %}{% if k in cfg %}<tr><th>{{ k }}</th><td>{{ cfg[k] }}</td></tr>{% endif %}{% endfor %}
<tr><th>runs per system</th><td>{{ cfg.get("runs_per_gateway", "?") }}</td></tr>
<tr><th>seed</th><td>{{ cfg.get("seed", "?") }} (orders the systems within each round)</td></tr>
</tbody></table>
<p>Closed-loop users ramp linearly from the warm-up users to the top, then hold. The
<strong>measured window</strong> is the hold, <code>[hold_start, hold_end)</code> from each run's
phases{% if windows %} ({{ windows|join(", ") }} s){% endif %}: warm-up, ramp and the tail after the
hold are excluded from every headline figure (the ramp is shown in the plots).</p>
<h3>Execution order</h3>
<p>Runs are interleaved: each round runs every system once, in an order shuffled by the seed, so
slow drift of the machine spreads over all systems.</p>
<table><thead><tr><th>round</th><th>runs in order</th></tr></thead><tbody>
{% for r in rounds %}<tr><td class="n">{{ r.round }}</td><td>{{ r.runs|join(" → ") }}</td></tr>{% endfor %}
</tbody></table>
<p>Comparison keys (SHA-256 of each run's configuration without its index; one key per system means
its runs ran exactly the same thing):
{% for k in keys %}{{ k.system }}: {{ k.n }} key{{ "s" if k.n != 1 }} (<code>{{ k.key }}</code>){% if not loop.last %}; {% endif %}{% endfor %}.</p>
<h3>Definitions</h3>
<dl>{% for k, v in definitions %}<dt><strong>{{ k }}</strong></dt><dd>{{ v }}</dd>{% endfor %}</dl>
<details><summary>The whole study configuration</summary>
<table><tbody>{% for k, v in cfg|dictsort %}<tr><th>{{ k }}</th><td><code>{{ v }}</code></td></tr>{% endfor %}</tbody></table>
</details>
</div>""", study_id=m.get("study_id", ""), cfg=cfg, commit=m.get("git_commit", "?"),
                   started=m.get("started_t_unix_s"), ended=m.get("ended_t_unix_s"), machine=machine,
                   versions=versions, pkg=sorted((m.get("versions") or {}).items()),
                   run_versions=run_versions, load_keys=CONFIG_LOAD_KEYS, mock_keys=CONFIG_MOCK_KEYS,
                   windows=[f"{w:g}" for w in sorted(set(round(x, 1) for x in windows))],
                   rounds=rounds, keys=keys, definitions=list(A.DEFINITIONS.items()))


def _snippet(data: ReportData) -> str:
    path = data.study.path
    try:
        shown = str(path.resolve().relative_to(REPO_DIR))
    except ValueError:
        shown = str(path)
    return f'''import glob, json, pandas as pd
study = "{shown}"   # or "." from the directory holding this report
rows = pd.concat(pd.read_parquet(p) for p in glob.glob(f"{{study}}/runs/*/*/requests.parquet"))
samples = pd.concat(pd.read_parquet(p) for p in glob.glob(f"{{study}}/runs/*/*/samples.parquet"))
manifest = json.load(open(f"{{study}}/manifest.json"))
runs = {{r["run_id"]: json.load(open(f"{{study}}/{{r['dir']}}/manifest.json")) for r in manifest["runs"]}}

# the measured window and the headline figures of each run, by hand
hold = rows[rows.phase == "hold"]
ok = hold[hold.error_kind == ""]
window_s = {{k: r["phases"]["hold_end_t_unix_s"] - r["phases"]["hold_start_t_unix_s"]
            for k, r in runs.items() if r["status"] == "completed"}}
throughput = ok.groupby("run_id").size() / pd.Series(window_s)
overhead_p50 = ok.groupby("run_id").latency_ms.median() - manifest["config"]["mock_latency_ms"]
print(pd.DataFrame({{"throughput_rps": throughput, "overhead_p50_ms": overhead_p50}}))

# or every figure of this report
from harness import stats
s = stats.load_study(study)
print(stats.run_summary(s))
print(stats.head_to_head_table(s))'''


def section_artifacts(data: ReportData) -> str:
    base = data.study.path
    study_files = [p for p in ("manifest.json", "head_to_head.ipynb") if (base / p).is_file()]
    runs = []
    for run in data.study.runs:
        d = data.study.run_dirs.get(run.get("run_id"))
        if d is None or not d.is_dir():
            runs.append({"run_id": run.get("run_id"), "dir": None, "files": []})
            continue
        files = []
        for f in sorted(d.rglob("*")):
            if f.is_file():
                files.append({"href": f.relative_to(base).as_posix(),
                              "name": f.relative_to(d).as_posix(), "size": _size(f.stat().st_size)})
        runs.append({"run_id": run.get("run_id"), "status": run.get("status"),
                     "dir": d.relative_to(base).as_posix() if d.is_relative_to(base) else str(d),
                     "files": files})
    return _render("""
<div class="sluice-report" id="artifacts">
<h2>Raw artifacts</h2>
<p>Every file of this study, by its path relative to this report (the layout is documented in
<code>artifacts/README.md</code>). Study: {% for f in study_files %}<a href="{{ f }}">{{ f }}</a>{% if not loop.last %}, {% endif %}{% endfor %}.</p>
<ul>
{% for r in runs %}<li><strong>{{ r.run_id }}</strong>{% if r.dir %} (<a href="{{ r.dir }}/">{{ r.dir }}/</a>, {{ r.status }}):
{% for f in r.files %}<a href="{{ f.href }}">{{ f.name }}</a> <small>({{ f.size }})</small>{% if not loop.last %}, {% endif %}{% endfor %}
{% else %}: no directory{% endif %}</li>
{% endfor %}
</ul>
<h3>Re-derive the numbers in pandas</h3>
<pre><code>{{ snippet }}</code></pre>
</div>""", study_files=study_files, runs=runs, snippet=_snippet(data))


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024.0
    return f"{n} B"


def render_section(data: ReportData, name: str) -> str:
    """One section's HTML (a fragment; the 'style' section carries the CSS the others use)."""
    if name not in SECTIONS:
        raise KeyError(f"unknown section {name!r}; sections: {SECTIONS}")
    return globals()[f"section_{name}"](data)


def render_report_html(study_dir: str | Path, reference: str | None = None,
                       bin_users: int = A.DEFAULT_BIN_USERS, verify: bool = True) -> str:
    """The whole self-contained HTML page of a study."""
    data = collect(study_dir, reference=reference, bin_users=bin_users, verify=verify)
    study_id = data.study.manifest.get("study_id") or data.study.path.name
    body = "\n".join(render_section(data, name) for name in SECTIONS)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>Sluice report: {jinja2.utils.markupsafe.escape(study_id)}</title>\n</head>\n"
            f"<body>\n{body}\n</body>\n</html>\n")


# --- building ------------------------------------------------------------------------------------

_NB_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _build_via_notebook(study_dir: Path, out: Path, reference: str | None, bin_users: int) -> None:
    import nbformat
    import papermill
    from nbconvert import HTMLExporter

    with tempfile.TemporaryDirectory(prefix="sluice-report-") as tmp:
        executed = Path(tmp) / "report.ipynb"
        papermill.execute_notebook(
            str(NOTEBOOK), str(executed), kernel_name="python3", cwd=str(REPO_DIR),
            parameters={"study_dir": str(study_dir), "reference": reference or "",
                        "bin_users": int(bin_users)},
            progress_bar=False, log_output=False)
        nb = nbformat.read(str(executed), as_version=4)
    for cell in nb.cells:   # warnings on stderr are not part of the report
        if cell.get("cell_type") == "code":
            cell["outputs"] = [o for o in cell.get("outputs", [])
                               if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]
    study_id = (A.read_json(study_dir / "manifest.json").get("study_id") or study_dir.name)
    nb.metadata["title"] = f"Sluice report: {study_id}"
    exporter = HTMLExporter(template_name="lab", exclude_input=True, exclude_input_prompt=True,
                            exclude_output_prompt=True,
                            extra_loaders=[jinja2.DictLoader({"sluice_report.html.j2": _NB_TEMPLATE})])
    exporter.template_file = "sluice_report.html.j2"
    html, _ = exporter.from_notebook_node(nb)
    _write(out, html)


def build_report(study_dir: str | Path, via_notebook: bool = False, reference: str | None = None,
                 bin_users: int = A.DEFAULT_BIN_USERS, out: str | Path | None = None) -> Path:
    """Write the report of ``study_dir`` (default: STUDY_DIR/report.html) and return its path.
    ``via_notebook=True`` executes notebooks/report.ipynb with papermill and exports it with
    nbconvert (no code cells); otherwise the same sections are rendered directly."""
    study_dir = Path(study_dir).resolve()
    out_path = Path(out) if out is not None else study_dir / REPORT_NAME
    if via_notebook:
        _build_via_notebook(study_dir, out_path, reference, bin_users)
    else:
        _write(out_path, render_report_html(study_dir, reference=reference, bin_users=bin_users))
    return out_path
