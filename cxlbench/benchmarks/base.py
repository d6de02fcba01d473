"""What a benchmark family is: one module that declares itself whole.

A family module has:

    NAME         its name, equal to its key in benchmarks.FAMILIES
    Spec         a dataclass derived from spec.Spec: the keys its suite table may
                 set, typed, with defaults (a key it does not know is an error)
    METRICS      the Metrics its samples carry (name, unit, better); a sample of
                 any other metric fails its case
    SHOW         how it is shown: title, one-line description, x axis, facets,
                 and the headline figures of the terminal summary and the report
    ONE_PROCESS  optional, True when its repetitions must share one process
    DRIFT        optional, {metric: sentinel probe kind} ("chase", "triad"): which of
                 the run's drift sentinels moves with that metric (benchmarks.sentinel);
                 a suite with such a family gets sentinels unless it says otherwise
    SENTINEL     optional, True for the sentinel family itself: its rows describe the
                 machine's drift during the run, not a result, so headlines, compare
                 and the gate leave them out unless asked
    plan(spec, env) -> list[Planned]        in the runner process
    measure(case, env, info) -> list[Sample]  in a worker process, so a crash
                                            costs one case; `info` takes what it
                                            found (placement checks, CPUs, warnings)

A case that cannot run here is planned with a skip reason (or `measure` raises
Skip): it is recorded with that reason, never measured somewhere else instead.
The runner writes `describe(module)` into run.json, and the summary, the report,
compare and gate read the family from there, never from this code: a run
renders as it was recorded. docs/architecture.md walks through adding one.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any, Callable

from cxlbench.benchmarks.spec import Spec
from cxlbench.results.schema import MOST_VALUE, Case, Metric
from cxlbench.topology.model import Initiator, Machine, Tier


@dataclass(frozen=True)
class Headline:
    """One figure a family contributes per tier to the terminal summary and to the
    report's tier table: of the samples of `metric` that match `where`, one figure
    per value of the `per` parameters, from the case that `pick` chooses:
      "best"            the best median (the metric's `better` says which way)
      "worst"           the worst median
      "largest:<param>" among the cases at the largest value of <param>, the best
                        (the idle latency of a sweep: the far end of its curve,
                        from the nearest initiator when several measured it)
      "each"            every case, one line each
    `label` is formatted with the chosen case's parameters ({threads}, {page};
    sizes as 1GiB); `column` names its column in the report's tier table. The
    spread shown beside the median is over repetitions, or over the case's samples
    with spread = "samples" (the steady steps of one training run); `trend` names a
    metric shown from the case's first sample to its last (the loss); `floor` names
    the case's metric for the machine's own share of this one (a tail's L1 floor,
    measured in the same repetitions): the figure says whether it stands above it."""
    label: str
    metric: str
    column: str = ""
    where: dict[str, Any] = field(default_factory=dict)
    per: tuple[str, ...] = ()
    pick: str = "best"
    scale: float = 1.0                # value shown = value x scale, in `unit`
    unit: str = ""                    # default: the metric's own
    digits: int = 2
    count: bool = False               # shown as 16.8M
    spread: str = "repetitions"
    trend: str = ""
    floor: str = ""


@dataclass(frozen=True)
class Show:
    """How a family is shown. `x`: the parameter its charts put on the x axis
    (None: the first numeric parameter that varies); `facets`: parameters that
    split its charts (one chart per value) before series are drawn; `pair`: two
    metrics measured at the same points, drawn one against the other instead."""
    title: str
    description: str
    x: str | None = None
    facets: tuple[str, ...] = ()
    headlines: tuple[Headline, ...] = ()
    pair: tuple[str, str] | None = None   # (x metric, y metric) measured at the same points


def metrics(*declared: Metric) -> dict[str, Metric]:
    return {m.name: m for m in declared}


def describe(module: ModuleType) -> dict[str, Any]:
    """The family's self-description as run.json records it."""
    show: Show = module.SHOW
    return {"name": module.NAME, "title": show.title, "description": show.description,
            "x": show.x, "facets": list(show.facets), "pair": list(show.pair) if show.pair else None,
            "headlines": [asdict(h) for h in show.headlines],
            "metrics": {m.name: {"unit": m.unit, "better": m.better} for m in module.METRICS.values()},
            "one_process": bool(getattr(module, "ONE_PROCESS", False)),
            "drift": dict(getattr(module, "DRIFT", {})), "sentinel": bool(getattr(module, "SENTINEL", False))}


