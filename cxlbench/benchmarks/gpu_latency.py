"""GPU pointer-chase latency: one GPU thread, dependent loads, in ns and in cycles.

Targets: the GPU's own HBM over working sets from the L1 to several GiB, and
each host tier (DDR, CXL) read in place through page-locked, device-mapped
memory (zero-copy) — the latency a GPU pays to reach DDR vs CXL.

One kernel launch (cb_chase) follows a single random cycle (cxlbench.gpu.chase):
`warm` untimed loads (the whole chain when it fits in the L2, so cache levels
are measured warm), then `steps` loads timed inside the kernel by %clock64
(cycles) and %globaltimer (ns), sized to last ~2 ms. Host tiers use
ld.global.cv loads (never answered from a cache: every load crosses the link).
The stride sets the spacing of the chased lines: 64 B for the caches; the
page size (2 MiB) or more makes every load touch a new page, so the knees of
the curve are the TLB levels' reach, as in the Volta/Hopper dissection papers.

Samples per repetition: latency_ns and cycles (ns and cycles per load), with
the clock the device ran at (cycles / ns, `clock_mhz_effective`) and the SM
clock NVML read during the case (`sm_clock_mhz`). The kernel's final address
is checked against the chain, so a chase that skipped loads is refused.
Each repetition builds a fresh chain (new permutation) in a fresh buffer.
"""
from __future__ import annotations

from contextlib import ExitStack

from dataclasses import dataclass
from typing import Literal

from cxlbench.benchmarks.base import Env, Headline, Planned, Show, metrics, sweep
from cxlbench.benchmarks.gpu_common import (
    HOST_KINDS, GpuSpec, first_skip, gpu_initiators, gpu_memory_skip, hbm_tier, host_memory_skip,
    host_tiers, open_session, planned, to_host, wants_hbm)
from cxlbench.benchmarks.sizes import Page
from cxlbench.benchmarks.spec import Size
from cxlbench.results.schema import Case, Metric, Sample

NAME = "gpu_latency"
DEFAULT_SIZES = tuple(k << 10 for k in (16, 64, 256, 1 << 10, 4 << 10, 16 << 10, 32 << 10, 64 << 10,
                                        256 << 10, 1 << 20, 4 << 20))
TARGET_S = 2e-3                  # the timed loop's length
WARM_CAP = 1 << 16               # untimed loads when the chain outgrows the L2
MIN_STEPS = {"ca": 1 << 15, "cv": 1 << 10}
MAX_STEPS = 1 << 24
PROBE_STEPS = 256

METRICS = metrics(Metric("latency_ns", "ns", "lower"), Metric("cycles", "cycles", "lower"))
SHOW = Show("GPU latency", "A GPU's dependent loads over its own memory (HBM) and over host memory "
            "it reads directly: ns and cycles per load over the working set.",
            x="working_set_bytes", facets=("pattern",),
            headlines=(Headline("GPU latency, {working_set_bytes} working set", "latency_ns",
                                column="GPU latency", where={"pattern": "random"},
                                pick="largest:working_set_bytes", digits=1),))


@dataclass(kw_only=True)
class Spec(GpuSpec):
    working_set: tuple[Size, ...] = DEFAULT_SIZES
    stride: tuple[Size, ...] = (64,)
    pattern: tuple[Literal["random", "sequential"], ...] = ("random",)
    page: tuple[Page, ...] = ("4k",)          # host tiers' pages


def plan(spec: Spec, env: Env) -> list[Planned]:
    gpus, why = gpu_initiators(env)
    sizes, strides = list(spec.working_set), list(spec.stride)
    out = []
    for gpu in gpus:
        targets = ([hbm_tier(env, gpu)] if wants_hbm(spec) else []) + host_tiers(spec, env, gpu)
        for tier in targets:
            host = tier.kind in HOST_KINDS
            for p in sweep(pattern=spec.pattern, stride_bytes=strides, page=spec.page if host else [None],
                           working_set_bytes=sizes):
                params = {"pattern": p["pattern"], "stride_bytes": p["stride_bytes"],
                          "working_set_bytes": p["working_set_bytes"], "load": "cv" if host else "ca"}
                if host:
                    params["page"] = p["page"]
                out.append(planned(NAME, gpu, tier, params, spec,
                                   first_skip(why, _cannot(params, tier, gpu, env)),
                                   _estimate(params, spec)))
    return out


