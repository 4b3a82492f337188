"""Every figure names its machine: the facts a report shows, the "same machine?" decision on
synthetic manifests, and comparisons of studies (and suites) from different machines, which show
the figures side by side and give no verdict."""
from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from synthetic import SYNTHETIC_MACHINE, RunParams, make_study
from synthetic_manifests import write_suite_manifest
from test_report import _tables

from harness.commands import main as cli
from harness.stats.across import VERDICT_ONLY
from harness.stats.machines import machine_fields, same_machine
from report import format as F
from report import suite_data as S
from report.compare import compare_studies
from report.sections import render_section
from report.suite_report import build_suite_report

EPYC = {"cpu_model": "AMD EPYC 7763 64-Core Processor", "cpu_count": 2,
        "kernel": "6.1.0-18-amd64", "os": "Linux-6.1.0-18-amd64-x86_64-with-glibc2.36"}
XEON = {"cpu_model": "Intel(R) Xeon(R) Platinum 8370C CPU @ 2.80GHz", "cpu_count": 4,
        "kernel": "6.1.0-18-amd64"}
VERDICT_WORDS = ("faster", "slower", "no clear difference", "less CPU", "more CPU",
                 "less memory", "more memory", "verdict-better", "verdict-worse", "≈")


# --- the decision, on synthetic manifests ---------------------------------------------------------

def test_facts_say_unknown_where_the_manifest_is_silent():
    assert machine_fields({"cpu_count": 2.0}) == {"cpu_model": "unknown", "cpu_count": "2",
                                                 "kernel": "unknown"}
    assert machine_fields(None)["cpu_model"] == "unknown"
    assert machine_fields({"cpu_model": "  "})["cpu_model"] == "unknown"


def test_same_machine_is_the_same_cpu_model_and_core_count():
    assert same_machine(EPYC, dict(EPYC)).same
    assert same_machine(EPYC, {**EPYC, "cpu_count": 2.0}).same        # a count read as a float
    # the kernel is named, not compared
    assert same_machine(EPYC, {**EPYC, "kernel": "6.12.0"}).same
    other_model = same_machine(EPYC, {**EPYC, "cpu_model": "AMD EPYC 9654"})
    assert not other_model.same and other_model.differs == ("cpu_model",)
    more_cores = same_machine(EPYC, {**EPYC, "cpu_count": 8})
    assert more_cores.differs == ("cpu_count",)
    assert same_machine(EPYC, XEON).differs == ("cpu_model", "cpu_count")
    assert same_machine(EPYC, XEON).a["cpu_model"] == EPYC["cpu_model"]


def test_a_fact_missing_on_one_side_cannot_show_the_same_machine():
    assert same_machine(EPYC, {"cpu_count": 2}).differs == ("cpu_model",)
    assert same_machine({}, {}).same          # nothing tells them apart


def test_machine_line_is_short():
    assert F.machine_line(machine_fields(EPYC)) == "AMD EPYC 7763, 2 cores, Linux 6.1.0-18-amd64"
    assert F.machine_line(machine_fields(XEON)) == "Intel Xeon Platinum 8370C, 4 cores, kernel 6.1.0-18-amd64"
    assert (F.machine_line(machine_fields(XEON), short=False)
            == "Intel(R) Xeon(R) Platinum 8370C CPU @ 2.80GHz, 4 cores, kernel 6.1.0-18-amd64")
    assert F.machine_line(machine_fields({})) == "unknown, unknown cores, kernel unknown"
    assert F.machine_line(machine_fields({**SYNTHETIC_MACHINE, "cpu_count": 1})).endswith(
        "1 core, Linux 6.1.0-synthetic")
    sentence = F.different_machines(machine_fields(EPYC), machine_fields(XEON))
    assert sentence == ("These studies ran on different machines (A: AMD EPYC 7763, 2 cores, "
                        "Linux 6.1.0-18-amd64; B: Intel Xeon Platinum 8370C, 4 cores, kernel "
                        "6.1.0-18-amd64): differences between them are not verdicts.")