class UndeclaredMetric(Exception):
    """A family measured a metric it does not declare: its case fails, never the run."""


def check_metrics(samples: list, module: ModuleType) -> list:
    """The samples, each of a metric the family declares and a finite value within
    MOST_VALUE: a case that measured otherwise fails, its run does not."""
    for s in samples:
        if s.metric not in module.METRICS:
            raise UndeclaredMetric(f"{module.NAME} measured {s.metric!r}, which it does not declare "
                                   f"in METRICS ({', '.join(module.METRICS) or 'none'})")
        if not abs(s.value) <= MOST_VALUE:            # NaN fails this too
            raise UndeclaredMetric(f"{module.NAME} measured {s.metric} = {s.value!r}: not a figure "
                                   f"(not finite, or past {MOST_VALUE:g})")
    return samples


class Skip(Exception):
    """The case cannot be measured here; the message says why."""


@dataclass
class Planned:
    case: Case
    skip: str | None = None          # reason, when the case cannot run here
    estimate_s: float = 1.0          # expected wall time, for progress and budget
    processes: int = 1               # workers the repetitions are spread over (the runner sets it)
    family: str = ""                 # how the runner found the family (registry key or module path)
    spec: Spec | None = None         # the table it was planned from (the runner sets these)
    one_process: bool = False        # the family's ONE_PROCESS: never another process


@dataclass
class Env:
    """The machine as the runner sees it, given to plan() and measure()."""
    machine: Machine
    tiers: dict[str, Tier]
    initiators: dict[str, Initiator]
    suite: dict[str, Any] = field(default_factory=dict)   # suite-level settings
    root: str = "/"
    # In measure(): the settings of the case's table (the runner sets them; code that
    # measures a case directly gets the common defaults).
    spec: Spec = field(default_factory=lambda: Spec(name=""))

    def tier(self, name: str) -> Tier:
        return self.tiers[name]

    def initiator(self, name: str) -> Initiator:
        return self.initiators[name]


