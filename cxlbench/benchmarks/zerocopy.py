"""Zero-copy vs copy vs migrate (host): data that lives on a far tier (a CXL
node, a remote socket) is used K times by an initiator. Three ways to do it:

  in_place            read it where it is, K times
  copy                copy it to the initiator's local DDR first (into a staging
                      buffer allocated and faulted in beforehand), then read the copy
  migrate_mbind       move its pages to the local node (mbind MPOL_BIND with
                      MPOL_MF_MOVE), then read them
  migrate_move_pages  the same through move_pages(2)

One use is one pass of the STREAM read kernel over all of it (`threads` of the
initiator's CPUs). A repetition times the preparation (copy or migration; none
in place) and `max_uses` passes in native code and stores, for every K from 0
to max_uses, `seconds` = preparation + the first K passes (column `uses`). The
crossover K — where copying or migrating first starts to pay — is derived per
far tier by cxlbench.analysis.derive.crossovers. Migration is verified: pages
that did not move are counted and reported.

On a machine with one NUMA node there is no far tier: the case is recorded as
skipped with that reason.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cxlbench.benchmarks.base import Env, Planned, Show, memory_short, metrics, place, placement_found, sweep
from cxlbench.benchmarks.sizes import array_bytes
from cxlbench.benchmarks.write_penalty import Threads, thread_list
from cxlbench.benchmarks.spec import Count, Size, Spec as BaseSpec
from cxlbench.results.schema import Case, Metric, Sample
from cxlbench.topology.model import Initiator, Tier

NAME = "zerocopy"
STRATEGIES = ("in_place", "copy", "migrate_mbind", "migrate_move_pages")
METRICS = metrics(Metric("seconds", "s", "lower"))
SHOW = Show("Zero-copy vs copy vs migrate", "Time to use far data K times: in place, copied to the "
            "local tier first, or migrated first.", x="uses", facets=("threads",))


@dataclass(kw_only=True)
class Spec(BaseSpec):
    strategy: tuple[Literal["in_place", "copy", "migrate_mbind", "migrate_move_pages"], ...] = STRATEGIES
    data_bytes: Size | Literal["auto"] = "auto"
    max_uses: Count = 16                 # passes over the data after its preparation
    threads: Threads = (1,)
    page: Literal["4k", "thp"] = "4k"


def local_tier(initiator: Initiator, env: Env) -> Tier | None:
    """The DDR tier of the initiator's own node."""
    return next((t for t in sorted(env.tiers.values(), key=lambda t: t.name)
                 if t.kind == "ddr" and t.node == initiator.node), None)


def far_pairs(spec: Spec, env: Env) -> list[tuple[Initiator, Tier, Tier]]:
    """(initiator, far tier, its local DDR tier) for every CPU initiator and every
    host tier on another node (spec.tiers: kinds or names)."""
    wanted = set(spec.tiers)
    out = []
    for i in sorted((i for i in env.initiators.values() if i.kind == "cpu"), key=lambda i: i.name):
        local = local_tier(i, env)
        if local is None:
            continue
        for t in sorted(env.tiers.values(), key=lambda t: t.name):
            if t.is_host_memory and t.node != i.node and (t.kind in wanted or t.name in wanted):
                out.append((i, t, local))
    return out


def plan(spec: Spec, env: Env) -> list[Planned]:
    common = {"data_bytes": array_bytes(spec.data_bytes, env.machine), "max_uses": spec.max_uses,
              "page": spec.page}
    pairs = far_pairs(spec, env)
    if not pairs:
        return _nothing_far(spec, env, common)
    planned = []
    for initiator, far, local in pairs:
        for p in sweep(strategy=spec.strategy, threads=thread_list(spec.threads, len(initiator.cpus))):
            params = {**p, **common, "local": local.name}
            case = Case(NAME, initiator.name, far.name, far.kind, params, spec.repetitions, spec.warmup)
            planned.append(Planned(case, cannot(params, initiator, far, local, env),
                                   estimate(params, spec)))
    return planned


