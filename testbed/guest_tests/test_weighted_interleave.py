"""MPOL_WEIGHTED_INTERLEAVE (Linux >= 6.9) through the C core: pages land on a DRAM
node and the slower node (the CXL region's node, or the CPU-less DRAM node in the
numa configuration) in the proportions of the sysfs weights, within 5%."""
from __future__ import annotations

import array
from collections import Counter
from pathlib import Path

import pytest

WEIGHTS = Path("/sys/kernel/mm/mempolicy/weighted_interleave")
MiB = 1 << 20


@pytest.fixture
def weights():
    """Set node weights; the old ones come back afterwards."""
    saved = {p: p.read_text() for p in WEIGHTS.glob("node*")}

    def set_(w: dict[int, int]):
        for node, weight in w.items():
            (WEIGHTS / f"node{node}").write_text(str(weight))
    yield set_
    for p, text in saved.items():
        p.write_text(text)


@pytest.mark.parametrize("fast_weight,slow_weight", [(3, 1), (1, 2)])
def test_weighted_interleave_proportions(weights, expect, cxl_node, fast_weight, slow_weight):
    from cxlbench import _native
    cpu_less_dram = [n["id"] for n in expect["nodes"] if n["mem_mib"] and not n["cpus"]]
    slow = cxl_node if cxl_node is not None else cpu_less_dram[0]
    weights({0: fast_weight, slow: slow_weight})
    # few pages on the slow node: first touch of CXL memory is ~1 s/MiB under TCG
    length = 3 * MiB if slow_weight > fast_weight else 4 * MiB
    addr = _native.map_anonymous(length)
    try:
        # 4 KiB pages: under THP "always" one 2 MiB fault would place 512 pages at once
        _native.madvise(addr, length, _native.MADV_NOHUGEPAGE)
        _native.mbind(addr, length, [0, slow], mode="weighted_interleave")
        _native.fault_in(addr, length)
        counts = Counter(array.array("i", _native.page_nodes(addr, length)))
    finally:
        _native.unmap(addr, length)
    pages = length // 4096
    assert set(counts) <= {0, slow} and sum(counts.values()) == pages, dict(counts)
    want = fast_weight / (fast_weight + slow_weight)
    assert abs(counts[0] / pages - want) <= 0.05, f"{dict(counts)}: node 0 share, wanted {want:.2f}"
