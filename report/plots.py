"""The report's plots, each a base64 PNG (``data:`` URI) so the HTML stays one self-contained file."""
from __future__ import annotations

import base64
import io
import math

import numpy as np
import pandas as pd

from harness.model.metrics import metric
from harness.stats.across import describe
from harness.stats.fault_lane import BIN_S as FAULT_BIN_S
from harness.stats.open_loop import KEPT_UP_SHARE, OPEN_LOOP_BOUNDS_MS
from harness.stats.ramp import rss_timeline
from report import format as F
from report.data import ReportData
from report.format import configuration, heading

RSS = metric("rss_peak_bytes")
PNG_COLOURS = 128     # a plot's palette (_png)

def _png(fig) -> str:
    import matplotlib.pyplot as plt
    from PIL import Image
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    plt.close(fig)
    # a plot's few colours and their antialiasing fit a palette, at under a third of the bytes
    # of full colour: every plot is inline, and the published page holds about fifty
    out = io.BytesIO()
    Image.open(buf).convert("RGB").quantize(colors=PNG_COLOURS).save(out, format="png",
                                                                     optimize=True)
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode("ascii")


def _plt():
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    plt.rcParams.update({"font.size": 10, "axes.grid": True, "grid.alpha": 0.3,
                         "axes.spines.top": False, "axes.spines.right": False})
    return plt


def _run_style(status: str, run_index: int) -> dict:
    """A run is a thin line of its system's colour; a run that did not complete is dotted."""
    if status != "completed":
        return {"linestyle": ":", "linewidth": 0.9, "alpha": 0.6, "marker": "x", "markersize": 3}
    return {"linestyle": "-", "linewidth": 0.9, "alpha": 0.8, "marker": "o", "markersize": 2}


# Positive values spanning more than this factor get a log axis, so the fast systems are not
# flat lines under the slowest one.
LOG_SPAN = 20.0


def _scale_y(ax, values) -> None:
    """A log (or, with values ≤ 0, a symmetric log) y axis when the values span orders of
    magnitude; linear from 0 otherwise."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype="float64")
    pos = v[v > 0]
    if len(pos) and pos.max() / pos.min() > LOG_SPAN:
        if (v <= 0).any():
            ax.set_yscale("symlog", linthresh=float(np.percentile(pos, 10)))
        else:
            ax.set_yscale("log")
    elif len(v) and v.min() >= 0:
        ax.set_ylim(bottom=0)


def _system_legend(ax, data: ReportData, systems, **kw) -> None:
    """One legend entry per system (its colour), not one per run."""
    from matplotlib.lines import Line2D
    ax.legend([Line2D([], [], color=data.colors.get(s, "k"), lw=2) for s in systems], systems,
              **kw)


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
    ax.set_title("Throughput vs users along the ramp and the hold (each run a thin line)")
    _system_legend(ax, data, list(pd.unique(r["system"])), ncol=4, fontsize=8, loc="upper left")
    _scale_y(ax, r["throughput_rps"])
    return _png(fig)


def plot_overhead(data: ReportData) -> str | None:
    """Median overhead vs users, one panel per system on its own scale (so the fast systems are
    readable), each run a thin line, over the floor's band (min–max of its runs per bin)."""
    r = _ordered_ramp(data)
    if not len(r):
        return None
    plt = _plt()
    col = "overhead_vs_mock_p50_ms"
    floor = data.roles.floor
    band = (r[(r["system"] == floor) & (r["status"] == "completed")].groupby("users_mid")[col]
            .agg(["min", "max"]) if floor else pd.DataFrame())
    systems = [s for s in pd.unique(r["system"]) if s != floor] or list(pd.unique(r["system"]))
    ncols = min(len(systems), 4)
    nrows = math.ceil(len(systems) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(13, 2.8 * nrows + 0.5), squeeze=False)
    for ax, system in zip(axes.flat, systems):
        if len(band):
            ax.fill_between(band.index, band["min"], band["max"], color="0.6", alpha=0.35,
                            label=f"{floor} (min–max of its runs)")
        g_all = r[r["system"] == system]
        for _, g in g_all.groupby("run_id", sort=False):
            g = g.sort_values("users_bin")
            st = g["status"].iloc[0]
            ax.plot(g["users_mid"], g[col], color=data.colors.get(system, "k"),
                    **_run_style(st, g["run_index"].iloc[0]))
        ax.set_title(system, loc="left", fontsize=10, color=data.colors.get(system, "k"))
        ax.set_xlabel("users", fontsize=8)
        _scale_y(ax, list(g_all[col]) + (list(band["max"]) if len(band) else []))
    for ax in list(axes.flat)[len(systems):]:
        ax.set_visible(False)
    axes[0, 0].set_ylabel("p50 latency − mock (ms)")
    if len(band):
        axes[0, 0].legend(fontsize=7, loc="upper left")
    fig.suptitle("Median overhead vs users, per system on its own scale (each run a thin line; "
                 "grey: the floor)")
    fig.tight_layout()
    return _png(fig)


