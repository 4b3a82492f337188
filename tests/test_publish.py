"""The publication: `python -m harness publish` writes artifacts/published/ from a complete study
(refusing one that is not, with what it lacks), marks the rows whose key the tree no longer
produces, and the README's Results block agrees with artifacts/published/."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from synthetic import make_study, write_lane_counts

from harness.commands import main
from harness.files import readers
from harness.files.store import tree_bytes, write_frame
from harness.model.config import REPO_DIR, StudyConfig
from harness.model.formats import PUBLICATION
from harness.model.gateway_spec import load_gateway_spec
from harness.model.plan import make_plan
from harness.run.run import instruments
from harness.run.staleness import stale_systems
from report import publish as P
from report.tables import UNSTABLE_MARK

BIFROST = "its upstream binary does not start on this CPU (the reason a test gives)"


def _complete(root: Path, study_id: str = "s1") -> Path:
    """A complete synthetic study: every run done (litellm's second failed: a finding), Bifrost
    kept with its reason, the counting lane run (litellm not counted, with its reason)."""
    path = make_study(root, study_id).path
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["systems"]["bifrost"] = {"kind": "competitor", "version": "", "role": "system",
                                      "runnable": False, "not_runnable_reason": BIFROST}
    (path / "manifest.json").write_text(json.dumps(manifest))
    write_lane_counts(path, manifest["systems"], {"litellm": "not ready after 300 s under callgrind",
                                        "bifrost": f"not run in this study: {BIFROST}"})
    return path


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    root = tmp_path_factory.mktemp("publish")
    artifacts = root / "artifacts"
    study = _complete(artifacts)
    readme = root / "README.md"
    readme.write_text(f"# x\n\n## Results\n\n{P.README_START}\n{P.NOTHING_PUBLISHED}\n"
                      f"{P.README_END}\n\n## After\n")
    stale = {"litellm": "files changed: gateway.toml"}
    out = artifacts / P.PUBLISHED
    pub = P.publish(study, P.newest_complete_suites(artifacts), stale, out, readme)
    return {"root": root, "study": study, "out": out, "readme": readme, "pub": pub}


def test_a_complete_study_is_published_with_its_page_tables_manifests_and_hashes(published):
    out, pub, study = published["out"], published["pub"], published["study"]
    page = (out / P.PAGE).read_text()
    # the answer first: the head-to-head table before any other table
    assert page[:page.index('id="headline-table"')].count("<table") <= 1
    assert page.index('id="headline-table"') < page.index('id="counts-table"')
    for heading in ("net overhead p50", "net overhead p99", "instr./req (counted)"):
        assert heading in page
    # self-contained: no fetch from the network
    assert "http://" not in page.replace("http://www.w3.org", "") and "https://" not in page
    assert "<script src" not in page and "<link" not in page
    # each section names its study, machine and commit; a lane not run says so
    assert "s1" in page and "Synthetic CPU @ 2.0GHz, 2 cores" in page
    assert "0123456789ab" in page
    assert "Fault lane: not run" in page and "In-flight lane: not run" in page
    assert BIFROST in page and "not ready after 300 s under callgrind" in page
    # the tables, read with the documented line and through their reader
    headline = readers.read_published_table(out / "headline.parquet")
    assert list(headline["system"]) == ["direct", "nginx", "sluice", "litellm stale",
                                       "bifrost"]
    assert {"summary.parquet", "runs.parquet", "counts.parquet"} <= set(pub["tables"])
    for name in pub["tables"]:
        assert len(readers.read_published_table(out / name)) > 0
    # the manifests, and every raw file's size and SHA-256
    assert (out / "manifests" / "study" / "manifest.json").is_file()
    assert (out / "manifests" / "study" / "counts.json").is_file()
    assert (out / "manifests" / "study" / "runs" / "nginx" / "1" / "manifest.json").is_file()
    raw = {f["path"]: f for f in pub["standard"]["raw_files"]}
    assert set(raw) == {p.relative_to(study).as_posix() for p in study.rglob("*") if p.is_file()}
    one = study / "runs" / "nginx" / "1" / "requests.parquet"
    assert raw["runs/nginx/1/requests.parquet"]["size_bytes"] == one.stat().st_size
    systems = {s["system"]: s for s in pub["standard"]["systems"]}
    assert systems["bifrost"]["not_runnable_reason"] == BIFROST
    assert systems["sluice"]["instructions_per_request"] == {"plain": 54_000.0, "stream": 108_000.0}
    assert systems["litellm"]["instructions_per_request"] == {"plain": None, "stream": None}
    assert tree_bytes(out) <= P.MAX_BYTES


def test_a_stale_row_is_marked_on_the_page_and_in_the_readme(published):
    page = (published["out"] / P.PAGE).read_text()
    assert 'id="stale"' in page and "files changed: gateway.toml" in page
    head = page[page.index('id="headline-litellm"'):]
    assert "tag stale" in head[:head.index("</tr>")]
    assert "stale" not in page[page.index('id="headline-nginx"'):].split("</tr>")[0]
    assert "litellm (files changed: gateway.toml)" in P.readme_block(published["out"])


def test_the_readme_block_is_written_from_the_publication(published):
    block = P.readme_block_in(published["readme"])
    assert block == P.readme_block(published["out"])
    assert len(block.splitlines()) <= P.README_LINES
    assert "| sluice |" in block and "Synthetic CPU @ 2.0GHz" in block
    assert "artifacts/published/index.html" in block or "published/index.html" in block
    # a system that could not run: its reason once, in the head-to-head's sentence
    assert block.count(BIFROST) == 1 and "bifrost (not runnable)" in block
    assert published["readme"].read_text().endswith(f"{P.README_END}\n\n## After\n")


def test_the_repository_readme_agrees_with_artifacts_published():
    """The README's Results block is what artifacts/published/ says (nothing published yet:
    exactly the sentence that says so)."""
    assert P.readme_block_in(REPO_DIR / "README.md") == P.readme_block(REPO_DIR / "artifacts" / P.PUBLISHED)


def test_an_incomplete_study_is_refused_with_what_it_lacks(tmp_path):
    path = make_study(tmp_path, "half", status="interrupted").path
    with pytest.raises(P.PublishError) as info:
        P.newest_complete_study(tmp_path, profile="synthetic")
    assert len(info.value.lines()) == 1
    text = info.value.lines()[0]
    assert "half" in text and "status interrupted" in text
    assert "counting lane did not run" in text
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["runs"] = [r for r in manifest["runs"] if r["run_id"] != "sluice-3"]
    manifest["status"] = "completed"
    (path / "manifest.json").write_text(json.dumps(manifest))
    assert P.study_problems(path) == ["sluice: 2 of 3 runs done",
                                      "its counting lane did not run (no counts.json)"]
    with pytest.raises(P.PublishError, match="sluice: 2 of 3 runs done"):
        P.publish(path, {}, {}, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_newest_complete_study_is_taken(tmp_path):
    _complete(tmp_path, "older")
    newer = make_study(tmp_path, "newer").path      # no counting lane: not complete
    manifest = json.loads((newer / "manifest.json").read_text())
    manifest["started_t_unix_s"] += 1000.0
    (newer / "manifest.json").write_text(json.dumps(manifest))
    assert P.newest_complete_study(tmp_path, profile="synthetic") == tmp_path / "older"


def _gateways(tmp_path: Path) -> Path:
    root = tmp_path / "gateways"
    for name in ("direct", "nginx"):
        shutil.copytree(REPO_DIR / "gateways" / name, root / name)
    return root


def test_a_key_the_tree_no_longer_produces_is_stale_with_the_reason(tmp_path):
    gateways = _gateways(tmp_path)
    config = StudyConfig(gateways=("direct", "nginx"), profile="smoke", gateways_dir=str(gateways))
    specs = {s: load_gateway_spec(s, gateways) for s in config.gateways}
    recorded = {r.system: r for r in make_plan(config, specs, instruments()) if r.run_index == 1}
    assert stale_systems(config, recorded) == {}
    more = dataclasses.replace(config, users=config.users + 1)
    assert stale_systems(more, recorded)["nginx"] == "settings: load.users"
    template = gateways / "nginx" / "nginx.conf.tmpl"
    template.write_text(template.read_text() + "\n# changed\n")
    stale = stale_systems(config, recorded)
    assert list(stale) == ["nginx"]
    assert stale["nginx"] == f"files changed: {template.name}"
    shutil.rmtree(gateways / "nginx")
    assert "cannot be read now" in stale_systems(config, recorded)["nginx"]


def test_a_change_to_a_variant_a_run_did_not_ask_for_leaves_it_current(tmp_path):
    """nginx's sized template is read by the in-flight lane's runs only: a standard run recorded
    before it changed is still what the tree runs; a sized one is not."""
    gateways = _gateways(tmp_path)
    shipped = StudyConfig(gateways=("nginx",), profile="smoke", gateways_dir=str(gateways))
    sized = dataclasses.replace(shipped, scale="sized")
    specs = {"nginx": load_gateway_spec("nginx", gateways)}
    recorded = {config.scale: make_plan(config, specs, instruments())[0]
                for config in (shipped, sized)}
    sized_template = gateways / "nginx" / "nginx.sized.tmpl"
    sized_template.write_text(sized_template.read_text() + "\n# changed\n")
    assert stale_systems(shipped, {"nginx": recorded["shipped"]}) == {}
    assert stale_systems(sized, {"nginx": recorded["sized"]}) == {
        "nginx": "files changed: nginx.sized.tmpl"}
    shipped_template = gateways / "nginx" / "nginx.conf.tmpl"   # the one a sized run replaces
    shipped_template.write_text(shipped_template.read_text() + "\n# changed\n")
    assert stale_systems(sized, {"nginx": recorded["sized"]}) == {
        "nginx": "files changed: nginx.sized.tmpl"}
    assert stale_systems(shipped, {"nginx": recorded["shipped"]}) == {
        "nginx": "files changed: nginx.conf.tmpl"}


def test_sluices_key_covers_its_package_sources():
    """A change to any of Sluice's sources makes its published row stale."""
    spec = load_gateway_spec("sluice")
    declared = set(spec.declared_files())
    sources = {p.relative_to(spec.directory).as_posix()
               for pattern in ("sluice/*.py", "sluice/*.pxd", "sluice/*.pyx")
               for p in spec.directory.glob(pattern)}
    assert sources and {"pyproject.toml", "setup.py"} | sources <= declared


