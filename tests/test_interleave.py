"""Interleaved buffers: weights reduced for the kernel, page-range plans in the
weights' proportions, shares checked, the kernel's global weights restored, and
on this machine the single-node (100:0) case placed and verified for real."""
from __future__ import annotations

from collections import Counter

import pytest

from cxlbench.memory import PlacementError, page_nodes
from cxlbench.memory import interleave as il

PAGE = 4096


@pytest.mark.parametrize("weights, reduced", [
    ({0: 75, 2: 25}, {0: 3, 2: 1}),
    ({0: 90, 2: 10}, {0: 9, 2: 1}),
    ({0: 50, 2: 50}, {0: 1, 2: 1}),
    ({0: 100, 2: 0}, {0: 1}),
    ({0: 0.5, 2: 0.25}, {0: 2, 2: 1}),
    ({0: 1000, 2: 1}, {0: 255, 2: 1}),             # the kernel keeps weights in a u8
    ({2: 1, 0: 2}, {0: 2, 2: 1}),
])
def test_weights_are_reduced_to_the_kernels_range(weights, reduced):
    assert il.reduce_weights(weights) == reduced


@pytest.mark.parametrize("bad", [{0: 0, 2: 0}, {0: -1, 2: 3}, {}])
def test_weights_that_place_nothing_are_refused(bad):
    with pytest.raises(ValueError):
        il.reduce_weights(bad)


@pytest.mark.parametrize("weights", [{0: 3, 2: 1}, {0: 1, 2: 1}, {0: 9, 2: 1}, {0: 1, 2: 4},
                                     {0: 2, 1: 1, 2: 1}])
