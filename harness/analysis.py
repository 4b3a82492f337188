"""The statistics of a study, computed from the raw artifacts only (artifacts/README.md).

Everything here is a pure function over the Parquet rows, the samples and the manifests of one
study directory: no Locust summary, no rounding before the end. The run is the unit: each figure
is computed per run, then summarised across the runs of a system, then compared with a reference
system.

Definitions (the report's methodology prints the same text, from ``DEFINITIONS``):

* measured window: ``[hold_start, hold_end)`` from the run manifest's ``phases``; a request belongs
  to it when its ``start_t_unix_s`` falls inside (the same rows as ``phase == "hold"``);
* latency percentiles: over the window's successful requests (``error_kind == ""``), numpy's
  default linear interpolation;
* throughput: successful requests started in the window / the window's length;
* overhead vs mock: a latency percentile minus the mock's set latency;
* overhead vs direct: a latency percentile minus the same percentile of the direct baseline
  (mean over its completed runs) at the same user count (bins of ``bin_users``);
* CPU-ms per request: the ``system`` role's ``cpu_seconds_total`` difference over the window
  (linearly interpolated at the window's edges) × 1000 / requests started in the window;
* memory (``system`` role, tree-summed RSS): idle = median before the load starts, peak = max over
  the run, steady = median during the window, recovered = the last sample after the load ended.
"""
from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd
from scipy import stats

from harness.store import sha256_file

SCHEMA_VERSION = 1

# --- thresholds (the criteria) -----------------------------------------------------------
LOCUST_CPU_LIMIT_PERCENT = 90.0      # per Locust process; Locust itself warns at 90 %
MOCK_HOLD_TOLERANCE_MS = 2.0         # the mock's hold-time p99 must be within this of its setting
MOCK_CPU_LIMIT_FRACTION = 0.9        # the mock's CPU must stay below this share of its workers' cores
OTHER_CPU_LIMIT_PERCENT = 20.0       # other processes' mean CPU in the window (100 = one core);
                                     # beyond the list: on a shared machine they compete
OFFERED_SHARE = 0.90                 # serving this share of a paced offered load: not a limit
UNSTABLE_COV = 0.10                  # a run set with CoV >= 10 % is unstable
VERDICT_ALPHA = 0.05                 # Welch's t-test p below this ...
VERDICT_MIN_EFFECT = 0.10            # ... and the ratio off 1 by at least this: a verdict
DEFAULT_BIN_USERS = 50
DEFAULT_REFERENCE = "nginx"
DEFAULT_DIRECT = "direct"
PERCENTILES = (50, 95, 99)
ERROR_KINDS = ("http", "timeout", "connection", "other")

REQUEST_COLUMNS: dict[str, str] = {
    "run_id": "str", "system": "str", "start_t_unix_s": "float64", "latency_ms": "float64",
    "status_code": "int32", "response_bytes": "int64", "error_kind": "str", "error": "str",
    "users": "int32", "phase": "str", "worker_pid": "int32", "worker_host": "str",
    "mock_request_id": "str", "self_overhead_ms": "float64",
}
SAMPLE_COLUMNS: dict[str, str] = {
    "run_id": "str", "system": "str", "t_unix_s": "float64", "role": "str", "pid_count": "int32",
    "rss_bytes": "int64", "cpu_percent": "float64", "cpu_seconds_total": "float64",
    "num_fds": "int32", "load_avg_1m": "float64",
}

# The headline figures: (column, unit, which direction is better, verdict words better/worse).
METRICS: dict[str, dict[str, Any]] = {
    "throughput_rps": dict(label="throughput", unit="req/s", higher_is_better=True,
                           words=("faster", "slower")),
    "latency_p50_ms": dict(label="latency p50", unit="ms", higher_is_better=False,
                           words=("faster", "slower")),
    "latency_p95_ms": dict(label="latency p95", unit="ms", higher_is_better=False,
                           words=("faster", "slower")),
    "latency_p99_ms": dict(label="latency p99", unit="ms", higher_is_better=False,
                           words=("faster", "slower")),
    "overhead_vs_mock_p50_ms": dict(label="median overhead (vs mock)", unit="ms",
                                    higher_is_better=False, words=("faster", "slower")),
    "overhead_vs_mock_p95_ms": dict(label="p95 overhead (vs mock)", unit="ms",
                                    higher_is_better=False, words=("faster", "slower")),
    "overhead_vs_mock_p99_ms": dict(label="p99 overhead (vs mock)", unit="ms",
                                    higher_is_better=False, words=("faster", "slower")),
    "overhead_vs_direct_p50_ms": dict(label="median overhead (vs direct)", unit="ms",
                                      higher_is_better=False, words=("faster", "slower")),
    "overhead_vs_direct_p95_ms": dict(label="p95 overhead (vs direct)", unit="ms",
                                      higher_is_better=False, words=("faster", "slower")),
    "overhead_vs_direct_p99_ms": dict(label="p99 overhead (vs direct)", unit="ms",
                                      higher_is_better=False, words=("faster", "slower")),
    "cpu_ms_per_request": dict(label="CPU-ms per request", unit="ms", higher_is_better=False,
                               words=("less CPU", "more CPU")),
    "rss_peak_bytes": dict(label="peak RSS", unit="bytes", higher_is_better=False,
                           words=("less memory", "more memory")),
    "rss_steady_bytes": dict(label="steady RSS", unit="bytes", higher_is_better=False,
                             words=("less memory", "more memory")),
    "errors_total": dict(label="errors", unit="requests", higher_is_better=False,
                         words=("fewer errors", "more errors")),
}
SUMMARY_METRICS = tuple(METRICS)
COMPARE_METRICS = tuple(m for m in METRICS if m != "errors_total")

DEFINITIONS: dict[str, str] = {
    "measured window": "[hold_start, hold_end) from each run manifest's phases; a request belongs "
                       "to it when it was sent inside (the rows with phase == \"hold\"). Warm-up, "
                       "ramp and tail are excluded.",
    "latency percentiles": "over the window's successful requests (error_kind == \"\"), numpy's "
                           "default linear interpolation, in ms from send to last byte.",
    "throughput": "successful requests sent in the window divided by the window's length.",
    "overhead vs mock": "a latency percentile minus the mock's set latency (the HeimOS way).",
    "overhead vs direct": "a latency percentile minus the same percentile of the direct baseline "
                          "(mean over its completed runs) at the same user count (users binned).",
    "errors": "rows of the whole run by error_kind (http, timeout, connection, other), plus the "
              "requests still in flight when the load stopped (run manifest checks).",
    "CPU-ms per request": "the system's process-tree cpu_seconds_total difference over the window "
                          "(interpolated at its edges) × 1000 / requests sent in the window.",
    "memory": "the system's tree-summed RSS: idle = median before the load, peak = maximum over "
              "the run, steady = median in the window, recovered = last sample after the load.",
    "summary across runs": "mean ± sample sd over completed runs only; CoV = sd / |mean|, a run set "
                           "with CoV ≥ 10% is flagged unstable; 95% CI = mean ± t(0.975, n−1)·sd/√n.",
    "verdict": "against the reference system: the ratio of means with its propagated sd; "
               "\"faster\"/\"slower\" (or less/more CPU, memory) only when Welch's t-test gives "
               "p < 0.05 and the ratio differs from 1 by at least 10%; otherwise "
               "\"no clear difference\".",
    "capacity or behaviour": "a run measures capacity only when nothing but the system limited it: "
                             "Locust below 90% CPU per process and no Locust CPU warning, the mock's "
                             "hold-time p99 within 2 ms of its setting, the mock's CPU below 90% of "
                             "its workers' cores, the load average before the run below the core "
                             "count, zero failed requests; and, beyond those, other processes on "
                             "the machine using at most 20% of a core on average in the window. "
                             "Otherwise it shows behaviour.",
}


