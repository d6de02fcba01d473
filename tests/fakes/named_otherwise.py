"""A plugin family whose NAME is not its module path: its cases are named "otherwise"
and the runner still finds its module for every one of them."""
from dataclasses import dataclass

from cxlbench.benchmarks.base import Planned, Show, metrics
from cxlbench.benchmarks.spec import Spec as BaseSpec
from cxlbench.results.schema import Case, Metric, Sample

NAME = "otherwise"
METRICS = metrics(Metric("seconds", "s", "lower"))
SHOW = Show("Named otherwise", "A plugin registered by its module path.")


@dataclass(kw_only=True)
class Spec(BaseSpec):
    pass


def plan(spec, env):
    return [Planned(Case(NAME, "cpu:node0", "ddr0", "ddr", {}, spec.repetitions, 0), estimate_s=0.1)]


def measure(case, env, info):
    return [Sample("seconds", 1.0 + r, r) for r in range(case.repetitions)]
