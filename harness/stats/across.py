"""Across runs: mean ± sd per system, Welch verdicts against a reference, and the head-to-head table."""
from __future__ import annotations

import math
import warnings
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd
from scipy import stats

from harness.stats.loading import Study
from harness.stats.metrics import (
    COMPARE_METRICS,
    DEFAULT_BIN_USERS,
    DEFAULT_DIRECT,
    DEFAULT_REFERENCE,
    METRICS,
    SUMMARY_METRICS,
    UNSTABLE_COV,
    VERDICT_ALPHA,
    VERDICT_MIN_EFFECT,
)
from harness.stats.runs import run_summary


def describe(values: Iterable[float]) -> dict[str, float]:
    """n, mean, sd (n−1), min, max, CoV, t-based 95% CI of a run set (NaNs dropped)."""
    a = np.asarray([v for v in values if v is not None], dtype="float64")
    a = a[~np.isnan(a)]
    n = int(a.size)
    mean = float(a.mean()) if n else math.nan
    sd = float(a.std(ddof=1)) if n >= 2 else math.nan
    cov = (sd / abs(mean)) if n >= 2 and mean != 0 else math.nan
    half = float(stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)) if n >= 2 else math.nan
    return {"n": n, "mean": mean, "sd": sd, "min": float(a.min()) if n else math.nan,
            "max": float(a.max()) if n else math.nan, "cov": cov,
            "unstable": bool(not math.isnan(cov) and cov >= UNSTABLE_COV),
            "ci95_low": mean - half, "ci95_high": mean + half, "ci95_half": half}


def system_summary(run_summary_df: pd.DataFrame,
                   metrics: Iterable[str] = SUMMARY_METRICS,
                   direct: str = DEFAULT_DIRECT) -> pd.DataFrame:
    """Long table, one row per (system, metric), over completed runs only; failed runs are counted
    in ``n_not_completed`` and never averaged. The direct baseline's overhead vs itself is zero by
    construction: its CoV is left out (NaN) and it is never flagged unstable."""
    rows = []
    df = run_summary_df
    for system in pd.unique(df["system"]):
        sub = df[df["system"] == system]
        done = sub[sub["status"] == "completed"]
        for m in metrics:
            if m not in df.columns:
                continue
            d = describe(done[m].astype("float64"))
            if system == direct and m.startswith("overhead_vs_direct"):
                d.update(cov=math.nan, unstable=False)
            rows.append({"system": system, "metric": m, **d,
                         "n_not_completed": int(len(sub) - len(done))})
    cols = ["system", "metric", "n", "mean", "sd", "min", "max", "cov", "unstable",
            "ci95_low", "ci95_high", "ci95_half", "n_not_completed"]
    return pd.DataFrame(rows, columns=cols)


def ratio_with_sd(mean_a: float, sd_a: float, mean_b: float, sd_b: float) -> tuple[float, float]:
    """a/b and its sd by first-order error propagation (independent a and b)."""
    if mean_b == 0 or math.isnan(mean_b) or math.isnan(mean_a):
        return math.nan, math.nan
    r = mean_a / mean_b
    if mean_a == 0:
        return r, abs(sd_a / mean_b) if not math.isnan(sd_a) else math.nan
    rel = (sd_a / mean_a) ** 2 + (sd_b / mean_b) ** 2
    return r, abs(r) * math.sqrt(rel) if not math.isnan(rel) else math.nan