def plot_rss(data: ReportData) -> str | None:
    tl = rss_timeline(data.study)
    systems = [s for s in data.study.systems if s in set(tl["system"])]
    if not systems:
        return None
    plt = _plt()
    fig, axes = plt.subplots(len(systems), 1, figsize=(11, 2.3 * len(systems) + 0.6), sharex=True,
                             squeeze=False)
    for ax, system in zip(axes[:, 0], systems):
        g = tl[tl["system"] == system]
        run_ids = [r.run_id for r in sorted(
            (r for r in data.study.runs if r.system == system), key=lambda r: r.run_index)]
        for run_id in [x for x in run_ids if x in set(g["run_id"])]:
            gr = g[g["run_id"] == run_id]
            run = data.study.run(run_id)
            st = run.status
            ax.plot(gr["t_rel_s"], gr["rss_bytes"] / RSS.scale, color=data.colors.get(system, "k"),
                    label=run_id + ("" if st == "completed" else f" ({st})"),
                    **{k: v for k, v in _run_style(st, run.run_index or 1).items()
                       if k != "marker"})
        # the measured window of the first completed run of this system, shaded
        for run in data.study.runs:
            if run.system == system and run.status == "completed":
                ph = run.phases
                t0 = (ph.warmup_start_t_unix_s if ph.warmup_start_t_unix_s is not None
                      else ph.ramp_start_t_unix_s)
                if t0 is not None and ph.hold_start_t_unix_s is not None and ph.hold_end_t_unix_s is not None:
                    ax.axvspan(ph.hold_start_t_unix_s - t0, ph.hold_end_t_unix_s - t0,
                               color="0.85", alpha=0.5, label="measured window")
                    if ph.load_end_t_unix_s is not None:
                        ax.axvline(ph.load_end_t_unix_s - t0, color="0.4", lw=0.8, ls="--",
                                   label="load stops")
                break
        ax.set_ylabel(f"RSS ({RSS.unit})")
        ax.set_title(f"{system}", loc="left", fontsize=10)
        ax.legend(fontsize=7, ncol=5, loc="lower right")
        ax.set_ylim(bottom=0)
    axes[-1, 0].set_xlabel("seconds since the load started (negative: idle before the load)")
    fig.suptitle("Resident memory of each system's process tree over time (each run a line)")
    fig.tight_layout()
    return _png(fig)


# The headline figures, run by run.
RUNS_PLOT = ("throughput_rps", "overhead_vs_mock_p50_ms", "cpu_ms_per_request", "rss_peak_bytes")