def as_list(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def node_cpus(env: Env, node: int | None) -> list[int]:
    """The CPUs of a node this process may run on (its CPU initiator's), none where it
    may use none of them or the node has no CPUs."""
    init = env.initiators.get(f"cpu:node{node}")
    return [] if init is None or init.not_allowed else list(init.cpus)


def free_memory(env: Env, node: int | None) -> tuple[int, str] | None:
    """(bytes a case may take from a node, what bounds it): the node's free memory, or
    less where this process's memory cgroup (a pod's, a job's) leaves less. Sized from
    the node alone, a case is killed by the cgroup's OOM killer mid-measurement instead
    of being skipped with the reason before it runs. None: no such node."""
    n = env.machine.nodes.get(node) if node is not None else None
    if n is None:
        return None
    e = env.machine.environment
    if e.memory_limit_free_bytes is not None and e.memory_limit_free_bytes < n.mem_free_bytes:
        return e.memory_limit_free_bytes, _limit_left(e)
    return n.mem_free_bytes, f"node {node}'s free memory"


def _limit_left(e) -> str:
    return (f"what this process's memory limit leaves free ({e.memory_limit_free_bytes >> 20} MiB free of its "
            f"cgroup's {e.memory_limit_bytes >> 20} MiB)")


def limit_short(env: Env, need: int, share: float = 0.8) -> str | None:
    """Why a case spreading `need` bytes over several nodes is not run: more than `share`
    of what this process's memory cgroup leaves free, which caps the total, not a node."""
    e = env.machine.environment
    if e.memory_limit_free_bytes is None or need <= e.memory_limit_free_bytes * share:
        return None
    return f"needs {need >> 20} MiB in all, more than {share:.0%} of {_limit_left(e)}"


def memory_short(env: Env, node: int | None, need: int, share: float = 0.8, on: str = "") -> str | None:
    """Why a case needing `need` bytes on a node is not run: more than `share` of
    what it may take there (free_memory); None when it fits."""
    free = free_memory(env, node)
    if free is None or need <= free[0] * share:
        return None
    return f"needs {need >> 20} MiB{f' on {on}' if on else ''}, more than {share:.0%} of {free[1]}"


def host_pairs(spec: Spec, env: Env) -> list[tuple[Initiator, Tier]]:
    """The CPU-initiator × host-tier matrix a spec asks for.

    spec.initiators: "all" (every node with CPUs, MLC's matrix) or "local" (each tier
    only from the CPUs of its own node, or from node 0's for CPU-less tiers).
    spec.tiers: tier kinds or names to include.
    """
    wanted = set(spec.tiers)
    tiers = [t for t in env.tiers.values()
             if t.is_host_memory and (t.kind in wanted or t.name in wanted)]
    cpus = [i for i in env.initiators.values() if i.kind == "cpu"]
    if spec.initiators == "all":
        return [(i, t) for t in tiers for i in cpus]
    pairs = []
    for t in tiers:
        local = [i for i in cpus if i.node == t.node] or _nearest(cpus, t, env.machine)
        pairs.extend((i, t) for i in local[:1])
    return pairs


def _nearest(cpus: list[Initiator], tier: Tier, machine: Machine) -> list[Initiator]:
    """CPU-less tiers are reached from the CPU node the firmware says is closest."""
    node = machine.nodes.get(tier.node)
    if node is None or not cpus:
        return cpus[:1]
    return sorted(cpus, key=lambda i: node.distances.get(i.node, 1 << 30))[:1]


def sweep(**axes) -> list[dict[str, Any]]:
    """Cartesian product of parameter axes, in the order given (first axis outermost)."""
    points: list[dict[str, Any]] = [{}]
    for name, values in axes.items():
        points = [{**p, name: v} for p in points for v in as_list(values)]
    return points


def place(length: int, node: int, page: str = "4k"):
    """memory.allocate(), with a buffer that cannot be placed as the case asks (no
    such memory, too little free, huge pages not reserved) raised as a Skip with the
    reason: recorded, never measured somewhere else."""
    from cxlbench.memory import PlacementError, allocate
    try:
        return allocate(length, node, page=page)
    except PlacementError as e:
        raise Skip(str(e)) from None


def placement_found(*bufs) -> dict[str, Any]:
    """What the kernel gave the case's buffers, for its samples: the smallest page
    size, huge-page coverage and physical contiguity among them (contiguity None
    when the kernel hides the frames from this process)."""
    contiguity = [b.phys_contiguity for b in bufs]
    return {"page_bytes": min(b.page_bytes_found for b in bufs),
            "huge_coverage": min(b.huge_coverage for b in bufs),
            "phys_contiguity": None if None in contiguity else round(min(contiguity), 4)}


def cpu_held(threads: int, fn: Callable, *args) -> tuple[Any, float]:
    """Run fn(*args) (a timed native loop on `threads` threads of this process) and
    return its result with the fraction of the wall time those threads held a CPU.
    Below 1, something else ran on our CPUs (another process, or the hypervisor:
    with steal-time accounting a guest's CPU clocks exclude stolen time), and the
    wall-clock figure counts that as memory time. Stored with each sample, it lets
    a comparison refuse to call a change that interference can explain."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn(*args)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return result, min(cpu / (wall * threads), 1.0) if wall > 0 else 1.0
