"""NUMA nodes and the kernel's memory tiers."""
from __future__ import annotations

from .hmat import read_hmat
from .hugepages import node_pools
from .model import Node
from .sysfs import (SysfsFormatError, meminfo_bytes, numbered, parse_cpulist, read_cpulist, read_required,
                    read_text)

NODE_DIR = "/sys/devices/system/node"
TIER_DIR = "/sys/devices/virtual/memory_tiering"


def node_ids(root: str) -> list[int]:
    """Online nodes; the node directories when `online` is absent (old kernels, fixtures)."""
    return read_cpulist(root, f"{NODE_DIR}/online") or numbered(root, NODE_DIR, "node")


def read_distances(root: str, node: int, ids: list[int]) -> dict[int, int]:
    """The SLIT row of `node`: the kernel lists one distance per online node, in node order."""
    values = (read_text(root, f"{NODE_DIR}/node{node}/distance") or "").split()
    if not all(v.isdigit() for v in values):
        raise SysfsFormatError(f"{NODE_DIR}/node{node}/distance holds {' '.join(values)!r}, not distances")
    return {other: int(v) for other, v in zip(ids, values)}


def read_memory_tiers(root: str = "/") -> dict[int, list[int]]:
    """memory_tierN -> its nodes. Lower N is faster memory (DRAM is tier 4 by default)."""
    return {tier: read_cpulist(root, f"{TIER_DIR}/memory_tier{tier}/nodelist")
            for tier in numbered(root, TIER_DIR, "memory_tier")}


def tier_of(node: int, tiers: dict[int, list[int]]) -> int | None:
    return next((tier for tier, nodes in tiers.items() if node in nodes), None)


def read_meminfo(root: str, node: int) -> tuple[int, int]:
    """(MemTotal, MemFree) of a node in bytes. Read as 0, a node's memory would
    drop its tier from the plan without a word, so a meminfo without them is refused."""
    path = f"{NODE_DIR}/node{node}/meminfo"
    text = read_required(root, path)
    total, free = meminfo_bytes(text, "MemTotal"), meminfo_bytes(text, "MemFree")
    if total is None or free is None:
        held = f"holds {text.splitlines()[0][:60]!r}, not" if text else "is empty, without"
        raise SysfsFormatError(f"{path} {held} the node's 'MemTotal: N kB' and 'MemFree: N kB' lines")
    return total, free


def read_node(root: str, node: int, ids: list[int], tiers: dict[int, list[int]]) -> Node:
    d = f"{NODE_DIR}/node{node}"
    total, free = read_meminfo(root, node)
    return Node(
        id=node,
        # Empty is a node whose CPUs are all offline; absent or unreadable is not,
        # and read as empty it would make a CPU node "CPU-less memory" measured from afar.
        cpus=parse_cpulist(read_required(root, f"{d}/cpulist"), f"{d}/cpulist"),
        mem_total_bytes=total,
        mem_free_bytes=free,
        distances=read_distances(root, node, ids),
        hugepages=node_pools(root, node),
        hmat=read_hmat(root, node),
        memory_tier=tier_of(node, tiers),
    )


#: why a machine view without nodes has no host tiers
NO_NODES = (f"{NODE_DIR} shows no NUMA nodes (a kernel built without NUMA, or a container that masks /sys): "
            "host memory cannot be placed or its placement verified")


def read_nodes(root: str = "/") -> dict[int, Node]:
    """Every online NUMA node with its CPUs, memory, distances, huge pages, HMAT and tier.

    A kernel with NUMA support exposes node0 even on one socket. None at all (a
    kernel built without NUMA, a container that masks /sys) gives an empty dict:
    no host tier can be placed or checked there, but a GPU's HBM and a storage tier
    still can, so the runner refuses only a plan left empty (NO_NODES says why).
    """
    ids = node_ids(root)
    tiers = read_memory_tiers(root)
    return {n: read_node(root, n, ids, tiers) for n in ids}