def test_publish_check_prints_the_stale_rows_and_exits_0(published, capsys):
    code = main(["publish", "--check", "--out", str(published["out"])])
    printed = capsys.readouterr().out
    assert code == 0
    # the synthetic runs' keys are no tree's: every system run is stale, with a reason
    for system in ("direct", "nginx", "sluice", "litellm"):
        assert f"  {system}: stale: " in printed
    assert f"  bifrost: no run ({BIFROST})" in printed
    assert main(["publish", "--check", "--out", str(published["root"] / "none")]) == 0
    assert "nothing published" in capsys.readouterr().out


def test_the_publication_reader_refuses_a_version_it_does_not_know(published, tmp_path):
    data = json.loads((published["out"] / PUBLICATION.file).read_text())
    assert data["schema_version"] == PUBLICATION.version
    path = tmp_path / PUBLICATION.file
    path.write_text(json.dumps({**data, "schema_version": 99}))
    with pytest.raises(readers.ArtifactError, match="publication schema_version 99"):
        readers.read_publication(path)


def _fault_suite(artifacts: Path, suite_id: str = "faults-t", name: str = "faults",
                 scenario: str = "error_burst", started_t_unix_s: float = 1.0,
                 excluded: int = 0) -> Path:
    """A complete fault suite of one synthetic cell (and ``excluded`` combinations the suite
    leaves out) under artifacts/suites/."""
    from synthetic_faults import FaultRun, make_fault_study
    from synthetic_manifests import write_suite_manifest

    from harness.model.config import from_profile
    root = artifacts / "suites" / suite_id
    make_fault_study(root, "cell-01", {"direct": [FaultRun()], "nginx": [FaultRun(dialect="other")],
                                       "sluice": [FaultRun(attempts=2, fail_every=0)]})
    config = from_profile("faults", fault_scenario=scenario).to_dict()
    left_out = [{"cell_id": f"cell-{k + 2:02d}", "comparison_key": "", "excluded": "a unary scenario",
                 "values": {"fault_scenario": scenario}, "config": config, "status": "excluded",
                 "dir": ""} for k in range(excluded)]
    write_suite_manifest(root, [{"cell_id": "cell-01", "comparison_key": "k" * 8, "excluded": "",
                                 "values": {"fault_scenario": scenario}, "config": config,
                                 "status": "completed", "dir": "cell-01"}, *left_out],
                         name=name, profile="faults", started_t_unix_s=started_t_unix_s,
                         ended_t_unix_s=started_t_unix_s + 1.0)
    return root