def plot_runs(data: ReportData) -> str | None:
    rs = data.rs
    if not len(rs):
        return None
    plt = _plt()
    systems = [s for s in data.study.systems if s in set(rs["system"])]
    fig, axes = plt.subplots(1, len(RUNS_PLOT), figsize=(13, 3.6))
    for ax, name in zip(axes, RUNS_PLOT):
        m = metric(name)
        top = 0.0
        for i, system in enumerate(systems):
            sub = rs[rs["system"] == system]
            done = sub[sub["status"] == "completed"]
            vals = done[name].astype("float64") / m.scale
            jitter = np.linspace(-0.12, 0.12, max(len(vals), 1))[:len(vals)]
            ax.scatter(i + jitter, vals, color=data.colors.get(system, "k"), s=18, zorder=3)
            d = describe(vals)
            if d["n"] >= 1 and not math.isnan(d["mean"]):
                err = 0 if math.isnan(d["ci95_half"]) else d["ci95_half"]
                ax.errorbar(i + 0.3, d["mean"], yerr=err, fmt="s", color="k", ms=4, capsize=3)
                top = max(top, d["max"], d["mean"] + err)
        ax.set_xticks(range(len(systems)), systems, rotation=30, ha="right")
        ax.set_xlim(-0.5, len(systems) - 0.3)
        ax.set_title(heading(m), fontsize=10)
        vals = rs.loc[rs["status"] == "completed", name].astype("float64") / m.scale
        _scale_y(ax, vals)
        if ax.get_yscale() == "linear":
            ax.set_ylim(0, top * 1.12 if top > 0 else 1.0)
    fig.suptitle("Each completed run (dots) and the mean with its t-based 95% CI (black)")
    fig.tight_layout()
    return _png(fig)


def plot_self_overhead(data: ReportData, rows: list[dict]) -> str | None:
    """rows: report.tables.self_overhead_rows."""
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.4))
    x = np.arange(len(rows))
    w = 0.2
    series = [("overhead_vs_mock_p50_ms", "client-observed p50", "#1f4e79"),
              ("self_overhead_p50_ms", "self-reported p50", "#8fbce6"),
              ("overhead_vs_mock_p95_ms", "client-observed p95", "#a0522d"),
              ("self_overhead_p95_ms", "self-reported p95", "#f2b98a")]
    for k, (key, label, color) in enumerate(series):
        ax.bar(x + (k - 1.5) * w, [r[key]["mean"] for r in rows], w, label=label, color=color)
    ax.set_xticks(x, [r["system"] for r in rows])
    ax.set_ylabel("ms")
    ax.set_title("Self-reported vs client-observed overhead (mean over runs)")
    ax.legend(fontsize=8)
    return _png(fig)


# --- sections ------------------------------------------------------------------------------------

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
        style = dict(color=data.colors.get(system, "k"),
                     label=run_id + ("" if st == "completed" else f" ({st})"),
                     **_run_style(st, g["run_index"].iloc[0]))
        axes[0].plot(g["offered_rps"], g["p99_added_ms"], **style)
        axes[1].plot(g["offered_rps"], g["achieved_rps"] / g["offered_rps"], **style)
    for b in OPEN_LOOP_BOUNDS_MS:
        axes[0].axhline(b, color="#999", linewidth=0.8, linestyle="--")
    axes[0].set_yscale("symlog", linthresh=10)
    axes[0].set_ylabel("p99 added latency vs the floor (ms, from the intended start)")
    axes[1].axhline(KEPT_UP_SHARE, color="#999", linewidth=0.8, linestyle="--")
    axes[1].set_ylabel("achieved / offered")
    rates = sorted(steps["offered_rps"].unique())
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xticks(rates, [f"{r:g}" for r in rates])
        ax.minorticks_off()
        ax.set_xlabel("offered rate (req/s)")
    axes[0].set_title("p99 added latency per step (dashed: the declared bounds)")
    axes[1].set_title(f"achieved / offered rate (dashed: {KEPT_UP_SHARE:.0%})")
    axes[0].legend(ncol=3, fontsize=8, loc="upper left")
    fig.tight_layout()
    return _png(fig)


