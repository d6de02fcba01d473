"""Memory interleaved across a DDR node and a CXL node at weights from 100:0 to
0:100: bandwidth, and loaded latency, of the combination — the configuration
that adds CXL bandwidth to DDR's.

For every CXL tier, the DDR tier it is paired with is the local DDR of the CPU
node nearest to it (the initiator); with initiators = "all", every CPU node
pairs its own DDR with it. The buffer's pages are spread by
cxlbench.memory.interleave (MPOL_WEIGHTED_INTERLEAVE where the kernel has it,
else mbind page ranges) and the shares found are checked against the weights
before anything is timed; 100:0 and 0:100 are plain bound buffers. The case's
target is "<ddr>+<cxl>" (kind "interleave"); `ddr_weight` is the DDR share in
percent. probe = bandwidth (STREAM kernels, every CPU of the initiator) or
loaded_latency (the loaded-latency family's curve on interleaved buffers).

On a machine without a CXL tier (one node, or sockets only) the cases are
recorded as skipped with that reason; `with` = ["ddr"] pairs remote DDR nodes
instead (a socket as a CXL stand-in).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from cxlbench.benchmarks import loaded_latency
from cxlbench.benchmarks.bandwidth import KERNELS, Kernel, thread_counts, time_kernel
from cxlbench.benchmarks.base import Env, Planned, Show, Skip, limit_short, memory_short, metrics, sweep
from cxlbench.benchmarks.sizes import array_bytes
from cxlbench.benchmarks.spec import Count, Delays, Mix, Size, Spec as BaseSpec, Threads, within
from cxlbench.results.schema import Case, Metric, Sample
from cxlbench.topology.model import Initiator, Tier

NAME = "interleave"
DEFAULT_WEIGHTS = (100, 75, 50, 25, 0)          # DDR share, percent
METRICS = metrics(Metric("bandwidth_GBps", "GB/s", "higher"), Metric("latency_ns", "ns", "lower"))
SHOW = Show("Interleave", "DDR and CXL memory interleaved at weights from 100:0 to 0:100: the bandwidth "
            "and loaded latency of the combination.", x="ddr_weight", facets=("probe",))


@dataclass(kw_only=True)
class Spec(BaseSpec):
    with_: tuple[str, ...] = field(default=("cxl",), metadata={"key": "with"})   # far tier kinds
    ddr_weight: tuple[Annotated[int, within(0, 100)], ...] = DEFAULT_WEIGHTS   # percent
    probe: tuple[Literal["bandwidth", "loaded_latency"], ...] = ("bandwidth", "loaded_latency")
    array_bytes: Size | Literal["auto"] = "auto"
    page: Literal["4k", "thp"] = "4k"
    method: Literal["auto", "weighted", "ranges"] = "auto"
    # probe = bandwidth
    kernel: tuple[Kernel, ...] = ("read",)
    threads: tuple[Threads, ...] | Literal["auto"] = "auto"    # the largest count is measured
    iterations: Count = 10
    # probe = loaded_latency
    mix: tuple[Mix, ...] = ("read",)
    load_threads: tuple[Threads, ...] | Literal["auto"] = "auto"
    delays: Delays = "mlc"


def pairs(spec: Spec, env: Env) -> list[tuple[Initiator, Tier, Tier]]:
    """(initiator, ddr, far) for every far tier of the kinds in spec.with_
    (default cxl): with initiators = "local" (default) the CPU node nearest the far
    tier and that node's DDR; with "all", every other CPU node with its own DDR."""
    kinds = set(spec.with_)
    every = spec.initiators == "all"
    cpus = [i for i in env.initiators.values() if i.kind == "cpu"]
    out = []
    for far in sorted(env.tiers.values(), key=lambda t: t.name):
        if not far.is_host_memory or not (far.kind in kinds or far.name in kinds):
            continue
        node = env.machine.nodes.get(far.node)
        near = sorted(cpus, key=lambda i: (node.distances.get(i.node, 1 << 30) if node else 0,
                                           i.name))
        for i in near:
            if i.node == far.node:
                continue                       # a DDR tier is not interleaved with itself
            ddr = next((t for t in env.tiers.values() if t.kind == "ddr" and t.node == i.node), None)
            if ddr is not None:
                out.append((i, ddr, far))
                if not every:
                    break
    return out


