"""Drift sentinels: a few cheap reference cases measured again and again through a run.

On a shared machine the whole host drifts: for a minute its DRAM is slower, its
last-level cache smaller, its memory bandwidth shared with a neighbour. One run
cannot see that in its own cases, each measured once in a few processes. So a
run visits three reference probes at its start, every `interval_s` of run time
between cases, and at its end, and keeps every sample with its time since the
run started (`t_s`): the run's own drift trace.

    l1_chase    a pointer chase inside the L1 (16 KiB): the core's clock and the
                hypervisor's scheduling, nothing of memory
    dram_chase  a chase at 4x the caches (STREAM's size rule): DRAM latency and the
                page walks that go with it
    triad       one-thread triad over three arrays that together hold ~4x the
                caches: one core's share of the memory bandwidth

They reuse the latency family's chase and the bandwidth family's STREAM kernels.
Unlike a case's repetitions, the visits deliberately share one buffer each, held
by one long-lived probe process (runner.sentinels) for the whole run: a fresh
buffer would add page-placement spread, and the trace is meant to show time, not
placement. Each visit costs only its timed samples (about half a second in all);
it never runs beside a case.

A family declares which sentinel moves with its metrics (`DRIFT`); compare and
gate may judge a case relative to it (analysis.drift) where A/A evidence on the
machine says that is quieter. The sentinel rows themselves are a reference, not a
result (`SENTINEL`): headlines, compare and gate leave them out.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Annotated, Literal

from cxlbench.benchmarks import bandwidth, latency
from cxlbench.benchmarks.base import (Env, Planned, Show, cpu_held, free_memory, host_pairs, metrics, place,
                                      placement_found)
from cxlbench.benchmarks.sizes import Page, array_bytes, stream_array_bytes
from cxlbench.benchmarks.spec import Count, Size, Spec as BaseSpec, at_least
from cxlbench.results.schema import Case, Metric, Sample

NAME = "sentinel"
SENTINEL = True
METRICS = metrics(Metric("latency_ns", "ns", "lower"), Metric("bandwidth_GBps", "GB/s", "higher"))
SHOW = Show(
    "Drift sentinels", "Three reference probes measured at the start of the run, between cases every "
    "interval and at the end, on one buffer each: every visit's value relative to the probe's median "
    "over the run, against the time since the run started (above zero: a chase slower, triad faster than "
    "its median). A flat line: the machine held still; a step or a slope: every case measured then moved "
    "with it.",
    x="t_s", facets=("probe",))

Probe = Literal["l1_chase", "dram_chase", "triad"]


@dataclass(kw_only=True)
class Spec(BaseSpec):
    tiers: tuple[str, ...] = ("ddr",)
    repetitions: Count = 1                     # visits, when measured as an ordinary case
    probes: tuple[Probe, ...] = ("l1_chase", "dram_chase", "triad")
    l1_working_set: Size = 16 << 10
    dram_working_set: Size | Literal["auto"] = "auto"     # auto: 4x the caches, as STREAM's arrays
    triad_array: Size | Literal["auto"] = "auto"          # each of three; auto: the three hold ~4x the caches
    page: Page = "4k"
    samples: Count = 3                         # timed samples per probe per visit
    interval_s: Annotated[float, at_least(0)] = 30   # run time between visits (runner.sentinels); 0: every process


def plan(spec: Spec, env: Env) -> list[Planned]:
    """One case per probe, on the first DDR tier from its local CPUs."""
    pairs = [(i, t) for i, t in host_pairs(spec, env) if not i.not_allowed]   # CPUs it may run on
    if not pairs:
        return []
    initiator, tier = pairs[0]
    big = array_bytes(spec.dram_working_set, env.machine)
    triad = array_bytes(spec.triad_array, env.machine) if spec.triad_array != "auto" else \
        max(64 << 20, stream_array_bytes(env.machine) // 4)
    planned = []
    for probe in spec.probes:
        if probe == "triad":
            params = {"probe": probe, "array_bytes": triad, "threads": 1, "page": spec.page}
        else:
            ws = spec.l1_working_set if probe == "l1_chase" else big
            params = {"probe": probe, "working_set_bytes": ws, "page": spec.page}
        case = Case(NAME, initiator.name, tier.name, tier.kind, params, spec.repetitions, 1)
        planned.append(Planned(case, None, 0.3 + spec.samples * spec.min_sample_s))
    held = sum(held_bytes(p.case.params) for p in planned)
    free = free_memory(env, tier.node)
    if free is not None and held > free[0] * 0.25:
        why = f"the sentinels would hold {held >> 20} MiB for the whole run, more than a quarter of {free[1]}"
        for p in planned:
            p.skip = why
    return planned


def held_bytes(params: dict) -> int:
    """What a probe keeps allocated for the whole run."""
    return 3 * params["array_bytes"] if params["probe"] == "triad" else params["working_set_bytes"]


def measure(case: Case, env: Env, info: dict) -> list[Sample]:
    """As an ordinary case: a probe of its own, visited `repetitions` times."""
    with Sentinels([case], env, time.monotonic(), info) as probe:
        return [s for visit in range(case.repetitions) for s in probe.visit(visit)[case.case_id]]


class Sentinels:
    """The probes' buffers, built once (chains laid, arrays faulted in, chase steps
    calibrated to last the sample time) and visited again and again. `start`: the
    run's start on the monotonic clock (the same clock in every process), from
    which each sample's t_s is counted."""

    def __init__(self, cases: list[Case], env: Env, start: float, info: dict):
        from cxlbench import _native
        self.cases, self.start, self.env = cases, start, env
        self.sample_s = max(env.spec.min_sample_s / 2, 0.005)
        self.samples = getattr(env.spec, "samples", 3)
        self.buffers, self.state = [], {}
        initiator = env.initiator(cases[0].initiator)
        self.cpu = initiator.cpus[0]
        os.sched_setaffinity(0, [self.cpu])
        info["cpu"] = self.cpu
        try:
            for case in cases:
                p, node = case.params, env.tier(case.target).node
                if p["probe"] == "triad":
                    bufs = [place(p["array_bytes"], node, p["page"]) for _ in range(3)]
                    self.buffers += bufs
                    found = placement_found(*bufs)
                    self.state[case.case_id] = (bufs, found)
                else:
                    buf = place(p["working_set_bytes"], node, p["page"])
                    self.buffers.append(buf)
                    heads = _native.chase_init(buf.addr, p["working_set_bytes"], latency.LINE, 0, 1, 1)
                    steps = latency._calibrate(heads, self.sample_s, warmup=1)
                    found = {**placement_found(buf), "steps": steps}
                    self.state[case.case_id] = (heads, found)
        except BaseException:
            self.close()
            raise

    def visit(self, number: int) -> dict[str, list[Sample]]:
        """One visit: each probe warmed (the cases since the last visit evicted it)
        and timed `samples` times; the samples are repetition `number`."""
        from cxlbench import _native
        out = {}
        for case in self.cases:
            p = case.params
            t_s = round(time.monotonic() - self.start, 3)
            if p["probe"] == "triad":
                bufs, found = self.state[case.case_id]
                samples = bandwidth.time_kernel("triad", bufs, p["array_bytes"], [self.cpu], False, 1,
                                                self.samples, number, {**found, "t_s": t_s})
            else:
                heads, found = self.state[case.case_id]
                _native.chase_run(heads, found["steps"])              # warm-up
                samples = []
                for i in range(self.samples):
                    elapsed_ns, held = cpu_held(1, _native.chase_run, heads, found["steps"])
                    samples.append(Sample("latency_ns", elapsed_ns / found["steps"], number,
                                          {**found, "t_s": t_s, "iteration": i,
                                           "cpu_held": round(held, 4)}))
            out[case.case_id] = samples
        return out

    def close(self) -> None:
        for b in self.buffers:
            b.close()
        self.buffers = []

    def __enter__(self) -> "Sentinels":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
