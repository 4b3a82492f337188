"""Topology files are checked before anything starts; processes on 'other hosts' (here through
prefixes that run on this machine: `env`, and `sh -c` as ssh would) start and stop there."""
import sys
from pathlib import Path

import psutil
import pytest
from polling import wait_for

from harness.commands import main
from harness.model.config import ConfigError, from_profile
from harness.model.plan import make_plan
from harness.model.topology import Host, TopologyError, load_topology, local_topology
from harness.remote.hosts import RemoteProcess, command_on, facts, snapshot, start_on
from harness.run.preflight import preflight
from harness.run.run import instruments

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "topologies"

GOOD = """schema_version = 1
[hosts.gen]
address = "10.0.0.1"
prefix = []
[hosts.gw]
address = "10.0.0.2"
prefix = ["env"]
[hosts.up]
address = "10.0.0.3"
prefix = ["sh", "-c"]
quote = true
[roles]
mock = "up"
system = "gw"
locust_master = "gen"
locust_workers = [{ host = "gen", count = 1 }, { host = "up", count = 2 }]
"""


def write(tmp_path, text, name="topology.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_good_file_places_every_role(tmp_path):
    topology = load_topology(write(tmp_path, GOOD))
    assert topology.host("up") == Host("up", "10.0.0.3", ("sh", "-c"), True)
    assert topology.host("gen").local and not topology.host("gw").local
    assert topology.worker_count == 3
    assert topology.roles() == {"gen": ["locust-master", "locust-worker"], "gw": ["system"],
                                "up": ["mock", "locust-worker", "locust-worker"]}


def test_every_problem_is_named_on_its_own_line(tmp_path):
    bad = """schema_version = 1
[hosts.a]
address = "gateway.lab"
prefix = ["no-such-prefix-command-here"]
colour = "red"
[hosts.b]
address = "10.0.0.2"
[hosts.d]
address = "10.0.0.4"
[roles]
mock = "a"
system = "nowhere"
locust_master = "b"
locust_workers = [{ host = "c", count = 0 }]
"""
    with pytest.raises(TopologyError) as caught:
        load_topology(write(tmp_path, bad))
    text = "\n".join(caught.value.problems)
    assert "[hosts.a] address: must be an IPv4 address, got 'gateway.lab'" in text
    assert "command 'no-such-prefix-command-here' is not runnable here" in text
    assert "[hosts.a] colour: unknown key; allowed: address, prefix, quote" in text
    assert "[roles] system: unknown host 'nowhere'" in text
    assert "[roles.locust_workers[0]] host: unknown host 'c'" in text
    assert "[roles.locust_workers[0]] count: must be at least 1, got 0" in text
    assert "only one host may be this machine" in text  # b and d have no prefix
    assert len(caught.value.problems) == 7


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(TopologyError, match="cannot read it"):
        load_topology(tmp_path / "absent.toml")
    with pytest.raises(TopologyError, match="not valid TOML"):
        load_topology(write(tmp_path, "schema_version = ["))


def test_bad_topology_fails_study_validation_before_anything_starts(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["study", "--profile", "smoke", "--gateways", "nginx", "--set", f"out_dir=\"{out}\"",
                 "--set", f"topology=\"{tmp_path / 'absent.toml'}\""]) == 2
    assert "topology: " in capsys.readouterr().err and not (out.exists() and any(out.iterdir()))
    path = write(tmp_path, GOOD)
    with pytest.raises(ConfigError, match="locust_processes: the topology's locust_workers"):
        preflight(from_profile("smoke", gateways=["nginx"], topology=str(path), locust_processes=2,
                                  out_dir=str(out)))


def test_the_plan_counts_the_workers_and_keys_the_placement(tmp_path):
    from harness.model.gateway_spec import load_gateway_spec
    path = write(tmp_path, GOOD)
    config = from_profile("smoke", gateways=["nginx"], topology=str(path))
    local = from_profile("smoke", gateways=["nginx"])
    specs = {"nginx": load_gateway_spec("nginx")}
    (run,), (alone,) = make_plan(config, specs, instruments()), make_plan(local, specs, instruments())
    assert run.load.locust_processes == 3 and alone.load.locust_processes == 1
    assert run.topology.source and alone.topology == local_topology()
    assert run.comparison_key != alone.comparison_key
    moved = write(tmp_path, GOOD.replace('mock = "up"', 'mock = "gw"'), "moved.toml")
    (other,) = make_plan(from_profile("smoke", gateways=["nginx"], topology=str(moved)), specs,
                         instruments())
    assert other.comparison_key != run.comparison_key


@pytest.mark.parametrize("name", ["two-hosts.toml", "four-hosts.toml"])
def test_the_documented_examples_parse(name):
    try:
        topology = load_topology(EXAMPLES / name)
    except TopologyError as exc:  # only ssh may be missing on a machine that runs the tests
        assert all("command 'ssh'" in p for p in exc.problems), exc.problems
        return
    assert topology.roles()


def test_commands_for_a_shell_prefix_are_quoted_into_one_line():
    host = Host("h", "10.0.0.9", ("ssh", "h"), quote=True)
    argv = command_on(host, ["nginx", "-g", "daemon off;"], {"A": "x y"})
    assert argv[:2] == ["ssh", "h"] and len(argv) == 3
    assert "'daemon off;'" in argv[2] and "'A=x y'" in argv[2]
    assert command_on(Host("l", "127.0.0.1"), ["a", "b"]) == ["a", "b"]


SPAWNER = ("import subprocess, sys, time\n"
           "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
           "time.sleep(60)\n")


@pytest.mark.parametrize("prefix,quote", [(("env",), False), (("sh", "-c"), True)])
def test_a_process_on_another_host_is_stopped_there(tmp_path, prefix, quote):
    host = Host("other", "127.0.0.1", prefix, quote)
    proc = start_on(host, "spawner", [sys.executable, "-c", SPAWNER], tmp_path / "log",
                    tmp_path / "pids" / "spawner.pid", env={"MARK": "a b"})
    assert isinstance(proc, RemoteProcess)
    assert wait_for(lambda: (tmp_path / "pids" / "spawner.pid").exists())
    pid = int((tmp_path / "pids" / "spawner.pid").read_text())
    assert wait_for(lambda: len(psutil.Process(pid).children()) == 1)
    tree = [psutil.Process(pid), *psutil.Process(pid).children()]
    assert psutil.Process(pid).environ().get("MARK") == "a b"
    proc.stop()
    assert wait_for(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE
                                    for p in tree), timeout_s=5)


def test_facts_are_read_on_the_host_through_its_prefix():
    remote = facts(Host("other", "127.0.0.1", ("sh", "-c"), True))
    assert remote["kernel"] and remote["cpu_count"] >= 1 and remote["cpu_model"]
    assert "load_avg_1m" in snapshot(Host("other", "127.0.0.1", ("env",)))


def test_a_host_that_cannot_run_the_harness_stops_the_study_before_it_starts(tmp_path, capsys):
    path = write(tmp_path, GOOD.replace('prefix = ["env"]', 'prefix = ["false"]'))
    out = tmp_path / "out"
    assert main(["study", "--profile", "smoke", "--gateways", "nginx", "--set", f"out_dir=\"{out}\"",
                 "--set", f"topology=\"{path}\""]) == 2
    err = capsys.readouterr().err
    assert "topology: host gw: false env PYTHONPATH=" in err and "exited with 1" in err
    assert not out.exists()   # the preflight creates nothing
