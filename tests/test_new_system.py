"""A new system is one folder under gateways/: a suite that asks for every system plans it and a
study runs it, with no other file touched (here a second nginx, "edge", in a copy of the tree's
system folders)."""
from __future__ import annotations

import dataclasses
import shutil

import pytest

from harness.model.config import GATEWAYS_DIR
from harness.model.suite import load_suite
from harness.run.preflight import preflight
from harness.run.study import run_study
from harness.run.suite_run import expand
from harness.stats.loading import load_study

pytestmark = pytest.mark.integration


def test_a_new_system_is_planned_and_run_from_its_folder_alone(tmp_path):
    systems = tmp_path / "gateways"
    shutil.copytree(GATEWAYS_DIR / "direct", systems / "direct")
    shutil.copytree(GATEWAYS_DIR / "nginx", systems / "edge")
    toml = systems / "edge" / "gateway.toml"
    toml.write_text(toml.read_text().replace('name = "nginx"', 'name = "edge"', 1))
    suite_file = tmp_path / "every.toml"
    suite_file.write_text(f'name = "every"\nprofile = "smoke"\n[base]\ngateways = ["all"]\n'
                          f'gateways_dir = "{systems}"\n[axes]\nrequest.stream = [false]\n')
    [cell] = expand(load_suite(suite_file), suite_dir=tmp_path / "out")
    assert cell.excluded == "" and cell.config.gateways == ("direct", "edge")
    result = run_study(preflight(dataclasses.replace(cell.config, runs_per_gateway=1)))
    assert sorted((r.system, r.status) for r in result.records) == [
        ("direct", "completed"), ("edge", "completed")], [r.reason for r in result.records]
    study = load_study(result.study_dir)
    edge = study.requests[study.requests["system"] == "edge"]
    assert len(edge) > 0 and (edge["status_code"] == 200).all()