def test_a_complete_fault_suite_gets_its_section_and_table(tmp_path):
    artifacts = tmp_path / "artifacts"
    study = _complete(artifacts)
    suite = _fault_suite(artifacts)
    lanes = P.newest_complete_suites(artifacts)
    assert lanes["faults"] == suite and lanes["inflight"].startswith("not run")
    pub = P.publish(study, lanes, {}, artifacts / P.PUBLISHED)
    assert pub["lanes"]["faults"]["suite_id"] == "faults-t"
    page = (artifacts / P.PUBLISHED / P.PAGE).read_text()
    section = page[page.index('id="published-faults"'):page.index('id="published-faults-extra"')]
    assert "Suite <code>faults-t</code>" in section and "error_burst" in section
    assert "kernel unknown" in section     # the cells' machine, as their manifests say
    assert len(readers.read_published_table(artifacts / P.PUBLISHED / "faults.parquet")) > 0
    assert (artifacts / P.PUBLISHED / "manifests" / "faults" / "manifest.json").is_file()


def test_each_lane_takes_the_newest_suite_of_its_own_name(tmp_path):
    """The other scenarios' suite, run after the core lane, is a lane beside it, never its
    replacement; a suite of another name (shipped configurations, say) is no lane."""
    artifacts = tmp_path / "artifacts"
    study = _complete(artifacts)
    core = _fault_suite(artifacts, "faults-a")
    extra = _fault_suite(artifacts, "faults-extra-b", "faults-extra", "retry_after", 5.0, excluded=1)
    _fault_suite(artifacts, "faults-shipped-c", "faults-shipped", started_t_unix_s=9.0)
    lanes = P.newest_complete_suites(artifacts)
    assert lanes["faults"] == core and lanes["faults-extra"] == extra
    assert lanes["inflight"] == "not run: no suite named inflight under artifacts/suites/"
    pub = P.publish(study, lanes, {}, artifacts / P.PUBLISHED)
    assert [pub["lanes"][k].get("suite_id") for k in P.LANES] == ["faults-a", "faults-extra-b", None]
    # a combination the suite leaves out is not a cell that did not run
    assert "Fault lane, the other scenarios: suite faults-extra-b, 1 of 1 cells run." in pub["sentences"]
    page = (artifacts / P.PUBLISHED / P.PAGE).read_text()
    assert "retry_after" in page[page.index('id="published-faults-extra"'):]
    assert len(readers.read_published_table(artifacts / P.PUBLISHED / "faults-extra.parquet")) > 0


