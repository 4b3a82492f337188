"""The numbers every section of a study's report reads, computed once from the study directory."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness.model.roles import Roles
from harness.stats.across import (
    SUMMARY_COLUMNS,
    compare,
    overhead_figures,
    roles,
    system_labels,
    system_summary,
)
from harness.stats.count_table import lane_frame
from harness.stats.definitions import DEFAULT_BIN_USERS
from harness.stats.fault_lane import fault_summary, fault_timelines
from harness.stats.feature_cost import feature_cost
from harness.stats.inflight_limits import DEFAULT_PLANNED_LATENCY_S, Lane, lane
from harness.stats.loading import Study, cpu_count, load_study
from harness.stats.open_loop import open_loop_capacity, open_loop_steps
from harness.stats.ramp import ramp_curve
from harness.stats.runs import run_summary
from harness.stats.sizing import (
    DEFAULT_GB_HOUR_USD,
    DEFAULT_LOAD_RPS,
    DEFAULT_VCPU_HOUR_USD,
    Prices,
)
from harness.stats.streaming import stream_summary

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf"]


def system_colors(systems: list[str]) -> dict[str, str]:
    """Each system's colour by its place in the study's order: the same in every plot of a
    report, and across a suite whose cells list the same systems."""
    return {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(systems)}


@dataclass(frozen=True, eq=False)
class ReportData:
    study: Study
    roles: Roles
    rs: pd.DataFrame                 # run_summary
    summary: pd.DataFrame            # system_summary (long)
    comparison: pd.DataFrame | None  # compare against the reference (None: no reference ran)
    labels: pd.DataFrame             # system_labels
    ramp: pd.DataFrame               # ramp_curve
    bin_users: int
    colors: dict[str, str]
    prices: Prices                   # for the sizing section's monthly cost
    load_rps: float                  # the load the sizing section plans for
    overhead: dict[str, str]         # per compared system, the overhead figure its verdict uses
    inflight: Lane                   # the in-flight lane (empty without in-flight runs)
    planned_latency_s: float = DEFAULT_PLANNED_LATENCY_S  # with load_rps: the open requests
                                     # the sizing section plans for (Little's law)
    counts: pd.DataFrame = field(default_factory=lambda: lane_frame(None))  # the counting lane
    counts_about: dict = field(default_factory=dict)  # its tool, sizes and CPU model
    # Each lane's figures (empty frames when the study has no run of that lane):
    stream: pd.DataFrame = field(default_factory=pd.DataFrame)          # stream_summary
    fault_windows: pd.DataFrame = field(default_factory=pd.DataFrame)   # fault_summary, per window
    fault_runs: pd.DataFrame = field(default_factory=pd.DataFrame)      # fault_summary, per run
    fault_timelines: pd.DataFrame = field(default_factory=pd.DataFrame)
    open_loop: pd.DataFrame = field(default_factory=pd.DataFrame)       # open_loop_steps
    open_loop_capacity: pd.DataFrame = field(default_factory=pd.DataFrame)
    feature_cost: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def reference(self) -> str | None:
        """The system verdicts compare with (Roles.reference: None when nothing ran)."""
        return self.roles.reference

    def ordered(self, frame: pd.DataFrame) -> pd.DataFrame:
        """``frame``'s rows in the study's system order (stable within a system)."""
        order = {s: i for i, s in enumerate(self.study.systems)}
        return frame.assign(_o=frame["system"].map(order)).sort_values(
            "_o", kind="mergesort").drop(columns="_o")


def collect(study_dir: str | Path, reference: str | None = None,
            bin_users: int = DEFAULT_BIN_USERS, verify: bool = True,
            vcpu_hour_usd: float = DEFAULT_VCPU_HOUR_USD, gb_hour_usd: float = DEFAULT_GB_HOUR_USD,
            load_rps: float = DEFAULT_LOAD_RPS,
            planned_latency_s: float = DEFAULT_PLANNED_LATENCY_S) -> ReportData:
    """Load the study and compute everything the report shows. The prices (USD per vCPU-hour
    and per GB-hour; defaults and their source in harness/stats/sizing.py), the planned load and
    the planned latency only feed the sizing section."""
    study = load_study(study_dir, verify=verify)
    study_roles = roles(study, reference=reference)
    rs = run_summary(study, bin_users=bin_users, floor=study_roles.floor)
    ref = study_roles.reference
    has_runs = len(rs) > 0 and "system" in rs.columns
    summary = (system_summary(rs, floor=study_roles.floor) if has_runs
               else pd.DataFrame(columns=SUMMARY_COLUMNS))
    comparison = (compare(rs, reference=ref, floor=study_roles.floor)
                  if has_runs and ref is not None and ref in set(rs["system"]) else None)
    overhead = overhead_figures(rs, ref) if comparison is not None else {}
    labels = system_labels(rs) if has_runs else pd.DataFrame(
        columns=["system", "label", "runs", "completed", "reasons"])
    colors = system_colors(study.systems)
    return ReportData(study=study, roles=study_roles, rs=rs, summary=summary,
                      comparison=comparison,
                      labels=labels, ramp=ramp_curve(study, bin_users=bin_users, floor=study_roles.floor),
                      bin_users=bin_users, colors=colors,
                      prices=(Prices() if (vcpu_hour_usd, gb_hour_usd) == (
                          DEFAULT_VCPU_HOUR_USD, DEFAULT_GB_HOUR_USD)
                          else Prices(vcpu_hour_usd, gb_hour_usd, "given on the command line")),
                      load_rps=load_rps, overhead=overhead,
                      inflight=lane(study, study_roles.floor, cpu_count(study)),
                      planned_latency_s=planned_latency_s, **_counts(study),
                      **_lanes(study, rs, study_roles))


def _lanes(study: Study, rs: pd.DataFrame, roles: Roles) -> dict:
    """The streaming, fault, open-loop and feature-cost lanes' figures, computed once."""
    fault_windows, fault_runs = fault_summary(study)
    steps = open_loop_steps(study, floor=roles.floor)
    return {"stream": stream_summary(study, floor=roles.floor),
            "fault_windows": fault_windows, "fault_runs": fault_runs,
            "fault_timelines": fault_timelines(study, fault_runs) if len(fault_runs)
            else pd.DataFrame(),
            "open_loop": steps,
            "open_loop_capacity": open_loop_capacity(steps, roles.floor) if len(steps)
            else pd.DataFrame(),
            "feature_cost": feature_cost(study, rs, roles.floors)}


def _counts(study: Study) -> dict:
    """The counting lane's table and what it ran with (empty without a counting lane)."""
    record = study.counts
    if record is None:
        return {}
    sizes = next((b["sizes"] for b in record["builds"] if b.get("sizes")), {})
    return {"counts": lane_frame(record),
            "counts_about": {"valgrind": record.get("valgrind") or "unknown", "sizes": sizes,
                             "cpu": (record.get("machine") or {}).get("cpu_model") or "unknown"}}
