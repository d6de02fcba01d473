"""Pointer-chase latency: ns per dependent load, working set × page size × pattern.

With one chain the timed run is the chase in blocks of a few loads
(benchmarks.tails): the same loop gives the mean (latency_ns) and the
distribution (p50 … p99.99 and max ns per load, the histogram in the run's
histograms.parquet), and the L1 floor is measured beside it.

Each repetition is an independent trial: a fresh buffer on the target node
(new physical pages) and a fresh random cycle (new seed). Run-to-run spread in
memory latency comes mostly from where the pages land, so trials inside one
process that reused one buffer would understate it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from cxlbench.benchmarks import tails
from cxlbench.benchmarks.base import (Env, Headline, Planned, Show, Skip, cpu_held, host_pairs, memory_short,
                                      metrics, place, placement_found, sweep)
from cxlbench.benchmarks.sizes import PAGE_BYTES, Page, hugetlb_short, resolve_sizes
from cxlbench.benchmarks.spec import Count, Size, Spec as BaseSpec
from cxlbench.results.schema import Case, Metric, Sample

NAME = "latency"
LINE = 64
WINDOW_PAGES = 64          # multichase's window: TLB reach stays small, caches still miss

#: The drift sentinel that moves with each metric (benchmarks.sentinel).
DRIFT = {"latency_ns": "chase", "ns_per_load": "chase"}
METRICS = metrics(
    Metric("latency_ns", "ns", "lower"),
    Metric("ns_per_load", "ns", "lower"),      # with N chains: elapsed / (steps x chains)
    *tails.TAIL_METRICS,                       # one chain: the distribution (benchmarks.tails)
    *tails.FLOOR_METRICS,                      # ... and the L1 floor beside it
)
SHOW = Show(
    "Latency", "Pointer-chase latency in ns per dependent load over the working set (log₂ axis); "
    "dashed lines mark the cache sizes the machine reports. One line per tier × page size; the band "
    "is the 95% interval of the median over repetitions.",
    x="working_set_bytes", facets=("pattern",),
    headlines=(Headline("latency, {working_set_bytes} working set, {page} pages", "latency_ns",
                        column="idle latency", where={"pattern": "random", "chains": 1}, per=("page",),
                        pick="largest:working_set_bytes", digits=1),
               # the distribution of the same loop, and the machine's floor beside its tail
               *(Headline(f"{name} of k-load blocks, {{working_set_bytes}} working set, {{page}} pages", metric, column=name,
                          where={"pattern": "random", "chains": 1}, per=("page",),
                          pick="largest:working_set_bytes", digits=1, floor=tails.FLOOR_OF.get(metric, ""))
                 for name, metric in (("p50", "p50_ns"), ("p99", "p99_ns"), ("p99.9", "p99_9_ns"),
                                      ("floor p99.9", "floor_p99_9_ns")))))


@dataclass(kw_only=True)
class Spec(BaseSpec):
    working_set: tuple[Size, ...] | Literal["auto"] = "auto"   # auto: a sweep around the caches
    min_working_set: Size = 16 << 10
    max_working_set: Size = 1 << 30
    page: tuple[Page, ...] = ("4k",)
    pattern: tuple[Literal["random", "window"], ...] = ("random",)
    chains: tuple[Count, ...] = (1,)   # independent chases at once: memory-level parallelism
    ORDERED = (("min_working_set", "max_working_set"),)


def plan(spec: Spec, env: Env) -> list[Planned]:
    sizes = resolve_sizes(spec.working_set, env.machine, spec.min_working_set, spec.max_working_set)
    planned = []
    for initiator, tier in host_pairs(spec, env):
        for p in sweep(page=spec.page, pattern=spec.pattern, chains=spec.chains, working_set_bytes=sizes):
            params = {**p, "line_bytes": LINE}
            if p["pattern"] == "window":
                params["window_bytes"] = WINDOW_PAGES * PAGE_BYTES.get(p["page"], 4096)
            case = Case(NAME, initiator.name, tier.name, tier.kind, params, spec.repetitions, spec.warmup)
            planned.append(Planned(case, _cannot(params, tier, env), _estimate(params, spec)))
    return planned


def _cannot(params: dict, tier, env: Env) -> str | None:
    """Why a case cannot run here, decided before spending time on it."""
    page = params["page"]
    need = params["working_set_bytes"]
    short = memory_short(env, tier.node, need)
    if short:
        return short
    if page.startswith("hugetlb"):
        return hugetlb_short(env.machine, tier.node, page, -(-need // PAGE_BYTES[page]))
    return None


def _estimate(params: dict, spec: Spec) -> float:
    """Seconds: timed samples plus building the chain (~0.2 µs per line here); with
    one chain the floor's quarter more."""
    lines = params["working_set_bytes"] // LINE
    timed = 1 + (1 / tails.FLOOR_SHARE if params.get("chains", 1) == 1 else 0)
    per_trial = (spec.warmup + timed) * spec.min_sample_s + lines * 2e-7
    return 0.3 + spec.repetitions * per_trial