def test_range_plan_covers_the_buffer_in_the_weights_proportions(weights):
    total = sum(weights.values())
    length = 1000 * total * PAGE
    ranges = il.range_plan(length, weights, PAGE)
    assert ranges[0][0] == 0 and sum(n for _, n, _ in ranges) == length
    assert all(a + n == b for (a, n, _), (b, _, _) in zip(ranges, ranges[1:]))
    assert all(x[2] != y[2] for x, y in zip(ranges, ranges[1:]))     # neighbours merged
    pages = Counter()
    for _, n, node in ranges:
        pages[node] += n // PAGE
    assert {n: c / (length // PAGE) for n, c in pages.items()} == il.expected_fractions(weights)
    # the pattern repeats every sum(weights) pages: the first round is w0 pages, then w1...
    first = [node for _, n, node in ranges[:len(weights)] for _ in range(n // PAGE)]
    assert first == [n for n, w in weights.items() for _ in range(w)]


def test_range_plan_of_a_ragged_length_ends_mid_round():
    ranges = il.range_plan(6 * PAGE, {0: 3, 2: 2}, PAGE)
    assert ranges == [(0, 3 * PAGE, 0), (3 * PAGE, 2 * PAGE, 2), (5 * PAGE, PAGE, 0)]
    with pytest.raises(ValueError):
        il.range_plan(PAGE + 1, {0: 1, 2: 1}, PAGE)


def test_range_unit_keeps_the_mapping_count_bounded():
    one_gib = 1 << 30
    unit = il.range_unit(one_gib, {0: 1, 2: 1}, PAGE)
    assert unit % PAGE == 0
    assert len(il.range_plan(one_gib, {0: 1, 2: 1}, unit)) <= il.MAX_RANGES
    assert il.range_unit(64 * PAGE, {0: 3, 2: 1}, PAGE) == PAGE      # small buffers: page-granular
    assert il.range_unit(1 << 30, {0: 1, 2: 1}, 2 << 20) % (2 << 20) == 0


def test_found_shares_are_checked_against_the_weights():
    w = {0: 3, 2: 1}
    assert il.check_fractions({0: 0.75, 2: 0.25}, w, 1 << 30, PAGE) is None
    assert il.check_fractions({0: 0.7502, 2: 0.2498}, w, 1 << 30, PAGE) is None
    assert "not 75.0%" in il.check_fractions({0: 0.6, 2: 0.4}, w, 1 << 30, PAGE)
    assert "not asked for" in il.check_fractions({0: 0.75, 1: 0.05, 2: 0.20}, w, 1 << 30, PAGE)
    # a buffer of a few rounds is allowed one round of slack
    assert il.check_fractions({0: 0.5, 2: 0.5}, w, 8 * PAGE, PAGE) is None


def test_kernel_weights_are_written_and_restored(tmp_path):
    d = tmp_path / il.WEIGHTS_DIR
    d.mkdir(parents=True)
    for name, text in [("node0", "1"), ("node2", "1"), ("__auto_type", "true")]:
        (d / name).write_text(text + "\n")       # `auto`, as some 6.18 builds name it
    saved = il.read_kernel_weights(str(tmp_path))
    assert saved == {"__auto_type": "true", "node0": "1", "node2": "1"}
    il.write_kernel_weights({0: 3, 2: 1}, str(tmp_path))
    assert (d / "node0").read_text() == "3\n" and (d / "node2").read_text() == "1\n"
    il.restore_kernel_weights(saved, str(tmp_path))
    assert il.read_kernel_weights(str(tmp_path)) == saved


# ---- on this machine ---------------------------------------------------------------

def test_single_node_is_a_bound_buffer_verified_page_by_page():
    with il.allocate_interleaved(8 << 20, {0: 100, 1: 0}) as buf:
        assert buf.method == "bind" and buf.weights == {0: 1} and buf.fractions == {0: 1.0}
        assert set(page_nodes(buf.addr, buf.length)) == {0}
        assert buf.found()["node0_fraction"] == 1.0
    assert buf.closed


def test_single_node_with_thp():
    with il.allocate_interleaved(8 << 20, {0: 1}, page="thp") as buf:
        assert buf.page_bytes_found == 2 << 20 and buf.huge_coverage >= 0.9


def test_a_node_that_does_not_exist_is_refused():
    with pytest.raises(PlacementError, match="does not exist"):
        il.allocate_interleaved(8 << 20, {0: 1, 63: 1})
    with pytest.raises(PlacementError, match="page="):
        il.allocate_interleaved(8 << 20, {0: 1, 1: 1}, page="hugetlb-2m")


def test_ranges_over_one_node_place_every_page_there():
    """The ranges path on this machine: two weights for the same node (the plan is
    exercised, the kernel binds every range)."""
    from cxlbench import _native
    size = 256 * PAGE
    addr = _native.map_anonymous(size)
    try:
        for off, n, node in il.range_plan(size, {0: 3}, PAGE):
            _native.mbind(addr + off, n, [node], "bind", strict=True)
        il._populate(addr, size, {0: 3})
        assert il._fractions(addr, size) == {0: 1.0}
    finally:
        _native.unmap(addr, size)


@pytest.mark.skipif(not il.has_weighted_interleave() or not il._may_set_weights("/"),
                    reason="needs MPOL_WEIGHTED_INTERLEAVE (Linux >= 6.9) and root")
def test_weighted_interleave_places_pages_and_leaves_the_global_weights_as_they_were():
    """Mode 6 on this machine's one node, with the weight it already has: nothing is
    written to the kernel's global settings (writing a weight turns `auto` off, and
    a kernel without firmware bandwidths cannot turn it back on)."""
    from cxlbench import _native
    before = il.read_kernel_weights()
    size = 64 * PAGE
    addr = _native.map_anonymous(size)
    try:
        assert il._place_weighted(addr, size, {0: int(before["node0"])}, "/") == []
        assert il._fractions(addr, size) == {0: 1.0}
    finally:
        _native.unmap(addr, size)
    assert il.read_kernel_weights() == before


def test_restoring_reports_a_setting_the_kernel_refuses(tmp_path):
    d = tmp_path / il.WEIGHTS_DIR
    d.mkdir(parents=True)
    (d / "node0").write_text("1\n")
    (d / "auto").mkdir()                        # cannot be written, as ENODEV cannot
    failed = il.restore_kernel_weights({"node0": "1", "auto": "true"}, str(tmp_path))
    assert len(failed) == 1 and failed[0].startswith("auto=true")


def test_bandwidth_probe_records_cpu_held_with_several_threads():
    """As the bandwidth family: each repetition's least per-iteration share of CPU
    held, from the threads' own CPU clocks (barrier waits are not counted as lost)."""
    from cxlbench.benchmarks import interleave
    from cxlbench.results.schema import Case
    from cxlbench.runner.run import build_env
    params = {"probe": "bandwidth", "kernel": "copy", "threads": 2, "ddr_weight": 50,
              "array_bytes": 4 << 20, "iterations": 3, "ddr": "ddr0", "far": "ddr0",
              "page": "4k", "method": "auto"}
    samples = interleave.measure(Case("interleave", "cpu:node0", "ddr0+ddr0", "interleave",
                                      params, 2, 1), build_env("/", []), {})
    assert [s.metric for s in samples] == ["bandwidth_GBps"] * 6
    assert all(0 < s.params["cpu_held"] <= 1 for s in samples)
    for rep in (0, 1):
        assert len({s.params["cpu_held"] for s in samples if s.repetition == rep}) == 1