def _nothing_far(spec: Spec, env: Env, common: dict) -> list[Planned]:
    """One skipped case per CPU initiator, saying why nothing was measured."""
    out = []
    for i in sorted((i for i in env.initiators.values() if i.kind == "cpu"), key=lambda i: i.name):
        local = local_tier(i, env)
        target = local or next(iter(env.tiers.values()), None)
        if target is None:
            continue
        why = (f"no far tier: every host tier is on {i.name}'s own node (a one-node machine); "
               f"zero-copy vs copy vs migrate needs a CXL or remote-socket node "
               f"(declare one: cxl=node:N)")
        case = Case(NAME, i.name, target.name, target.kind, {**common, "strategy": "all"},
                    spec.repetitions, spec.warmup)
        out.append(Planned(case, why, 0.0))
    return out


def cannot(params: dict, initiator, far, local, env: Env) -> str | None:
    if params["threads"] > len(initiator.cpus):
        return f"{params['threads']} threads, but {initiator.name} has {len(initiator.cpus)} CPUs"
    for tier in (far, local):
        short = memory_short(env, tier.node, params["data_bytes"], 0.4, on=tier.name)
        if short:
            return short
    return None


def estimate(params: dict, spec: Spec) -> float:
    """Seconds: faulting the far data (and the staging copy) in at ~1 GB/s, the
    preparation (~2 GB/s), max_uses passes at ~5 GB/s per thread."""
    b = params["data_bytes"]
    passes = params["max_uses"] * b / (5e9 * params["threads"])
    return 0.5 + spec.repetitions * (2 * b / 1e9 + b / 2e9 + passes)


def measure(case: Case, env: Env, info: dict) -> list[Sample]:
    from cxlbench import _native
    from cxlbench.memory import placement
    p = case.params
    far_node = env.tier(case.target).node
    local_node = env.tier(p["local"]).node
    cpus = env.initiator(case.initiator).cpus[:p["threads"]]
    size, uses = p["data_bytes"], p["max_uses"]
    samples: list[Sample] = []
    moved_fraction = []
    for rep in range(case.repetitions):
        data = place(size, far_node, p["page"])
        staging = place(size, local_node, p["page"]) if p["strategy"] == "copy" else None
        try:
            n = data.length
            if case.warmup:                    # caches and TLB warm, as a program's data would be
                _native.stream("read", data.addr, 0, 0, n, cpus, False, case.warmup)
            where = data.addr
            if p["strategy"] == "in_place":
                prep = 0.0
            elif p["strategy"] == "copy":
                prep = _native.stream("copy", data.addr, 0, staging.addr, n, cpus, False, 1)[0]
                where = staging.addr
            elif p["strategy"] == "migrate_mbind":
                t0 = _native.now_ns()
                _native.mbind(data.addr, n, [local_node], "bind", strict=False, move=True)
                prep = (_native.now_ns() - t0) / 1e9
            else:
                elapsed_ns, _ = _native.move_pages(data.addr, n, local_node, 4096)
                prep = elapsed_ns / 1e9
            if p["strategy"].startswith("migrate"):
                found = placement(data.addr, n, local_node)
                moved_fraction.append(found.fraction)
            passes = _native.stream("read", where, 0, 0, n, cpus, False, uses)
            found_page = placement_found(data)
        finally:
            data.close()
            if staging is not None:
                staging.close()
        total = prep
        samples.append(Sample("seconds", total, rep, {**found_page, "uses": 0}))
        for k, t in enumerate(passes, start=1):
            total += t
            samples.append(Sample("seconds", total, rep, {**found_page, "uses": k}))
    info["cpus"] = cpus
    info["far_node"], info["local_node"] = far_node, local_node
    if moved_fraction:
        info["moved_fraction"] = [round(f, 4) for f in moved_fraction]
        if min(moved_fraction) < 0.999:
            info.setdefault("warnings", []).append(
                f"migration left {1 - min(moved_fraction):.1%} of the pages on node {far_node} "
                f"(pages shared or pinned, or node {local_node} short of memory)")
    return samples