def measure(case: Case, env: Env, info: dict) -> list[Sample]:
    p = case.params
    return chase(case, env, info, LINE, p.get("window_bytes", 0), p["chains"],
                 distribution=p["chains"] == 1)


def chase(case: Case, env: Env, info: dict, line_bytes: int, window_bytes: int = 0,
          chains: int = 1, distribution: bool = False) -> list[Sample]:
    """Each repetition: a fresh buffer of the case's working_set_bytes on its tier
    and page size, a fresh random cycle over lines `line_bytes` apart (random within
    windows of `window_bytes` when set), calibrated, warmed and timed on the
    initiator's first CPU; one latency_ns sample (and ns_per_load with chains).
    distribution (one chain): the timed run is the chase in blocks (tails), the
    mean figure and the tail metrics those of the blocks the thread held its CPU
    for (tails.timed_distribution), beside the L1 floor; the histograms and the
    plain wall-clock mean go to info."""
    from cxlbench import _native

    initiator = env.initiator(case.initiator)
    tier = env.tier(case.target)
    os.sched_setaffinity(0, initiator.cpus[:1])
    p = case.params
    min_s = env.spec.min_sample_s
    samples = []
    for rep in range(case.repetitions):
        with place(p["working_set_bytes"], tier.node, p["page"]) as buf:
            # buf.length is rounded up to the page size (2 MiB for THP): chase only the
            # working set asked for, or a 16 KiB case would measure 2 MiB.
            heads = _native.chase_init(buf.addr, p["working_set_bytes"], line_bytes, window_bytes,
                                       chains, case.seed(rep))
            steps = _calibrate(heads, min_s, warmup=case.warmup)
            if distribution:
                (mean_ns, dist), held = cpu_held(1, tails.timed_distribution, heads[0], steps)
            else:
                elapsed_ns, held = cpu_held(1, _native.chase_run, heads, steps)
                mean_ns = elapsed_ns / steps
            found = {**placement_found(buf), "steps": steps, "cpu_held": round(held, 4)}
        if mean_ns is not None:       # None: no window held its CPU (the reason in info)
            samples.append(Sample("latency_ns", mean_ns, rep, found))
        if chains > 1:                # memory-level parallelism: loads in flight together
            samples.append(Sample("ns_per_load", mean_ns / chains, rep, found))
        if distribution:
            samples += _tails(dist, mean_ns, tier.node, rep, found, info, seed=case.seed(rep))
    info["cpu"] = initiator.cpus[0]
    if distribution and not any(s.metric == "latency_ns" for s in samples):
        # every repetition measured someone else's time: a figure would be theirs
        raise Skip(f"no repetition kept a window in which the chase held CPU {initiator.cpus[0]}: another "
                   f"process ran there throughout; measure when it is free")
    return samples


def _tails(dist: tails.Distribution, mean_ns: float | None, node: int, rep: int, found: dict,
           info: dict, *, seed: int) -> list[Sample]:
    """The tail metrics of one repetition with its L1 floor; the histograms and the
    check of the distribution's mean against the mean figure go to info. A repetition
    that kept no block says so and gives no tail."""
    if dist.n == 0:
        info.setdefault("distribution", []).append({
            "repetition": rep, "blocks": 0, "lost_blocks": dist.lost_blocks,
            "note": "no block kept: the thread held its CPU under 95% in every window"})
        return []
    with place(tails.FLOOR_BYTES, node, "4k") as fbuf:
        floor = tails.floor_distribution(fbuf.addr, dist, mean_ns, seed)
    info.setdefault(tails.HISTOGRAMS, []).extend([dist.record(rep, "chase"), floor.record(rep, "floor")])
    info.setdefault("distribution", []).append({
        "repetition": rep, "k": dist.k, "timer_overhead_ns": round(dist.overhead_ns, 2),
        "mean_ns": round(dist.mean_ns(), 3), "mean_vs_latency": round(dist.mean_ns() / mean_ns - 1, 4),
        "wall_ns": round(dist.wall_mean(), 3),
        "blocks": dist.n, "lost_blocks": dist.lost_blocks, "floor": floor.extra, **dist.extra})
    return tails.samples(rep, found, dist, floor)


def _calibrate(heads: list[int], min_s: float, warmup: int) -> int:
    """Steps that make one timed run last min_s; the calibration runs double as warm-up."""
    from cxlbench import _native
    steps = 4096
    while True:
        elapsed = _native.chase_run(heads, steps) / 1e9
        if elapsed >= min_s / 8:
            break
        steps *= 4
    for _ in range(warmup):
        _native.chase_run(heads, steps)
    return max(steps, int(steps * min_s / elapsed))
