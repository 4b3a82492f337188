"""The preflight, the one check before a study starts: settings, systems and this machine judged
together, every problem named at once, the topology file read once."""
import pytest

from harness.files.handoff import HandoffError, handed_off, read_handoff
from harness.model import suite as suite_model
from harness.model import topology as topology_mod
from harness.model import validation
from harness.model.config import REPO_DIR, ConfigError, from_profile
from harness.model.topology import local_topology
from harness.run import preflight as preflight_mod
from harness.run import suite_run as suite_run
from harness.run.preflight import Cleared, preflight

# One host, this machine, with two Locust workers: the file is read, nothing remote is probed.
ONE_HOST = """schema_version = 1
[hosts.here]
address = "127.0.0.1"
[roles]
mock = "here"
system = "here"
locust_master = "here"
locust_workers = [{ host = "here", count = 2 }]
"""


def test_a_bad_setting_and_a_bad_system_are_named_together(tmp_path):
    with pytest.raises(ConfigError) as caught:
        preflight(from_profile("smoke", gateways=("nginx",), feature="auth_budget", users=0,
                               out_dir=str(tmp_path)))
    named = [p.partition(":")[0] for p in caught.value.problems]
    assert "users" in named and "feature" in named, caught.value.problems


def test_the_topology_file_is_read_once_per_preflight(tmp_path, monkeypatch):
    path = tmp_path / "topology.toml"
    path.write_text(ONE_HOST)
    reads = []
    real = topology_mod.load_topology
    monkeypatch.setattr(topology_mod, "load_topology", lambda p: reads.append(p) or real(p))
    cleared = preflight(from_profile("smoke", gateways=("nginx",), topology=str(path),
                                     out_dir=str(tmp_path)))
    assert len(reads) == 1, reads
    assert {r.load.locust_processes for r in cleared.plan} == {2}
    assert cleared.topology.source == str(path.resolve())


def test_a_suite_checks_each_cell_once_for_its_expansion_and_its_expected_length(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(suite_run, "preflight",
                        lambda config: calls.append(config) or preflight_mod.preflight(config))
    cells = suite_run.expand(suite_model.load_suite(REPO_DIR / "notebooks" / "suites" / "smoke.toml"),
                             str(tmp_path))
    built = sum(c.config is not None or c.excluded.startswith("cannot run: ") for c in cells)
    runs, expected_s = suite_run.expected(cells)
    assert len(calls) == built and runs == sum(len(c.runs) for c in cells) > 0 and expected_s > 0


def test_the_settings_checks_are_pure_given_the_machines_facts():
    # The same settings judged for two machines: only what differs between them is named.
    config = from_profile("smoke", gateways=("nginx",), cpu_affinity_load="1", nice_mock=-5)
    bare = validation.HostFacts(cpus=frozenset({0}), root=False, has_taskset=False, has_nice=True,
                                port_range=None, hard_files_limit=-1)
    ready = validation.HostFacts(cpus=frozenset({0, 1}), root=True, has_taskset=True, has_nice=True,
                                 port_range=(32768, 60999), hard_files_limit=-1)
    named = [p.partition(":")[0] for p in validation.problems(config, local_topology(), bare)]
    assert "cpu_affinity_load" in named and "nice_mock" in named, named
    assert validation.problems(config, local_topology(), ready) == []


def test_the_preflight_reaches_the_notebook_as_it_was_made(tmp_path):
    """What the notebook and suite commands hand to the notebook's kernel: the same Cleared,
    read back, and one error line when there is none or it is something else."""
    cleared = preflight(from_profile("smoke", gateways=("direct",), out_dir=str(tmp_path)))
    with handed_off(cleared) as path:
        assert read_handoff(path, Cleared) == cleared
        with pytest.raises(HandoffError, match="holds a Cleared, not a str"):
            read_handoff(path, str)
    assert not path.exists()
    with pytest.raises(HandoffError, match="lives only while the command that wrote it runs"):
        read_handoff(path, Cleared)
