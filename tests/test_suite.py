"""Suites of cells: paths, expansion, exclusions, comparison keys, comparing two suites (the
smoke suite for real through papermill: test_suite_integration.py)."""
import dataclasses
import os
import shutil

import pytest
from synthetic import RunParams, make_study
from synthetic_manifests import write_suite_manifest

from harness.commands import main
from harness.model import migrate
from harness.model import suite as M
from harness.model.config import REPO_DIR, StudyConfig
from harness.model.gateway_spec import load_gateway_spec
from harness.model.plan import Instruments, KeyVersionError, key_version
from harness.run import suite_run as R
from harness.stats.outcomes import Outcome
from report import format as F
from report import suite_data as S
from report.suite_report import build_suite_report, cells_frame


def write_suite(tmp_path, text, name="t.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


BASIC = """
name = "basic"
profile = "smoke"
[base]
gateways = ["nginx"]
load.think_time_s = 0.2
[axes]
request.stream = [false, true]
load.users = [0, 4]
[[exclude]]
where = { request.stream = true, load.users = 4 }
reason = "not needed here"
"""


@pytest.mark.parametrize("path,field", [("load.users", "users"), ("mock.latency_ms", "mock_latency_ms"),
                                        ("request.stream", "stream"), ("gateway.workers", "gateway_workers"),
                                        ("mock.stream_chunks", "stream_chunks"), ("seed", "seed"),
                                        ("load.open_loop_rates_per_s", "open_loop_rates_per_s"),
                                        ("wire.capture_offset_s", "wire_capture_offset_s"),
                                        ("wire.capture_s", "wire_capture_s"),
                                        ("inflight.steps", "inflight_steps"),
                                        ("placement.nice_mock", "nice_mock"),
                                        ("faults.fault_scenario", "fault_scenario")])
def test_paths_name_fields(path, field):
    assert M.field_of(path) == field


@pytest.mark.parametrize("path,message", [("colour", "not a setting"), ("net.users", "unknown section"),
                                          ("mock.users", "mock has no 'users'"),
                                          ("out_dir", "not a setting"), ("study.study_id", "study has no"),
                                          ("load.inflight_steps", "load has no"),
                                          ("request.latency_ms", "request has no"),
                                          ("wire.offset_s", r"wire has no .offset_s.; it has \[.capture_s., .capture_offset_s.")])
def test_bad_paths_are_named(path, message):
    with pytest.raises(M.SuiteError, match=message):
        M.field_of(path)


def test_expansion_exclusions_and_floor(tmp_path):
    cells = R.expand(M.load_suite(write_suite(tmp_path, BASIC)), str(tmp_path / "out"))
    assert [c.values for c in cells] == [
        {"request.stream": False, "load.users": 0}, {"request.stream": False, "load.users": 4},
        {"request.stream": True, "load.users": 0}, {"request.stream": True, "load.users": 4}]
    assert cells[0].excluded.startswith("cannot run: users: must be at least 1")
    assert cells[2].excluded.startswith("cannot run: users: must be at least 1")
    assert cells[3].excluded == "excluded by the suite: not needed here"
    runnable = cells[1]
    assert runnable.excluded == "" and runnable.config.gateways == ("direct", "nginx")
    assert (runnable.config.users, runnable.config.think_time_s, runnable.config.stream) == (4, 0.2, False)
    assert key_version(runnable.comparison_key) == 2
    assert all(c.comparison_key == "" for c in cells if c.excluded)


def test_comparison_key_is_the_whole_configuration(tmp_path):
    suite = M.load_suite(write_suite(tmp_path, BASIC))
    a = R.expand(suite, str(tmp_path / "a"))[1]
    b = R.expand(suite, str(tmp_path / "b"))[1]
    assert a.comparison_key == b.comparison_key          # where it is written does not count
    here = R.instruments()  # the keys expand made: this mock's and this Locust's versions
    assert M.cell_key(dataclasses.replace(a.config, study_id="x"), here) == a.comparison_key
    for change in (dict(users=5), dict(seed=1), dict(mock_latency_ms=61.0),
                   dict(gateways=("direct", "nginx", "sluice"))):
        assert M.cell_key(dataclasses.replace(a.config, **change), here) != a.comparison_key, change


@pytest.mark.parametrize("text,message", [
    ('name = "x"\n[axes]\n', "needs at least one axis"),
    ('[axes]\nload.users = 4\n', r"\[axes\] load.users: expected a non-empty list of values, got 4"),
    ('[axes]\nload.users = [1]\nusers = [2]\n', r"\[axes\] users: sets users, as 'load.users' does"),
    ('[axes]\nload.users = [1]\n[[exclude]]\nwhere = { seed = 1 }\nreason = "r"\n', "not axes"),
    ('profile = "fast"\n[axes]\nload.users = [1]\n', "unknown profile"),
    ('colour = 1\n[axes]\nload.users = [1]\n', "colour: unknown key; allowed: name, description"),
    ('name = 3\n[axes]\nload.users = [1]\n', "name: expected a string, got 3"),
    ('[base]\nload.users = "many"\n[axes]\nseed = [1]\n',
     r"\[base\] load.users: expected a whole number, got 'many'"),
    ('[axes]\nload.think_time_s = [0.1, "slow"]\n',
     r"\[axes\] load.think_time_s: expected a finite number, got 'slow'"),
    ('[axes]\nload.userz = [1]\n', r"\[axes\] load.userz: load has no 'userz'"),
    ('[axes]\nseed = [1]\n[[exclude]]\nwhere = { seed = 1 }\n', r"\[exclude\[0\]\] reason: missing"),
    ('[axes\n', "not valid TOML"),
])
def test_bad_suite_files_are_refused_before_anything_runs(tmp_path, text, message):
    with pytest.raises(M.SuiteError, match=message):
        M.load_suite(write_suite(tmp_path, text))


def test_dry_run_lists_cells_keys_and_reasons(tmp_path, capsys):
    assert main(["suite", str(write_suite(tmp_path, BASIC)), "--dry-run", "--out-dir", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert out.count("cannot run: users: must be at least 1") == 2 and "not needed here" in out
    assert not (tmp_path / "o" / "basic").exists()
    assert main(["suite", str(tmp_path / "missing.toml"), "--dry-run"]) == 2


@pytest.mark.parametrize("name", ["smoke", "streaming", "load-levels"])
def test_committed_suites_expand(name):
    cells = R.expand(M.load_suite(REPO_DIR / "notebooks" / "suites" / f"{name}.toml"))
    runnable = [c for c in cells if not c.excluded]
    assert runnable and all(c.config.gateways[0] == "direct" for c in runnable)
    assert len({c.comparison_key for c in runnable}) == len(runnable)


def test_a_suite_named_from_the_repository_is_found_again_from_the_notebooks_folder(monkeypatch):
    """make faults names its suite relative to the repository; the suite notebook, run in
    notebooks/, reads the file again there."""
    monkeypatch.chdir(REPO_DIR)
    suite = M.load_suite("notebooks/suites/smoke.toml")
    monkeypatch.chdir(REPO_DIR / "notebooks")
    assert suite.path.is_absolute() and suite.path.read_text() == suite.text


def test_the_fault_lane_expects_its_runs_and_their_planned_length():
    """5 scenarios x (5 configured systems x 3 runs + direct and MLflow once), each at least its
    warm-up, its step, idle and cool-down; Bifrost (not runnable here) adds none."""
    cells = R.expand(M.load_suite(REPO_DIR / "notebooks" / "suites" / "faults.toml"))
    runs, seconds = R.expected(cells)
    config = next(c.config for c in cells if c.config is not None)
    per_run = (config.warmup_s + config.open_loop_step_s + config.idle_s + config.cooldown_s
               + R.RUN_FIXED_S)
    assert runs == 85 and seconds == pytest.approx(85 * per_run)


def test_runs_override_the_suites_own_and_a_bad_value_is_refused_first(capsys):
    """make faults RUNS=1: 5 scenarios x (5 configured systems + direct and MLflow) once each;
    a value that is not a whole number >= 1 stops the command before any cell is cleared."""
    suite = M.load_suite(REPO_DIR / "notebooks" / "suites" / "faults.toml")
    assert M.with_runs_per_gateway(suite, 0) is suite and M.with_runs_per_gateway(suite, None) is suite
    runs, _ = R.expected(R.expand(M.with_runs_per_gateway(suite, "1")))
    assert runs == 35
    for bad in ("two", -1, 1.5, True):
        with pytest.raises(M.SuiteError, match=r"runs_per_gateway \(RUNS=, --runs-per-gateway\).*whole number"):
            M.with_runs_per_gateway(suite, bad)
    assert main(["suite", str(suite.path), "--runs-per-gateway", "x", "--dry-run"]) == 2
    assert "RUNS=" in capsys.readouterr().err


def test_noise_suites_parse_and_list_their_cells(tmp_path, capsys, monkeypatch):
    """capture-ab: the aa pair with the capture off and on; affinity-ab: unpinned and two pinned
    splits (checked as on a 2-CPU machine with taskset)."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/taskset" if name == "taskset" else which(name))
    suites = REPO_DIR / "notebooks" / "suites"
    for name in ("capture-ab", "affinity-ab"):
        assert main(["suite", str(suites / f"{name}.toml"), "--dry-run", "--out-dir", str(tmp_path)]) == 0
    assert not any(tmp_path.iterdir())
    capture = [c for c in R.expand(M.load_suite(suites / "capture-ab.toml")) if not c.excluded]
    assert [c.config.wire_capture_s for c in capture] == [0.0, 20.0]
    assert all(c.config.gateways == ("direct", "nginx", "nginx~aa") for c in capture)
    cells = R.expand(M.load_suite(suites / "affinity-ab.toml"))
    pins = [(c.config.cpu_affinity_load, c.config.cpu_affinity_mock, c.config.cpu_affinity_system)
            for c in cells if not c.excluded]
    assert pins == [("", "", ""), ("0", "1", "1"), ("0", "0", "1")]
    assert all(c.excluded.startswith("excluded by the suite") for c in cells if c.config is None)
    # unpinned, the aa cell has the key of capture-ab's "on" cell (which never had pins); that a
    # setting left empty keeps the key it had before the setting existed is pinned in
    # test_recorded_cell_keys_keep
    assert cells[0].comparison_key == capture[1].comparison_key
    assert len({c.comparison_key for c in cells if not c.excluded}) == 3


# A cell fixed in every setting and in the bytes of its systems' files, and the keys recorded for
# it. A suite's manifest records each cell's key and two suites are compared only where their keys
# are equal, so a recorded key must keep matching its cell: the current recipe's
# (RECORDED_V2_CELL_KEY) and recipe 1's, recomputed by harness.model.migrate. A change to the
# current recipe must fail here: it raises KEY_VERSION and moves the recipe it replaces, frozen,
# into migrate. Never update these literals to make the test pass.
FIXED_CELL = dict(
    gateways=("alpha", "beta"), profile="smoke", reference_system="beta", aa_pair=(),
    gate_system="alpha", gate_base_system="", builds=(), system_env=(), runs_per_gateway=3,
    users=50, ramp_s=10.0, hold_s=30.0, min_hold_requests=0, max_hold_s=120.0, warmup_s=5.0,
    warmup_users=5, idle_s=3.0, cooldown_s=5.0, think_time_s=1.0, locust_processes=1,
    request_timeout_s=30.0, mock_latency_ms=60.0, mock_workers=1, mock_response_tokens=16,
    stream=False, stream_chunks=20, chunk_delay_ms=20.0, fault_scenario="", fault_start_s=10.0,
    fault_duration_s=0.0, fault_seed=-1, resilience="shipped",
    open_loop_rates_per_s=(), open_loop_step_s=20.0, feature="", request_bytes=0,
    wire_capture_s=20.0, wire_capture_offset_s=2.0, wire_snaplen_bytes=512, gateway_workers=2,
    ready_timeout_s=60.0, seed=0, base_port=0, topology="", cpu_affinity_load="",
    cpu_affinity_mock="", cpu_affinity_system="", nice_load=0, nice_mock=0, nice_system=0,
    out_dir="artifacts/suites/fixed", study_id="cell-01")
GATEWAY_TOML = """schema_version = 1
name = "{name}"
kind = "competitor"
description = "A fixed declaration: its bytes are part of the recorded cell key."

[start]
command = ["{name}", "--port", "{{{{port}}}}"]

[request]
base_url = "http://127.0.0.1:{{{{port}}}}"
"""
INSTRUMENTS = Instruments(mock_version="1.2.0", locust_version="2.47.0")
RECORDED_V2_CELL_KEY = "2:738e89fd2cda25bccaace9e2ea130434e81830e551510e848471f55477bcda37"
# fault_lead_s retired (the load arms the faults): every cell key moved once
RECORDED_CELL_KEY = "0e2fc0432fb5f60728156a9977c71731df010cbc6f7611dcbca50eded3b4d3f1"
RECORDED_CELL_KEY_ALL_SET = "825bdc4987f2021d26af220692eb24654518d8187d64c400958399df117adc7b"


def _fixed_folders(root):
    for name in ("alpha", "beta"):
        (root / name).mkdir()
        (root / name / "gateway.toml").write_text(GATEWAY_TOML.format(name=name))
    return StudyConfig(**FIXED_CELL, gateways_dir=str(root))


def _tomls(config):
    return {n: load_gateway_spec(n, config.systems_dir).toml_sha256 for n in config.gateways}


def test_recorded_cell_keys_keep(tmp_path):
    config = _fixed_folders(tmp_path)
    assert M.cell_key(config, INSTRUMENTS) == RECORDED_V2_CELL_KEY
    assert migrate.cell_key_v1(config, _tomls(config)) == RECORDED_CELL_KEY
    # where it is written, what it is called, the preset it came from and its ports are in
    # neither recipe
    elsewhere = dataclasses.replace(config, base_port=9000, out_dir="elsewhere", study_id="x",
                                    profile="standard")
    assert M.cell_key(elsewhere, INSTRUMENTS) == RECORDED_V2_CELL_KEY
    assert migrate.cell_key_v1(elsewhere, _tomls(config)) == RECORDED_CELL_KEY
    every_one_set = dict(cpu_affinity_load="0", cpu_affinity_mock="1", cpu_affinity_system="1",
                         nice_load=5, nice_mock=5, nice_system=0, gate_base_system="alpha~base",
                         builds=("alpha~base=main~1",), system_env=("alpha:SLUICE_TEST_DELAY_MS=1",))
    # (settings added after this key was recorded are checked one by one below)
    assert set(every_one_set) | {"runs_unconfigured", "count_lane"} == set(migrate.V1_IN_CELL_KEY_WHEN_SET)
    all_set = dataclasses.replace(config, **every_one_set)
    assert migrate.cell_key_v1(all_set, _tomls(config)) == RECORDED_CELL_KEY_ALL_SET
    for later in (dict(runs_unconfigured=1), dict(count_lane=True)):
        assert migrate.cell_key_v1(dataclasses.replace(config, **later), _tomls(config)) != RECORDED_CELL_KEY
    # the current recipe has every setting in, whatever its value
    for name, value in [(n, v) for n, v in every_one_set.items() if v != getattr(config, n)]:
        changed = dataclasses.replace(config, **{name: value})
        assert M.cell_key(changed, INSTRUMENTS) != RECORDED_V2_CELL_KEY, name
    assert M.cell_key(config, Instruments("1.2.1", "2.47.0")) != RECORDED_V2_CELL_KEY


def test_a_cell_key_holds_the_abandon_share_only_where_its_runs_do(tmp_path):
    """Only a streamed in-flight cell leaves streams: elsewhere the share is unset in its runs and
    left out of its key, which stays as recorded."""
    config = _fixed_folders(tmp_path)
    inflight = dataclasses.replace(config, inflight_steps=(100,), inflight_step_s=20.0,
                                   inflight_hold_s=10.0)
    for unary in (config, inflight):
        leaves = dataclasses.replace(unary, inflight_abandon_share=0.25)
        assert M.cell_key(leaves, INSTRUMENTS) == M.cell_key(unary, INSTRUMENTS)
    streamed = dataclasses.replace(inflight, stream=True)
    leaves = dataclasses.replace(streamed, inflight_abandon_share=0.25)
    assert M.cell_key(leaves, INSTRUMENTS) != M.cell_key(streamed, INSTRUMENTS)


def test_a_cell_key_covers_every_file_its_systems_declare(tmp_path):
    """A template, a script a command names and a pin [key] names: editing any of them changes
    the key (recipe 1, which hashed gateway.toml only, saw none of them)."""
    config = _fixed_folders(tmp_path)
    alpha = tmp_path / "alpha"
    (alpha / "alpha.conf.tmpl").write_text("listen {{port}};\n")
    (alpha / "install.sh").write_text("pip install -r requirements.txt\n")
    (alpha / "requirements.txt").write_text("alpha==1.0\n")
    (alpha / "WHY.md").write_text("Why alpha.\n")
    (alpha / "gateway.toml").write_text(GATEWAY_TOML.format(name="alpha") + """
[install]
command = ["bash", "{{gateway_dir}}/install.sh"]

[[start.files]]
template = "alpha.conf.tmpl"
output = "alpha.conf"

[key]
files = ["requirements*.txt"]
""")
    assert load_gateway_spec("alpha", tmp_path).declared_files() == (
        "alpha.conf.tmpl", "gateway.toml", "install.sh", "requirements.txt")
    before, before_v1 = M.cell_key(config, INSTRUMENTS), migrate.cell_key_v1(config, _tomls(config))
    (alpha / "WHY.md").write_text("Why alpha, again.\n")     # documentation: not declared
    assert M.cell_key(config, INSTRUMENTS) == before
    for name, text in (("alpha.conf.tmpl", "listen {{port}} reuseport;\n"),
                       ("install.sh", "pip install --no-deps -r requirements.txt\n"),
                       ("requirements.txt", "alpha==1.1\n")):
        (alpha / name).write_text(text)
        assert M.cell_key(config, INSTRUMENTS) != before, name
        assert migrate.cell_key_v1(config, _tomls(config)) == before_v1, name
        before = M.cell_key(config, INSTRUMENTS)


def _fake_suite(root, suite_id, cells):
    """A suite directory whose cells are synthetic studies: (cell_id, key, values, params)."""
    entries = []
    for cell_id, key, values, params in cells:
        make_study(root / suite_id, study_id=cell_id, params=params)
        entries.append({"cell_id": cell_id, "values": values, "comparison_key": key, "excluded": "",
                        "status": "completed", "dir": cell_id})
    write_suite_manifest(root / suite_id, entries)
    return root / suite_id


def test_suites_are_compared_only_where_keys_match(tmp_path):
    base = {"direct": [RunParams(overhead_ms=o, cpu_cores=None) for o in (0.2, 0.25, 0.3)],
            "nginx": [RunParams(overhead_ms=o) for o in (0.8, 0.82, 0.84)]}
    slower = {**base, "nginx": [RunParams(overhead_ms=o) for o in (8.0, 8.2, 8.4)]}
    a = _fake_suite(tmp_path, "a", [("cell-01", "k1" * 32, {"load.users": 10}, base),
                                    ("cell-02", "k2" * 32, {"load.users": 100}, base)])
    b = _fake_suite(tmp_path, "b", [("cell-01", "k1" * 32, {"load.users": 10}, slower),
                                    ("cell-02", "k3" * 32, {"load.users": 100}, base)])
    compared, apart = S.compare_suites(S.collect_suite(a), S.collect_suite(b))
    assert set(compared["cell_a"]) == {"cell-01"} and set(compared["system"]) == {"direct", "nginx"}
    row = compared[(compared.system == "nginx") & (compared.metric == "overhead_vs_direct_p50_ms")].iloc[0]
    assert row.outcome is Outcome.WORSE and row["mean"] > row.mean_ref   # B against A
    same = compared[(compared.system == "nginx") & (compared.metric == "throughput_rps")].iloc[0]
    assert same.ratio == pytest.approx(1.0)
    assert sorted(zip(apart["suite"], apart["cell"])) == [("a", "cell-02"), ("b", "cell-02")]
    assert set(apart["why"]) == {"no cell with this comparison key in the other suite"}


def test_a_suite_recorded_with_recipe_1_is_compared_with_a_newer_one(tmp_path):
    """A's keys are recipe 1's, B's the current recipe's: B's cells are re-keyed in recipe 1
    from their record (the suite manifest's config, the study's gateway.toml digests), so the
    cell configured alike is compared and the other is not."""
    from harness.files.study_files import StudyFiles
    params = {"direct": [RunParams(overhead_ms=o, cpu_cores=None) for o in (0.2, 0.25)],
              "nginx": [RunParams(overhead_ms=o) for o in (0.8, 0.9)]}
    a = _fake_suite(tmp_path, "a", [("cell-01", "", {"load.users": 10}, params)])
    study = StudyFiles(a / "cell-01").read_manifest()
    tomls = {n: info.gateway_toml_sha256 for n, info in study.systems.items()}
    config = study.config

    def entry(cell_id, key, cfg):
        return {"cell_id": cell_id, "values": {"load.users": cfg.users}, "comparison_key": key,
                "excluded": "", "status": "completed", "dir": cell_id, "config": cfg.to_dict()}

    write_suite_manifest(a, [entry("cell-01", migrate.cell_key_v1(config, tomls), config)])
    b = _fake_suite(tmp_path, "b", [("cell-01", "", {}, params), ("cell-02", "", {}, params)])
    other = dataclasses.replace(config, users=config.users + 1)
    write_suite_manifest(b, [entry("cell-01", "2:" + "ab" * 32, config),
                             entry("cell-02", "2:" + "cd" * 32, other)])
    compared, apart = S.compare_suites(S.collect_suite(a), S.collect_suite(b))
    assert set(zip(compared["cell_a"], compared["cell_b"])) == {("cell-01", "cell-01")}
    assert list(zip(apart["suite"], apart["cell"], apart["comparison_key"])) == [
        ("b", "cell-02", "2:cdcdcdcdcd")]
    assert [(x, y) for x, y, _ in S.cell_machines(S.collect_suite(a), S.collect_suite(b))] == [("cell-01", "cell-01")]
    # a key of a recipe this harness does not know is refused
    write_suite_manifest(b, [entry("cell-01", "7:" + "ab" * 32, config)])
    with pytest.raises(KeyVersionError, match="'7' is not one this harness knows"):
        S.compare_suites(S.collect_suite(a), S.collect_suite(b))


def test_suite_table_has_a_row_per_cell_and_system(tmp_path):
    params = {"direct": [RunParams(overhead_ms=o, cpu_cores=None) for o in (0.2, 0.25)],
              "nginx": [RunParams(overhead_ms=o) for o in (0.8, 0.9)]}
    suite_dir = _fake_suite(tmp_path, "s", [("cell-01", "k" * 64, {"load.users": 10}, params)])
    suite = S.collect_suite(suite_dir)
    table = S.suite_table(suite)
    assert list(table["system"]) == ["direct", "nginx"] and list(table["load.users"]) == ["10", "10"]
    assert table.loc[1, "runs"] == "2 of 2" and table.loc[1, "overhead_vs_direct_p50_ms_n"] == 2
    shown = cells_frame(suite)
    assert "(n=2)" in shown.loc[1, F.heading("overhead_vs_direct_p50_ms")]


# --- the provider-fault lane across a suite ---------------------------------------------------------

BIFROST = "not runnable here: the Go module proxy refuses its modules (the exact error is in gateway.toml)"


def _fault_suite(root):
    """A faults suite of synthetic studies: error_burst as shipped (one run each) and with the
    recommended configurations (Sluice twice, nginx declaring none), provider_down as shipped,
    and stalled_streams left out; bifrost is never runnable."""
    from synthetic_faults import FaultRun, make_fault_study

    from harness.model.config import from_profile
    not_runnable = {"bifrost": BIFROST}
    cells = [
        ("cell-01", "error_burst", "shipped", {
            "direct": [FaultRun()], "nginx": [FaultRun(dialect="other")],
            # every request of the fault window reached the provider four times
            "sluice": [FaultRun(attempts=4, fail_every=0)]}),
        ("cell-02", "error_burst", "recommended", {
            "direct": [FaultRun()],
            "nginx": [FaultRun(dialect="other",
                               resilience_note="no recommended configuration declared")],
            "sluice": [FaultRun(attempts=2, fail_every=50, resilience="recommended"),
                       FaultRun(attempts=2, fail_every=25, resilience="recommended")]}),
        ("cell-03", "provider_down", "shipped", {
            "direct": [FaultRun(fail_every=1, dialect="none")],
            "nginx": [FaultRun(fail_every=1, dialect="none")],
            "sluice": [FaultRun(fail_every=1, slow_ms=30.0, slow_after_s=40.0)]}),
    ]
    entries = []
    for cell_id, scenario, resilience, runs in cells:
        make_fault_study(root, cell_id, runs, scenario, resilience, not_runnable)
        entries.append({"cell_id": cell_id, "comparison_key": cell_id * 8, "excluded": "",
                        "values": {"fault_scenario": scenario, "resilience": resilience},
                        "status": "completed", "dir": cell_id, "skipped": not_runnable,
                        "config": from_profile("faults", fault_scenario=scenario,
                                               resilience=resilience).to_dict()})
    entries.append({"cell_id": "cell-04", "comparison_key": "", "config": None, "dir": "",
                    "values": {"fault_scenario": "stalled_streams", "resilience": "shipped"},
                    "status": "excluded", "excluded": "excluded by the suite: stalled streams "
                                                      "need streamed responses"})
    write_suite_manifest(root, entries, suite_id="faults-test", name="faults",
                         description="synthetic", profile="faults",
                         suite_file="notebooks/suites/faults.toml",
                         axes={"fault_scenario": [], "resilience": []},
                         started_t_unix_s=1.0, ended_t_unix_s=2.0)
    return root


def test_fault_suite_table_per_system_and_configuration(tmp_path):
    from report import fault_tables
    rows, timelines = S.fault_table(S.collect_suite(_fault_suite(tmp_path)))
    assert set(rows["scenario"]) == {"error_burst", "provider_down"}   # cell-04 has no study
    burst = rows[rows["scenario"] == "error_burst"].set_index(["cell", "system"])
    assert burst.loc[("cell-01", "sluice"), "amplification_during_mean"] == 4.0
    assert burst.loc[("cell-02", "sluice"), "runs"] == 2
    assert burst.loc[("cell-01", "bifrost"), "not_run"] == BIFROST
    assert set(timelines["cell"]) == {"cell-01", "cell-02", "cell-03"}
    shown = fault_tables.fault_suite(rows[rows["scenario"] == "error_burst"], "t").frame()
    during = F.heading("success_share", "sent during")
    amp = F.heading("amplification", "sent during")
    by = {(r["system"].split()[0], r["configuration"]): r for r in shown.to_dict("records")}
    single = by[("sluice", "as shipped")]
    assert single["runs"] == "1 run: no spread" and single[amp] == "4.00"
    assert single[during] == "100.0%" and "±" not in single[during]
    two = by[("sluice", "recommended")]
    assert two["runs"] == "2 runs" and two[during] == "97.0% ± 1.4" and two[amp] == "2.00 ± 0.00"
    shipped = by[("nginx", "as shipped: no recommended configuration declared")]
    assert shipped[F.heading("client_dialect_share", "during")] == "0%"
    assert by[("direct", "as shipped")][F.heading("client_dialect_share", "during")] == "100%"
    # a system that did not run: once, with its reason (the whole of it in the tooltip)
    (not_run,) = [r for r in shown.to_dict("records") if r["system"].startswith("bifrost")]
    assert not_run["configuration"] == "not run" and not_run["runs"] == "0"
    assert not_run[during] == F.DASH
    (row,) = [r for r in fault_tables.fault_suite(rows[rows["scenario"] == "error_burst"], "t").rows
              if r.cells[0].main_text.startswith("bifrost")]
    assert row.cells[1].text.startswith("not run: not runnable here: the Go module")
    assert row.cells[1].title == BIFROST


def test_a_row_is_labelled_only_by_the_axes_that_tell_its_scenarios_cells_apart():
    """Streamed and unary cells of one scenario name their request.stream; a scenario run in one
    cell only has nothing to tell apart, so its rows carry no axis label."""
    from types import SimpleNamespace as NS

    def cell(scenario, stream):
        return NS(scenario=scenario, values={"fault_scenario": scenario, "resilience": "shipped",
                                             "request.stream": stream}), None
    suite = NS(cells=(cell("error_burst", False), cell("error_burst", True),
                      cell("stream_cut", True), (NS(scenario="", values={"seed": 1}), None)))
    assert S._configuration_axes(suite) == {"error_burst": ["request.stream"], "stream_cut": []}


def test_fault_figures_are_shown_at_three_significant_digits_shares_at_their_own():
    from report.fault_tables import _fault_figure
    row = {"recovered": 1, "runs": 1, "dialect_missing": "",
           **{f"{name}_{k}": v for name, n_mean_sd in (
               ("tts_p99_ms", (2, 2402.94, 12.3)), ("success_during", (1, 0.9997, float("nan"))),
               ("silent_truncations", (1, 3000.0, float("nan")))) for k, v in zip(("n", "mean", "sd"), n_mean_sd)}}
    assert _fault_figure(row, "tts_p99_ms", "tts_p99_ms").text == "2403 ± 12"
    assert _fault_figure(row, "silent_truncations", "silent_truncations").text == "3000"
    assert _fault_figure(row, "success_during", "success_share").text == "100.0%"


def test_fault_suite_sentences_come_from_the_figures(tmp_path):
    from report.summary import fault_findings
    rows, _ = S.fault_table(S.collect_suite(_fault_suite(tmp_path)))
    texts = [s.text for s in fault_findings(rows[rows["scenario"] == "error_burst"])]
    assert texts == [
        ("As shipped, highest success during the fault: sluice 100.0% (1 run: no spread); "
         "the floor (direct): 80.0%."),
        ("As shipped, fewest provider requests per client request during the fault: nginx 1.00 "
         "(1 run: no spread); the floor (direct): 1.00."),
        ("As shipped, on the frontier (no other system better on success, wasted attempts and "
         "p99 time to success at once): nginx, sluice."),
        ("As shipped, attempts beyond what the success needed (more than 0.02 per request): "
         "nginx 0.200, sluice 3.000."),
        ("As shipped, sluice against nginx, the best other system: success during the fault "
         "100.0% vs 80.0% (+20.0 points), provider requests per client request 4.00 vs 1.00 "
         "(+3.00) (1 run each: no spread)."),
        ("Recommended configurations, highest success during the fault: sluice 97.0% (n = 2); "
         "the floor (direct): 80.0%."),
        ("Recommended configurations, fewest provider requests per client request during the "
         "fault: nginx (as shipped) 1.00 (1 run: no spread); the floor (direct): 1.00."),
        ("Recommended configurations, on the frontier (no other system better on success, "
         "wasted attempts and p99 time to success at once): nginx (as shipped), sluice."),
        ("Recommended configurations, attempts beyond what the success needed (more than 0.02 "
         "per request): nginx (as shipped) 0.200, sluice 1.030."),
        ("Recommended configurations, sluice against nginx (as shipped), the best other system: "
         "success during the fault 97.0% vs 80.0% (+17.0 points), provider requests per client "
         "request 2.00 vs 1.00 (+1.00) (n = 2 and 1).")]
    # a tie stays a tie
    down = [s.text for s in fault_findings(rows[rows["scenario"] == "provider_down"])]
    assert down[0].startswith("Highest success during the fault: nginx and sluice 0.0%")


def test_faults_suite_report_has_one_table_per_scenario(tmp_path):
    """Rendered without a browser: a table per scenario that ran, its plot, and the scenario
    left out with its reason."""
    import re

    html = build_suite_report(_fault_suite(tmp_path)).path.read_text()
    assert re.findall(r'<table id="(suite-faults-[a-z_]+)"', html) == [
        "suite-faults-error_burst", "suite-faults-provider_down"]
    assert html.count('alt="error_burst: success share and amplification') == 1
    assert html.count('alt="provider_down: success share and amplification') == 1
    assert "Scenario <code>stalled_streams</code>" in html
    assert "cell-04 (fault_scenario = stalled_streams, resilience = shipped): excluded by the suite" in html
    assert "1 run: no spread" in html and "not run" in html


def test_a_faults_suite_answers_first_with_one_table_and_the_runs_lost(tmp_path):
    """The first screen: scenario x system, each row on the frontier or dominated by whom (the
    floor quoted, not ranked), a system that did not run lost with its reason, and the excluded
    cell not counted as lost."""
    from report.fault_first_screen import first_screen, runs_lost
    root = _fault_suite(tmp_path)
    suite = S.collect_suite(root)
    rows, _ = S.fault_table(suite)
    shown = first_screen(rows).frame()
    burst = shown[shown["scenario"] == "error_burst"]
    marks = {(r["system"], i): r["frontier"] for i, r in enumerate(burst.to_dict("records"))}
    assert "floor: quoted, not ranked" in {m for (s, _), m in marks.items() if s == "direct"}
    assert {m for (s, _), m in marks.items() if s in ("nginx", "sluice")} == {"frontier"}
    assert list(shown.columns[2:7]) == [F.heading(m) for m in (
        "success_share", "excess_amplification", "tts_p99_ms", "silent_truncations",
        "early_retry_share")]
    lost = runs_lost(rows, suite.manifest.cells)
    assert any(line.startswith("bifrost in error_burst: not runnable here") for line in lost)
    assert not any("cell-04" in line or "stalled_streams" in line for line in lost)
    html = build_suite_report(root).path.read_text()
    assert html.index('id="suite-first-screen"') < html.index('id="suite-faults"')