def plan(spec: Spec, env: Env) -> list[Planned]:
    weights = list(spec.ddr_weight)
    size = array_bytes(spec.array_bytes, env.machine)
    found = pairs(spec, env)
    if not found:
        return _no_pair(spec, env)
    planned = []
    for initiator, ddr, far in found:
        target = f"{ddr.name}+{far.name}"
        for probe in spec.probe:
            if probe == "bandwidth":
                threads = thread_counts(spec.threads, len(initiator.cpus))
                points = sweep(kernel=spec.kernel, threads=threads[-1:], ddr_weight=weights)
                extra = {"array_bytes": size, "iterations": spec.iterations}
            else:
                counts = loaded_latency.load_thread_counts(spec.load_threads, len(initiator.cpus))
                points = sweep(mix=spec.mix, load_threads=counts, ddr_weight=weights)
                extra = {"working_set_bytes": size, "load_bytes": size,
                         "delays": loaded_latency.delays_param(spec.delays),
                         "nt": False, "line_bytes": loaded_latency.LINE}
            for p in points:
                params = {"probe": probe, **p, **extra, "ddr": ddr.name, "far": far.name,
                          "page": spec.page, "method": spec.method}
                case = Case(NAME, initiator.name, target, "interleave", params, spec.repetitions, spec.warmup)
                planned.append(Planned(case, cannot(params, initiator, ddr, far, env), estimate(params, spec)))
    return planned


def _no_pair(spec: Spec, env: Env) -> list[Planned]:
    kinds = ", ".join(spec.with_)
    nodes = sorted(n for n, node in env.machine.nodes.items() if node.has_memory)
    why = (f"no {kinds} tier to interleave with DDR on this machine (memory nodes: "
           f"{', '.join(map(str, nodes))}); it needs a second node: declare one with "
           f"cxl=node:N, or set with = [\"ddr\"] to use a remote socket")
    out = []
    for t in sorted(env.tiers.values(), key=lambda t: t.name):
        if t.kind == "ddr":
            i = next((i for i in env.initiators.values() if i.kind == "cpu" and i.node == t.node), None)
            if i is not None:
                case = Case(NAME, i.name, t.name, "interleave", {"probe": "all"},
                            spec.repetitions, spec.warmup)
                out.append(Planned(case, why, 0.0))
    return out


def cannot(params: dict, initiator, ddr, far, env: Env) -> str | None:
    w = params["ddr_weight"]
    if not 0 <= w <= 100:
        return f"ddr_weight {w}: a percentage, 0..100"
    if params["probe"] == "bandwidth":
        need = KERNELS[params["kernel"]][0] * params["array_bytes"]
    else:
        if len(initiator.cpus) < 2 or params["load_threads"] > len(initiator.cpus) - 1:
            return (f"{initiator.name} has {len(initiator.cpus)} CPUs: loaded latency needs one "
                    f"to chase and {params['load_threads']} to load")
        need = params["working_set_bytes"] + params["load_threads"] * params["load_bytes"]
    for tier, share in ((ddr, w / 100), (far, 1 - w / 100)):
        short = memory_short(env, tier.node, int(need * share), on=tier.name)
        if short:
            return short
    return limit_short(env, need)


def estimate(params: dict, spec: Spec) -> float:
    if params["probe"] == "bandwidth":
        arrays, moved = KERNELS[params["kernel"]]
        b = params["array_bytes"]
        return 0.3 + spec.repetitions * (arrays * b / 1e9 + (params["iterations"] + spec.warmup)
                                         * moved * b / (5e9 * params["threads"]))
    return loaded_latency.estimate(params, spec)


def measure(case: Case, env: Env, info: dict) -> list[Sample]:
    from cxlbench.memory import PlacementError
    from cxlbench.memory.interleave import allocate_interleaved
    p = case.params
    ddr, far = env.tier(p["ddr"]), env.tier(p["far"])
    weights = {ddr.node: p["ddr_weight"]}
    weights[far.node] = weights.get(far.node, 0) + 100 - p["ddr_weight"]   # one node: all of it
    cpus = env.initiator(case.initiator).cpus

    def place(n: int):
        try:
            return allocate_interleaved(n, weights, page=p["page"], method=p["method"])
        except PlacementError as e:
            raise Skip(str(e)) from None

    samples: list[Sample] = []
    for rep in range(case.repetitions):
        if p["probe"] == "bandwidth":
            bufs = [place(p["array_bytes"]) for _ in range(KERNELS[p["kernel"]][0])]
            try:
                found = {"page_bytes": bufs[0].page_bytes_found, "huge_coverage": bufs[0].huge_coverage}
                _record(info, bufs[0])
                samples += time_kernel(p["kernel"], bufs, p["array_bytes"], cpus[:p["threads"]], False,
                                       case.warmup, p["iterations"], rep, found)
            finally:
                for x in bufs:
                    x.close()
        else:
            chase = place(p["working_set_bytes"])
            load = place(p["load_bytes"] * p["load_threads"])
            with chase, load:
                found = {"page_bytes": chase.page_bytes_found, "huge_coverage": chase.huge_coverage}
                _record(info, chase)
                samples += loaded_latency.curve(chase, load, cpus, p, rep, found, env, info,
                                                seed=case.seed(rep), first=case.first_repetition)
    return samples


def _record(info: dict, buf) -> None:
    """What the interleave found (method, step, shares per node): the last repetition's."""
    info["interleave"] = buf.found()
    for note in buf.notes:
        if note not in info.get("warnings", []):
            info.setdefault("warnings", []).append(note)
