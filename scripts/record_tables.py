"""Every table the harness computes from a study or a suite directory, pickled, so that a change
to loading or to the figures can be shown to change no number: record with the tree before the
change, then compare with the tree after it.

    python scripts/record_tables.py record DIR OUT.pkl      # DIR: a study or a suite directory
    python scripts/record_tables.py compare DIR OUT.pkl     # exit 1 on the first difference

It imports the harness of the working directory's tree: record with that tree's own copy of this
script (its names), compare with this one; the tables are matched by name."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from harness.stats import across
from harness.stats.fault_lane import fault_summary, fault_timelines, system_figures
from harness.stats.feature_cost import feature_cost
from harness.stats.inflight_limits import lane
from harness.stats.loading import cpu_count, load_study
from harness.stats.open_loop import open_loop_capacity, open_loop_steps
from harness.stats.ramp import ramp_curve
from harness.stats.runs import run_summary
from harness.stats.streaming import stream_summary
from report import suite_data as suite_stats
from report import tables
from report.data import collect


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    """Lists and dicts in cells as their repr (exact for floats), so frames compare exactly."""
    frame = frame.copy()
    for column in frame.columns:
        if frame[column].dtype == object and frame[column].map(
                lambda v: isinstance(v, (list, tuple, dict))).any():
            frame[column] = frame[column].map(repr)
    return frame


def _lane_tables(prefix: str, cell_lane) -> dict[str, pd.DataFrame]:
    slopes = pd.DataFrame([{"system": s, **{k: v for k, v in vars(slope).items()}}
                           for s, slope in sorted(cell_lane.slopes.items())])
    return {f"{prefix}inflight.steps": cell_lane.steps, f"{prefix}inflight.table": cell_lane.table,
            f"{prefix}inflight.stops": cell_lane.stops, f"{prefix}inflight.slopes": slopes}


def study_tables(study_dir: Path, prefix: str = "") -> dict[str, pd.DataFrame]:
    study = load_study(study_dir)
    roles = across.roles(study)
    rs = run_summary(study, floor=roles.floor)
    out = {"run_summary": rs, "ramp": ramp_curve(study, floor=roles.floor)}
    if len(rs) and "system" in rs.columns:
        out["system_summary"] = across.system_summary(rs, floor=roles.floor)
        out["labels"] = across.system_labels(rs)
        ref = roles.reference
        if ref is not None and ref in set(rs["system"]):
            out["compare"] = across.compare(rs, reference=ref, floor=roles.floor)
    per_window, per_run = fault_summary(study)
    out["faults.per_window"], out["faults.per_run"] = per_window, per_run
    if len(per_run):
        out["faults.timelines"] = fault_timelines(study, per_run)
        out["faults.systems"] = system_figures(per_window, per_run)
    steps = open_loop_steps(study, roles.floor)
    out["open_loop.steps"] = steps
    if len(steps):
        out["open_loop.capacity"] = open_loop_capacity(steps, roles.floor)
    out["streaming"] = stream_summary(study, roles.floor)
    out["feature_cost"] = feature_cost(study, rs)
    out.update(_lane_tables("", lane(study, roles.floor, cpu_count(study))))
    data = collect(study_dir)
    out["report.headline"] = tables.headline(data).frame()
    out["report.counts"] = data.counts
    return {prefix + name: _plain(frame) for name, frame in out.items()}


def suite_tables(suite_dir: Path) -> dict[str, pd.DataFrame]:
    suite = suite_stats.collect_suite(suite_dir)
    out = {"suite.table": suite_stats.suite_table(suite)}
    out["suite.faults.rows"], out["suite.faults.timelines"] = suite_stats.fault_table(suite)
    for entry, cell_lane in suite_stats.inflight_lanes(suite):
        out.update(_lane_tables(f"suite.{entry.cell_id}.", cell_lane))
    out = {name: _plain(frame) for name, frame in out.items()}
    for entry, data in suite.cells:
        out.update(study_tables(data.study.path, prefix=f"{entry.cell_id}/"))
    return out


def tables_of(directory: Path) -> dict[str, pd.DataFrame]:
    manifest = json.loads((directory / "manifest.json").read_text())
    return suite_tables(directory) if "cells" in manifest else study_tables(directory)


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("record", "compare"):
        print(__doc__, file=sys.stderr)
        return 2
    verb, directory, pickle = argv[0], Path(argv[1]), Path(argv[2])
    now = tables_of(directory)
    if verb == "record":
        pd.to_pickle(now, pickle)
        print(f"{len(now)} tables of {directory} -> {pickle}")
        return 0
    recorded = pd.read_pickle(pickle)
    if sorted(recorded) != sorted(now):
        print(f"different tables: only recorded {sorted(set(recorded) - set(now))}, "
              f"only now {sorted(set(now) - set(recorded))}")
        return 1
    rows = 0
    for name, frame in recorded.items():
        try:
            pd.testing.assert_frame_equal(now[name], frame, check_exact=True, obj=name)
        except AssertionError as exc:
            print(f"{name}: differs\n{exc}")
            return 1
        rows += len(frame)
    print(f"{len(now)} tables ({rows} rows) of {directory}: identical")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
