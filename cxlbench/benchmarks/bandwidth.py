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

from cxlbench.benchmarks.base import Env, Planned, as_list, host_pairs, place, sweep
from cxlbench.benchmarks.sizes import stream_array_bytes
from cxlbench.results.schema import Case, Sample
from cxlbench.units import parse_size

NAME = "bandwidth"
# STREAM's arrays each kernel reads or writes (stream_kernels.h: copy c = a,
# scale b = s*c, add c = a + b, triad a = b + s*c); each role gets a buffer of
# its own, and each array-length of bytes counts once, as STREAM counts.
ROLES = {"read": "a", "write": "a", "copy": "ac", "scale": "bc", "add": "abc", "triad": "abc"}
# arrays each kernel touches, and how many array-lengths of bytes it moves
KERNELS = {k: (len(r), len(r)) for k, r in ROLES.items()}


def addresses(kernel: str, bufs: list) -> tuple[int, int, int]:
    """The a, b, c addresses for kernel, one buffer per role it uses, 0 for the rest.
    Two roles on one buffer would make copy an in-place update (each line read
    and written back), not a copy, whose destination the cache must first read."""
    by_role = dict(zip(ROLES[kernel], bufs, strict=True))
    return tuple(by_role[r].addr if r in by_role else 0 for r in "abc")


def thread_counts(spec_value, ncpus: int) -> list[int]:
    if spec_value in (None, "auto"):
        counts = [n for n in (1, 2, 4, 8, 16, 32, 64, 128) if n < ncpus] + [ncpus]
        return sorted(set(counts))
    return [n for n in as_list(spec_value) if n <= ncpus]


def plan(spec: dict, env: Env) -> list[Planned]:
    array = spec.get("array_bytes", "auto")
    array_bytes = stream_array_bytes(env.machine) if array == "auto" else parse_size(array)
    planned = []
    for initiator, tier in host_pairs(spec, env):
        threads = thread_counts(spec.get("threads", "auto"), len(initiator.cpus))
        for p in sweep(spec, page=spec.get("page", ["4k"]), kernel=spec.get("kernel", list(KERNELS)),
                       nt=spec.get("nt", [False]), threads=threads):
            if p["nt"] and p["kernel"] == "read":
                continue                      # a read kernel has no stores to make non-temporal
            params = {**p, "array_bytes": array_bytes, "iterations": spec.get("iterations", 10)}
            case = Case(NAME, initiator.name, tier.name, tier.kind, params,
                        spec["repetitions"], spec["warmup"])
            planned.append(Planned(case, _cannot(params, tier, env), _estimate(params, spec)))
    return planned


def _cannot(params: dict, tier, env: Env) -> str | None:
    if params["kernel"] not in KERNELS:
        return f"unknown kernel {params['kernel']!r} (use {', '.join(KERNELS)})"
    if params["page"] not in ("4k", "thp"):
        return f"page policy {params['page']!r} is not offered for bandwidth (use 4k or thp)"
    node = env.machine.nodes.get(tier.node)
    need = KERNELS[params["kernel"]][0] * params["array_bytes"]
    if node is not None and need > node.mem_free_bytes * 0.8:
        return f"needs {need >> 20} MiB, more than 80% of node {tier.node}'s free memory"
    return None


def _estimate(params: dict, spec: dict) -> float:
    """Seconds, assuming ~5 GB/s per thread and ~1 GB/s to fault memory in."""
    arrays, moved = KERNELS[params["kernel"]]
    fault = arrays * params["array_bytes"] / 1e9
    timed = (params["iterations"] + spec["warmup"]) * moved * params["array_bytes"] / (5e9 * params["threads"])
    return 0.3 + spec["repetitions"] * (fault + timed)


def measure(case: Case, env: Env, info: dict) -> list[Sample]:
    p = case.params
    tier = env.tier(case.target)
    cpus = env.initiator(case.initiator).cpus[:p["threads"]]
    arrays, _ = KERNELS[p["kernel"]]
    samples = []
    for rep in range(case.repetitions):
        bufs = [place(p["array_bytes"], tier.node, p["page"]) for _ in range(arrays)]
        try:
            found = {"page_bytes": min(x.page_bytes_found for x in bufs),
                     "huge_coverage": min(x.huge_coverage for x in bufs)}
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
