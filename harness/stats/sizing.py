"""Sizing and cost: what a system's measured CPU time and memory per request come to at a load a
platform team plans for, and what that costs at given on-demand prices. An estimate, with its
assumptions stated by the report: CPU scales linearly with the request rate (CPU-ms per request
is constant), memory does not (the steady RSS measured at the study's load), one replica, no
headroom, 730 hours a month.

The default prices are AWS Fargate's on-demand Linux/x86 rates in us-east-1 (N. Virginia):
$0.04048 per vCPU-hour and $0.004445 per GB-hour, the AWS Fargate pricing page's figures as
quoted by public pricing guides dated March and June 2026 (read November 2026; verify at
https://aws.amazon.com/fargate/pricing/). Fargate bills exactly these two dimensions, which is
why they are used; pass your own with ``--vcpu-hour-usd`` and ``--gb-hour-usd``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from harness.stats.across import describe
from harness.stats.inflight_limits import planned_open, replicas_at, stop_limit

DEFAULT_VCPU_HOUR_USD = 0.04048
DEFAULT_GB_HOUR_USD = 0.004445
PRICES_SOURCE = ("AWS Fargate on-demand, Linux/x86, us-east-1, as quoted in 2026 "
                 "(read November 2026)")
DEFAULT_LOAD_RPS = 1000.0
HOURS_PER_MONTH = 730.0
GIB = float(2**30)

SIZING_COLUMNS = ["system", "n", "cores", "cores_sd", "cores_low", "cores_high", "memory_gib",
                  "memory_gib_sd", "usd_month", "usd_month_low", "usd_month_high"]


@dataclass(frozen=True)
class Prices:
    vcpu_hour_usd: float = DEFAULT_VCPU_HOUR_USD
    gb_hour_usd: float = DEFAULT_GB_HOUR_USD
    source: str = PRICES_SOURCE

    def monthly(self, cores: float, gib: float) -> float:
        return (cores * self.vcpu_hour_usd + gib * self.gb_hour_usd) * HOURS_PER_MONTH


def sizing(run_summary_df: pd.DataFrame, systems: list[str], prices: Prices = Prices(),
           load_rps: float = DEFAULT_LOAD_RPS) -> pd.DataFrame:
    """Per system with a measured CPU time: cores needed at ``load_rps`` (CPU-ms per request ×
    rate / 1000, mean, sd and t-based 95% CI over completed runs), its steady RSS in GiB and the
    monthly cost of both, the cost's interval carried from the cores' CI."""
    rows = []
    done = (run_summary_df[run_summary_df["status"] == "completed"] if len(run_summary_df)
            else run_summary_df)
    for system in systems:
        sub = done[done["system"] == system] if len(done) else done
        if not len(sub):
            continue
        cpu = describe(sub["cpu_ms_per_request"].astype("float64") * load_rps / 1000.0)
        mem = describe(sub["rss_steady_bytes"].astype("float64") / GIB)
        if cpu["n"] == 0 or mem["n"] == 0:
            continue
        low = max(cpu["ci95_low"], 0.0) if not math.isnan(cpu["ci95_low"]) else math.nan
        rows.append({"system": system, "n": cpu["n"], "cores": cpu["mean"], "cores_sd": cpu["sd"],
                     "cores_low": low, "cores_high": cpu["ci95_high"],
                     "memory_gib": mem["mean"], "memory_gib_sd": mem["sd"],
                     "usd_month": prices.monthly(cpu["mean"], mem["mean"]),
                     "usd_month_low": prices.monthly(low, mem["mean"]),
                     "usd_month_high": prices.monthly(cpu["ci95_high"], mem["mean"])})
    return pd.DataFrame(rows, columns=SIZING_COLUMNS)


# A replica at the planned concurrency: the smallest Fargate task with 2 GB per vCPU.
DEFAULT_REPLICA_CORES = 1.0
DEFAULT_REPLICA_GIB = 2.0
CONCURRENCY_COLUMNS = ["system", "open_requests", "memory_gib", "extrapolated", "highest_held",
                       "cores", "replicas", "decides", "replicas_by_cpu", "replicas_by_memory",
                       "replicas_by_connections", "usd_month"]


def concurrency_sizing(lane, load_rps: float, latency_s: float, prices: Prices = Prices(),
                       replica_cores: float = DEFAULT_REPLICA_CORES,
                       replica_gib: float = DEFAULT_REPLICA_GIB) -> pd.DataFrame:
    """Per system of an in-flight lane (harness.stats.inflight_limits.Lane): the requests open at
    ``load_rps`` × ``latency_s``, the memory they take by its fit (``extrapolated`` beyond the
    highest step it held), the cores at that rate (CPU-ms per request at its highest held step),
    and the replicas of (replica_cores, replica_gib) it needs, with the limit that decides (CPU,
    memory, or the open requests over the most one replica held, named by what stopped it
    above: descriptors, a configured cap, CPU, or its stop) and their cost."""
    rows = []
    if lane.empty:
        return pd.DataFrame(rows, columns=CONCURRENCY_COLUMNS)
    open_requests = planned_open(load_rps, latency_s)
    for stop in lane.stops.to_dict("records"):
        system, held = stop["system"], int(stop["highest_held"])
        slope = lane.slopes.get(system)
        mine = lane.table[(lane.table["system"] == system) & (lane.table["target_open"] == held)]
        if slope is None or not len(mine):
            continue
        cores = float(mine["cpu_ms_per_request_mean"].iloc[0]) * load_rps / 1000.0
        out = replicas_at(open_requests, cores, slope, held, replica_cores, replica_gib,
                          stop_limit(stop["cause"], stop["evidence"]))
        rows.append({"system": system, "highest_held": held, "cores": cores,
                     "extrapolated": open_requests > held, **out,
                     "usd_month": (out["replicas"] * prices.monthly(replica_cores, replica_gib)
                                   if not math.isnan(out["replicas"]) else math.nan)})
    return pd.DataFrame(rows, columns=CONCURRENCY_COLUMNS)
