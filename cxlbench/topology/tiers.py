"""Tiers (where bytes can live) and initiators (who reads them), from a Machine.

Discovery classifies what the kernel shows; a user's declaration replaces the
classification of one node, or adds an nvme scratch directory, and is recorded
on the tier. NVMe tiers are never discovered: a tier is a directory we may
fill with many GB, and only the user can say which one that is.
"""
from __future__ import annotations

import os
import shutil

from .model import Machine, Node, Tier, TierDeclaration, Initiator
from .block_devices import block_device_for
from cxlbench.units import format_cpulist
from .sysfs import read_cpulist

HOST_KINDS = ("ddr", "cxl")
DECLARABLE = HOST_KINDS + ("nvme",)


def parse_tier_declaration(text: str) -> TierDeclaration:
    """"cxl=node:1", "ddr=node:0", "nvme=/mnt/scratch" -> TierDeclaration.

    Raises ValueError with one sentence naming what is wrong. Whether a node
    exists is checked against a machine by classify_tiers (check_declaration).
    """
    kind, sep, spec = (part.strip() for part in text.partition("="))
    kind = kind.lower()
    if not sep or not kind or not spec:
        raise ValueError(f"tier declaration {text!r} is not KIND=SPEC, e.g. cxl=node:1 or nvme=/mnt/scratch")
    if kind not in DECLARABLE:
        raise ValueError(f"unknown tier kind {kind!r} in {text!r}: declare one of {', '.join(DECLARABLE)}"
                         " (hbm tiers come from the GPUs found)")
    if kind == "nvme":
        return TierDeclaration(text=text, kind=kind, path=nvme_path(text, spec))
    return TierDeclaration(text=text, kind=kind, node=node_spec(text, kind, spec))


def node_spec(text: str, kind: str, spec: str) -> int:
    prefix, _, number = spec.partition(":")
    if prefix != "node" or not number.isdigit():
        raise ValueError(f"a {kind} tier is declared by NUMA node, as {kind}=node:N, not {text!r}")
    return int(number)


def nvme_path(text: str, spec: str) -> str:
    path = os.path.abspath(os.path.expanduser(spec))
    if not os.path.isdir(path):
        raise ValueError(f"the nvme tier in {text!r} must be an existing directory, and {path} is not one")
    return path


def check_declaration(decl: TierDeclaration, machine: Machine) -> None:
    """A host-tier declaration must name a node of this machine that has memory."""
    if decl.node is None:
        return
    node = machine.nodes.get(decl.node)
    if node is None:
        known = ", ".join(str(n) for n in sorted(machine.nodes)) or "none"
        raise ValueError(f"node {decl.node} in {decl.text!r} does not exist: this machine has nodes {known}")
    if not node.has_memory:
        raise ValueError(f"node {decl.node} in {decl.text!r} has no memory to hold a tier")


def as_declarations(declarations, machine: Machine) -> list[TierDeclaration]:
    """Parse (strings) and check declarations; each node and each directory at most once."""
    decls = [parse_tier_declaration(d) if isinstance(d, str) else d for d in declarations]
    seen: dict[object, str] = {}
    for decl in decls:
        check_declaration(decl, machine)
        key = decl.node if decl.node is not None else decl.path
        if key in seen:
            raise ValueError(f"{decl.text!r} declares again what {seen[key]!r} already declared")
        seen[key] = decl.text
    return decls


def cxl_regions_of(machine: Machine, node: int) -> list[str]:
    """Why a node is CXL: the regions onlined as it, e.g. "region0 (ram, 1-way, from mem0)"."""
    return [f"{r.name} ({r.mode or 'mode ?'}, {r.interleave_ways or '?'}-way, "
            f"from {', '.join(r.memdevs) or 'unknown memdevs'})"
            for r in machine.cxl_regions if r.numa_node == node]


def cpu_node_tiers(machine: Machine) -> set[int]:
    return {n.memory_tier for n in machine.nodes.values() if n.has_cpu and n.memory_tier is not None}


def discover(machine: Machine, node: Node) -> tuple[str, str]:
    """(kind, evidence) for a node with memory, from what sysfs shows."""
    regions = cxl_regions_of(machine, node.id)
    if node.has_cpu:
        return "ddr", f"DRAM of the node holding CPUs {format_cpulist(node.cpus)}"
    if regions:
        return "cxl", f"CXL {'; '.join(regions)} onlined as node {node.id}"
    evidence = (f"CPU-less node {node.id} that no CXL region under /sys/bus/cxl onlines: taken as DRAM "
                f"(a memory-only node; if it is CXL that firmware set up, declare cxl=node:{node.id})")
    slower = cpu_node_tiers(machine)
    if node.memory_tier is not None and slower and node.memory_tier > max(slower):
        evidence += (f"; note the kernel ranks it slower (memory_tier{node.memory_tier}, "
                     f"CPU nodes in memory_tier{max(slower)})")
    return "ddr", evidence


