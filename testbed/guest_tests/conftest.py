"""Fixtures for the tests that run inside the test bed guest (see docs/testing.md).

Each check holds cxlbench to two independent sides:
  - what the host asked QEMU for: /results/expect.json, written by testbed/run.py
    from the same topology it turns into the QEMU command line;
  - what the kernel shows: sysfs, move_pages, /proc/self/numa_maps, and the CXL
    tools (cxl, daxctl) of the ndctl project.
The node number of the CXL region is the kernel's choice; it is read from the
DAX device daxctl onlined (its target_node), never from cxlbench.
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
from pathlib import Path

import pytest

RESULTS = Path(os.environ.get("TESTBED_RESULTS", "/results"))
NODE_SYSFS = Path("/sys/devices/system/node")


def _expect() -> dict:
    return json.loads((RESULTS / "expect.json").read_text())


def kernel_cxl_nodes() -> list[int]:
    """Nodes the CXL regions' DAX devices came online as (bound to kmem)."""
    nodes = []
    for dev in sorted(glob.glob("/sys/bus/dax/devices/dax*")):
        driver = os.path.basename(os.readlink(f"{dev}/driver")) if os.path.exists(f"{dev}/driver") else None
        if driver == "kmem":
            nodes.append(int(Path(dev, "target_node").read_text()))
    return nodes


def parse_nodelist(text: str) -> list[int]:
    out: list[int] = []
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def kernel_memory_nodes() -> list[int]:
    return parse_nodelist((NODE_SYSFS / "has_memory").read_text())


def pytest_generate_tests(metafunc):
    if "memory_node" in metafunc.fixturenames:
        metafunc.parametrize("memory_node", kernel_memory_nodes(), ids=lambda n: f"node{n}")


@pytest.fixture(scope="session")
def expect() -> dict:
    return _expect()


@pytest.fixture(scope="session")
def config(expect) -> str:
    return expect["config"]


@pytest.fixture(scope="session")
def cxl_node(config) -> int | None:
    """The CXL region's node in the cxl configuration (None in numa)."""
    nodes = kernel_cxl_nodes()
    if config == "cxl":
        assert len(nodes) == 1, f"setup should have onlined one CXL region as a node, found {nodes}"
        return nodes[0]
    assert nodes == [], f"the numa configuration has no CXL memory, yet DAX onlined {nodes}"
    return None


@pytest.fixture
def only_cxl(config):
    if config != "cxl":
        pytest.skip("needs the CXL region (cxl configuration)")


@pytest.fixture
def only_numa(config):
    if config != "numa":
        pytest.skip("checks the numa configuration only")


@pytest.fixture(scope="session")
def memoryless_nodes(expect) -> list[int]:
    return [n["id"] for n in expect["nodes"] if not n["mem_mib"]]


@pytest.fixture(scope="session")
def expected_tiers(expect, cxl_node) -> set[str]:
    names = {f"ddr{n['id']}" for n in expect["nodes"] if n["mem_mib"]}
    if cxl_node is not None:
        names.add(f"cxl{cxl_node}")
    return names


@pytest.fixture(scope="session")
def machine():
    from cxlbench.topology import read_machine
    return read_machine("/")


@pytest.fixture(scope="session")
def tiers(machine):
    from cxlbench.topology import classify_tiers
    return {t.name: t for t in classify_tiers(machine)}


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["cxlbench", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def topology_json() -> dict:
    out = run_cli("topology", "--json")
    assert out.returncode == 0, f"cxlbench topology --json exited {out.returncode}: {out.stderr}"
    return json.loads(out.stdout)
