"""The in-flight lane's presentation: the table per system and step, where each system stops,
the sizing at a planned concurrency, and the generated sentences. Every number comes from
harness.stats.inflight_limits and harness.stats.sizing."""
from __future__ import annotations

import math

import pandas as pd

from harness.stats.inflight_lane import ERROR_CAUSES
from harness.stats.inflight_limits import INSTRUMENTS, Lane, Slope
from report import format as F
from report.grid import Row, Table, cell, number, table

# (heading, the summary's figure, digits) of the steps table, each shown as mean ± sd.
STEP_COLUMNS = (
    ("open at client", "client_open_mean", 0), ("open at mock", "mock_open_mean", 0),
    ("open by its count", "system_open_mean", 0),
    ("RSS (MiB)", "rss_mib", 1), ("open fds", "open_fds", 0),
    ("upstream conns", "upstream_connections", 0), ("reqs / conn", "requests_per_connection", 1),
    ("added p50 (ms)", "added_p50_ms", 1), ("added p99 (ms)", "added_p99_ms", 1),
    ("CPU-ms / req", "cpu_ms_per_request", 3), ("CPU-ms / frame", "cpu_ms_per_frame", 4))
# The floor's own added p99 at the same step follows the system's: the instruments' part of a tail.
FLOOR_AFTER = "added_p99_ms"
# (heading, the summary's figure, digits) of the abandon table, each mean ± sd over runs.
ABANDON_COLUMNS = (
    ("abandoned", "abandoned", 0), ("not seen by the mock", "abandon_unmatched", 0),
    ("client close → provider close p50 (ms)", "close_to_provider_p50_ms", 1),
    ("p99 (ms)", "close_to_provider_p99_ms", 1), ("never closed", "never_closed_share", 3),
    ("frames after it left / 1,000", "frames_after_leave_per_1000", 0),
    ("fds after", "fds_after_wave", 0), ("fds expected", "fds_expected_after_wave", 0),
    ("fds kept", "fds_kept_after_wave", 0), ("RSS after − before (MiB)", "rss_change_after_wave_mib", 1),
    ("health p99 before (ms)", "probe_p99_before_ms", 1), ("health p99 in the wave (ms)", "probe_p99_wave_ms", 1))


def _mean_sd(rec: dict, name: str, digits: int) -> str:
    mean, sd = rec.get(f"{name}_mean", math.nan), rec.get(f"{name}_sd", math.nan)
    if F.isnan(mean):
        return F.DASH
    text = f"{mean:,.{digits}f}"
    return text if F.isnan(sd) else f"{text} ± {sd:,.{digits}f}"


def _errors(rec: dict) -> str:
    """The failures per run by class, named as the definitions name them (the most first)."""
    counts = [(c, rec.get(f"errors_{c}_mean", math.nan)) for c in ERROR_CAUSES]
    seen = [(c, n) for c, n in counts if not F.isnan(n) and n > 0]
    return ", ".join(f"{c} {n:,.0f}" for c, n in sorted(seen, key=lambda cn: -cn[1])) or "none"


def steps_table(lane: Lane, order: list[str]) -> Table:
    """Per system and step: each figure mean ± sd over the runs that ran it, the errors by cause
    (mean per run) and the label (held, failed, the instruments' limit, not run)."""
    rank = {s: i for i, s in enumerate(order)}
    floor = {r["target_open"]: r for r in lane.table.to_dict("records") if r["system"] == lane.floor}
    floor_heading = f"{lane.floor or 'the floor'}'s added p99 (ms)"
    rows = []
    for rec in sorted(lane.table.to_dict("records"),
                      key=lambda r: (rank.get(r["system"], len(rank)), r["target_open"])):
        label = rec["label"] + ("" if rec["open_agree"] or rec["runs_ran"] == 0
                                else " (client and mock disagree)")
        figures = []
        for _, name, d in STEP_COLUMNS:
            figures.append(number(_mean_sd(rec, name, d)))
            if name == FLOOR_AFTER:
                at = floor.get(rec["target_open"])
                figures.append(number(F.DASH if at is None else _mean_sd(at, name, d)))
        rows.append(Row((cell(rec["system"], strong=True), number(f"{rec['target_open']:,}"),
                         number(f"{rec['runs_ran']} of {rec['runs']}"), *figures,
                         cell(_errors(rec)), cell(label)),
                        "ok" if rec["label"] == "held" else "failed"))
    headings = []
    for heading, name, _ in STEP_COLUMNS:
        headings.append(heading)
        if name == FLOOR_AFTER:
            headings.append(floor_heading)
    return table(["system", "open asked", "runs", *headings, "errors / run", "step"], rows,
                 "inflight-table", wide=True)