class ArtifactError(RuntimeError):
    """A study directory that cannot be analysed as it is."""


class IntegrityError(ArtifactError):
    """A run's file no longer matches the SHA-256 its run manifest recorded."""


# --- loading -------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Study:
    """One study directory, loaded. ``requests`` and ``samples`` hold every run's rows, with an
    extra ``run_status`` column (the run manifest's status) so incomplete runs stay visible."""

    path: Path
    manifest: dict
    runs: list[dict]                      # run manifests, in plan order
    requests: pd.DataFrame
    samples: pd.DataFrame
    mock_stats: dict[str, dict] = field(default_factory=dict)   # run_id -> mock_stats.json
    run_dirs: dict[str, Path] = field(default_factory=dict)     # run_id -> run directory

    def run(self, run_id: str) -> dict:
        for r in self.runs:
            if r.get("run_id") == run_id:
                return r
        raise KeyError(f"no run {run_id!r} in study {self.path}")

    @property
    def systems(self) -> list[str]:
        return system_order(self)

    @property
    def completed_run_ids(self) -> list[str]:
        return [r["run_id"] for r in self.runs if r.get("status") == "completed"]


def verify_run_files(run_dir: Path, run_manifest: Mapping) -> None:
    """Raise IntegrityError naming the first file whose SHA-256 differs from the manifest's."""
    files = run_manifest.get("files") or {}
    for name, expected in sorted(files.items()):
        path = Path(run_dir) / name
        if not path.is_file():
            raise IntegrityError(f"{path}: listed in the run manifest's files but missing; "
                                 f"refusing to analyse run {run_manifest.get('run_id')!r}")
        actual = sha256_file(path)
        if actual != str(expected).lower():
            raise IntegrityError(
                f"{path}: SHA-256 {actual} does not match {expected} recorded in "
                f"{Path(run_dir) / 'manifest.json'}; the artifact changed after run "
                f"{run_manifest.get('run_id')!r} ended, refusing to analyse it")


def _read_json(path: Path) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _empty_frame(columns: Mapping[str, str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})


def _read_parquet(path: Path, columns: Mapping[str, str]) -> pd.DataFrame:
    if not path.is_file():
        return _empty_frame(columns)
    df = pd.read_parquet(path)
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ArtifactError(f"{path}: missing columns {missing} (artifacts/README.md)")
    return df


