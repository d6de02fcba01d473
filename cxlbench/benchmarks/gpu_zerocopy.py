"""Zero-copy vs memcpy vs managed memory: a GPU kernel uses host-resident data K times.

Data of `data_bytes` starts on a host tier; a "use" is one pass of a read
kernel (16-byte coalesced loads, summed and checked) over all of it. Four ways:

  in_place          the kernel reads the tier's pinned, mapped memory where it is
  memcpy            cudaMemcpyAsync to HBM first (the preparation), then reads HBM
  managed_prefetch  cudaMallocManaged data first touched on the host, moved with
                    cudaMemPrefetchAsync (the preparation), then read
  managed_fault     the same data read without a prefetch: pages migrate on the
                    GPU's faults during the first use

A repetition queues, behind the spin kernel, the preparation then `max_uses`
uses with an event after each, and stores for every K from 0 to max_uses
`seconds` = preparation + the first K uses (column `uses`); the crossover K
from which copying (or prefetching) pays off against reading in place is
derived from those curves per data size (cxlbench.cli.devicecheck.crossovers,
the same arithmetic as the host family's). Every use's sum is checked.

Managed memory is placed by the driver, not by the placement layer: its data
is first touched by the CPUs of the GPU's own node, so managed cases run on
that node's DDR tier only, labelled host_placement="first-touch". A managed
allocation never exceeds the GPU's free memory (oversubscription would
measure eviction, not migration). Each repetition starts from fresh data.
"""
from __future__ import annotations

import os
from contextlib import ExitStack

from dataclasses import dataclass
from typing import Literal

from cxlbench.benchmarks.base import Env, Planned, Show, metrics, node_cpus, sweep
from cxlbench.benchmarks.gpu_common import (
    GpuSpec, first_skip, gpu_initiators, gpu_memory_skip, host_memory_skip, host_tiers, local_host_tier,
    open_session, planned)
from cxlbench.benchmarks.spec import Count, Size
from cxlbench.results.schema import Case, Metric, Sample

NAME = "gpu_zerocopy"
STRATEGIES = ("in_place", "memcpy", "managed_prefetch", "managed_fault")
DEFAULT_SIZES = tuple(k << 10 for k in (64, 1 << 10, 16 << 10, 256 << 10, 1 << 20))
BLOCK, PER_SM = 256, 8          # one launch shape for every strategy

METRICS = metrics(Metric("seconds", "s", "lower"))
SHOW = Show("GPU zero-copy vs copy vs managed", "Time for a GPU to use host data K times: read in "
            "place over the link, copied to HBM first, or as managed memory.", x="uses",
            facets=("data_bytes",))


@dataclass(kw_only=True)
class Spec(GpuSpec):
    strategy: tuple[Literal[STRATEGIES], ...] = STRATEGIES
    data: tuple[Size, ...] = DEFAULT_SIZES
    max_uses: Count = 8
    page: Literal["4k", "thp"] = "4k"


def plan(spec: Spec, env: Env) -> list[Planned]:
    gpus, why = gpu_initiators(env)
    sizes, max_uses = list(spec.data), spec.max_uses
    out: list[Planned] = []
    for gpu in gpus:
        local = local_host_tier(env, gpu)
        for tier in host_tiers(spec, env, gpu):
            for p in sweep(strategy=spec.strategy, data_bytes=sizes):
                params = {**p, "max_uses": max_uses}
                managed = p["strategy"].startswith("managed")
                if managed:
                    params["host_placement"] = "first-touch"
                else:
                    params["page"] = spec.page
                skip = first_skip(why, _cannot(params, tier, gpu, env, local))
                out.append(planned(NAME, gpu, tier, params, spec, skip, _estimate(params, spec)))
    return out


def _cannot(params, tier, gpu, env, local) -> str | None:
    size = params["data_bytes"]
    if size < 4096 or size % 4096:
        return f"data size must be a multiple of 4 KiB, not {size}"
    if params["strategy"].startswith("managed") and (local is None or tier.name != local.name):
        return (f"managed memory is placed by the driver on first touch: measured from the "
                f"GPU's own node ({local.name if local else 'none'}) only")
    need_gpu = size if params["strategy"] != "in_place" else 0
    return host_memory_skip(env, tier, size) or (gpu_memory_skip(env, gpu, need_gpu, 0.8)
                                                 if need_gpu else None)