def abandon_table(lane: Lane, order: list[str]) -> Table | None:
    """Per system and step of a run that left streams: what it did when a share of its clients
    closed their streams mid-way (harness.stats.inflight_abandon); None when none were left."""
    if "abandoned_mean" not in lane.table or not (lane.table["abandoned_mean"] > 0).any():
        return None
    rank = {s: i for i, s in enumerate(order)}
    rows = []
    for rec in sorted(lane.table.to_dict("records"),
                      key=lambda r: (rank.get(r["system"], len(rank)), r["target_open"])):
        if F.isnan(rec["abandoned_mean"]) or rec["abandoned_mean"] <= 0:
            continue
        rows.append([cell(rec["system"], strong=True), number(f"{rec['target_open']:,}"),
                     *(number(_mean_sd(rec, name, d)) for _, name, d in ABANDON_COLUMNS)])
    return table(["system", "open asked", *(h for h, _, _ in ABANDON_COLUMNS)], rows,
                 "inflight-abandon-table", wide=True)


def per_open_table(lanes: list[Lane], order: list[str]) -> Table | None:
    """Per system: MiB per 1,000 open unary requests and per 1,000 open streams, each with the
    highest step held and where it stopped (from each lane of the suite's cells); None without
    both kinds."""
    by_kind = {}
    for lane in lanes:
        by_kind.setdefault(lane.stream, lane)
    if len(by_kind) < 2:
        return None
    systems = [s for s in order if any(s in set(k.stops["system"]) for k in by_kind.values())]
    rows = []
    for system in systems:
        parts = []
        for stream in (False, True):
            lane = by_kind[stream]
            parts += [number(_per_k(lane.slopes.get(system))), number(_stopped(lane, system))]
        rows.append([cell(system, strong=True), *parts])
    return table(["system", "MiB / 1,000 open unary", "held (stopped at)",
                  "MiB / 1,000 open streams", "held (stopped at)"], rows, "inflight-per-open-table")


def _per_k(slope: Slope | None) -> str:
    if slope is None or F.isnan(slope.mib_per_1000):
        return F.DASH
    return f"{slope.mib_per_1000:,.1f} (R² {slope.r2:.2f})"


def _stopped(lane: Lane, system: str) -> str:
    rec = lane.stops[lane.stops["system"] == system]
    if not len(rec):
        return F.DASH
    rec = rec.iloc[0]
    held = f"{int(rec['highest_held']):,}"
    if F.isnan(rec["stopped_at"]):
        return f"{held} (every step)"
    return f"{held} ({rec['stopped_at']:,.0f}: {rec['cause']})"


def runs_table(lane: Lane) -> Table:
    """Every step of every run: the requests it held open at the client and at the mock."""
    rows = []
    for rec in lane.steps.sort_values(["system", "run_index", "target_open"]).to_dict("records"):
        if not rec["ran"]:
            rows.append(Row((cell(rec["run_id"]), number(f"{rec['target_open']:,}"),
                             *(number(F.DASH) for _ in range(4)), cell("not run")), "failed"))
            continue
        state = "held" if rec["held"] else (f"failed: {rec['run_failed'][:60]}"
                                            if rec.get("run_failed") else "not held")
        if not rec["open_agree"]:
            state += " (client and mock disagree)"
        rows.append(Row((cell(rec["run_id"]), number(f"{rec['target_open']:,}"),
                         *(number(F.num(rec[k], 0)) for k in ("client_open_mean", "client_open_max",
                                                               "mock_open_mean", "mock_open_max")),
                         cell(state)), "ok" if rec["held"] else "failed"))
    return table(["run", "open asked", "open at client (mean)", "(max)", "open at mock (mean)",
                  "(max)", "step"], rows, "inflight-runs-table")


