"""CPU affinity per role: the lists are checked before anything starts, each role's processes are
started under taskset, and the settings are in the plan, the key and the manifests."""
import dataclasses
import json
import os
import shutil
import sys

import pytest
from polling import wait_for
from synthetic_manifests import small_run_manifest

from harness.host.processes import ManagedProcess
from harness.model import affinity
from harness.model.affinity import CpuAffinity, cpu_list, cpus_of, pinned
from harness.model.config import ConfigError, from_profile
from harness.model.gateway_spec import load_gateway_spec
from harness.model.manifests import RunManifest, StudyManifest
from harness.model.plan import make_plan
from harness.run import load as load_stage
from harness.run import systems
from harness.run.load import Target
from harness.run.preflight import preflight
from harness.run.run import instruments


def problems_of(config):
    with pytest.raises(ConfigError) as info:
        preflight(config)
    return info.value.problems


@pytest.fixture
def two_cpus(monkeypatch):
    """This process may use CPUs 0 and 1, and taskset is on PATH."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/taskset" if name == "taskset" else which(name))


@pytest.mark.parametrize("text,cpus", [("0", {0}), ("0-1", {0, 1}), ("0,2", {0, 2}), ("0-6:2", {0, 2, 4, 6}),
                                       ("3,0-1", {0, 1, 3})])
def test_taskset_lists_parse(text, cpus):
    assert cpus_of(text) == cpus


@pytest.mark.parametrize("text", ["", "a", "0-", "1-0", "0-4:0", " 0", "0,", "-1", "0:2"])
def test_bad_lists_are_refused(text):
    with pytest.raises(ValueError):
        cpus_of(text)


def test_cpu_list_is_compact():
    assert cpu_list({0, 1, 2, 3, 6}) == "0-3,6" and cpu_list({1}) == "1" and cpu_list(set()) == ""


def test_valid_lists_pass(tmp_path, two_cpus):
    preflight(from_profile("aa", out_dir=str(tmp_path), cpu_affinity_load="0",
                              cpu_affinity_mock="1", cpu_affinity_system="0-1"))


def test_bad_lists_name_the_field(tmp_path, two_cpus):
    found = problems_of(from_profile("aa", out_dir=str(tmp_path), cpu_affinity_mock="one",
                                     cpu_affinity_system="1-3"))
    assert len(found) == 2, found
    assert found[0].startswith("cpu_affinity_mock: expected a CPU list") and "'one'" in found[0]
    assert found[1] == "cpu_affinity_system: CPU 2-3 is not available to this process (available: 0-1), got '1-3'"


def test_missing_taskset_is_said_once_naming_the_fields(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "taskset" else which(name))
    found = problems_of(from_profile("aa", out_dir=str(tmp_path), cpu_affinity_load="0",
                                     cpu_affinity_mock="1"))
    assert found == ["cpu_affinity_load, cpu_affinity_mock: pinning needs taskset (Debian: util-linux), "
                     "which is not on PATH; install it or leave the setting empty"]
    preflight(from_profile("aa", out_dir=str(tmp_path)))  # not pinned: taskset is not needed


def test_a_role_on_another_host_cannot_be_pinned(tmp_path, two_cpus):
    topology = tmp_path / "t.toml"
    topology.write_text('schema_version = 1\n[hosts.here]\naddress = "127.0.0.1"\n'
                        '[hosts.there]\naddress = "10.0.0.2"\nprefix = ["env"]\n'
                        '[roles]\nmock = "here"\nsystem = "there"\nlocust_master = "here"\n')
    found = problems_of(from_profile("aa", out_dir=str(tmp_path), topology=str(topology),
                                     cpu_affinity_mock="0", cpu_affinity_system="1"))
    assert found == ["cpu_affinity_system: the topology runs the system role on host 'there'; "
                     "CPU affinity is checked and applied on this machine only"]


def test_the_command_is_started_under_taskset():
    argv = [sys.executable, "-m", "mocks.server"]
    assert pinned("0-1", argv) == ["taskset", "-c", "0-1", *argv]
    assert pinned("", argv) == argv


@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset is not installed")
def test_a_pinned_process_and_its_children_run_on_those_cpus(tmp_path):
    cpu = max(os.sched_getaffinity(0))
    child = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); time.sleep(30)"
    proc = ManagedProcess("pinned", pinned(str(cpu), [sys.executable, "-c", child]), tmp_path / "p.log")
    try:
        assert wait_for(lambda: len(proc.tree()) == 2, 10.0)
        assert proc.tree()[0].cmdline()[0] == sys.executable  # taskset exec'd it: the pid is its own
        assert [p.cpu_affinity() for p in proc.tree()] == [[cpu], [cpu]]
    finally:
        proc.stop()


def _plan(**settings):
    config = from_profile("aa", **settings)
    return make_plan(config, {name: load_gateway_spec(name, config.systems_dir) for name in config.gateways},
                     instruments())


def test_plan_carries_the_pins_and_keys_change_only_when_pinned():
    plain = _plan()
    pinned_plan = _plan(cpu_affinity_load="0", cpu_affinity_mock="1", cpu_affinity_system="1")
    assert plain[0].affinity == CpuAffinity()
    assert pinned_plan[0].affinity == CpuAffinity(load="0", mock="1", system="1")
    assert [r.comparison_key for r in plain] != [r.comparison_key for r in pinned_plan]


def test_manifests_record_the_pins_and_older_ones_load_unpinned():
    spec = _plan(cpu_affinity_mock="1")[0]
    manifest = dataclasses.replace(small_run_manifest("nginx-1", "nginx", 1, {}), spec=spec)
    again = RunManifest.from_json(manifest.to_json())
    assert again.spec.affinity == CpuAffinity(mock="1")
    assert json.loads(manifest.to_json())["spec"]["affinity"] == {"load": "", "mock": "1", "system": ""}
    # written before affinity existed: no "affinity" in the spec, no cpu_affinity_* in the config
    assert small_run_manifest("nginx-1", "nginx", 1, {}).spec.affinity == CpuAffinity()
    study = StudyManifest.from_json(json.dumps({"schema_version": 2, "study_id": "s", "status": "completed",
                                                "config": {"gateways": ["nginx"]}}))
    assert (study.config.cpu_affinity_load, study.config.cpu_affinity_mock,
            study.config.cpu_affinity_system) == ("", "", "")


def test_each_role_is_started_pinned(tmp_path, monkeypatch):
    started = {}

    class Fake:
        pid = 1

        def stop(self):
            pass

    def fake_start_on(host, role, argv, *args, **kwargs):
        started.setdefault(role, []).append(argv)
        return Fake()

    monkeypatch.setattr(systems, "start_on", fake_start_on)
    monkeypatch.setattr(systems, "wait_ready", lambda *a, **k: 0.1)
    monkeypatch.setattr(load_stage, "start_on", fake_start_on)
    spec = _plan(cpu_affinity_load="0", cpu_affinity_mock="1", cpu_affinity_system="0-1",
                 locust_processes=2, ramp_s=10.0)[0]
    systems.start_mock(tmp_path, 60.0, 1, 16, cpus=spec.affinity.mock)
    gateway = load_gateway_spec("nginx", from_profile("aa").systems_dir)
    systems.start_system(gateway, tmp_path, "http://127.0.0.1:1", 1, 1, 5.0, cpus=spec.affinity.system)
    target = Target("http://127.0.0.1:2", "/v1/chat/completions", "m", {}, "", 1.0)
    load_stage.start_locust(spec, target, tmp_path)
    assert started["mock"][0][:4] == ["taskset", "-c", "1", sys.executable]
    assert started["mock"][0][4:6] == ["-m", "mocks.server"]
    assert started["system"][0][:3] == ["taskset", "-c", "0-1"] and started["system"][0][3] == "nginx"
    assert started["locust"][0][:6] == ["taskset", "-c", "0", sys.executable, "-m", "locust"]
    assert "--processes" in started["locust"][0]
    # not pinned: the commands are as they were
    systems.start_mock(tmp_path, 60.0, 1, 16)
    assert started["mock"][1][:3] == [sys.executable, "-m", "mocks.server"]


def test_the_roles_are_the_fields():
    assert set(affinity.FIELDS.values()) == {"cpu_affinity_load", "cpu_affinity_mock", "cpu_affinity_system"}
    assert {f.name for f in dataclasses.fields(CpuAffinity)} == set(affinity.FIELDS)


def test_niceness_is_checked_placed_in_the_argv_and_keyed_only_when_set(tmp_path, monkeypatch):
    assert problems_of(from_profile("aa", out_dir=str(tmp_path), nice_load=20)) == [
        "nice_load: niceness runs from -20 to 19, got 20"]
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert problems_of(from_profile("aa", out_dir=str(tmp_path), nice_mock=-5)) == [
        "nice_mock: a negative niceness (a higher priority) needs root, got -5"]
    assert pinned("1", ["x"], -5) == ["taskset", "-c", "1", "nice", "-n", "-5", "x"]
    assert pinned("", ["x"], 3) == ["nice", "-n", "3", "x"]
    assert pinned("", ["x"]) == ["x"]
    plain, nice = _plan(), _plan(nice_mock=-5)
    assert nice[0].nice == affinity.Niceness(mock=-5) and plain[0].nice == affinity.Niceness()
    assert [r.comparison_key for r in plain] != [r.comparison_key for r in nice]


def test_a_niced_process_runs_at_that_niceness(tmp_path):
    proc = ManagedProcess("niced", pinned("", [sys.executable, "-c", "import time; time.sleep(30)"], 7),
                          tmp_path / "p.log")
    try:
        # nice exec's the command: the pid stays the process's own (before the exec, or as a
        # zombie, a process may show no command line at all: wait past that)
        assert wait_for(lambda: [p.cmdline()[:1] for p in proc.tree()] == [[sys.executable]], 10.0)
        assert proc.tree()[0].nice() == 7
    finally:
        proc.stop()
