"""Stride: dependent loads to lines `stride` bytes apart, in random order, over a
fixed working set — how the cost of a load grows as fewer lines share a page.

At a 64-byte stride every line of every page is visited, so most loads find their
translation in the TLB (64 lines a 4 KiB page); at 4 KiB each load is on a page
of its own, so with 4 KiB pages each one misses the TLB and pays a page walk
(through the nested page tables, in a VM), while with 2 MiB pages it does not.
The difference between the page sizes at a large stride is the page walk's cost.
The timed loop is the latency family's chase (the C core's chase_init/chase_run)
with its line size set to the stride.

This family is also docs/architecture.md's worked example of adding a family.
"""
from __future__ import annotations

from dataclasses import dataclass

from cxlbench.benchmarks import latency
from cxlbench.benchmarks.base import Env, Headline, Planned, Show, host_pairs, metrics, sweep
from cxlbench.benchmarks.sizes import Page
from cxlbench.benchmarks.spec import Size
from cxlbench.benchmarks.spec import Spec as BaseSpec
from cxlbench.results.schema import Case, Metric, Sample

NAME = "stride"
#: The drift sentinel that moves with each metric (benchmarks.sentinel).
DRIFT = {"latency_ns": "chase"}
METRICS = metrics(Metric("latency_ns", "ns", "lower"))
SHOW = Show(
    "Stride", "Dependent loads in random order to lines a stride apart over a fixed working set: "
    "ns per load over the stride (log₂ axis), one line per tier × page size.",
    x="stride_bytes",
    headlines=(Headline("latency at a {stride_bytes} stride, {page} pages", "latency_ns",
                        column="latency, largest stride", per=("page",), pick="largest:stride_bytes",
                        digits=1),))


@dataclass(kw_only=True)
class Spec(BaseSpec):
    stride: tuple[Size, ...] = (64, 256, 1 << 10, 4 << 10)
    working_set: Size = 256 << 20
    page: tuple[Page, ...] = ("4k", "thp")


def plan(spec: Spec, env: Env) -> list[Planned]:
    planned = []
    for initiator, tier in host_pairs(spec, env):
        for p in sweep(page=spec.page, stride_bytes=spec.stride):
            params = {**p, "working_set_bytes": spec.working_set}
            case = Case(NAME, initiator.name, tier.name, tier.kind, params, spec.repetitions, spec.warmup)
            planned.append(Planned(case, _cannot(params, tier, env), _estimate(params, spec)))
    return planned


def _cannot(params: dict, tier, env: Env) -> str | None:
    stride, ws = params["stride_bytes"], params["working_set_bytes"]
    if stride < 8 or stride % 8:
        return f"a stride is a multiple of 8 bytes (one pointer), not {stride}"
    if ws // stride < 2:
        return f"a {ws} B working set holds fewer than two lines {stride} B apart"
    return latency._cannot(params, tier, env)          # memory and huge pages, as the chase's


def _estimate(params: dict, spec: Spec) -> float:
    """As a latency case: the timed runs, and building the chain over its lines."""
    lines = params["working_set_bytes"] // params["stride_bytes"]
    return 0.3 + spec.repetitions * ((spec.warmup + 1) * spec.min_sample_s + lines * 2e-7)


def measure(case: Case, env: Env, info: dict) -> list[Sample]:
    return latency.chase(case, env, info, line_bytes=case.params["stride_bytes"])
