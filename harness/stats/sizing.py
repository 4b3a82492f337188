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