def host_tier(machine: Machine, node: Node, decl: TierDeclaration | None) -> Tier:
    kind, evidence = discover(machine, node)
    declared = None
    if decl is not None:
        evidence = f"declared {decl.text}; discovery said {kind}{node.id}: {evidence}"
        kind, declared = decl.kind, decl.text
    return Tier(name=f"{kind}{node.id}", kind=kind, node=node.id,
                capacity_bytes=node.mem_total_bytes, free_bytes=node.mem_free_bytes,
                declared=declared, evidence=evidence)


def gpu_tiers(machine: Machine) -> list[Tier]:
    tiers = []
    for gpu in machine.gpus:
        known = "" if gpu.memory_bytes else "; capacity unknown without NVML or torch"
        tiers.append(Tier(name=f"hbm{gpu.index}", kind="hbm", gpu=gpu.index,
                          capacity_bytes=gpu.memory_bytes, free_bytes=gpu.memory_free_bytes or 0,
                          evidence=f"memory of GPU {gpu.index} ({gpu.name}, via {gpu.source}){known}"))
    return tiers


def device_evidence(path: str) -> str:
    device = block_device_for(path)
    if device is None:
        return "on no block device (tmpfs, overlay or a network filesystem)"
    model = f" ({device.model})" if device.model else ""
    return f"on {device.name}{model}" + ("" if device.is_nvme else ", which is not an NVMe device")


def nvme_tier(index: int, decl: TierDeclaration) -> Tier:
    usage = shutil.disk_usage(decl.path)
    return Tier(name=f"nvme{index}", kind="nvme", path=decl.path, capacity_bytes=usage.total,
                free_bytes=usage.free, declared=decl.text,
                evidence=f"declared {decl.text}; {device_evidence(decl.path)}")


def classify_tiers(machine: Machine, declarations=()) -> list[Tier]:
    """Host tiers by node (nodes without memory hold none), then GPU memory, then declared nvme.

    `declarations` are strings ("cxl=node:1") or TierDeclaration; a bad one
    raises ValueError with one sentence.
    """
    decls = as_declarations(declarations, machine)
    by_node = {d.node: d for d in decls if d.node is not None}
    tiers = [host_tier(machine, node, by_node.get(node.id))
             for _, node in sorted(machine.nodes.items()) if node.has_memory]
    tiers += gpu_tiers(machine)
    tiers += [nvme_tier(i, d) for i, d in enumerate(d for d in decls if d.kind == "nvme")]
    return tiers


def initiators(machine: Machine, allowed: set[int] | None = None) -> list[Initiator]:
    """The CPUs of each node that has some, then each GPU. `allowed`: the CPUs this
    process may run on (allowed_cpus); a node's initiator holds only those, and where
    none of its CPUs is, says so (not_allowed: its cases are skipped, not run elsewhere)."""
    cpus = []
    for _, n in sorted(machine.nodes.items()):
        if not n.has_cpu:
            continue
        mine = [c for c in n.cpus if allowed is None or c in allowed]
        cpus.append(Initiator(name=f"cpu:node{n.id}", kind="cpu", node=n.id, cpus=mine or list(n.cpus),
                              not_allowed="" if mine else f"no CPU of node {n.id} is allowed to this process"))
    gpus = [Initiator(name=f"gpu:{g.index}", kind="gpu", node=g.numa_node, gpu=g.index)
            for g in machine.gpus]
    return cpus + gpus


def allowed_cpus(machine: Machine, root: str = "/") -> set[int] | None:
    """The machine's CPUs this process may run on, where that is not all of them
    (taskset, a container's cpuset, a scheduler's binding), recorded on the machine's
    environment; None when every CPU is. Pinning a worker to a CPU outside it would
    either fail or, as root, quietly run where the user said not to. The boot's
    default mask under isolcpus= (every CPU but the isolated ones) is no one's
    restriction: isolated CPUs are there to be pinned to, as before."""
    every = {c for n in machine.nodes.values() for c in n.cpus}
    mine = set(os.sched_getaffinity(0)) & every
    isolated = set(read_cpulist(root, "/sys/devices/system/cpu/isolated"))
    if not every or mine == every or (isolated and mine == every - isolated):
        return None
    machine.environment.allowed_cpus = format_cpulist(sorted(mine))
    return mine