def _cannot(params: dict, tier, gpu, env: Env) -> str | None:
    ws, stride = params["working_set_bytes"], params["stride_bytes"]
    if stride < 8 or stride % 8:
        return f"the stride must be a multiple of 8 bytes, not {stride}"
    if ws // stride < 2:
        return f"a {ws} B working set holds fewer than 2 lines {stride} B apart"
    if "page" in params:
        return host_memory_skip(env, tier, ws)
    return gpu_memory_skip(env, gpu, ws + 24 * (ws // stride))    # + the permutation's temporaries


def _estimate(params: dict, spec: Spec) -> float:
    n = params["working_set_bytes"] // params["stride_bytes"]
    host = "page" in params
    build = n * (6e-8 if host else 2e-9)
    per_load = 1.5e-6 if host else 5e-7
    warm = (min(n, WARM_CAP) if host or n * params["stride_bytes"] > 64 << 20 else n) * per_load
    timed = max(TARGET_S, MIN_STEPS["cv" if host else "ca"] * per_load)
    return spec.repetitions * (build + 2 * warm + timed + 0.05)


def measure(case: Case, env: Env, info: dict) -> list[Sample]:
    import numpy as np

    from cxlbench.gpu import chase
    from cxlbench.gpu.buffers import DeviceBuffer
    from cxlbench.gpu.errors import WrongResult
    from cxlbench.memory.pinned import PinnedHost

    p = case.params
    ws, stride = p["working_set_bytes"], p["stride_bytes"]
    n = chase.nodes(ws, stride)
    host = case.tier_kind in HOST_KINDS
    kernel = "cb_chase_cv" if p["load"] == "cv" else "cb_chase"
    samples: list[Sample] = []
    with open_session(case, env, info) as s:
        dev, xp = s.dev, s.xp
        out = s.enter(DeviceBuffer(dev, 64))
        out_words = out.view("uint64", 0, 24)
        for rep in range(case.repetitions):
            with ExitStack() as stack:
                if host:
                    buf = stack.enter_context(PinnedHost(dev, ws, env.tier(case.target).node, p["page"]))
                    words, base, mod = buf.array("uint64", 0, ws), buf.device, np
                    found = buf.found()
                else:
                    dbuf = stack.enter_context(DeviceBuffer(dev, ws))
                    words, base, mod = dbuf.view("uint64", 0, ws), dbuf.ptr, xp
                    found = {}
                visit = chase.order(n, p["pattern"], case.seed(rep), mod)
                start = chase.link(words, base, visit, stride, mod)
                dev.synchronize()
                fits = not host and ws <= dev.l2_bytes
                warm = n if fits or n <= WARM_CAP else WARM_CAP

                def launch(w, steps):
                    return lambda k, stream: dev.launch(kernel, 1, 1, (start, w, steps, out.ptr), stream)

                s.timer.run(launch(min(warm, 1024), PROBE_STEPS), iterations=1, ops=1, warmup=0,
                            spin=False)
                probe_ns = _host_words(xp, out_words)[1] / PROBE_STEPS
                steps = int(min(MAX_STEPS, max(MIN_STEPS[p["load"]], TARGET_S * 1e9 / max(probe_ns, 1.0))))
                with s.sampler() as sampler:
                    timed = s.timer.run(launch(warm, steps), iterations=1, ops=1, warmup=0, spin=False)
                cycles, ns, final = _host_words(xp, out_words)
                want = chase.expected(base, visit, stride, warm + steps)
                del visit
                if final != want:
                    raise WrongResult(f"the chase ended at {final:#x}, not {want:#x}: it did not follow "
                                      f"the chain for {warm + steps} loads")
                launch_ns = timed.seconds[0] * 1e9
                if ns <= 0 or cycles <= 0 or ns > launch_ns * 1.05 + 10_000:
                    raise WrongResult(f"the device timers disagree: {ns} ns and {cycles} cycles in a "
                                      f"launch that took {launch_ns:.0f} ns by events")
            params = {**s.params(), **sampler.summary(), **found, "steps": steps, "warm_steps": warm,
                      "clock_mhz_effective": cycles / ns * 1e3}
            samples.append(Sample("latency_ns", ns / steps, rep, params))
            samples.append(Sample("cycles", cycles / steps, rep, params))
    return samples


def _host_words(xp, words) -> tuple[int, int, int]:
    values = to_host(words)
    return int(values[0]), int(values[1]), int(values[2])
