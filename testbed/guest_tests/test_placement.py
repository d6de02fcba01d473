"""Placement on every node the kernel gives memory to, verified by the kernel's own
answers (move_pages through the C core, and /proc/self/numa_maps, which involves no
cxlbench code), and refused on a node that has none."""
from __future__ import annotations

import array
import re

import pytest

MiB = 1 << 20


def numa_maps_pages(addr: int) -> dict[int, int]:
    """Pages per node of the mapping that starts at addr, as /proc/self/numa_maps says."""
    with open("/proc/self/numa_maps") as f:
        for line in f:
            start, _, rest = line.partition(" ")
            if int(start, 16) == addr:
                return {int(n): int(c) for n, c in re.findall(r"\bN(\d+)=(\d+)", rest)}
    raise AssertionError(f"no mapping at {addr:#x} in /proc/self/numa_maps")


def test_placement_on_each_node_with_memory(memory_node, cxl_node):
    from cxlbench import _native
    from cxlbench.memory import allocate
    # first touch of CXL-backed memory costs ~1 s/MiB under TCG: keep that node's share small
    length = 1 * MiB if memory_node == cxl_node else 4 * MiB
    with allocate(length, memory_node, page="4k") as buf:
        assert buf.length >= length
        nodes = array.array("i", _native.page_nodes(buf.addr, buf.length))
        assert len(nodes) == buf.length // 4096
        assert set(nodes) == {memory_node}, f"pages on nodes {sorted(set(nodes))}"
        assert numa_maps_pages(buf.addr) == {memory_node: buf.length // 4096}


def test_placement_refused_on_a_node_without_memory(memoryless_nodes):
    from cxlbench.memory import PlacementError, allocate
    assert memoryless_nodes, "the test bed topology has a node with CPUs and no memory"
    for nid in memoryless_nodes:
        with pytest.raises(PlacementError):
            allocate(1 * MiB, nid, page="4k")


def test_placement_refused_on_a_node_that_does_not_exist():
    from cxlbench.memory import PlacementError, allocate
    with pytest.raises((PlacementError, ValueError)):
        allocate(1 * MiB, 63, page="4k")
