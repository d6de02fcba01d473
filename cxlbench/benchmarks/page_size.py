"""Page size and TLB: chase latency with 4 KiB pages, THP, and 2 MiB / 1 GiB
hugetlb pages, from inside the L1 TLB's reach to several GiB; bandwidth with
each page size too.

Two chase patterns per page size: `random` over the whole working set (every
load may need a new translation) and `window` (multichase's: random within
windows of 64 pages, windows in random order — the same cache misses, few TLB
misses). Their difference, and the knees of the random curve, are where the
TLB's reach ends and what a miss adds: cxlbench.analysis.derive.tlb_knees.

Cases are latency-family cases (probe = latency: the same fresh buffer and
cycle per repetition, timed as loaded latency's idle point so that time another
process takes from the CPU is not counted) and bandwidth-family cases (probe =
bandwidth, the read kernel, measured by that family's code); every
sample records the page size obtained and the huge-page coverage found (THP can
silently give 4 KiB pages; allocate refuses below 90%). hugetlb cases are
skipped with the reason when the node has no pages of that size reserved.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cxlbench.benchmarks import bandwidth, latency
from cxlbench.benchmarks.base import (Env, Planned, Show, free_memory, host_pairs, metrics, place, placement_found,
                                      sweep)
from cxlbench.benchmarks.sizes import PAGE_BYTES, Page, array_bytes, latency_sweep
from cxlbench.benchmarks.write_penalty import Threads, thread_list
from cxlbench.benchmarks.spec import Count, Size, Spec as BaseSpec
from cxlbench.results.schema import Case, Metric, Sample

NAME = "page_size"
PAGES = ("4k", "thp", "hugetlb-2m", "hugetlb-1g")
MAX_DEFAULT = 8 << 30          # "several GiB", when free memory allows
METRICS = metrics(Metric("latency_ns", "ns", "lower"), Metric("bandwidth_GBps", "GB/s", "higher"))
SHOW = Show("Page size and TLB", "Chase latency with each page size over the working set; the knees "
            "are where the TLB's reach ends.", x="working_set_bytes", facets=("probe", "pattern"))


@dataclass(kw_only=True)
class Spec(BaseSpec):
    probe: tuple[Literal["latency", "bandwidth"], ...] = ("latency", "bandwidth")
    page: tuple[Page, ...] = PAGES
    working_set: tuple[Size, ...] | Literal["auto"] = "auto"
    min_working_set: Size = 16 << 10
    max_working_set: Size | Literal["auto"] = "auto"   # auto: half the free memory, <= 8 GiB
    pattern: tuple[Literal["random", "window"], ...] = ("random", "window")
    # probe = bandwidth (the read kernel)
    threads: Threads = (1,)
    array_bytes: Size | Literal["auto"] = "auto"
    iterations: Count = 10
    ORDERED = (("min_working_set", "max_working_set"),)


def max_working_set(value, env: Env, tiers) -> int:
    """"auto": the largest power of two under half the smallest free memory of the
    tiers (and 8 GiB); else the size given."""
    if value != "auto":
        return value
    free = [f[0] for t in tiers if (f := free_memory(env, t.node)) is not None]
    limit = min([MAX_DEFAULT] + [f // 2 for f in free])
    size = 1 << 20
    while size * 2 <= limit:
        size *= 2
    return size


def plan(spec: Spec, env: Env) -> list[Planned]:
    pairs = host_pairs(spec, env)
    hi = max_working_set(spec.max_working_set, env, [t for _, t in pairs])
    sizes = list(spec.working_set) if spec.working_set != "auto" \
        else latency_sweep(env.machine, spec.min_working_set, hi)
    size = array_bytes(spec.array_bytes, env.machine)
    planned = []
    for initiator, tier in pairs:
        if "latency" in spec.probe:
            for p in sweep(page=spec.page, pattern=spec.pattern, working_set_bytes=sizes):
                params = {"probe": "latency", **p, "chains": 1, "line_bytes": latency.LINE}
                if p["pattern"] == "window":
                    params["window_bytes"] = latency.WINDOW_PAGES * PAGE_BYTES.get(p["page"], 4096)
                    if p["working_set_bytes"] <= params["window_bytes"]:
                        continue              # one window: the same chase as random
                case = Case(NAME, initiator.name, tier.name, tier.kind, params, spec.repetitions, spec.warmup)
                planned.append(Planned(case, _cannot_latency(params, tier, env),
                                       latency._estimate(params, spec)))
        if "bandwidth" in spec.probe:
            threads = thread_list(spec.threads, len(initiator.cpus))
            for p in sweep(page=spec.page, threads=threads):
                params = {"probe": "bandwidth", **p, "kernel": "read", "nt": False,
                          "array_bytes": size, "iterations": spec.iterations}
                case = Case(NAME, initiator.name, tier.name, tier.kind, params, spec.repetitions, spec.warmup)
                planned.append(Planned(case, _cannot_bandwidth(params, tier, env),
                                       bandwidth._estimate(params, spec)))
    return planned


def _cannot_latency(params: dict, tier, env: Env) -> str | None:
    return latency._cannot(params, tier, env)


def _cannot_bandwidth(params: dict, tier, env: Env) -> str | None:
    page = params["page"]
    if page.startswith("hugetlb"):
        # the pool check is the latency family's, for the array's bytes
        return latency._cannot({"page": page, "working_set_bytes": params["array_bytes"]}, tier, env)
    return bandwidth._cannot(params, tier, env)


def measure(case: Case, env: Env, info: dict) -> list[Sample]:
    if case.params["probe"] == "latency":
        return measure_latency(case, env, info)
    return bandwidth.measure(case, env, info)


def measure_latency(case: Case, env: Env, info: dict) -> list[Sample]:
    """The latency family's trial (fresh buffer and cycle per repetition), timed by
    the loaded-latency code's idle point: ~250 µs sub-windows kept only when the
    chase thread had its CPU. A knee is a step of a few ns to a few tens of ns; on
    a shared machine, time another process took would bury it (on an idle one this
    is plain wall-clock timing)."""
    from cxlbench import _native
    p = case.params
    tier = env.tier(case.target)
    cpu = env.initiator(case.initiator).cpus[0]
    duration_ns = int(env.spec.min_sample_s * 1e9)
    samples, kept = [], []
    for rep in range(case.repetitions):
        with place(p["working_set_bytes"], tier.node, p["page"]) as buf:
            heads = _native.chase_init(buf.addr, p["working_set_bytes"], latency.LINE,
                                       p.get("window_bytes", 0), p["chains"], case.seed(rep))
            r = _native.loaded_latency(heads, cpu, 0, 0, [], warmup_ns=duration_ns * case.warmup // 2,
                                       duration_ns=duration_ns, limit_ns=6 * duration_ns)
            found = {**placement_found(buf), "steps": r["chase_steps"]}
        kept.append(round(r["windows_kept"] / max(r["windows"], 1), 3))
        if r["chase_steps"] == 0:
            info.setdefault("warnings", []).append(
                f"repetition {case.first_repetition + rep}: the chase never had its CPU for a whole sub-window (the "
                f"machine is busy); no sample")
            continue
        samples.append(Sample("latency_ns", r["chase_ns"] / r["chase_steps"], rep, found))
    info["cpu"] = cpu
    info["kept_windows"] = kept
    return samples
