"""What a benchmark family is: it plans cases for a machine and measures one case.

A family is a module with NAME, `plan(spec, env) -> list[Planned]` and
`measure(case, env) -> list[Sample]`. Planning runs in the runner process;
measuring runs in a worker process, so a crash costs one case. A case that
cannot run here is planned with a skip reason (or `measure` raises Skip):
it is recorded with that reason, never measured somewhere else instead.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from cxlbench.results.schema import Case
from cxlbench.topology.model import Initiator, Machine, Tier


class Skip(Exception):
    """The case cannot be measured here; the message says why."""


@dataclass
class Planned:
    case: Case
    skip: str | None = None          # reason, when the case cannot run here
    estimate_s: float = 1.0          # expected wall time, for progress and budget
    processes: int = 1               # workers the repetitions are spread over (the runner sets it)


@dataclass
class Env:
    """The machine as the runner sees it, given to plan() and measure()."""
    machine: Machine
    tiers: dict[str, Tier]
    initiators: dict[str, Initiator]
    suite: dict[str, Any] = field(default_factory=dict)   # suite-level settings
    root: str = "/"

    def tier(self, name: str) -> Tier:
        return self.tiers[name]

    def initiator(self, name: str) -> Initiator:
        return self.initiators[name]


def as_list(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def host_pairs(spec: dict, env: Env) -> list[tuple[Initiator, Tier]]:
    """The CPU-initiator × host-tier matrix a spec asks for.

    spec["initiators"]: "all" (every node with CPUs, MLC's matrix) or "local" (each tier
    only from the CPUs of its own node, or from node 0's for CPU-less tiers).
    spec["tiers"]: tier kinds or names to include (default: every host tier).
    """
    wanted = set(as_list(spec.get("tiers", ["ddr", "cxl"])))
    tiers = [t for t in env.tiers.values()
             if t.is_host_memory and (t.kind in wanted or t.name in wanted)]
    cpus = [i for i in env.initiators.values() if i.kind == "cpu"]
    if spec.get("initiators", "local") == "all":
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


def sweep(spec: dict, **axes) -> list[dict[str, Any]]:
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