def verdict(a: Iterable[float], b: Iterable[float], metric: str) -> dict[str, Any]:
    """Compare run set ``a`` with reference run set ``b`` on one metric (see DEFINITIONS)."""
    meta = METRICS.get(metric, dict(label=metric, higher_is_better=False, words=("better", "worse")))
    da, db = describe(a), describe(b)
    ratio, ratio_sd = ratio_with_sd(da["mean"], da["sd"], db["mean"], db["sd"])
    aa = np.asarray([v for v in a], dtype="float64")
    bb = np.asarray([v for v in b], dtype="float64")
    aa, bb = aa[~np.isnan(aa)], bb[~np.isnan(bb)]
    t_stat = p = math.nan
    if aa.size >= 2 and bb.size >= 2:
        if np.ptp(aa) == 0 and np.ptp(bb) == 0:
            # every run of each set identical: the difference is certain (or nil)
            p = 0.0 if aa[0] != bb[0] else 1.0
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                res = stats.ttest_ind(aa, bb, equal_var=False)
            t_stat, p = float(res.statistic), float(res.pvalue)
    res = {"n": da["n"], "n_ref": db["n"], "mean": da["mean"], "sd": da["sd"],
           "mean_ref": db["mean"], "sd_ref": db["sd"], "ratio": ratio, "ratio_sd": ratio_sd,
           "t": t_stat, "p_value": p}
    better_w, worse_w = meta["words"]
    if da["n"] < 2 or db["n"] < 2:
        res.update(outcome="no clear difference", verdict="no clear difference",
                   reason=f"too few completed runs for a t-test (n={da['n']} vs {db['n']})")
        return res
    if math.isnan(ratio) or db["mean"] <= 0 or da["mean"] < 0:
        res.update(outcome="no clear difference", verdict="no clear difference",
                   reason=f"the ratio is undefined (reference mean {db['mean']:.4g}, "
                          f"this {da['mean']:.4g})")
        return res
    higher = ratio > 1
    better = higher if meta["higher_is_better"] else not higher
    effect = abs(ratio - 1)
    ptxt = f"Welch p = {p:.3g}" if not math.isnan(p) else "Welch p undefined"
    rtxt = f"ratio {ratio:.3f} ± {ratio_sd:.3f}"
    if not math.isnan(p) and p < VERDICT_ALPHA and effect >= VERDICT_MIN_EFFECT:
        word = better_w if better else worse_w
        res.update(outcome="better" if better else "worse", verdict=word,
                   reason=f"{rtxt}, {ptxt} < {VERDICT_ALPHA:g} and the ratio is "
                          f"{effect:.0%} off 1 (≥ {VERDICT_MIN_EFFECT:.0%})")
    else:
        why = []
        if math.isnan(p) or p >= VERDICT_ALPHA:
            why.append(f"{ptxt} ≥ {VERDICT_ALPHA:g}" if not math.isnan(p) else ptxt)
        if effect < VERDICT_MIN_EFFECT:
            why.append(f"the ratio is only {effect:.1%} off 1 (< {VERDICT_MIN_EFFECT:.0%})")
        res.update(outcome="no clear difference", verdict="no clear difference",
                   reason=f"{rtxt}: " + " and ".join(why))
    return res


def compare(run_summary_df: pd.DataFrame, reference: str = DEFAULT_REFERENCE,
            metrics: Iterable[str] = COMPARE_METRICS, direct: str = DEFAULT_DIRECT) -> pd.DataFrame:
    """Every other system against ``reference``, per metric, over completed runs. The direct
    baseline's overhead vs itself is not compared (it is zero by construction)."""
    df = run_summary_df
    if reference not in set(df["system"]):
        raise KeyError(f"reference system {reference!r} has no runs in this study "
                       f"(systems: {sorted(set(df['system']))})")
    done = df[df["status"] == "completed"]
    ref = done[done["system"] == reference]
    rows = []
    for system in pd.unique(df["system"]):
        if system == reference:
            continue
        sub = done[done["system"] == system]
        for m in metrics:
            if m not in df.columns:
                continue
            meta = METRICS.get(m, {})
            v = verdict(sub[m].astype("float64").tolist(), ref[m].astype("float64").tolist(), m)
            if m.startswith("overhead_vs_direct") and direct in (system, reference):
                v.update(outcome="no clear difference", verdict="no clear difference",
                         ratio=math.nan, ratio_sd=math.nan,
                         reason=f"not compared: {direct!r} is the baseline this overhead is "
                                "measured against")
            rows.append({"system": system, "reference": reference, "metric": m,
                         "better_when": "higher" if meta.get("higher_is_better") else "lower", **v})
    cols = ["system", "reference", "metric", "better_when", "n", "n_ref", "mean", "sd", "mean_ref",
            "sd_ref", "ratio", "ratio_sd", "t", "p_value", "outcome", "verdict", "reason"]
    return pd.DataFrame(rows, columns=cols)


def system_labels(run_summary_df: pd.DataFrame) -> pd.DataFrame:
    """Per system: 'capacity' only when every completed run is capacity; the reasons with run ids."""
    rows = []
    for system in pd.unique(run_summary_df["system"]):
        sub = run_summary_df[run_summary_df["system"] == system]
        done = sub[sub["status"] == "completed"]
        reasons = []
        for _, r in sub.iterrows():
            if r["label_reasons"]:
                reasons.extend(f"{r['run_id']}: {x}" for x in str(r["label_reasons"]).split("; "))
        if not len(done):
            label = "failed"
        elif (done["label"] == "capacity").all():
            label = "capacity"
        else:
            label = "behaviour"
        rows.append({"system": system, "label": label, "runs": int(len(sub)),
                     "completed": int(len(done)), "reasons": reasons})
    return pd.DataFrame(rows, columns=["system", "label", "runs", "completed", "reasons"])


# --- along the ramp ------------------------------------------------------------------------------