def plot_inflight(data: ReportData, steps: pd.DataFrame) -> str | None:
    """RSS of each system's tree against the requests open at the client, each run a line, with
    each system's fit over its held steps dashed; log axes when the systems span a decade."""
    ran = steps[steps["ran"].astype(bool)] if len(steps) else steps
    if ran.empty or ran["rss_mib"].isna().all():
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.6))
    order = {s: i for i, s in enumerate(data.study.systems)}
    ran = ran.assign(_o=ran["system"].map(order)).sort_values(["_o", "run_index", "target_open"])
    for (system, run_id), g in ran.groupby(["system", "run_id"], sort=False):
        if g["rss_mib"].isna().all():
            continue
        st = g["status"].iloc[0]
        ax.plot(g["client_open_mean"], g["rss_mib"], color=data.colors.get(system, "k"),
                label=run_id + ("" if st == "completed" else f" ({st})"),
                **_run_style(st, g["run_index"].iloc[0]))
        failed = g[~g["held"].astype(bool)]
        ax.scatter(failed["client_open_mean"], failed["rss_mib"], marker="x", s=40,
                   color=data.colors.get(system, "k"))
    rss = ran["rss_mib"].dropna()
    if len(rss) and rss.min() > 0 and rss.max() / rss.min() >= 10:
        ax.set_yscale("log")
    ax.set_xscale("log")
    targets = sorted(ran["target_open"].unique())
    ax.set_xticks(targets, [f"{t:,}" for t in targets])
    ax.minorticks_off()
    ax.set_xlabel("requests open at the client")
    ax.set_ylabel("RSS of the system's process tree (MiB)")
    ax.set_title("Memory against open requests (x: a step not held)")
    ax.legend(ncol=3, fontsize=8, loc="upper left")
    fig.tight_layout()
    return _png(fig)


# How a fault run's configuration is drawn: its system's colour, this line style.
RESILIENCE_STYLE = {"shipped": "-", "recommended": "--"}


def _ran(run) -> str:
    """The configuration a run ran: a recommended one asked for but not declared ran as shipped."""
    ran = configuration(run["resilience"], run["resilience_note"])
    return "recommended" if ran == "recommended" else "shipped"


def plot_fault_timelines(timelines: pd.DataFrame, colors: dict[str, str],
                         title: str) -> str | None:
    """Success share and amplification per 1-s bin of the hold (``fault_timelines`` of
    harness.stats.fault_lane), each run a thin line of its system's colour (dashed: the recommended
    configuration; crosses: a run that did not complete), the fault window shaded."""
    if timelines.empty:
        return None
    plt = _plt()
    from matplotlib.lines import Line2D
    # a third panel when a standby took some provider requests: the primary's share of them
    standby = "primary_share" in timelines and (timelines["primary_share"].dropna() < 1).any()
    fig, axes = plt.subplots(3 if standby else 2, 1, figsize=(11, 7.6 if standby else 5.6),
                             sharex=True)
    top, bottom = axes[0], axes[1]
    for _, g in timelines.groupby([c for c in ("cell", "run_id") if c in timelines], sort=False):
        first = g.iloc[0]
        done = first["run_status"] == "completed"
        style = {"linestyle": RESILIENCE_STYLE[_ran(first)], "linewidth": 0.9,
                 "alpha": 0.8 if done else 0.6, "marker": "" if done else "x", "markersize": 3}
        color = colors.get(first["system"], "k")
        middle = g["t_s"] + FAULT_BIN_S / 2   # a bin's figure belongs to all of it, not its start
        top.plot(middle, g["success_share"] * 100, color=color, **style)
        bottom.plot(middle, g["amplification"], color=color, **style)
        if standby:
            axes[2].plot(middle, g["primary_share"] * 100, color=color, **style)
    first = timelines.iloc[0]
    if standby:
        axes[2].set_ylabel("provider requests\non the primary (%)")
        axes[2].set_ylim(-2, 102)
    for ax in axes:
        ax.axvspan(first["fault_from_s"], first["fault_to_s"], color="0.85", alpha=0.5)
    top.set_ylabel("client success (%)")
    top.set_ylim(-2, 102)
    bottom.set_ylabel("provider requests per\nclient request")
    bottom.set_ylim(bottom=0)
    axes[-1].set_xlabel(f"seconds after the hold's start ({FAULT_BIN_S:g}-s bins, at their middle; "
                        "shaded: the fault window)")
    top.set_title(title)
    systems = [s for s in colors if s in set(timelines["system"])]
    ran = {_ran(x) for x in timelines[["resilience", "resilience_note"]].to_dict("records")}
    styles = [r for r in RESILIENCE_STYLE if r in ran]
    handles = ([Line2D([], [], color=colors[s], lw=2) for s in systems]
               + ([Line2D([], [], color="0.3", ls=RESILIENCE_STYLE[r]) for r in styles]
                  if len(styles) > 1 else []))
    labels = systems + ([("as shipped" if r == "shipped" else r) for r in styles]
                        if len(styles) > 1 else [])
    top.legend(handles, labels, ncol=min(len(labels), 6), fontsize=8, loc="lower left")
    return _png(fig)


