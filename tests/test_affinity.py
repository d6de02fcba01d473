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
from cxlbench.units import format_cpulist

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def two_socket():
    return build_env(str(FIXTURES / "two_socket_cxl"), [])


def test_each_nodes_initiator_holds_only_the_cpus_the_process_may_run_on(two_socket):
    m = two_socket.machine
    node0, node1 = m.nodes[0].cpus, m.nodes[1].cpus
    by = {i.name: i for i in initiators(m, set(node0[1:]))}
    assert by["cpu:node0"].cpus == node0[1:] and not by["cpu:node0"].not_allowed
    assert by["cpu:node1"].not_allowed == "no CPU of node 1 is allowed to this process"
    assert {i.name: i.cpus for i in initiators(m)} == {"cpu:node0": node0, "cpu:node1": node1}


def test_the_allowed_set_is_recorded_only_where_it_is_not_every_cpu(two_socket, monkeypatch):
    m = two_socket.machine
    every = {c for n in m.nodes.values() for c in n.cpus}
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: every | {4096})
    assert allowed_cpus(m) is None and m.environment.allowed_cpus is None
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(m.nodes[0].cpus[:2]))
    assert allowed_cpus(m) == set(m.nodes[0].cpus[:2])
    assert m.environment.allowed_cpus == f"{m.nodes[0].cpus[0]}-{m.nodes[0].cpus[1]}"


def test_the_boot_default_mask_under_isolcpus_is_no_restriction(two_socket, monkeypatch, tmp_path):
    """Isolated CPUs are left out of every process's default mask to be pinned to on
    purpose: a benchmark measures there as before, and no run is marked restricted."""
    m = two_socket.machine
    every = {c for n in m.nodes.values() for c in n.cpus}
    isolated = set(m.nodes[1].cpus)
    (tmp_path / "sys/devices/system/cpu").mkdir(parents=True)
    (tmp_path / "sys/devices/system/cpu/isolated").write_text(format_cpulist(sorted(isolated)) + "\n")
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: every - isolated)
    assert allowed_cpus(m, str(tmp_path)) is None and m.environment.allowed_cpus is None
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: every - isolated - {m.nodes[0].cpus[0]})
    assert allowed_cpus(m, str(tmp_path)) is not None       # narrower than the boot's: someone's choice


def test_a_node_with_no_allowed_cpu_has_its_cases_skipped_not_moved(two_socket):
    """Every family of the standard suites plans from it (bandwidth's thread counts had
    divided by zero CPUs), every case skipped with the reason; the drift sentinels
    run from a node it may use."""
    env = two_socket
    node0 = set(env.machine.nodes[0].cpus)
    env.initiators.update({i.name: i for i in initiators(env.machine, node0)})
    env.machine.environment.allowed_cpus = format_cpulist(sorted(node0))
    for suite in ("quick", "standard"):
        planned = plan_suite(load_suite(suite), env)
        from_1 = [p for p in planned if p.case.initiator == "cpu:node1"]
        assert from_1 and all(p.skip for p in from_1)          # a reason of its own (no huge pages) stays
        assert sum("no CPU of node 1 is allowed" in p.skip for p in from_1) > len(from_1) / 2
        assert {p.case.benchmark for p in from_1} >= {"latency", "bandwidth"}
        assert any(not p.skip for p in planned if p.case.initiator == "cpu:node0")
    from cxlbench.runner import sentinels
    watching = sentinels.plan(load_suite("quick"), env, plan_suite(load_suite("quick"), env))
    assert watching.planned and {p.case.initiator for p in watching.planned} == {"cpu:node0"}
    assert any("its affinity" in w for w in warnings({"environment": {"allowed_cpus": "0-3"}}))