def test_an_unstable_figure_is_explained_under_the_table(published):
    """The mark beside a figure whose runs disagree is said once under the table, and only when a
    figure carries it."""
    assert UNSTABLE_MARK not in P.readme_block(published["out"])   # the synthetic runs agree
    shaky = published["root"] / "shaky"
    shutil.copytree(published["out"], shaky)
    table = pd.read_parquet(shaky / "headline.parquet")
    column = table.columns[2]
    table[column] = table[column].astype(str) + f" {UNSTABLE_MARK}"
    write_frame(shaky / "headline.parquet", table, PUBLICATION)
    block = P.readme_block(shaky)
    assert block.count(f"{UNSTABLE_MARK}: the runs disagree") == 1


def test_an_inflight_suite_section_shows_sizing_stops_and_clients_who_left():
    """The published in-flight section renders from the same context as the suite page: memory
    per open unary request beside per open stream, each cell's stops, and the abandon table of
    the streamed cell that left streams."""
    from types import SimpleNamespace as NS

    from synthetic_inflight import step

    from harness.stats import inflight_limits as L
    from report.sections import render
    from report.suite_report import inflight_context

    def lane(stream):
        left = {"abandoned": 50.0, "close_to_provider_p99_ms": 12.0} if stream else {"abandoned": 0.0}
        steps = pd.DataFrame([step(s, t, True, **left) for s in ("direct", "sluice")
                              for t in (1000, 2500)])
        table = L.summary(steps, floor="direct")
        stops = L.where_it_stops(table, cores=2.0).assign(configuration="sized")
        return L.Lane(steps, table, stops, L.slopes(steps), 10.0, stream, "direct")
    suite = NS(cells=tuple((NS(cell_id=f"cell-0{i}", values={"request.stream": s}),
                            NS(inflight=lane(s))) for i, s in ((1, False), (2, True))))
    html = render("suite_inflight.html.j2", **inflight_context(suite))
    assert 'id="suite-inflight-sizing"' in html and "MiB / 1,000 open streams" in html
    assert html.count('id="inflight-stops-table"') == 2
    assert html.count('id="inflight-abandon-table"') == 1
    assert "<h3>cell-02: request.stream = true</h3>" in html
    assert html.index('id="inflight-abandon-table"') > html.index("cell-02")