def plot_faults(data: ReportData, timelines: pd.DataFrame) -> str | None:
    """A study's fault runs over the hold (plot_fault_timelines), in the report's colours."""
    return plot_fault_timelines(timelines, data.colors,
                                "While the provider fails (each run a line)")


def plot_fault_frontier(rows: pd.DataFrame, colors: dict[str, str], title: str) -> str | None:
    """Per system and configuration of one scenario: success against amplification for the
    requests sent during the fault (mean, error bars one sd over the runs), labelled with the
    p99 time to success; the line A = s / (1 − p̂), with the least p̂ of the cheapest routes the
    systems had (harness.stats.fault_requests), is what the success costs at the least."""
    ran = rows[(rows["not_run"] == "") & (rows["success_during_n"] > 0)] if len(rows) else rows
    if ran.empty:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.6))
    for r in ran.to_dict("records"):
        x, y = r["amplification_during_mean"], r["success_during_mean"] * 100
        ax.errorbar(x, y, xerr=_sd(r["amplification_during_sd"]),
                    yerr=_sd(r["success_during_sd"]) * 100, fmt="o", color=colors.get(r["system"], "k"),
                    markersize=6, capsize=2)
        ax.annotate(f"{r['system']}\np99 {F.value(r['tts_p99_ms_mean'], 'tts_p99_ms', unit=True)}",
                    (x, y), textcoords="offset points", xytext=(6, -10), fontsize=7)
    p_hat = float(ran["floor_failure_share_mean"].min())
    if 0 <= p_hat < 1:
        s = np.linspace(0, 1, 50)
        ax.plot(s / (1 - p_hat), s * 100, color="0.5", linestyle=":", linewidth=1,
                label=f"A = s / (1 − p̂), p̂ = {p_hat:.0%}: no attempt wasted")
        ax.legend(fontsize=8, loc="lower right")
    ax.set_xlabel("provider requests per client request (sent during the fault)")
    ax.set_ylabel("client success (%)")
    ax.set_xlim(left=min(0.9, ax.get_xlim()[0]))
    ax.set_title(title)
    return _png(fig)


def _sd(value) -> float:
    return 0.0 if value is None or F.isnan(value) else float(value)


def plot_fault_tts(rows: pd.DataFrame, colors: dict[str, str], title: str) -> str | None:
    """Per system and configuration of one scenario: the share of the requests sent during the
    fault answered successfully within t (log time; the mean over its runs). A curve that stays
    below 100% is the requests that never succeeded."""
    from harness.stats.fault_requests import TTS_GRID_MS
    ran = [r for r in rows.to_dict("records") if isinstance(r.get("tts_curve"), list)
           and r["tts_curve"]] if len(rows) else []
    if not ran:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for r in ran:
        style = RESILIENCE_STYLE[_ran(r)]
        ax.plot(TTS_GRID_MS, [100 * v for v in r["tts_curve"]], color=colors.get(r["system"], "k"),
                linestyle=style, linewidth=1.2, label=r["system"])
    ax.set_xscale("log")
    ax.set_ylim(-2, 102)
    ax.set_xlabel("time to success (ms, log scale)")
    ax.set_ylabel("requests answered successfully (%)")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(title)
    return _png(fig)