# --- the study report's first screen --------------------------------------------------------------

def test_the_study_report_names_its_machine_in_its_header(tmp_path):
    s = make_study(tmp_path, params={"nginx": [RunParams()]},
                   machine={"cpu_model": "AMD EPYC 7763 64-Core Processor", "kernel": "6.1.0-18-amd64"})
    data = SimpleNamespace(study=SimpleNamespace(manifest=s.manifest, path=s.path, systems=["nginx"]),
                           reference="nginx")
    header = render_section(data, "header")
    assert "Measured on AMD EPYC 7763, unknown cores, kernel 6.1.0-18-amd64" in header
    assert 'title="AMD EPYC 7763 64-Core Processor, unknown cores' in header


# --- two studies ----------------------------------------------------------------------------------

BASE = {"direct": [RunParams(overhead_ms=o, cpu_cores=None) for o in (0.2, 0.25, 0.3)],
        "sluice": [RunParams(overhead_ms=o, cpu_cores=0.15) for o in (0.45, 0.5, 0.55)]}
SLOWER = {**BASE, "sluice": [RunParams(overhead_ms=o, cpu_cores=0.15) for o in (5.0, 5.2, 5.4)]}


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    """Study a on an EPYC; b, slower, on the same CPU with another kernel; c, slower, on a Xeon."""
    root = tmp_path_factory.mktemp("machines")
    return {"a": make_study(root, study_id="a", params=BASE, machine=EPYC).path,
            "b": make_study(root, study_id="b", params=SLOWER,
                            machine={**EPYC, "kernel": "6.12.0"}).path,
            "c": make_study(root, study_id="c", params=SLOWER, machine=XEON).path}


def test_studies_on_the_same_machine_get_verdicts_and_name_it(studies, tmp_path):
    verdicts, _, machines = compare_studies(studies["a"], studies["b"])
    assert machines.same and "outcome" in verdicts.columns
    out = tmp_path / "same.html"
    assert cli(["report", "--compare", str(studies["a"]), str(studies["b"]), "-o", str(out)]) == 0
    html = out.read_text()
    assert ("A measured on AMD EPYC 7763, 2 cores, Linux 6.1.0-18-amd64; B measured on AMD EPYC "
            "7763, 2 cores, Linux 6.12.0") in html
    assert "different machines" not in html and "suite-compare-table" in html


def test_studies_on_different_machines_are_shown_side_by_side_without_a_verdict(studies, tmp_path):
    verdicts, _, machines = compare_studies(studies["a"], studies["c"])
    assert machines.differs == ("cpu_model", "cpu_count")
    assert not set(VERDICT_ONLY) & set(verdicts.columns)
    row = verdicts.set_index(["system", "metric"]).loc[("sluice", "overhead_vs_mock_p50_ms")]
    assert row["mean"] > row["mean_ref"] > 0 and row["n"] == row["n_ref"] == 3
    out = tmp_path / "other.html"
    assert cli(["report", "--compare", str(studies["a"]), str(studies["c"]), "-o", str(out)]) == 0
    html = out.read_text()
    assert F.different_machines(machines.a, machines.b) in html
    body = html[html.index('id="different-machines"'):]
    assert not any(w in body for w in VERDICT_WORDS), [w for w in VERDICT_WORDS if w in body]
    t = _tables(html)
    assert "suite-compare-table" not in t
    assert t["compare-side-by-side-table"][0] == ["system", "metric", "A: mean ± sd", "B: mean ± sd"]
    rows = {(r[0], r[1]): r for r in t["compare-side-by-side-table"][1:]}
    shown = rows[("sluice", F.heading("overhead_vs_mock_p50_ms"))]
    assert float(shown[2].split(" ")[0]) < float(shown[3].split(" ")[0])


# --- two suites -----------------------------------------------------------------------------------

