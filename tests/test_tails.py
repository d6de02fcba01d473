"""The chase's distribution: the C histogram's layout, the timed blocks, the
reduction to percentiles and the floor (cxlbench/benchmarks/tails.py).

Behaviour only: no assertion depends on how fast anything ran.
"""
import math
import os

import pytest

from cxlbench import _native
from cxlbench.benchmarks import tails
from cxlbench.benchmarks.tails import Distribution

CPUS = sorted(os.sched_getaffinity(0))
TOP = 1 << 40


@pytest.fixture
def chain():
    """chain(bytes) -> the head of a random cycle over a fresh mapping's lines."""
    maps = []

    def make(length: int, seed: int = 5) -> int:
        addr = _native.map_anonymous(length)
        maps.append((addr, length))
        return _native.chase_init(addr, length, 64, 0, 1, seed)[0]

    yield make
    for addr, length in maps:
        _native.unmap(addr, length)


# ---- the histogram's layout ------------------------------------------------------------

def test_buckets_tile_every_duration_in_order_without_gaps():
    v, expect = 0, 0
    while v < TOP:
        index, lower, width = _native.hist_index(v)
        assert (index, lower) == (expect, v)
        v, expect = lower + width, expect + 1
    assert expect == _native.hist_index(TOP - 1)[0] + 1


@pytest.mark.parametrize("ns", [0, 1, 255, 256, 257, 511, 512, 999, 2400, 123_456, 2**33 + 7])
def test_a_duration_lands_in_a_bucket_no_wider_than_a_128th_of_it(ns):
    _, lower, width = _native.hist_index(ns)
    assert lower <= ns < lower + width
    assert width == 1 or width <= lower / 128


def test_durations_past_the_top_count_in_the_last_bucket():
    assert _native.hist_index(TOP * 5)[0] == _native.hist_index(TOP - 1)[0]


# ---- the timed blocks -------------------------------------------------------------------

def test_every_block_is_counted_kept_or_lost(chain):
    d = _native.chase_dist(chain(1 << 16), 16, 5000)
    kept = d["kept"]
    assert kept["n"] + d["lost_blocks"] == 5000
    assert sum(c for _, _, c in kept["buckets"]) == kept["n"]
    assert all(lo <= kept["max_ns"] for lo, _, _ in kept["buckets"])
    assert d["overhead_ns"] > 0 and d["k"] == 16


def test_a_distribution_needs_at_least_one_load_a_block(chain):
    with pytest.raises(ValueError, match="k >= 1"):
        _native.chase_dist(chain(4096), 0, 10)


def test_the_histograms_mean_is_the_exact_mean_within_half_a_bucket(chain):
    d = Distribution.from_native(_native.chase_dist(chain(1 << 20), 8, 20000))
    exact = d.per_load(d.sum_ns / d.n)
    assert d.mean_ns() == pytest.approx(exact, rel=1 / 256)


def test_the_mean_figure_leaves_out_the_windows_the_thread_lost_and_the_wall_mean_keeps_them():
    """A window the thread lost holds time no load waited on memory: 1000 kept blocks of
    820 ns and 64 lost ones that took 50 µs each (another thread ran)."""
    d = Distribution(8, 20.0, [816], [8], [1000], 1000, 820_000, 830, lost_blocks=64, lost_ns=64 * 50_000)
    assert d.exact_mean() == pytest.approx((820 - 20) / 8)                      # 100 ns per load
    assert d.wall_mean() == pytest.approx((820_000 + 3_200_000 - 1064 * 20) / (1064 * 8))
    assert d.wall_mean() > 4 * d.exact_mean()
    assert d.mean_ns() == pytest.approx(d.exact_mean(), rel=1 / 128)            # the histogram agrees


def test_a_chase_with_no_window_held_has_no_mean_figure(monkeypatch, chain):
    """Every window lost: the repetition gives no latency, rather than the wall clock's."""
    lost = {"kept": {"n": 0, "sum_ns": 0, "max_ns": 0, "buckets": []}, "k": 8, "overhead_ns": 19.0,
            "lost_blocks": 640, "lost_ns": 10**6}
    monkeypatch.setattr(_native, "chase_dist", lambda *a: lost)
    mean, d = tails.timed_distribution(chain(1 << 16), 1 << 14)
    assert mean is None and d.lost_blocks == 640 and d.wall_mean() > 0


@pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs: one chases, one loads")
def test_loaded_latency_counts_its_kept_blocks_into_the_histogram(chain):
    head = chain(1 << 16)
    laddr = _native.map_anonymous(1 << 16)
    try:
        r = _native.loaded_latency([head], CPUS[0], laddr, 1 << 16, [CPUS[1]], delay=0,
                                   duration_ns=20_000_000, warmup_ns=1_000_000, k=8)
        plain = _native.loaded_latency([head], CPUS[0], laddr, 1 << 16, [CPUS[1]],
                                       duration_ns=5_000_000, warmup_ns=1_000_000)
    finally:
        _native.unmap(laddr, 1 << 16)
    assert r["k"] == 8 and r["overhead_ns"] > 0
    assert r["hist"]["n"] * 8 == r["chase_steps"]        # kept sub-windows' blocks, no others
    assert r["all_load_lines"] > 0                        # the load ran
    # Load lines count only inside kept windows. The converse does not hold: a shared
    # machine may take a CPU for all of 20 ms (no window kept), or keep a few windows in
    # which the load thread published no lines yet.
    assert r["load_lines"] <= r["all_load_lines"]
    assert r["windows_kept"] > 0 or r["load_lines"] == 0
    assert plain["hist"] is None and plain["k"] == 0


