"""A process confined to some CPUs (taskset, a container's cpuset) measures from
those alone: each node's initiator holds its allowed CPUs, a node with none has
its cases skipped with the reason, and the run says so. Before, workers pinned
themselves to every CPU of a node: as root that escaped the user's taskset (two
threads read 45 GB/s on a process told to use one CPU), in a cpuset it failed
every case."""
from pathlib import Path

import pytest

from cxlbench.analysis.machine import warnings
from cxlbench.runner.run import build_env, plan_suite
from cxlbench.runner.suite import load_suite
from cxlbench.topology import allowed_cpus, initiators

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def two_socket():
    return build_env(str(FIXTURES / "two_socket_cxl"), [])


def test_each_nodes_initiator_holds_only_the_cpus_the_process_may_run_on(two_socket):
    m = two_socket.machine
    node0, node1 = m.nodes[0].cpus, m.nodes[1].cpus
    by = {i.name: i.cpus for i in initiators(m, set(node0[1:]))}
    assert by["cpu:node0"] == node0[1:] and by["cpu:node1"] == []
    assert {i.name: i.cpus for i in initiators(m)} == {"cpu:node0": node0, "cpu:node1": node1}


def test_the_allowed_set_is_recorded_only_where_it_is_not_every_cpu(two_socket, monkeypatch):
    m = two_socket.machine
    every = {c for n in m.nodes.values() for c in n.cpus}
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: every | {4096})
    assert allowed_cpus(m) is None and m.environment.allowed_cpus is None
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(m.nodes[0].cpus[:2]))
    assert allowed_cpus(m) == set(m.nodes[0].cpus[:2])
    assert m.environment.allowed_cpus == f"{m.nodes[0].cpus[0]}-{m.nodes[0].cpus[1]}"


def test_a_node_with_no_allowed_cpu_has_its_cases_skipped_not_moved(two_socket, tmp_path):
    env = two_socket
    env.initiators["cpu:node1"].cpus = []
    env.machine.environment.allowed_cpus = "0-3"
    suite_path = tmp_path / "s.toml"
    suite_path.write_text('name = "s"\nrepetitions = 1\n[[benchmark]]\nname = "latency"\ninitiators = "all"\n'
                          'working_set = ["1MiB"]\n')
    planned = plan_suite(load_suite(str(suite_path)), env)
    skipped = {p.case.initiator for p in planned if p.skip and "no CPU of node 1" in p.skip}
    ran = {p.case.initiator for p in planned if not p.skip}
    assert skipped == {"cpu:node1"} and ran == {"cpu:node0"}
    assert any("taskset or a cpuset" in w for w in warnings({"environment": {"allowed_cpus": "0-3"}}))
