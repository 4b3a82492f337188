"""Numbers to words: digits, units, "±", verdict words and reasons. The statistics return values
and outcomes (harness/stats); how a metric is shown comes from the registry
(harness/model/metrics.py), and is applied here only."""
from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any, Mapping

import pandas as pd

from harness.model.metrics import METRICS, Metric, metric
from harness.model.quantities import quantity, scales, with_interval, with_spread
from harness.stats.definitions import VERDICT_ALPHA, VERDICT_MIN_EFFECT
from harness.stats.outcomes import Basis, Outcome

DASH = "—"


def isnan(x: Any) -> bool:
    try:
        return x is None or (isinstance(x, float) and math.isnan(x)) or bool(pd.isna(x))
    except (TypeError, ValueError):
        return False


NOT_REACHED = "not reached"   # an infinite figure: a time to success more requests never had


def num(x: Any, digits: int = 1, scale: float = 1.0, suffix: str = "") -> str:
    if isnan(x):
        return DASH
    if math.isinf(float(x)):
        return NOT_REACHED
    return f"{float(x) / scale:.{digits}f}{suffix}"


def _m(m: str | Metric) -> Metric:
    return m if isinstance(m, Metric) else metric(m)


def value(x: Any, m: str | Metric, unit: bool = False) -> str:
    """One value of a metric, with the registry's digits (and its unit when asked)."""
    m = _m(m)
    suffix = "%" if m.unit == "%" else (f" {m.unit}" if unit and m.unit else "")
    return num(x, m.digits, m.scale, suffix)


def figure(x: Any, m: str | Metric | None = None, sign: bool = False) -> str:
    """A figure in a sentence, as a person writes it: three significant digits in the unit that
    suits it ("5.97 s", "230 MiB", "2.13 M"); ``m``: the metric it is a value of (None: a plain
    count)."""
    if isnan(x):
        return DASH
    m = _m(m) if m is not None else None
    return quantity(float(x) / (m.scale if m else 1.0), m.unit if m else "", sign)


def figure_interval(x: Any, low: Any, high: Any, m: str | Metric, sign: bool = True) -> str:
    """A figure and its 95% CI in the figure's unit: "+5.97 s (95% CI +3.29 to +8.65 s)"."""
    if isnan(x):
        return DASH
    m = _m(m)
    scaled = [None if isnan(v) else float(v) / m.scale for v in (x, low, high)]
    return with_interval(*scaled, m.unit, sign)


def heading(m: str | Metric, qualifier: str = "", each_unit: bool = False) -> str:
    """A column heading: the metric's label (plus a table's qualifier, e.g. "added") and its
    unit; ``each_unit``: its cells carry their own (mean_sd_each), so the heading does not."""
    m = _m(m)
    words = f"{m.label} {qualifier}".strip()
    if each_unit and scales(m.unit):
        return words
    return f"{words} ({m.unit})" if m.unit and m.unit != "%" else words


def mean_sd_each(d: Mapping[str, Any], m: str | Metric) -> str:
    """'mean ± sd' as a person writes it, each cell in the unit that suits its mean ("356 ±
    28 ms", "72 ± 4 µs"); a metric whose unit does not scale (req/s) keeps the compact form
    under its heading's unit."""
    m = _m(m)
    if not scales(m.unit) or isnan(d.get("n")) or not d.get("n") or isnan(d.get("mean")) \
            or math.isinf(d["mean"]):
        return mean_sd(d, m, n=False, compact=True)
    sd = None if int(d["n"]) == 1 or isnan(d.get("sd")) else d["sd"] / m.scale
    return with_spread(d["mean"] / m.scale, sd, m.unit)


def compact_digits(x: float, digits: int) -> int:
    """The registry's decimals, but no more than three significant digits, whole digits all
    kept: '4225', not '4224.68'; '12.3', not '12.345' (a narrow table, its unit in the heading;
    the exact value is in the artifacts)."""
    if isnan(x) or x == 0:
        return digits
    return min(digits, max(0, 2 - math.floor(math.log10(abs(x)))))


def mean_sd(d: Mapping[str, Any], m: str | Metric, n: bool = True, compact: bool = False) -> str:
    """'mean ± sd (n=…)'; 'mean (n=1)' for a single run; '—' when there is none. ``n=False``
    leaves the run count out (a table that states it in its own column); ``compact`` keeps to
    four significant digits (compact_digits)."""
    m = _m(m)
    if isnan(d.get("n")) or not d.get("n") or isnan(d.get("mean")):
        return DASH
    count = f" (n={int(d['n'])})" if n else ""
    if math.isinf(d["mean"]):
        return f"{NOT_REACHED}{count}"
    mean = d["mean"] / m.scale
    digits = compact_digits(mean, m.digits) if compact else m.digits
    if int(d["n"]) == 1 or isnan(d.get("sd")):
        return f"{mean:.{digits}f}{count}"
    return f"{mean:.{digits}f} ± {d['sd'] / m.scale:.{digits}f}{count}"