def stops_table(lane: Lane, order: list[str]) -> Table:
    rows = []
    for rec in _ordered(lane.stops, order):
        slope = lane.slopes.get(rec["system"])
        per_k = (F.DASH if slope is None or F.isnan(slope.mib_per_1000)
                 else f"{slope.mib_per_1000:,.1f} (R² {slope.r2:.2f}, {slope.points} points)")
        stopped = F.DASH if F.isnan(rec["stopped_at"]) else f"{rec['stopped_at']:,.0f}"
        rows.append([cell(rec["system"], strong=True), cell(rec.get("configuration", "")),
                     number(f"{rec['highest_held']:,}"),
                     number(per_k), number(stopped), cell(rec["cause"] or "held every step"),
                     cell(rec["evidence"])])
    return table(["system", "ran as", "highest step held", "MiB per 1,000 open", "stopped at",
                  "what stopped it", "evidence"], rows, "inflight-stops-table")


def concurrency_table(frame: pd.DataFrame, order: list[str]) -> Table:
    rows = []
    for rec in _ordered(frame, order):
        memory = F.DASH if F.isnan(rec["memory_gib"]) else f"{rec['memory_gib'] * 1024:,.0f} MiB"
        if rec["extrapolated"] and memory != F.DASH:
            memory += f" (extrapolated beyond {rec['highest_held']:,})"
        replicas = F.DASH if F.isnan(rec["replicas"]) else f"{rec['replicas']:,.0f}"
        cost = F.DASH if F.isnan(rec["usd_month"]) else f"${rec['usd_month']:,.0f}"
        rows.append([cell(rec["system"], strong=True), number(f"{rec['open_requests']:,.0f}"),
                     number(memory), number(f"{rec['cores']:.2f}"), number(replicas),
                     cell(rec["decides"]), number(cost)])
    return table(["system", "open requests", "memory at them", "cores at the rate", "replicas",
                  "decided by", "USD / month"], rows, "inflight-sizing-table")


def sentences(lane: Lane, order: list[str]) -> list[str]:
    """One sentence per system: how many open requests it held in how much memory, or where it
    stopped and why ("nginx holds 10,000 open requests in 180 MiB; litellm stops at 2,500: ...")."""
    out = []
    for rec in _ordered(lane.stops, order):
        system, held = rec["system"], int(rec["highest_held"])
        at = lane.table[(lane.table["system"] == system) & (lane.table["target_open"] == held)]
        rss = at["rss_mib_mean"].iloc[0] if len(at) else math.nan
        memory = "" if F.isnan(rss) else f" in {rss:,.0f} MiB"
        if F.isnan(rec["stopped_at"]):
            out.append(f"{system} holds {held:,} open requests{memory}.")
        elif rec["cause"] == INSTRUMENTS:
            out.append(f"{system} holds {held:,} open requests{memory}; above that the instruments "
                       f"could not hold {rec['stopped_at']:,.0f} (direct did not either): not "
                       f"measured, not the system's limit.")
        elif held == 0:
            out.append(f"{system} did not hold even {rec['stopped_at']:,.0f} open requests: "
                       f"{rec['cause']} ({rec['evidence']}).")
        else:
            out.append(f"{system} holds {held:,}{memory} and stops at {rec['stopped_at']:,.0f}: "
                       f"{rec['cause']} ({rec['evidence']}).")
    return out


def _ordered(frame: pd.DataFrame, order: list[str]) -> list[dict]:
    if frame.empty:
        return []
    rank = {s: i for i, s in enumerate(order)}
    return sorted(frame.to_dict("records"), key=lambda r: rank.get(r["system"], len(rank)))