def _estimate(params: dict, spec: Spec) -> float:
    size = params["data_bytes"]
    prep = size / 2e10 if params["strategy"] != "in_place" else 0
    uses = params["max_uses"] * size / (2e10 if params["strategy"] == "in_place" else 2e12)
    setup = size * 2e-9
    return spec.repetitions * (prep + uses + setup + 0.05)


def measure(case: Case, env: Env, info: dict) -> list[Sample]:
    from cxlbench.gpu import correctness as check
    from cxlbench.gpu.buffers import DeviceBuffer, ManagedBuffer
    from cxlbench.gpu.errors import Unavailable
    from cxlbench.memory.pinned import PinnedHost

    p = case.params
    size, strategy, max_uses = p["data_bytes"], p["strategy"], p["max_uses"]
    words = size // 8
    want = (words * (words - 1) // 2) & ((1 << 64) - 1)      # data word i = i
    tier = env.tier(case.target)
    samples: list[Sample] = []
    with open_session(case, env, info) as s:
        dev, xp = s.dev, s.xp
        stream = s.timer.stream
        grid = PER_SM * dev.sm_count
        for rep in range(case.repetitions):
            with ExitStack() as st:
                partials = st.enter_context(DeviceBuffer(dev, (max_uses + 1) * grid * 8))
                prep = None
                if strategy.startswith("managed"):
                    if not getattr(dev, "concurrent_managed", True):
                        raise Unavailable("the GPU reports no concurrent managed access: managed "
                                          "memory moves whole at each launch here, not by fault "
                                          "or prefetch, so the managed strategies are not measured")
                    data = st.enter_context(ManagedBuffer(dev, size))
                    _touch_on_node(data, words, env, tier)
                    dev.prefetch(data.ptr, size, False, stream)       # every page on the host
                    dev.sync_stream(stream)
                    src, found = data.ptr, {}
                    if strategy == "managed_prefetch":
                        prep = _prefetcher(dev, data.ptr, size)
                else:
                    host = st.enter_context(PinnedHost(dev, size, tier.node, p["page"], mapped=True))
                    dev.launch("cb_fill_words", 4 * dev.sm_count, 256, (host.device, words, 0), stream)
                    dev.sync_stream(stream)
                    src, found = host.device, host.found()
                    if strategy == "memcpy":
                        hbm = st.enter_context(DeviceBuffer(dev, size))
                        src = hbm.ptr
                        prep = _copier(dev, hbm.ptr, host.addr, size)
                check.poison(xp, partials.view("uint64"))
                dev.synchronize()

                def op(k, stream_):
                    if k == 0:
                        if prep is not None:
                            prep(stream_)
                        return
                    dev.launch("cb_load_w16", grid, BLOCK, (src, size // 16, 16, partials.ptr + k * grid * 8),
                               stream_)
                with s.sampler() as smp:
                    timed = s.timer.run(op, iterations=max_uses + 1, ops=1, warmup=0)
                dev.synchronize()
                parts = partials.view("uint64")
                for k in range(1, max_uses + 1):
                    check.expect_sum(check.partial_sum(xp, parts[k * grid:(k + 1) * grid]), want,
                                     f"{strategy}: use {k}")
            params = {**s.params(), **smp.summary(), **found, "spin": timed.spin,
                      "block_threads": BLOCK, "grid_blocks": grid}
            total = 0.0
            for k, sec in enumerate(timed.seconds):
                total += sec
                samples.append(Sample("seconds", total, rep, {**params, "uses": k}))
    return samples


def _prefetcher(dev, ptr: int, size: int):
    return lambda stream: dev.prefetch(ptr, size, True, stream)


def _copier(dev, dst: int, src: int, size: int):
    from cxlbench.gpu.device import MEMCPY_H2D
    return lambda stream: dev.memcpy(dst, src, size, MEMCPY_H2D, stream)


def _touch_on_node(data, words: int, env: Env, tier) -> None:
    """Write the data (word i = i) from the CPUs of the tier's node, so first touch
    places the managed pages there."""
    import numpy as np
    cpus = node_cpus(env, tier.node)                # the ones this process may run on
    before = os.sched_getaffinity(0)
    try:
        if cpus:
            os.sched_setaffinity(0, cpus)
        view = data.array("uint64")
        chunk = 1 << 24
        for lo in range(0, words, chunk):
            hi = min(words, lo + chunk)
            view[lo:hi] = np.arange(lo, hi, dtype=np.uint64)
    finally:
        os.sched_setaffinity(0, before)
