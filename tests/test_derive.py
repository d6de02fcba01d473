"""Derived figures on synthetic curves whose answers are known: knees, TLB reach
and miss cost, loaded-latency curves, zero-copy crossovers, write-penalty
ratios, memory-level parallelism."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from cxlbench.analysis import derive

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def sweep(lo=16 * KiB, hi=4 * GiB):
    sizes, n = [], lo
    while n <= hi:
        sizes += [n, n * 3 // 2]
        n *= 2
    return [s for s in sizes if s <= hi]


def plateaus(sizes, levels):
    """levels: [(up_to_bytes, value)...]; the value of the first level whose reach holds x."""
    out = []
    for x in sizes:
        out.append(next(v for reach, v in levels if x <= reach))
    return np.array(out, dtype=float)


def rows(metric, values, reps=3, noise=0.0, seed=0, **cols):
    """Tidy samples: one row per repetition of each value, with `cols` (scalars or lists)."""
    rng = np.random.default_rng(seed)
    out = []
    n = len(values)
    for i, v in enumerate(values):
        for r in range(reps):
            row = {"run_id": "r", "metric": metric, "repetition": r,
                   "value": v * (1 + noise * rng.standard_normal())}
            for k, c in cols.items():
                row[k] = c[i] if isinstance(c, (list, np.ndarray)) and len(c) == n else c
            out.append(row)
    return out


# ---- knees --------------------------------------------------------------------------------

def test_knees_of_a_step_curve_are_the_plateau_ends():
    x = sweep(hi=256 * MiB)
    y = plateaus(x, [(32 * KiB, 1.0), (512 * KiB, 4.0), (8 * MiB, 12.0), (math.inf, 80.0)])
    found = derive.knees(x, y)
    assert [k.at for k in found] == [32 * KiB, 512 * KiB, 8 * MiB]
    assert [k.to for k in found] == [48 * KiB, 768 * KiB, 12 * MiB]
    assert [k.rise for k in found] == [3.0, 8.0, 68.0]


def test_a_gradual_rise_is_one_knee_starting_where_the_level_ends():
    # a cache of 1 MiB: hit rate C/x beyond it, so latency climbs over several points
    x = np.array(sweep(hi=64 * MiB), dtype=float)
    y = np.where(x <= MiB, 5.0, 5.0 + 95.0 * (1 - MiB / x))
    [k] = derive.knees(x, y)
    assert k.at == MiB and k.before == 5.0
    assert k.to == 12 * MiB        # from there on each point climbs by less than 3%


def test_a_noise_spike_is_not_a_knee():
    x = sweep(hi=64 * MiB)
    y = plateaus(x, [(1 * MiB, 10.0), (math.inf, 100.0)])
    y[3] *= 1.6                                   # one sample another process slowed
    found = derive.knees(x, y)
    assert [k.at for k in found] == [1 * MiB]


def test_a_noise_dip_does_not_move_a_knee():
    x = sweep(hi=64 * MiB)
    y = plateaus(x, [(1 * MiB, 10.0), (math.inf, 100.0)])
    y[x.index(4 * MiB)] = 20.0                    # one sample far too low
    assert [(k.at, k.to) for k in derive.knees(x, y)] == [(1 * MiB, 1.5 * MiB)]


def test_small_steps_below_the_rise_threshold_are_no_knee():
    x = sweep(hi=64 * MiB)
    y = 100.0 + np.arange(len(x)) * 0.5            # creeping up by ~0.5% a point
    assert derive.knees(x, y) == []


# ---- TLB reach -----------------------------------------------------------------------------

def latency_frame(sizes, random, window, page="4k", window_from=256 * KiB, **extra):
    out = rows("latency_ns", random, working_set_bytes=list(sizes), pattern="random", page=page,
               initiator="cpu:node0", target="ddr0", **extra)
    keep = [i for i, s in enumerate(sizes) if s > window_from]
    out += rows("latency_ns", [window[i] for i in keep], working_set_bytes=[sizes[i] for i in keep],
                pattern="window", page=page, initiator="cpu:node0", target="ddr0", **extra)
    return pd.DataFrame(out)


def test_tlb_knees_and_miss_cost_from_random_minus_window():
    sizes = sweep(hi=4 * GiB)
    caches = plateaus(sizes, [(32 * KiB, 1.0), (512 * KiB, 4.0), (16 * MiB, 12.0), (math.inf, 90.0)])
    # L1 TLB reach 256 KiB (64 × 4 KiB): +2 ns (an L2 TLB hit); L2 TLB reach 8 MiB: +60 ns walks
    tlb = plateaus(sizes, [(256 * KiB, 0.0), (8 * MiB, 2.0), (math.inf, 60.0)])
    frame = latency_frame(sizes, caches + tlb, caches, noise=0.0)
    [row] = derive.tlb_knees(frame).to_dict("records")
    assert row["page"] == "4k"
    assert [(at, to) for at, to, _ in row["tlb_knees"]] == [(256 * KiB, 384 * KiB), (8 * MiB, 12 * MiB)]
    assert [round(r, 6) for _, _, r in row["tlb_knees"]] == [2.0, 58.0]
    assert row["added_miss_ns"] == pytest.approx(60.0)
    assert row["added_miss_frac"] == pytest.approx(60.0 / 90.0)
    assert row["largest_bytes"] == 4 * GiB
    assert [at for at, _, _ in row["latency_knees"]][:3] == [32 * KiB, 256 * KiB, 512 * KiB]


def test_tlb_knees_per_page_size_with_noise():
    sizes = sweep(hi=4 * GiB)
    caches = plateaus(sizes, [(32 * KiB, 1.0), (512 * KiB, 4.0), (16 * MiB, 12.0), (math.inf, 90.0)])
    small = plateaus(sizes, [(8 * MiB, 0.0), (math.inf, 60.0)])
    huge = plateaus(sizes, [(128 * MiB, 0.0), (math.inf, 15.0)])       # 64 × 2 MiB
    frame = pd.concat([latency_frame(sizes, caches + small, caches, page="4k", noise=0.02, seed=1),
                       latency_frame(sizes, caches + huge, caches, page="thp", noise=0.02, seed=2,
                                     window_from=128 * MiB)])
    out = derive.tlb_knees(frame).set_index("page")
    assert [at for at, _, _ in out.loc["4k", "tlb_knees"]] == [8 * MiB]
    assert [at for at, _, _ in out.loc["thp", "tlb_knees"]] == [128 * MiB]
    assert out.loc["4k", "added_miss_ns"] == pytest.approx(60, abs=6)
    assert out.loc["thp", "added_miss_ns"] == pytest.approx(15, abs=5)


def test_no_window_pattern_means_no_tlb_split():
    sizes = sweep(hi=64 * MiB)
    frame = pd.DataFrame(rows("latency_ns", list(range(len(sizes))), working_set_bytes=sizes,
                              pattern="random", page="4k", initiator="i", target="t"))
    [row] = derive.tlb_knees(frame).to_dict("records")
    assert row["tlb_knees"] == [] and math.isnan(row["added_miss_ns"])


# ---- loaded latency --------------------------------------------------------------------------

def loaded_frame():
    delays = [0, 100, 1000, 20000]
    bw = [30.0, 20.0, 4.0, 0.2]
    lat = [300.0, 180.0, 120.0, 101.0]
    common = dict(benchmark="loaded_latency", initiator="cpu:node0", target="ddr0", mix="read")
    out = rows("latency_ns", lat, delay=delays, load_threads=1, **common)
    out += rows("bandwidth_GBps", bw, delay=delays, load_threads=1, **common)
    out += rows("latency_ns", [100.0], delay=0, load_threads=0, **common)
    out += rows("bandwidth_GBps", [0.0], delay=0, load_threads=0, **common)
    return pd.DataFrame(out)


def test_loaded_curve_is_latency_against_bandwidth_from_idle():
    curve = derive.loaded_curves(loaded_frame())
    assert curve["bandwidth_GBps"].tolist() == [0.0, 0.2, 4.0, 20.0, 30.0]
    assert curve["latency_ns"].tolist() == [100.0, 101.0, 120.0, 180.0, 300.0]
    assert curve["idle"].tolist() == [True, False, False, False, False]
    [s] = derive.loaded_summary(curve).to_dict("records")
    assert s["idle_latency_ns"] == 100.0 and s["peak_GBps"] == 30.0
    # 80% of peak = 24 GB/s: between (20, 180) and (30, 300)
    assert s["latency_at_80pct_ns"] == pytest.approx(180 + 120 * 0.4)


# ---- zero-copy crossovers ----------------------------------------------------------------------

@pytest.mark.parametrize("prep, per_use, expect", [
    (25.0, 4.0, 25 / 6),          # copy: pays from K = 25 / (10 - 4)
    (40.0, 4.0, 40 / 6),          # migrate: dearer to prepare
    (5.0, 9.9, 50.0),             # pays only after 50 uses
    (25.0, 10.0, math.inf),       # never pays: same per use, plus the preparation
    (0.0, 5.0, 0.0),              # free preparation: pays from the start
])
def test_crossover_k_of_linear_strategies(prep, per_use, expect):
    uses = np.array([0, 1, 2, 4, 8, 16, 32, 64])
    in_place = 10.0 * uses
    other = prep + per_use * uses
    assert derive.crossover(uses, in_place, other) == pytest.approx(expect)


def test_crossover_is_the_last_crossing_when_noise_wobbles():
    uses = [0, 1, 2, 3, 4, 5, 6]
    in_place = [0, 10, 20, 30, 40, 50, 60]
    other = [25, 29, 19, 31, 38, 44, 49]           # dips under at K=2 once, for good after K=3
    assert derive.crossover(uses, in_place, other) == pytest.approx(3 + 1 / 3)


def test_crossovers_per_far_tier_and_strategy():
    uses = list(range(0, 17))
    out = []
    for strategy, prep, per in [("in_place", 0.0, 0.10), ("copy", 0.25, 0.04),
                                ("migrate_mbind", 0.40, 0.04)]:
        out += rows("seconds", [prep + per * k for k in uses], uses=uses, strategy=strategy,
                    initiator="cpu:node0", target="cxl2", noise=0.01, seed=len(strategy))
    found = derive.crossovers(pd.DataFrame(out)).set_index("strategy")
    assert set(found.index) == {"copy", "migrate_mbind"}
    assert found.loc["copy", "crossover_uses"] == pytest.approx(0.25 / 0.06, rel=0.05)
    assert found.loc["migrate_mbind", "crossover_uses"] == pytest.approx(0.40 / 0.06, rel=0.05)
    assert found.loc["copy", "model_uses"] == pytest.approx(0.25 / 0.06, rel=0.05)
    assert found.loc["copy", "prep_s"] == pytest.approx(0.25, rel=0.05)


# ---- write penalty -----------------------------------------------------------------------------

def penalty_frame():
    cases = [("read", "regular", 64, 1.0), ("write", "regular", 64, 2.0), ("write", "nt", 64, 1.5),
             ("rmw", "regular", 64, 3.0), ("3:1", "regular", 64, 1.25), ("2:1", "regular", 64, 4 / 3),
             ("1:1", "regular", 64, 1.5), ("partial", "regular", 8, 2.5), ("partial", "nt", 8, 12.0)]
    out = []
    for op, store, wb, ns in cases:
        out += rows("ns_per_line", [ns], reps=5, op=op, store=store, write_bytes=wb, threads=1,
                    initiator="cpu:node0", target="ddr0")
        out += rows("bandwidth_GBps", [64 / ns], reps=5, op=op, store=store, write_bytes=wb,
                    threads=1, initiator="cpu:node0", target="ddr0")
    return pd.DataFrame(out)


def test_penalty_ratios_are_slowdowns_per_line_with_the_ecc_state_beside():
    out = derive.penalty_ratios(penalty_frame(), ecc="EDAC SECDED: 0 corrected")
    r = out.set_index("ratio")["value"].to_dict()
    assert r["write ÷ read"] == pytest.approx(2.0)
    assert r["write nt ÷ read"] == pytest.approx(1.5)
    assert r["rmw ÷ write"] == pytest.approx(1.5)
    assert r["3:1 ÷ read"] == pytest.approx(1.25)
    assert r["partial 8 B ÷ write"] == pytest.approx(1.25)
    assert r["partial 8 B nt ÷ write nt"] == pytest.approx(8.0)
    assert r["partial 8 B nt ÷ partial 8 B"] == pytest.approx(12.0 / 2.5)
    assert (out["ecc"] == "EDAC SECDED: 0 corrected").all()
    assert np.allclose(out["lo"], out["value"]) and np.allclose(out["hi"], out["value"])


def test_penalty_ratios_never_divide_across_page_sizes():
    small, huge = penalty_frame().assign(page="4k"), penalty_frame().assign(page="thp")
    huge.loc[(huge["op"] == "write") & (huge["store"] == "regular") & (huge["metric"] == "ns_per_line"),
             "value"] = 4.0
    out = derive.penalty_ratios(pd.concat([small, huge], ignore_index=True))
    by_page = out[out["ratio"] == "write ÷ read"].set_index("page")["value"]
    assert by_page["4k"] == pytest.approx(2.0) and by_page["thp"] == pytest.approx(4.0)


def test_ecc_state_by_target_from_a_run_record():
    meta = {"ecc": {"state": "EDAC: none"}, "cases": [
        {"benchmark": "write_penalty", "target": "ddr0", "info": {"ecc": "EDAC SECDED: 3 corrected"}},
        {"benchmark": "write_penalty", "target": "cxl2", "info": {}},
        {"benchmark": "latency", "target": "ddr1", "info": {"ecc": "x"}}]}
    assert derive.ecc_by_target(meta) == {"ddr0": "EDAC SECDED: 3 corrected", "cxl2": "EDAC: none"}


def test_penalty_ratios_name_only_what_was_measured():
    frame = penalty_frame()
    frame = frame[frame["op"].isin(["read", "write"]) & (frame["store"] == "regular")]
    out = derive.penalty_ratios(frame, ecc={"ddr0": "unknown"})
    assert out["ratio"].tolist() == ["write ÷ read"] and out["ecc"].tolist() == ["unknown"]


# ---- memory-level parallelism -------------------------------------------------------------------

def test_mlp_speedup_over_one_chain():
    common = dict(initiator="cpu:node0", target="cxl2", page="thp", working_set_bytes=GiB)
    out = rows("latency_ns", [300.0], chains=1, **common)
    for n, per in [(2, 150.0), (4, 80.0), (8, 60.0), (16, 60.0)]:
        out += rows("latency_ns", [per * n], chains=n, **common)
        out += rows("ns_per_load", [per], chains=n, **common)
    got = derive.mlp(pd.DataFrame(out)).set_index("chains")
    assert got["ns_per_load"].tolist() == [300.0, 150.0, 80.0, 60.0, 60.0]
    assert got["speedup"].tolist() == pytest.approx([1.0, 2.0, 3.75, 5.0, 5.0])


def test_medians_take_the_repetitions_median_of_inner_medians():
    frame = pd.DataFrame([{"metric": "m", "repetition": r, "value": v, "k": 1}
                          for r, vals in enumerate([[1, 2, 100], [3, 3, 3], [4, 5, 6]])
                          for v in vals])
    [row] = derive.medians(frame, ["k"]).to_dict("records")
    assert row["value"] == 3 and row["n"] == 3