def fmt_mean_sd(d: Mapping[str, Any], digits: int = 1, scale: float = 1.0) -> str:
    """'mean ± sd (n=…)'; 'mean (n=1)' for a single run; '—' when there is none."""
    n = int(d.get("n") or 0)
    if n == 0 or d.get("mean") is None or math.isnan(d["mean"]):
        return "—"
    mean = d["mean"] / scale
    if n == 1 or d.get("sd") is None or math.isnan(d["sd"]):
        return f"{mean:.{digits}f} (n={n})"
    return f"{mean:.{digits}f} ± {d['sd'] / scale:.{digits}f} (n={n})"


# column label, metric, digits, scale
HEADLINE_COLUMNS: list[tuple[str, str, int, float]] = [
    ("throughput (req/s)", "throughput_rps", 1, 1.0),
    ("median overhead (ms)", "overhead_vs_mock_p50_ms", 2, 1.0),
    ("p95 overhead (ms)", "overhead_vs_mock_p95_ms", 2, 1.0),
    ("CPU-ms / request", "cpu_ms_per_request", 3, 1.0),
    ("peak RSS (MiB)", "rss_peak_bytes", 1, 1024.0 * 1024.0),
    ("errors", "errors_total", 1, 1.0),
]


def default_reference(study_or_systems: Study | Iterable[str],
                      preferred: str = DEFAULT_REFERENCE) -> str | None:
    """``preferred`` when it ran, else the first system that ran (None when nothing ran)."""
    systems = (study_or_systems.systems if isinstance(study_or_systems, Study)
               else list(study_or_systems))
    if isinstance(study_or_systems, Study):
        ran = {r.system for r in study_or_systems.runs}
        systems = [s for s in systems if s in ran]
    if preferred in systems:
        return preferred
    return systems[0] if systems else None


def head_to_head_table(study: Study, reference: str | None = None,
                       rs: pd.DataFrame | None = None, overhead: str = "mock",
                       bin_users: int = DEFAULT_BIN_USERS) -> pd.DataFrame:
    """The headline table: one row per system, each figure 'mean ± sd (n=…)' over completed
    runs, plus the result label and the verdict against ``reference`` (throughput and median
    overhead). ``overhead`` = 'mock' (latency − the mock's setting) or 'direct'."""
    if rs is None:
        rs = run_summary(study, bin_users=bin_users)
    ref = reference or default_reference(study)
    columns = [(label.replace("overhead", f"overhead vs {overhead}") if "overhead" in label else label,
                metric.replace("vs_mock", f"vs_{overhead}"), digits, scale)
               for label, metric, digits, scale in HEADLINE_COLUMNS]
    summ = system_summary(rs, [m for _, m, _, _ in columns]) if len(rs) else None
    labels = system_labels(rs).set_index("system") if len(rs) else None
    comp = None
    if ref is not None and len(rs) and ref in set(rs["system"]):
        comp = compare(rs, reference=ref,
                       metrics=["throughput_rps", f"overhead_vs_{overhead}_p50_ms"])
    systems_meta = study.manifest.systems
    rows = []
    for system in study.systems:
        meta = systems_meta.get(system)
        version = meta.version if meta else ""
        if not version:
            version = next((r.version for r in study.runs if r.system == system and r.version), "")
        row: dict[str, Any] = {"system": system, "kind": meta.kind if meta else "",
                               "version": version}
        sub = rs[rs["system"] == system] if len(rs) else rs
        if not len(sub):
            why = (meta.not_runnable_reason if meta else "") or "no runs"
            row.update({label: "—" for label, *_ in columns})
            row.update({"runs": "0", "result": f"not run: {why}", f"vs {ref}": "—"})
            rows.append(row)
            continue
        n_done = int((sub["status"] == "completed").sum())
        row["runs"] = f"{n_done} of {len(sub)} completed"
        for label, metric, digits, scale in columns:
            d = summ[(summ["system"] == system) & (summ["metric"] == metric)].iloc[0].to_dict()
            text = fmt_mean_sd(d, digits, scale)
            if d.get("unstable") and metric != "errors_total":
                text += " ⚠ unstable"
            row[label] = text
        row["result"] = labels.loc[system, "label"] if labels is not None else ""
        if system == ref:
            row[f"vs {ref}"] = "reference"
        elif comp is not None:
            c = comp[comp["system"] == system].set_index("metric")
            parts = []
            for metric, name in (("throughput_rps", "throughput"),
                                 (f"overhead_vs_{overhead}_p50_ms", "median overhead")):
                if metric in c.index:
                    parts.append(f"{name}: {c.loc[metric, 'verdict']}")
            row[f"vs {ref}"] = "; ".join(parts)
        else:
            row[f"vs {ref}"] = "—"
        rows.append(row)
    order = ["system", "kind", "version", "runs"] + [label for label, *_ in columns] + [
        "result", f"vs {ref}"]
    return pd.DataFrame(rows, columns=order)


# --- the streaming lane --------------------------------------------------------------------------