def test_loaded_latency_times_blocks_of_one_chain_only(chain):
    heads = [chain(4096, 1), chain(4096, 2)]
    with pytest.raises(ValueError, match="one chain"):
        _native.loaded_latency(heads, CPUS[0], 0, 0, [], k=8)


# ---- percentiles, k and the floor -------------------------------------------------------

def synthetic(k=8, overhead=0.0) -> Distribution:
    """990 blocks of 800-803 ns and 10 of 8000-8063 ns (one slow load in 100 blocks)."""
    return Distribution(k, overhead, [800, 8000], [4, 64], [990, 10], 1000,
                        990 * 801 + 10 * 8040, 8060)


def test_percentiles_are_nearest_rank_at_the_bucket_middle_per_load():
    p = synthetic().percentiles()
    assert p["p50_ns"] == p["p90_ns"] == p["p99_ns"] == pytest.approx(801.5 / 8)
    assert p["p99_9_ns"] == p["p99_99_ns"] == pytest.approx((8000 + 31.5) / 8)
    assert p["max_ns"] == pytest.approx(8060 / 8)


def test_the_clocks_cost_comes_off_every_block_before_dividing_by_k():
    p = synthetic(overhead=20).percentiles()
    assert p["p50_ns"] == pytest.approx((801.5 - 20) / 8)
    assert synthetic(overhead=20).mean_ns() == pytest.approx((990 * 801.5 + 10 * 8031.5) / 1000 / 8 - 2.5)


def test_a_block_is_eight_loads_on_memory_and_longer_on_caches():
    assert tails.block_loads(90.0) == tails.block_loads(400.0) == 8
    assert tails.block_loads(1.4) == 358          # ceil(500 / 1.4): a block of >= 0.5 us
    assert tails.block_loads(0.0) == 8


def test_the_floor_puts_the_machines_spread_on_the_tiers_median():
    tier = {"p50_ns": 300.0}
    floor = Distribution(8, 0.0, [2400, 4000], [16, 32], [999, 1], 1000, 0, 4020)
    f = tails.floor_metrics(tier, floor)
    assert f["floor_p99_ns"] == pytest.approx(300.0)                          # no spread to p99
    assert f["floor_p99_99_ns"] == pytest.approx(300 + (4015.5 - 2407.5) / 8)  # one slow block


def test_samples_carry_every_tail_metric_and_the_floors():
    out = tails.samples(2, {"page_bytes": 4096}, synthetic(), synthetic())
    names = {s.metric for s in out}
    assert names == {m.name for m in tails.TAIL_METRICS + tails.FLOOR_METRICS}
    assert {s.repetition for s in out} == {2}
    assert all(s.params == {"page_bytes": 4096} for s in out)


def test_a_repetition_that_kept_no_block_gives_no_tail_samples():
    """Every window lost to other processes: no p50..max, not a max of 0 ns."""
    from cxlbench.benchmarks import tails
    empty = tails.Distribution(8, 19.0, [], [], [], 0, 0, 0, lost_blocks=640, lost_ns=10**6)
    assert math.isnan(empty.percentiles()["max_ns"])
    assert tails.samples(0, {}, empty, None) == []


def test_a_floor_that_kept_no_block_leaves_its_figures_out_and_the_tiers_stand():
    """In the QEMU test bed the floor's own chase lost every window once: its NaN
    percentiles failed the whole case (floor_p99_ns = nan: not a figure)."""
    from cxlbench.benchmarks import tails
    empty = tails.Distribution(8, 19.0, [], [], [], 0, 0, 0, lost_blocks=640, lost_ns=10**6)
    out = tails.samples(1, {}, synthetic(), empty)
    assert {s.metric for s in out} == {m.name for m in tails.TAIL_METRICS}
    assert all(math.isfinite(s.value) for s in out)


def test_a_clock_cost_above_the_fastest_block_is_bounded_by_it_and_the_estimate_kept():
    """A block holds one clock cost, so the cost is at most the fastest block's: an
    estimate above it (QEMU's TCG read one past the blocks' mean, and the mean came out
    negative) is replaced by that bound, and said."""
    kept = {"n": 4, "sum_ns": 4 * 300, "max_ns": 320, "buckets": [[280, 8, 2], [312, 8, 2]]}
    d = Distribution.from_native({"kept": kept, "k": 8, "overhead_ns": 310.0, "lost_blocks": 0, "lost_ns": 0})
    assert d.overhead_ns == 280 and d.extra == {"overhead_estimated_ns": 310.0}
    assert d.exact_mean() == pytest.approx((1200 - 4 * 280) / 32) and d.exact_mean() > 0
    fine = Distribution.from_native({"kept": kept, "k": 8, "overhead_ns": 24.0, "lost_blocks": 0, "lost_ns": 0})
    assert fine.overhead_ns == 24.0 and fine.extra == {}