def _suite(root: Path, suite_id: str, study: Path) -> Path:
    """A suite of one cell: ``study`` (its report already there, so no cell report is built)."""
    (root / suite_id).mkdir()
    (study / "report.html").touch()
    write_suite_manifest(root / suite_id, [
        {"cell_id": "cell-01", "values": {"load.users": 10}, "comparison_key": "k1" * 32,
         "excluded": "", "status": "completed", "dir": os.path.relpath(study, root / suite_id)}])
    return root / suite_id


@pytest.mark.parametrize("other,same", [("b", True), ("c", False)])
def test_suites_from_different_machines_are_not_judged(studies, tmp_path, capsys, other, same):
    a, b = _suite(tmp_path, "a", studies["a"]), _suite(tmp_path, "b", studies[other])
    compared, _ = S.compare_suites(S.collect_suite(a), S.collect_suite(b))
    assert set(compared["same_machine"]) == {same}
    pairs = S.cell_machines(S.collect_suite(a), S.collect_suite(b))
    assert [(x, y, m.same) for x, y, m in pairs] == [("cell-01", "cell-01", same)]
    assert cli(["suite", "--compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "A (" in out and "measured on AMD EPYC 7763, 2 cores" in out
    if same:
        assert "different machines" not in out and "worse" in out.lower()
        return
    sentence = F.different_machines(machine_fields(EPYC), machine_fields(XEON))
    assert not set(VERDICT_ONLY) & set(compared.dropna(axis=1, how="all").columns)
    assert sentence in out and "mean_A" in out and "mean_B" in out
    assert not any(w in out.lower() for w in ("better", "worse", "no clear difference", "p_value"))
    html = build_suite_report(b, compare_with=a).path.read_text()
    assert sentence in html
    t = _tables(html)
    assert "suite-compare-table" not in t and len(t["suite-side-by-side-table"]) > 1
    against = html[html.index("Against suite"):]
    assert not any(w in against for w in VERDICT_WORDS)


def test_the_header_says_where_the_roles_ran():
    from harness.model.config import from_profile
    from report.format import placement_text
    assert placement_text(from_profile("aa")) == "every role on any CPU"
    apart = from_profile("aa", cpu_affinity_load="0", cpu_affinity_mock="0", cpu_affinity_system="1",
                         nice_mock=-5)
    assert placement_text(apart) == ("system under test on its own core (CPU 1); load generator "
                                     "and mock on CPU 0; mock at nice -5")
    shared = from_profile("aa", cpu_affinity_load="0", cpu_affinity_mock="1", cpu_affinity_system="1")
    assert placement_text(shared) == "system under test and mock on CPU 1; load generator on CPU 0"


def test_a_study_keyed_by_recipe_1_is_compared_with_a_newer_one(tmp_path):
    """A's runs carry recipe-1 keys, B's the current recipe's: B's are re-keyed in recipe 1 from
    their specs, so the systems that ran alike are compared and one that did not is kept apart."""
    import dataclasses

    from harness.files.study_files import StudyFiles
    from harness.model import migrate
    a = make_study(tmp_path, study_id="a", params=BASE, machine=EPYC).path
    b = make_study(tmp_path, study_id="b", params=SLOWER, machine=EPYC).path
    for run, manifest in StudyFiles(a).run_manifests():
        run.write_manifest(dataclasses.replace(manifest,
                                               comparison_key=migrate.run_key_v1(manifest.spec)))
    for run, manifest in StudyFiles(b).run_manifests():
        spec = manifest.spec
        if manifest.system == "sluice":   # ran with another worker count: not comparable
            spec = dataclasses.replace(spec, gateway_workers=spec.gateway_workers + 1)
        run.write_manifest(dataclasses.replace(manifest, spec=spec,
                                               comparison_key=f"2:{manifest.run_index:064d}"))
    verdicts, apart, _ = compare_studies(a, b)
    assert set(verdicts["system"]) == {"direct"}
    assert apart.to_dict("records") == [
        {"system": "sluice", "why": "different configurations (comparison keys differ)"}]