def _concat(frames: list[pd.DataFrame], columns: Mapping[str, str]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        df = _empty_frame(columns)
        df["run_status"] = pd.Series(dtype="str")
        return df
    return pd.concat(frames, ignore_index=True)


def load_study(study_dir: str | Path, verify: bool = True) -> Study:
    """Load a study directory. Runs that did not complete are kept (``status`` in their manifest,
    ``run_status`` in the rows); a run whose files no longer match their recorded SHA-256 is
    refused with IntegrityError naming the file (``verify=False`` skips the check)."""
    path = Path(study_dir)
    manifest_path = path / "manifest.json"
    if not manifest_path.is_file():
        raise ArtifactError(f"{manifest_path}: no study manifest; is {path} a study directory?")
    manifest = _read_json(manifest_path)

    # Run directories: those the study manifest lists, then any other found on disk.
    entries: list[dict] = [dict(e) for e in manifest.get("runs") or []]
    listed = {e.get("run_id") for e in entries}
    for mpath in sorted((path / "runs").glob("*/*/manifest.json")):
        rm = _read_json(mpath)
        if rm.get("run_id") not in listed:
            entries.append({"run_id": rm.get("run_id"), "system": rm.get("system"),
                            "run_index": rm.get("run_index"), "status": rm.get("status"),
                            "reason": rm.get("reason", ""),
                            "dir": str(mpath.parent.relative_to(path))})
            listed.add(rm.get("run_id"))
    plan_pos = {p.get("run_id"): i for i, p in enumerate(manifest.get("plan") or [])}
    entries.sort(key=lambda e: (plan_pos.get(e.get("run_id"), len(plan_pos)), str(e.get("run_id"))))

    runs: list[dict] = []
    reqs: list[pd.DataFrame] = []
    samps: list[pd.DataFrame] = []
    mock_stats: dict[str, dict] = {}
    run_dirs: dict[str, Path] = {}
    for entry in entries:
        run_id = entry.get("run_id")
        rel = entry.get("dir") or f"runs/{entry.get('system')}/{entry.get('run_index')}"
        run_dir = Path(rel) if Path(rel).is_absolute() else path / rel
        mpath = run_dir / "manifest.json"
        if mpath.is_file():
            rm = _read_json(mpath)
        else:  # the run died before writing its manifest: keep it, marked
            rm = {"run_id": run_id, "system": entry.get("system"),
                  "run_index": entry.get("run_index"), "status": entry.get("status") or "failed",
                  "reason": entry.get("reason") or f"no run manifest at {mpath}",
                  "phases": {}, "files": {}}
        if rm.get("status") != "completed" and entry.get("status") and entry["status"] != "completed":
            rm.setdefault("reason", entry.get("reason", ""))
        if verify:
            verify_run_files(run_dir, rm)
        rm = dict(rm)
        status = rm.get("status") or "unknown"
        runs.append(rm)
        run_dirs[run_id] = run_dir
        r = _read_parquet(run_dir / "requests.parquet", REQUEST_COLUMNS)
        s = _read_parquet(run_dir / "samples.parquet", SAMPLE_COLUMNS)
        for df in (r, s):
            df["run_status"] = status
        reqs.append(r)
        samps.append(s)
        ms = run_dir / "mock_stats.json"
        mock_stats[run_id] = _read_json(ms) if ms.is_file() else {}

    return Study(path=path, manifest=manifest, runs=runs,
                 requests=_concat(reqs, REQUEST_COLUMNS), samples=_concat(samps, SAMPLE_COLUMNS),
                 mock_stats=mock_stats, run_dirs=run_dirs)


# --- small helpers -------------------------------------------------------------------------------

def system_order(study: Study) -> list[str]:
    """Systems in the study's configured order, then any others in plan order."""
    order: list[str] = []
    cfg = study.manifest.get("config") or {}
    for name in list(cfg.get("gateways") or []) + list((study.manifest.get("systems") or {})):
        if name not in order:
            order.append(name)
    for r in study.runs:
        if r.get("system") not in order:
            order.append(r.get("system"))
    return order


def _find_key(obj: Any, keys: Iterable[str]) -> Any:
    """First value found for any of ``keys`` in a nested dict (breadth-first)."""
    keys = tuple(keys)
    queue = [obj]
    while queue:
        cur = queue.pop(0)
        if isinstance(cur, Mapping):
            for k in keys:
                if k in cur and cur[k] is not None and not isinstance(cur[k], Mapping):
                    return cur[k]
            queue.extend(v for v in cur.values() if isinstance(v, Mapping))
    return None


def _num(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def mock_latency_ms(study: Study, run: Mapping) -> float:
    """The mock's set latency for a run: from its spec, else the study config, else mock_stats."""
    spec = run.get("spec") or {}
    v = _find_key(spec, ("mock_latency_ms",))
    if v is None and isinstance(spec.get("mock"), Mapping):
        v = spec["mock"].get("latency_ms")
    if v is None:
        v = (study.manifest.get("config") or {}).get("mock_latency_ms")
    if v is None:
        v = study.mock_stats.get(run.get("run_id"), {}).get("latency_ms")
    return _num(v)


def _mock_workers(study: Study, run: Mapping) -> float:
    v = _find_key(run.get("spec") or {}, ("mock_workers",))
    if v is None and isinstance((run.get("spec") or {}).get("mock"), Mapping):
        v = run["spec"]["mock"].get("workers")
    if v is None:
        v = study.mock_stats.get(run.get("run_id"), {}).get("workers")
    if v is None:
        v = (study.manifest.get("config") or {}).get("mock_workers")
    n = _num(v)
    return n if n > 0 else 1.0


def _locust_processes(study: Study, run: Mapping) -> float:
    """Load-generating Locust processes (workers); the manifest may give a count or a list."""
    v = _find_key(run.get("spec") or {}, ("locust_processes",))
    if v is None:
        v = (study.manifest.get("config") or {}).get("locust_processes")
    if v is None:
        p = (run.get("locust") or {}).get("processes")
        v = len(p) if isinstance(p, (list, tuple)) else p
    n = _num(v)
    return n if n > 0 else 1.0


def _load_avg_before(run: Mapping, samples: pd.DataFrame) -> float:
    hb = run.get("host_before") or {}
    for key in ("load_avg_1m", "loadavg_1m", "load_1m"):
        if key in hb:
            return _num(hb[key])
    for key in ("load_avg", "loadavg", "load_averages"):
        v = hb.get(key)
        if isinstance(v, (list, tuple)) and v:
            return _num(v[0])
        if isinstance(v, Mapping):
            for k in ("1m", "load_avg_1m", "1"):
                if k in v:
                    return _num(v[k])
    if len(samples):
        first = samples.sort_values("t_unix_s").iloc[0]
        return _num(first["load_avg_1m"])
    return math.nan


def _cpu_count(study: Study) -> float:
    machine = study.manifest.get("machine") or {}
    return _num(machine.get("cpu_count"))


def _phase(run: Mapping, name: str) -> float:
    return _num((run.get("phases") or {}).get(f"{name}_t_unix_s"))


def _pct(values: np.ndarray | pd.Series, q: float) -> float:
    a = np.asarray(values, dtype="float64")
    a = a[~np.isnan(a)]
    return float(np.percentile(a, q)) if a.size else math.nan


def _interp(t: np.ndarray, v: np.ndarray, at: float) -> float:
    if t.size == 0 or math.isnan(at):
        return math.nan
    if at < t[0] or at > t[-1]:
        # outside the sampled span: only the nearest sample within 1.5 s is trusted
        nearest = t[0] if at < t[0] else t[-1]
        if abs(at - nearest) > 1.5:
            return math.nan
    return float(np.interp(at, t, v))


def users_bin(users: pd.Series | np.ndarray, bin_users: int = DEFAULT_BIN_USERS) -> np.ndarray:
    """The lower edge of each user count's bin: floor(users / bin_users) * bin_users."""
    u = np.asarray(users, dtype="int64")
    return (u // int(bin_users)) * int(bin_users)


def window_rows(study: Study, run: Mapping) -> pd.DataFrame:
    """The rows of a run sent inside its measured window [hold_start, hold_end)."""
    lo, hi = _phase(run, "hold_start"), _phase(run, "hold_end")
    rows = study.requests[study.requests["run_id"] == run.get("run_id")]
    if math.isnan(lo) or math.isnan(hi):
        return rows.iloc[0:0]
    t = rows["start_t_unix_s"]
    return rows[(t >= lo) & (t < hi)]


def _ok(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[rows["error_kind"].fillna("") == ""]


def _direct_bins(study: Study, direct: str, bin_users: int) -> pd.DataFrame | None:
    """Per users-bin, the direct baseline's window percentiles, averaged over its completed runs."""
    per_run = []
    for run in study.runs:
        if run.get("system") != direct or run.get("status") != "completed":
            continue
        ok = _ok(window_rows(study, run))
        if not len(ok):
            continue
        b = users_bin(ok["users"], bin_users)
        for edge, grp in ok.groupby(b):
            per_run.append({"bin": int(edge), "run_id": run["run_id"],
                            **{f"p{q}": _pct(grp["latency_ms"], q) for q in PERCENTILES}})
    if not per_run:
        return None
    return pd.DataFrame(per_run).groupby("bin")[[f"p{q}" for q in PERCENTILES]].mean()


# --- capacity or behaviour -----------------------------------------------------------------------

def classify(row: Mapping) -> tuple[str, list[str]]:
    """('capacity' | 'behaviour' | 'failed', reasons) for one run_summary row (or a dict with the
    same keys). Capacity needs positive evidence for every criterion; missing data is a reason."""
    if row.get("status") != "completed":
        status = row.get("status")
        if status == "running":
            return "failed", ["run still running (not finished when the study was read)"]
        return "failed", [f"run {status}: {row.get('reason') or 'no reason recorded'}"]
    reasons: list[str] = []
    peak = _num(row.get("locust_cpu_peak_percent"))
    procs = _num(row.get("locust_processes"))
    procs = procs if procs > 0 else 1.0   # NaN compares False
    limit = LOCUST_CPU_LIMIT_PERCENT * procs
    if math.isnan(peak):
        reasons.append("Locust CPU was not sampled")
    elif peak >= limit:
        reasons.append(f"Locust CPU peaked at {peak:.0f}% (limit {limit:.0f}% for "
                       f"{procs:.0f} process{'es' if procs != 1 else ''}): the load generator "
                       "limited the load")
    if bool(row.get("locust_cpu_warning")):
        reasons.append("Locust printed its high-CPU warning")
    hold99, set_ms = _num(row.get("mock_hold_p99_ms")), _num(row.get("mock_latency_ms"))
    if math.isnan(hold99) or math.isnan(set_ms):
        reasons.append("the mock's hold-time p99 is unknown")
    elif hold99 - set_ms > MOCK_HOLD_TOLERANCE_MS:
        reasons.append(f"the mock's hold-time p99 was {hold99:.2f} ms for a set {set_ms:g} ms "
                       f"(+{hold99 - set_ms:.2f} ms > {MOCK_HOLD_TOLERANCE_MS:g} ms): the mock "
                       "was slowed")
    mpeak, mlimit = _num(row.get("mock_cpu_peak_percent")), _num(row.get("mock_cpu_limit_percent"))
    if math.isnan(mpeak):
        reasons.append("the mock's CPU was not sampled")
    elif not math.isnan(mlimit) and mpeak >= mlimit:
        reasons.append(f"the mock's CPU peaked at {mpeak:.0f}% (limit {mlimit:.0f}%)")
    load, cores = _num(row.get("load_avg_before")), _num(row.get("cpu_count"))
    if math.isnan(load) or math.isnan(cores):
        reasons.append("the load average before the run is unknown")
    elif load >= cores:
        reasons.append(f"the load average before the run was {load:.2f} on {cores:.0f} cores: "
                       "the machine was already busy")
    other = _num(row.get("other_cpu_mean_percent"))
    if not math.isnan(other) and other > OTHER_CPU_LIMIT_PERCENT:
        reasons.append(f"other processes on the machine used {other:.0f}% CPU on average during "
                       f"the window (> {OTHER_CPU_LIMIT_PERCENT:.0f}%)")
    failures = sum(int(_num(row.get(f"errors_{k}")) or 0) for k in ERROR_KINDS
                   if not math.isnan(_num(row.get(f"errors_{k}"))))
    if failures:
        parts = [f"{int(row.get(f'errors_{k}'))} {k}" for k in ERROR_KINDS
                 if _num(row.get(f"errors_{k}")) > 0]
        reasons.append(f"{failures} failed request{'s' if failures != 1 else ''} "
                       f"({', '.join(parts)})")
    cm = row.get("count_match")
    if cm is not None and not (isinstance(cm, float) and math.isnan(cm)) and not bool(cm):
        reasons.append("the mock's count does not match the successful rows")
    offered, tput = _num(row.get("offered_rps")), _num(row.get("throughput_rps"))
    if not math.isnan(offered) and not math.isnan(tput) and tput >= OFFERED_SHARE * offered:
        reasons.append(f"the users' think time capped the load at ~{offered:.0f} req/s and the "
                       f"system served {tput:.0f} req/s: the offered load, not the system, set "
                       "the throughput")
    return ("behaviour" if reasons else "capacity"), reasons


# --- per run -------------------------------------------------------------------------------------

def _other_cpu(run: Mapping, samples: pd.DataFrame, start: float, end: float) -> tuple[float, float]:
    """(machine CPU, CPU of processes not ours) as window means, % of one core. With several
    hosts, hosts that report the same hostname are one machine (network namespaces share it):
    a machine's own figure comes from any of its hosts, ours is summed over all of them; the
    busiest machine is reported."""
    w = samples[(samples["t_unix_s"] >= start) & (samples["t_unix_s"] < end)]
    if "host" not in w.columns:
        w = w.assign(host="")
    facts = run.get("hosts") or {}
    machine_of = {h: ((facts.get(h) or {}).get("before") or {}).get("hostname") or h
                  for h in pd.unique(w["host"])}
    worst = (math.nan, math.nan)
    for name in sorted(set(machine_of.values()), key=str):
        hosts = [h for h, m in machine_of.items() if m == name]
        here = w[w["host"].isin(hosts)]

        def mean_of(rows: pd.DataFrame) -> float:
            v = rows["cpu_percent"].to_numpy(dtype="float64")
            v = v[~np.isnan(v)]
            return float(v.mean()) if v.size else math.nan
        machine = mean_of(here[here["role"] == "machine"])
        if math.isnan(machine):
            continue
        ours = [mean_of(here[(here["role"] == role) & (here["host"] == h)])
                for role in ("system", "mock", "locust") for h in hosts]
        other = machine - sum(v for v in ours if not math.isnan(v))
        if math.isnan(worst[1]) or other > worst[1]:
            worst = (machine, other)
    return worst


def run_summary(study: Study, bin_users: int = DEFAULT_BIN_USERS,
                direct: str = DEFAULT_DIRECT) -> pd.DataFrame:
    """One row per run (plan order) with every per-run figure; see the module docstring."""
    direct_bins = _direct_bins(study, direct, bin_users)
    has_direct_run = any(r.get("system") == direct for r in study.runs)
    out = []
    for run in study.runs:
        rid = run.get("run_id")
        status = run.get("status") or "unknown"
        rows = study.requests[study.requests["run_id"] == rid]
        samples = study.samples[study.samples["run_id"] == rid]
        w = window_rows(study, run)
        ok = _ok(w)
        hs, he = _phase(run, "hold_start"), _phase(run, "hold_end")
        ws = _phase(run, "warmup_start")
        rs = _phase(run, "ramp_start")
        le = _phase(run, "load_end")
        load_start = ws if not math.isnan(ws) else rs
        window_s = he - hs
        rec: dict[str, Any] = {
            "run_id": rid, "system": run.get("system"), "run_index": run.get("run_index"),
            "round": run.get("round"), "position": run.get("position"), "status": status,
            "reason": run.get("reason", "") or "", "comparison_key": run.get("comparison_key", ""),
            "window_start_t_unix_s": hs, "window_end_t_unix_s": he, "window_s": window_s,
            "requests_total": int(len(rows)), "requests_in_window": int(len(w)),
            "successful_in_window": int(len(ok)),
        }
        rec["throughput_rps"] = (len(ok) / window_s) if window_s and window_s > 0 else math.nan
        lat = ok["latency_ms"].to_numpy(dtype="float64")
        for q in PERCENTILES:
            rec[f"latency_p{q}_ms"] = _pct(lat, q)
        mlat = mock_latency_ms(study, run)
        rec["mock_latency_ms"] = mlat
        for q in PERCENTILES:
            rec[f"overhead_vs_mock_p{q}_ms"] = rec[f"latency_p{q}_ms"] - mlat

        # overhead vs the direct baseline, same percentile, same users bin
        reason = ""
        if direct_bins is None:
            reason = (f"no completed {direct!r} run in this study" if not has_direct_run
                      else f"no completed {direct!r} run with requests in its window")
            vals = {q: math.nan for q in PERCENTILES}
        elif not len(ok):
            reason = "no successful requests in this run's window"
            vals = {q: math.nan for q in PERCENTILES}
        else:
            b = users_bin(ok["users"], bin_users)
            acc = {q: 0.0 for q in PERCENTILES}
            weight = 0
            for edge, grp in ok.groupby(b):
                if int(edge) not in direct_bins.index:
                    continue
                for q in PERCENTILES:
                    acc[q] += len(grp) * (_pct(grp["latency_ms"], q) - direct_bins.loc[int(edge), f"p{q}"])
                weight += len(grp)
            if weight:
                vals = {q: acc[q] / weight for q in PERCENTILES}
            else:
                vals = {q: math.nan for q in PERCENTILES}
                reason = f"no {direct!r} window data at this run's user counts"
        for q in PERCENTILES:
            rec[f"overhead_vs_direct_p{q}_ms"] = vals[q]
        rec["overhead_vs_direct_reason"] = reason

        # errors over the whole run
        kinds = rows["error_kind"].fillna("")
        known = kinds.isin(["", *ERROR_KINDS])
        for k in ERROR_KINDS:
            rec[f"errors_{k}"] = int((kinds == k).sum()) + (int((~known).sum()) if k == "other" else 0)
        rec["errors_total"] = int(sum(rec[f"errors_{k}"] for k in ERROR_KINDS))
        rec["errors_in_window"] = int(len(w) - len(ok))
        checks = run.get("checks") or {}
        infl = checks.get("inflight_at_stop")
        rec["inflight_at_stop"] = float(infl) if infl is not None else math.nan
        cm = checks.get("count_match")
        rec["count_match"] = bool(cm) if cm is not None else None

        # CPU per request and memory, from the system role
        sysm = samples[samples["role"] == "system"].sort_values("t_unix_s")
        t = sysm["t_unix_s"].to_numpy(dtype="float64")
        cpu_reason = ""
        if not len(sysm):
            cpu = math.nan
            cpu_reason = "no samples of a system process (a system the client calls directly?)"
        else:
            c = sysm["cpu_seconds_total"].to_numpy(dtype="float64")
            cpu = _interp(t, c, he) - _interp(t, c, hs)
            if math.isnan(cpu):
                cpu_reason = "the samples do not cover the measured window"
        rec["cpu_seconds_in_window"] = cpu
        rec["cpu_ms_per_request"] = (cpu * 1000.0 / len(w)) if len(w) and not math.isnan(cpu) else math.nan
        if not len(w) and not cpu_reason:
            cpu_reason = "no requests in the window"
        rec["cpu_reason"] = cpu_reason
        rss = sysm["rss_bytes"].to_numpy(dtype="float64")
        def _median(mask):
            return float(np.median(rss[mask])) if mask.any() else math.nan
        rec["rss_idle_bytes"] = _median(t < load_start) if not math.isnan(load_start) else math.nan
        rec["rss_peak_bytes"] = float(rss.max()) if rss.size else math.nan
        rec["rss_steady_bytes"] = _median((t >= hs) & (t < he)) if not math.isnan(hs) else math.nan
        after = t >= le if not math.isnan(le) else np.zeros(t.shape, bool)
        rec["rss_recovered_bytes"] = float(rss[after][-1]) if after.any() else math.nan

        # self-reported overhead
        so = ok["self_overhead_ms"].to_numpy(dtype="float64")
        so = so[~np.isnan(so)]
        rec["self_overhead_rows"] = int(so.size)
        rec["self_overhead_p50_ms"] = _pct(so, 50)
        rec["self_overhead_p95_ms"] = _pct(so, 95)

        # what else might have limited the result
        def _peak(role):
            s = samples[samples["role"] == role]
            if not math.isnan(load_start) and not math.isnan(le):
                s = s[(s["t_unix_s"] >= load_start) & (s["t_unix_s"] <= le)]
            v = s["cpu_percent"].to_numpy(dtype="float64")
            v = v[~np.isnan(v)]
            return float(v.max()) if v.size else math.nan
        locust = run.get("locust") or {}
        rec["locust_cpu_peak_percent"] = _peak("locust")
        rec["locust_processes"] = _locust_processes(study, run)
        rec["locust_cpu_warning"] = bool(locust.get("cpu_warning", False))
        mock = run.get("mock") or {}
        hold99 = mock.get("hold_ms_p99")
        if hold99 is None:
            hold99 = (study.mock_stats.get(rid, {}).get("hold_ms") or {}).get("p99")
        rec["mock_hold_p99_ms"] = _num(hold99)
        hold50 = mock.get("hold_ms_p50")
        if hold50 is None:
            hold50 = (study.mock_stats.get(rid, {}).get("hold_ms") or {}).get("p50")
        rec["mock_hold_p50_ms"] = _num(hold50)
        rec["mock_cpu_peak_percent"] = _peak("mock")
        rec["mock_cpu_limit_percent"] = 100.0 * _mock_workers(study, run) * MOCK_CPU_LIMIT_FRACTION
        rec["load_avg_before"] = _load_avg_before(run, samples)
        machine, other = _other_cpu(run, samples, hs, he)
        rec["machine_cpu_mean_percent"] = machine
        rec["other_cpu_mean_percent"] = other
        rec["cpu_count"] = _cpu_count(study)
        # Closed-loop users that wait between calls offer at most users / (think + the fastest
        # possible call: the mock's hold plus its stream). Not the measured latency: by Little's
        # law a closed loop's throughput always equals users / (think + latency), so a slow
        # system would look as if the think time, not it, had set its throughput.
        spec = run.get("spec") or {}
        load_spec, mock_spec = spec.get("load") or {}, spec.get("mock") or {}
        think, users = _num(load_spec.get("think_time_s")), _num(load_spec.get("users"))
        floor_s = (_num(mock_spec.get("latency_ms")) + (
            _num(mock_spec.get("stream_chunks")) * _num(mock_spec.get("chunk_delay_ms"))
            if load_spec.get("stream") else 0.0)) / 1000.0
        rec["offered_rps"] = (users / (think + floor_s) if think > 0 and not math.isnan(floor_s)
                              else math.nan)
        label, reasons = classify(rec)
        rec["label"] = label
        rec["label_reasons"] = "; ".join(reasons)
        out.append(rec)
    df = pd.DataFrame(out)
    if not len(df):
        return pd.DataFrame(columns=["run_id", "system", "run_index", "status", "label"])
    return df


# --- across runs ---------------------------------------------------------------------------------

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

def ramp_curve(study: Study, bin_users: int = DEFAULT_BIN_USERS,
               direct: str = DEFAULT_DIRECT) -> pd.DataFrame:
    """Per system, run and users bin along [ramp_start, hold_end): the time spent in the bin
    (the gaps from each request's send to the next, so throughput = successful / time),
    latency and overhead percentiles over the bin's successful requests."""
    direct_bins = _direct_ramp_bins(study, direct, bin_users)
    out = []
    for run in study.runs:
        rid = run.get("run_id")
        lo, hi = _phase(run, "ramp_start"), _phase(run, "hold_end")
        rows = study.requests[study.requests["run_id"] == rid]
        if math.isnan(hi):   # a run that ended early: up to its failure (or its last request)
            hi = _num(run.get("failed_t_unix_s"))
            if math.isnan(hi) and len(rows):
                hi = float(np.nextafter(rows["start_t_unix_s"].max(), math.inf))
        if math.isnan(lo) or math.isnan(hi):
            continue
        rows = rows[(rows["start_t_unix_s"] >= lo) & (rows["start_t_unix_s"] < hi)]
        if not len(rows):
            continue
        rows = rows.sort_values("start_t_unix_s", kind="mergesort")
        t = rows["start_t_unix_s"].to_numpy(dtype="float64")
        gaps = np.diff(np.append(t, hi))
        bins = users_bin(rows["users"], bin_users)
        ok_mask = (rows["error_kind"].fillna("") == "").to_numpy()
        lat = rows["latency_ms"].to_numpy(dtype="float64")
        mlat = mock_latency_ms(study, run)
        for edge in np.unique(bins):
            m = bins == edge
            dur = float(gaps[m].sum())
            okl = lat[m & ok_mask]
            rec = {"run_id": rid, "system": run.get("system"), "run_index": run.get("run_index"),
                   "status": run.get("status"), "users_bin": int(edge),
                   "users_mid": int(edge) + bin_users / 2.0, "requests": int(m.sum()),
                   "successful": int(okl.size), "duration_s": dur,
                   "throughput_rps": okl.size / dur if dur > 0 else math.nan}
            for q in PERCENTILES:
                p = _pct(okl, q)
                rec[f"latency_p{q}_ms"] = p
                rec[f"overhead_vs_mock_p{q}_ms"] = p - mlat
                d = (direct_bins.loc[int(edge), f"p{q}"]
                     if direct_bins is not None and int(edge) in direct_bins.index else math.nan)
                rec[f"overhead_vs_direct_p{q}_ms"] = p - d
            out.append(rec)
    cols = ["run_id", "system", "run_index", "status", "users_bin", "users_mid", "requests",
            "successful", "duration_s", "throughput_rps"] + [
        f"{k}_p{q}_ms" for k in ("latency", "overhead_vs_mock", "overhead_vs_direct")
        for q in PERCENTILES]
    return pd.DataFrame(out, columns=cols)


def _direct_ramp_bins(study: Study, direct: str, bin_users: int) -> pd.DataFrame | None:
    per = []
    for run in study.runs:
        if run.get("system") != direct or run.get("status") != "completed":
            continue
        lo, hi = _phase(run, "ramp_start"), _phase(run, "hold_end")
        rows = study.requests[study.requests["run_id"] == run.get("run_id")]
        rows = _ok(rows[(rows["start_t_unix_s"] >= lo) & (rows["start_t_unix_s"] < hi)])
        for edge, grp in rows.groupby(users_bin(rows["users"], bin_users)):
            per.append({"bin": int(edge), **{f"p{q}": _pct(grp["latency_ms"], q) for q in PERCENTILES}})
    if not per:
        return None
    return pd.DataFrame(per).groupby("bin").mean()


def rss_timeline(study: Study) -> pd.DataFrame:
    """The system role's RSS per run over time, with seconds since the run's load started."""
    s = study.samples[study.samples["role"] == "system"].copy()
    starts = {}
    for run in study.runs:
        ws, rs = _phase(run, "warmup_start"), _phase(run, "ramp_start")
        starts[run.get("run_id")] = ws if not math.isnan(ws) else rs
    s["load_start_t_unix_s"] = s["run_id"].map(starts).astype("float64")
    s["t_rel_s"] = s["t_unix_s"] - s["load_start_t_unix_s"]
    return s.sort_values(["system", "run_id", "t_unix_s"]).reset_index(drop=True)


# --- the headline table --------------------------------------------------------------------------

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
        ran = {r.get("system") for r in study_or_systems.runs}
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
    systems_meta = study.manifest.get("systems") or {}
    rows = []
    for system in study.systems:
        meta = systems_meta.get(system) or {}
        version = meta.get("version")
        if not version:
            for r in study.runs:
                if r.get("system") == system and r.get("version"):
                    version = r["version"]
                    break
        row: dict[str, Any] = {"system": system, "kind": meta.get("kind", ""),
                               "version": version or ""}
        sub = rs[rs["system"] == system] if len(rs) else rs
        if not len(sub):
            why = meta.get("not_runnable_reason") or "no runs"
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

BUFFERED_GAP_SHARE = 0.25   # frames arriving this much closer together than the mock sent them
BUFFERED_FIRST_TOKEN_SHARE = 0.9  # ... and the first of them this late in the stream: buffered


def stream_summary(study: Study, direct: str = DEFAULT_DIRECT) -> pd.DataFrame:
    """Per streamed run, over the window's successful streams: time to first byte and to first
    token, the gaps between content frames, whole-stream duration, frames received, streams
    that ended properly; overhead on time to first token and on the gaps against the direct
    baseline (mean of its completed runs); and whether the system buffered the stream."""
    out = []
    for run in study.runs:
        spec = run.get("spec") or {}
        if not (spec.get("load") or {}).get("stream"):
            continue
        mock = spec.get("mock") or {}
        rows = window_rows(study, run)
        ok = _ok(rows)
        gaps = np.concatenate([np.asarray(g, dtype="float64") for g in ok["chunk_gaps_ms"]]
                              ) if len(ok) else np.array([])
        rec = {"run_id": run.get("run_id"), "system": run.get("system"),
               "status": run.get("status"), "streams": int(len(ok)),
               "failed_streams": int(len(rows) - len(ok)),
               "ttfb_p50_ms": _pct(ok["ttfb_ms"], 50), "ttft_p50_ms": _pct(ok["ttft_ms"], 50),
               "ttft_p95_ms": _pct(ok["ttft_ms"], 95), "ttft_p99_ms": _pct(ok["ttft_ms"], 99),
               "gap_p50_ms": _pct(gaps, 50), "gap_p99_ms": _pct(gaps, 99),
               "gap_max_ms": float(gaps.max()) if gaps.size else math.nan,
               "duration_p50_ms": _pct(ok["latency_ms"], 50),
               "chunks_mean": float(ok["chunks"].mean()) if len(ok) else math.nan,
               "done_share": float(ok["stream_done"].mean()) if len(ok) else math.nan,
               "set_chunks": mock.get("stream_chunks"), "set_gap_ms": mock.get("chunk_delay_ms")}
        set_gap = _num(rec["set_gap_ms"])
        # Frames closer together than sent: held back and released in a burst. A proxy that
        # buffers the whole stream releases its first token only at the end; one that falls
        # behind under load releases bunches along the way, with its first token early.
        held = (ok["ttft_ms"] / ok["latency_ms"]).to_numpy(dtype="float64") if len(ok) else np.array([])
        rec["first_token_at_share_p50"] = _pct(held[~np.isnan(held)], 50)
        close = bool(not math.isnan(rec["gap_p50_ms"]) and not math.isnan(set_gap)
                     and rec["gap_p50_ms"] < BUFFERED_GAP_SHARE * set_gap)
        late = bool(not math.isnan(rec["first_token_at_share_p50"])
                    and rec["first_token_at_share_p50"] >= BUFFERED_FIRST_TOKEN_SHARE)
        rec["buffered"] = close and late
        rec["bunched"] = close and not late
        out.append(rec)
    table = pd.DataFrame(out)
    if table.empty:
        return table
    base = table[(table.system == direct) & (table.status == "completed")]
    for col, name in (("ttft_p50_ms", "ttft_overhead_p50_ms"), ("gap_p99_ms", "gap_overhead_p99_ms")):
        table[name] = table[col] - base[col].mean() if len(base) else math.nan
    return table


# --- the open-loop lane --------------------------------------------------------------------------

OPEN_LOOP_BOUNDS_MS = (5.0, 10.0, 50.0)   # declared bounds on the p99 added latency
KEPT_UP_SHARE = 0.95       # a step is kept up when at least this share of its offered rate was served,
LOSS_SHARE = 0.01          # at most this share of its slots were never sent or failed,
GROWTH_SHARE = 0.5         # and the median latency from the intended start did not grow through the
GROWTH_MIN_MS = 10.0       # step (last quarter vs first) by more than max(this share, this many ms)

OPEN_LOOP_DEFINITIONS: dict[str, str] = {
    "latency from the intended start": "the schedule's slot time to the last byte: the wait for "
                                       "a free user or a late load generator counts, so a slow "
                                       "system cannot hide by being sent less",
    "achieved rate": "successful responses completed inside the step's window / the step's length",
    "kept up": f"achieved ≥ {KEPT_UP_SHARE:.0%} of offered, at most {LOSS_SHARE:.0%} of the "
               f"step's slots unsent or failed, and the median latency from the intended start "
               f"in the step's last quarter not above its first quarter's by more than "
               f"max({GROWTH_SHARE:.0%}, {GROWTH_MIN_MS:g} ms)",
    "p99 added latency": "the step's p99 latency from the intended start minus the direct "
                         "baseline's at the same offered rate (mean over its completed runs)",
    "sustained under a bound": "the highest offered rate up to which every step was kept up with "
                               "its p99 added latency within the bound (0 = not even the lowest)",
}


def is_open_loop(run: Mapping) -> bool:
    return bool(((run.get("spec") or {}).get("load") or {}).get("open_loop_rates_per_s"))


def open_loop_steps(study: Study, direct: str = DEFAULT_DIRECT) -> pd.DataFrame:
    """One row per open-loop run and step: offered vs achieved rate, slots scheduled and sent,
    latency percentiles from the intended and from the actual start, the schedule's lag, p99
    added latency vs the direct baseline at the same offered rate, and whether the step was
    kept up (``reasons`` says why not; see OPEN_LOOP_DEFINITIONS)."""
    out = []
    for run in study.runs:
        if not is_open_loop(run):
            continue
        load = run["spec"]["load"]
        step_s, hs = float(load["open_loop_step_s"]), _phase(run, "hold_start")
        if math.isnan(hs):
            continue
        rows = study.requests[study.requests["run_id"] == run.get("run_id")]
        for index, rate in enumerate(load["open_loop_rates_per_s"], 1):
            start = hs + (index - 1) * step_s
            out.append(_open_loop_step(run, rows[rows["step_index"] == index], index,
                                       float(rate), start, step_s))
    table = pd.DataFrame(out)
    if table.empty:
        return table
    base = table[(table["system"] == direct) & (table["status"] == "completed")]
    ref = base.groupby("offered_rps")["from_intended_p99_ms"].mean()
    table["p99_added_ms"] = table["from_intended_p99_ms"] - table["offered_rps"].map(ref)
    table["direct_kept_up"] = table["offered_rps"].map(base.groupby("offered_rps")["kept_up"].all())
    return table


def _open_loop_step(run: Mapping, rows: pd.DataFrame, index: int, rate: float, start: float,
                    step_s: float) -> dict:
    scheduled = math.ceil(rate * step_s - 1e-9)   # the slots k/rate < step_s the schedule offers
    ok = _ok(rows)
    lag_ms = (rows["start_t_unix_s"] - rows["intended_start_t_unix_s"]).to_numpy(dtype="float64") * 1e3
    intended = ok["intended_start_t_unix_s"].to_numpy(dtype="float64")
    from_intended = (ok["start_t_unix_s"].to_numpy(dtype="float64") - intended) * 1e3 + \
        ok["latency_ms"].to_numpy(dtype="float64")
    end_t = ok["start_t_unix_s"].to_numpy(dtype="float64") + ok["latency_ms"].to_numpy(dtype="float64") / 1e3
    achieved = float(((end_t >= start) & (end_t < start + step_s)).sum()) / step_s
    quarter = step_s / 4.0
    first = _pct(from_intended[intended < start + quarter], 50)
    last = _pct(from_intended[intended >= start + step_s - quarter], 50)
    unsent, failed = scheduled - len(rows), len(rows) - len(ok)
    reasons = []
    if achieved < KEPT_UP_SHARE * rate:
        reasons.append(f"achieved {achieved:.0f} of {rate:g} req/s ({achieved / rate:.0%} < "
                       f"{KEPT_UP_SHARE:.0%})")
    if unsent > LOSS_SHARE * scheduled:
        reasons.append(f"{unsent} of {scheduled} slots never sent")
    if failed > LOSS_SHARE * scheduled:
        reasons.append(f"{failed} requests failed")
    if not math.isnan(first) and not math.isnan(last) and \
            last - first > max(GROWTH_MIN_MS, GROWTH_SHARE * first):
        reasons.append(f"latency from the intended start grew from {first:.1f} to {last:.1f} ms "
                       "through the step (a backlog)")
    waited = int(rows["waited_for_user"].sum())
    if waited:
        reasons.append(f"{waited} requests waited for a free user (more users would not change "
                       "the latency from the intended start, only who waits)")
    return {"run_id": run.get("run_id"), "system": run.get("system"),
            "run_index": run.get("run_index"), "status": run.get("status"), "step_index": index,
            "offered_rps": rate, "step_start_t_unix_s": start, "scheduled": scheduled,
            "sent": int(len(rows)), "unsent": unsent, "successful": int(len(ok)), "failed": failed,
            "waited_for_user": waited, "achieved_rps": achieved,
            "from_intended_p50_ms": _pct(from_intended, 50),
            "from_intended_p99_ms": _pct(from_intended, 99),
            "from_start_p50_ms": _pct(ok["latency_ms"], 50),
            "from_start_p99_ms": _pct(ok["latency_ms"], 99),
            "schedule_lag_p99_ms": _pct(lag_ms, 99),
            "from_intended_first_quarter_p50_ms": first, "from_intended_last_quarter_p50_ms": last,
            "kept_up": not [r for r in reasons if "waited for a free user" not in r],
            "reasons": "; ".join(reasons)}


def open_loop_capacity(steps: pd.DataFrame, bounds_ms: Iterable[float] = OPEN_LOOP_BOUNDS_MS,
                       direct: str = DEFAULT_DIRECT) -> pd.DataFrame:
    """Per system, over completed runs: the highest offered rate sustained under each p99 added
    latency bound and the first offered rate it did not keep up with, each described across
    runs (``describe``), plus whether the direct baseline also stopped there."""
    bounds = [float(b) for b in bounds_ms]
    per_run = []
    for run_id, g in steps[steps["status"] == "completed"].groupby("run_id", sort=False):
        g = g.sort_values("offered_rps")
        rec = {"system": g["system"].iloc[0], "run_id": run_id}
        failing = g[~g["kept_up"].astype(bool)]
        rec["stopped_at_rps"] = float(failing["offered_rps"].iloc[0]) if len(failing) else math.nan
        for b in bounds:
            within = g["kept_up"].astype(bool) & (g["p99_added_ms"] <= b)
            prefix = within.cumprod().astype(bool)   # every step up to it within the bound
            rec[f"sustained_{b:g}ms_rps"] = float(g["offered_rps"][prefix].max()) if prefix.any() else 0.0
        per_run.append(rec)
    per_run = pd.DataFrame(per_run)
    out = []
    direct_stop = (describe(per_run.loc[per_run["system"] == direct, "stopped_at_rps"])["min"]
                   if len(per_run) else math.nan)
    for system in pd.unique(steps["system"]):
        runs = per_run[per_run["system"] == system] if len(per_run) else per_run
        rec = {"system": system, "runs": int(len(runs)),
               "runs_kept_up_throughout": int(runs["stopped_at_rps"].isna().sum()) if len(runs) else 0,
               "highest_offered_rps": float(steps.loc[steps["system"] == system, "offered_rps"].max())}
        for name in ["stopped_at_rps"] + [f"sustained_{b:g}ms_rps" for b in bounds]:
            d = describe(runs[name]) if len(runs) else describe([])
            rec.update({f"{name}_n": d["n"], f"{name}_mean": d["mean"], f"{name}_sd": d["sd"]})
        stop = rec["stopped_at_rps_mean"]
        rec["baseline_also_stopped"] = bool(system != direct and not math.isnan(direct_stop)
                                            and not math.isnan(stop) and stop >= direct_stop)
        out.append(rec)
    return pd.DataFrame(out)


def open_loop_table(study: Study, bounds_ms: Iterable[float] = OPEN_LOOP_BOUNDS_MS,
                    steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """The open-loop headline: per system, 'mean ± sd (n=…)' of the highest rate sustained under
    each bound and of the rate where it stopped keeping up. Empty for a closed-loop study."""
    steps = open_loop_steps(study) if steps is None else steps
    if steps.empty:
        return pd.DataFrame()
    bounds = [float(b) for b in bounds_ms]
    cap = open_loop_capacity(steps, bounds)
    rows = []
    for _, r in cap.iterrows():
        row = {"system": r["system"], "runs": r["runs"]}
        for b in bounds:
            row[f"sustained, p99 added ≤ {b:g} ms (req/s)"] = fmt_mean_sd(
                {k: r[f"sustained_{b:g}ms_rps_{k}"] for k in ("n", "mean", "sd")}, 0)
        stop = fmt_mean_sd({k: r[f"stopped_at_rps_{k}"] for k in ("n", "mean", "sd")}, 0)
        if r["runs_kept_up_throughout"]:
            kept = f"{r['runs_kept_up_throughout']} of {r['runs']} runs kept up to {r['highest_offered_rps']:g}"
            stop = kept if stop == "—" else f"{stop}; {kept}"
        if r["baseline_also_stopped"]:
            stop += " (the direct baseline stopped there too: the machine's limit)"
        row["stopped keeping up at (req/s)"] = stop
        rows.append(row)
    return pd.DataFrame(rows)


# --- the feature-cost lane -----------------------------------------------------------------------
# Systems named 'folder@feature' (gateways/<folder> called as its [features.<feature>] says) run
# side by side in one study; each feature is compared with the same system's passthrough, and
# with the direct baseline run in the same client dialect.
PASSTHROUGH = "passthrough"
FEATURE_METRICS = (("latency_p50_ms", "median latency added (ms)", 2),
                   ("latency_p99_ms", "p99 latency added (ms)", 2),
                   ("cpu_ms_per_request", "CPU-ms per request added", 3))


def feature_runs(study: Study, rs: pd.DataFrame | None = None) -> pd.DataFrame:
    """run_summary rows of the 'folder@feature' systems, with folder, feature, dialect, body size
    and stream (from each run's manifest), plus the run's time to first token when it streamed."""
    rs = run_summary(study) if rs is None else rs
    meta = []
    for run in study.runs:
        system = str(run.get("system") or "")
        if "@" not in system:
            continue
        load = (run.get("spec") or {}).get("load") or {}
        request = run.get("request") or {}
        ok = _ok(window_rows(study, run))
        meta.append({"run_id": run.get("run_id"), "folder": system.split("@", 1)[0].split("~", 1)[0],
                     "feature": system.split("@", 1)[1], "dialect": request.get("dialect", ""),
                     "request_bytes": int(load.get("request_bytes", 0) or 0),
                     "stream": bool(load.get("stream", False)),
                     "ttft_p50_ms": _pct(ok["ttft_ms"], 50) if len(ok) else math.nan})
    if not meta:
        return pd.DataFrame()
    return rs.merge(pd.DataFrame(meta), on="run_id", how="inner")


def feature_cost(study: Study, rs: pd.DataFrame | None = None,
                 direct: str = DEFAULT_DIRECT) -> pd.DataFrame:
    """One row per (system@feature, metric): the feature's completed runs against the same
    system's passthrough runs (added = difference of means, its sd from both sets' sds, and the
    Welch + 10% verdict), and the latency added over the direct baseline in the same dialect."""
    runs = feature_runs(study, rs)
    if runs.empty:
        return pd.DataFrame()
    done = runs[runs["status"] == "completed"]
    metrics = list(FEATURE_METRICS)
    if done["stream"].any():
        metrics.append(("ttft_p50_ms", "time to first token added (ms)", 2))
    out = []
    for system in pd.unique(runs["system"]):
        sub = done[done["system"] == system]
        mine = runs[runs["system"] == system].iloc[0]
        base = done[(done["folder"] == mine["folder"]) & (done["feature"] == PASSTHROUGH)]
        floor = done[(done["folder"] == direct) & (done["dialect"] == mine["dialect"])]
        for metric, label, _ in metrics:
            a = sub[metric].astype("float64")
            b = base[metric].astype("float64")
            da, db, dd = describe(a), describe(b), describe(floor[metric].astype("float64"))
            rec = {"system": system, "folder": mine["folder"], "feature": mine["feature"],
                   "dialect": mine["dialect"], "request_bytes": int(mine["request_bytes"]),
                   "stream": bool(mine["stream"]), "metric": metric, "label": label,
                   "n": da["n"], "mean": da["mean"], "sd": da["sd"],
                   "n_passthrough": db["n"], "passthrough_mean": db["mean"], "passthrough_sd": db["sd"],
                   "added_mean": da["mean"] - db["mean"],
                   "added_sd": math.hypot(da["sd"], db["sd"]) if da["n"] >= 2 and db["n"] >= 2 else math.nan,
                   "vs_direct_mean": (da["mean"] - dd["mean"]) if metric != "cpu_ms_per_request" else math.nan,
                   "n_not_completed": int((runs["system"] == system).sum() - len(sub))}
            if mine["feature"] == PASSTHROUGH or mine["folder"] == direct:
                rec.update(verdict="reference", reason="the passthrough every feature is compared with"
                           if mine["feature"] == PASSTHROUGH else "the direct baseline")
            else:
                v = verdict(a, b, metric)
                rec.update(verdict=v["verdict"], reason=v["reason"])
            out.append(rec)
    return pd.DataFrame(out)


def feature_cost_table(study: Study, cost: pd.DataFrame | None = None) -> pd.DataFrame:
    """The lane's headline: per system@feature, what it adds over the same system's passthrough
    ('mean ± sd'), and its median latency over the direct baseline in the same dialect."""
    cost = feature_cost(study) if cost is None else cost
    if cost.empty:
        return pd.DataFrame()
    rows = []
    direct_rows = cost["folder"] == DEFAULT_DIRECT
    present = set(cost.loc[~direct_rows, "system"])
    for system in [name for name in system_order(study) if name in present]:
        sub = cost[cost["system"] == system].set_index("metric")
        first = sub.iloc[0]
        row = {"system": system, "dialect": first["dialect"],
               "body (KiB)": round(first["request_bytes"] / 1024), "stream": bool(first["stream"]),
               "runs": int(first["n"])}
        for metric, label, digits in FEATURE_METRICS + (("ttft_p50_ms", "time to first token added (ms)", 2),):
            if metric not in sub.index:
                continue
            r = sub.loc[metric]
            if first["feature"] == PASSTHROUGH:
                row[label] = "reference"
            else:
                row[label] = fmt_mean_sd({"n": r["n"], "mean": r["added_mean"], "sd": r["added_sd"]}, digits)
        p50 = sub.loc["latency_p50_ms"]
        row["median latency over direct (ms)"] = ("—" if math.isnan(p50["vs_direct_mean"])
                                                  else f"{p50['vs_direct_mean']:.2f}")
        verdicts = sub[sub["verdict"] != "reference"]
        row["verdict (CPU-ms)"] = (sub.loc["cpu_ms_per_request", "verdict"]
                                   if first["feature"] != PASSTHROUGH and len(verdicts) else "—")
        rows.append(row)
    return pd.DataFrame(rows)
