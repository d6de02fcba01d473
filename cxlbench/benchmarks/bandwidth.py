"""Sequential bandwidth: STREAM-style kernels × threads on every host tier.

Bytes are counted as STREAM counts them: what each kernel reads plus what it
writes, without the write-allocate read a regular store causes (so a regular
`write` that really moves 2× its bytes over the bus reports the 1× it was
asked to do; the non-temporal variants have no such hidden traffic).
Each repetition allocates fresh arrays on the target node; inside it the
kernel runs `iterations` timed times and every iteration is kept.

Each repetition also records `cpu_held`: the median, over its timed iterations
(as its figure is their median), of the least share of its own kernel interval
any of the threads held its CPU
(thread CPU clocks in the C loop, so waiting at the per-iteration barrier for
the slowest thread is not counted as someone else's time).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Literal

from cxlbench.benchmarks.base import (Env, Headline, Planned, Show, host_pairs, memory_short, metrics, place,
                                      placement_found, sweep)
from cxlbench.benchmarks.sizes import array_bytes
from cxlbench.benchmarks.spec import Count, Size, Spec as BaseSpec, Threads
from cxlbench.results.schema import Case, Metric, Sample

NAME = "bandwidth"
# STREAM's arrays each kernel reads or writes (stream_kernels.h: copy c = a,
# scale b = s*c, add c = a + b, triad a = b + s*c); each role gets a buffer of
# its own, and each array-length of bytes counts once, as STREAM counts.
ROLES = {"read": "a", "write": "a", "copy": "ac", "scale": "bc", "add": "abc", "triad": "abc"}
# arrays each kernel touches, and how many array-lengths of bytes it moves
KERNELS = {k: (len(r), len(r)) for k, r in ROLES.items()}
Kernel = Literal["read", "write", "copy", "scale", "add", "triad"]

#: The drift sentinel that moves with each metric (benchmarks.sentinel).
DRIFT = {"bandwidth_GBps": "triad"}
METRICS = metrics(Metric("bandwidth_GBps", "GB/s", "higher"))      # 10^9 bytes per second
SHOW = Show(
    "Bandwidth", "Streaming kernels over threads, one chart per kernel. GB/s = 10⁹ bytes per second, "
    "counting the bytes each kernel really moves.",
    x="threads", facets=("kernel",),
    headlines=tuple(Headline(f"peak {k} bandwidth ({{threads}} threads)", "bandwidth_GBps",
                             column=f"peak {k}", where={"kernel": k, "nt": False}, pick="best")
                    for k in ("read", "triad")))


@dataclass(kw_only=True)
class Spec(BaseSpec):
    array_bytes: Size | Literal["auto"] = "auto"    # each array's; auto: 4x the caches (STREAM)
    threads: tuple[Threads, ...] | Literal["auto"] = "auto"   # auto: 1, 2, 4 ... every CPU of the node
    kernel: tuple[Kernel, ...] = tuple(KERNELS)
    page: tuple[Literal["4k", "thp"], ...] = ("4k",)
    nt: tuple[bool, ...] = (False,)                   # non-temporal stores
    iterations: Count = 10                            # timed runs per repetition, each kept


def addresses(kernel: str, bufs: list) -> tuple[int, int, int]:
    """The a, b, c addresses for kernel, one buffer per role it uses, 0 for the rest.
    Two roles on one buffer would make copy an in-place update (each line read
    and written back), not a copy, whose destination the cache must first read."""
    by_role = dict(zip(ROLES[kernel], bufs, strict=True))
    return tuple(by_role[r].addr if r in by_role else 0 for r in "abc")


def thread_counts(value: tuple[int, ...] | str, ncpus: int) -> list[int]:
    if value == "auto":
        counts = [n for n in (1, 2, 4, 8, 16, 32, 64, 128) if n < ncpus] + [ncpus]
        return sorted(set(counts))
    return [n for n in value if n <= ncpus]


def plan(spec: Spec, env: Env) -> list[Planned]:
    size = array_bytes(spec.array_bytes, env.machine)
    planned = []
    for initiator, tier in host_pairs(spec, env):
        threads = thread_counts(spec.threads, len(initiator.cpus))
        for p in sweep(page=spec.page, kernel=spec.kernel, nt=spec.nt, threads=threads):
            if p["nt"] and p["kernel"] == "read":
                continue                      # a read kernel has no stores to make non-temporal
            params = {**p, "array_bytes": size, "iterations": spec.iterations}
            case = Case(NAME, initiator.name, tier.name, tier.kind, params, spec.repetitions, spec.warmup)
            planned.append(Planned(case, _cannot(params, tier, env), _estimate(params, spec)))
    return planned


def _cannot(params: dict, tier, env: Env) -> str | None:
    return memory_short(env, tier.node, KERNELS[params["kernel"]][0] * params["array_bytes"])


def _estimate(params: dict, spec: Spec) -> float:
    """Seconds, assuming ~5 GB/s per thread and ~1 GB/s to fault memory in."""
    arrays, moved = KERNELS[params["kernel"]]
    fault = arrays * params["array_bytes"] / 1e9
    timed = (params["iterations"] + spec.warmup) * moved * params["array_bytes"] / (5e9 * params["threads"])
    return 0.3 + spec.repetitions * (fault + timed)


def measure(case: Case, env: Env, info: dict) -> list[Sample]:
    p = case.params
    tier = env.tier(case.target)
    cpus = env.initiator(case.initiator).cpus[:p["threads"]]
    arrays, _ = KERNELS[p["kernel"]]
    samples = []
    info["place_s"] = []          # faulting in and checking the arrays: on some VMs most of a case's time
    for rep in range(case.repetitions):
        t0 = time.perf_counter()
        bufs = [place(p["array_bytes"], tier.node, p["page"]) for _ in range(arrays)]
        info["place_s"].append(round(time.perf_counter() - t0, 4))
        try:
            found = placement_found(*bufs)
            samples += time_kernel(p["kernel"], bufs, p["array_bytes"], cpus, p["nt"], case.warmup,
                                   p["iterations"], rep, found)
        finally:
            for x in bufs:
                x.close()
    info["cpus"] = cpus
    return samples


def time_kernel(kernel: str, bufs: list, array_bytes: int, cpus: list[int], nt: bool,
                warmup: int, iterations: int, rep: int, found: dict) -> list[Sample]:
    """Repetition `rep` of kernel over bufs (one per role it uses): `warmup` untimed
    passes, then one bandwidth sample per timed iteration, with what the caller found
    about the buffers and cpu_held (see above)."""
    from cxlbench import _native
    a, b, c = addresses(kernel, bufs)
    if warmup:
        _native.stream(kernel, a, b, c, array_bytes, cpus, nt, warmup)
    times, held = _native.stream(kernel, a, b, c, array_bytes, cpus, nt, iterations, held=True)
    found = {**found, "cpu_held": round(statistics.median(held), 4)}
    moved = KERNELS[kernel][1] * array_bytes
    return [Sample("bandwidth_GBps", moved / t / 1e9, rep, {**found, "iteration": i})
            for i, t in enumerate(times)]