def spread(d: Mapping[str, Any], m: str | Metric) -> str:
    """A run set's detail for a tooltip: n, the 95% CI and the CoV (when it is defined)."""
    m = _m(m)
    text = mean_sd(d, m)
    if not isnan(d.get("ci95_half")):
        text += f"; 95% CI {value(d['ci95_low'], m)} to {value(d['ci95_high'], m)}"
    if not isnan(d.get("cov")):
        text += f"; CoV {d['cov']:.0%}" + (" (unstable)" if d.get("unstable") else "")
    return text


def pct(x: Any, digits: int = 1) -> str:
    return "n/a" if isnan(x) else f"{x:.{digits}%}"


def when(t: Any) -> str:
    if isnan(t):
        return DASH
    return dt.datetime.fromtimestamp(float(t), dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def gib(x: Any) -> str:
    return DASH if isnan(x) else f"{float(x) / 2**30:.1f} GiB"


def size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024.0
    return f"{n} B"


def verdict_word(outcome: Outcome, m: str | Metric) -> str:
    """"faster", "less CPU", ... in the metric's own words; "no clear difference" otherwise."""
    if outcome is Outcome.NO_CLEAR_DIFFERENCE:
        return outcome.value
    better, worse = _m(m).words
    return better if outcome is Outcome.BETTER else worse


def times(r: Any) -> str:
    """A ratio as '×N': '×148', '×4.2', '×0.93' (never '14700% off 1')."""
    if isnan(r):
        return DASH
    r = float(r)
    return f"×{r:,.0f}" if abs(r) >= 10 else f"×{r:.1f}" if abs(r) >= 2 else f"×{r:.2f}"


def _off(ratio: float, digits: int) -> str:
    """How far a ratio is from 1: '5.0% off 1' when close, '×148 the reference' when not."""
    if 0.5 < ratio < 2:
        return f"{abs(ratio - 1):.{digits}%} off 1"
    return f"{times(ratio)} the reference"


def signed(x: Any, m: Metric | None) -> str:
    if isnan(x):
        return DASH
    if m is None:
        return f"{float(x):+.4g}"
    return ("+" if x >= 0 else "") + value(x, m)


def effect(v: Mapping[str, Any], m: str | Metric) -> str:
    """The effect a verdict was judged on: '×1.08 ± 0.03', or for a DIFFERENCE verdict
    '+3.15 s (95% CI +3.10 to +3.20 s)'."""
    m = _m(m)
    if v["basis"] is Basis.DIFFERENCE:
        return figure_interval(v["diff"], v["diff_low"], v["diff_high"], m)
    if isnan(v["ratio"]):
        return DASH
    return times(v["ratio"]) + ("" if isnan(v["ratio_sd"]) else f" ± {v['ratio_sd']:.2g}")


def verdict_reason(v: Mapping[str, Any]) -> str:
    """Why a verdict (a compare() row, or a Verdict as a dict) is what it is, with its numbers."""
    basis, ratio, ratio_sd, p = v["basis"], v["ratio"], v["ratio_sd"], v["p_value"]
    if basis is Basis.NOT_COMPARED:
        return "not compared: the floor is what this overhead is measured against"
    if basis is Basis.TOO_FEW_RUNS:
        return f"too few completed runs for a t-test (n={v['n']} vs {v['n_ref']})"
    ptxt = f"Welch p = {p:.3g}" if not math.isnan(p) else "Welch p undefined"
    if basis is Basis.DIFFERENCE:
        m = metric(v["metric"]) if v.get("metric") in METRICS else None
        how = (figure_interval(v["diff"], v["diff_low"], v["diff_high"], m) if m else
               f"{signed(v['diff'], m)} (95% CI {signed(v['diff_low'], m)} to "
               f"{signed(v['diff_high'], m)})")
        dtxt = (f"difference {how}, compared as a difference: the reference's mean "
                f"({v['mean_ref']:.3g}) is ≤ 0 or not clear of zero, so a ratio would mislead")
        if v["outcome"] is not Outcome.NO_CLEAR_DIFFERENCE:
            return f"{dtxt}; {ptxt} < {VERDICT_ALPHA:g}"
        if math.isnan(p) or p >= VERDICT_ALPHA:
            return f"{dtxt}; {ptxt}" + (f" ≥ {VERDICT_ALPHA:g}" if not math.isnan(p) else "")
        return (f"{dtxt}; {ptxt} < {VERDICT_ALPHA:g} but the difference is below "
                f"{VERDICT_MIN_EFFECT:.0%} of the reference (or the measurement's resolution)")
    rtxt = (f"ratio {times(ratio)}" if isnan(ratio_sd)
            else f"ratio {times(ratio)} ± {ratio_sd:.2g}")
    if v["outcome"] is not Outcome.NO_CLEAR_DIFFERENCE:
        return (f"{rtxt}, {ptxt} < {VERDICT_ALPHA:g} and the ratio is {_off(ratio, 0)} "
                f"(≥ {VERDICT_MIN_EFFECT:.0%} off 1)")
    why = []
    if math.isnan(p) or p >= VERDICT_ALPHA:
        why.append(f"{ptxt} ≥ {VERDICT_ALPHA:g}" if not math.isnan(p) else ptxt)
    if abs(ratio - 1) < VERDICT_MIN_EFFECT:
        why.append(f"the ratio is only {_off(ratio, 1)} (< {VERDICT_MIN_EFFECT:.0%})")
    return f"{rtxt}: " + " and ".join(why)


def configuration(resilience: str, note: str) -> str:
    """How a system ran in the fault lane: "recommended", or "as shipped" with the reason when
    there is one (a system asked for its recommended configuration that declares none)."""
    if resilience == "recommended" and not note:
        return "recommended"
    return "as shipped" + (f": {note}" if note else "")


def verdict_class(outcome: Outcome | None) -> str:
    """The CSS class a verdict is shown with."""
    return {Outcome.BETTER: "verdict-better", Outcome.WORSE: "verdict-worse"}.get(outcome, "")


# --- machines -------------------------------------------------------------------------------------

# marketing words that make a CPU model too long for the first screen's one line
_CPU_NOISE = (r"\((?:R|TM|tm|r)\)", r"\bCPU\b", r"\bProcessor\b", r"\b\d+-Core\b", r"@\s*[\d.]+\s*GHz")


def cpu_short(model: str) -> str:
    """'Intel(R) Xeon(R) Platinum 8370C CPU @ 2.80GHz' → 'Intel Xeon Platinum 8370C' (the
    whole model goes in a tooltip)."""
    short = model
    for pattern in _CPU_NOISE:
        short = re.sub(pattern, " ", short)
    short = re.sub(r"\s+", " ", short).strip(" ,")
    return short or model


def kernel_text(facts: Mapping[str, str]) -> str:
    """'Linux 6.1.0-18-amd64': the kernel release, after the OS's name when the release lacks it."""
    kernel = facts.get("kernel", "unknown")
    if kernel == "unknown" or not kernel[:1].isdigit():
        return kernel if kernel != "unknown" else "kernel unknown"
    system = facts.get("os", "").split("-")[0]
    return f"{system or 'kernel'} {kernel}"


def machine_line(facts: Mapping[str, str], short: bool = True) -> str:
    """'AMD EPYC 7763, 2 cores, Linux 6.1.0-18-amd64' from harness.stats.machines.machine_fields;
    "unknown" where the manifest does not say."""
    model = facts.get("cpu_model", "unknown")
    cores = facts.get("cpu_count", "unknown")
    unit = "core" if cores == "1" else "cores"
    return f"{cpu_short(model) if short else model}, {cores} {unit}, {kernel_text(facts)}"


def different_machines(a: Mapping[str, str], b: Mapping[str, str]) -> str:
    """The sentence a comparison of studies from different machines opens with."""
    return (f"These studies ran on different machines (A: {machine_line(a)}; B: "
            f"{machine_line(b)}): differences between them are not verdicts.")


def placement_text(config) -> str:
    """Where the roles ran, from a StudyConfig's affinity and niceness: 'system under test on its
    own core (CPU 1); load generator and mock on CPU 0; mock at nice -5', or 'every role on any
    CPU' when none was pinned or niced."""
    pins = {"system under test": config.cpu_affinity_system, "load generator": config.cpu_affinity_load,
            "mock": config.cpu_affinity_mock}
    nice = {"load generator": config.nice_load, "mock": config.nice_mock,
            "system under test": config.nice_system}
    parts = []
    system_cpus = pins["system under test"]
    others = [v for k, v in pins.items() if k != "system under test"]
    if system_cpus and all(v and not set(v.split(",")) & set(system_cpus.split(",")) for v in others):
        parts.append(f"system under test on its own core{'s' if '-' in system_cpus or ',' in system_cpus else ''} "
                     f"(CPU {system_cpus})")
        pins.pop("system under test")
    by_cpus: dict[str, list[str]] = {}
    for role, cpus in pins.items():
        if cpus:
            by_cpus.setdefault(cpus, []).append(role)
    parts += [f"{' and '.join(roles)} on CPU {cpus}" for cpus, roles in by_cpus.items()]
    parts += [f"{role} at nice {level}" for role, level in nice.items() if level]
    return "; ".join(parts) or "every role on any CPU"
