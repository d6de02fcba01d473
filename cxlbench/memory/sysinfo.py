"""What the placement layer needs to know about the machine, read from sysfs
under a root directory (tests point it at fixture trees).

NOTE: cxlbench.topology (cxlbench/topology/nodes.py, read_nodes) reads the
same files into Machine records. This module keeps its own few small readers
so that placing a buffer needs no full topology read and stays importable on
its own; switch to the topology readers if they grow a cheap per-node call.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

NODE_DIR = "sys/devices/system/node"
THP_DIR = "sys/kernel/mm/transparent_hugepage"
HUGEPAGES_DIR = "sys/kernel/mm/hugepages"


def _read(root: str, *parts: str) -> str | None:
    try:
        with open(os.path.join(root, *parts), encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


@dataclass(frozen=True)
class NodeMemory:
    node: int
    total_bytes: int
    free_bytes: int


def node_ids(root: str = "/") -> list[int]:
    """NUMA nodes the kernel shows (the nodeN directories)."""
    try:
        names = os.listdir(os.path.join(root, NODE_DIR))
    except OSError:
        return []
    return sorted(int(m.group(1)) for m in map(re.compile(r"node(\d+)$").match, names) if m)


def node_memory(node: int, root: str = "/") -> NodeMemory | None:
    """MemTotal and MemFree of one node; None if the node does not exist."""
    text = _read(root, NODE_DIR, f"node{node}", "meminfo")
    if text is None:
        return None
    fields = {}
    for line in text.splitlines():
        # "Node 0 MemTotal:        5728460 kB"
        m = re.match(r"Node\s+\d+\s+(\w+):\s+(\d+)(\s+kB)?", line)
        if m:
            fields[m.group(1)] = int(m.group(2)) * (1024 if m.group(3) else 1)
    return NodeMemory(node, fields.get("MemTotal", 0), fields.get("MemFree", 0))


def hugetlb_sizes(root: str = "/") -> list[int]:
    """Huge page sizes (bytes) the kernel offers: hugepages-<kB>kB directories."""
    try:
        names = os.listdir(os.path.join(root, HUGEPAGES_DIR))
    except OSError:
        return []
    return sorted(int(m.group(1)) * 1024
                  for m in map(re.compile(r"hugepages-(\d+)kB$").match, names) if m)


def hugetlb_pool_dir(node: int, page_bytes: int) -> str:
    """Where a node's pool of one huge page size is (relative to the root)."""
    return f"{NODE_DIR}/node{node}/hugepages/hugepages-{page_bytes // 1024}kB"


def hugetlb_pool(node: int, page_bytes: int, root: str = "/") -> tuple[int, int] | None:
    """(nr_hugepages, free_hugepages) of that size on that node; None if no such pool."""
    counts = []
    for name in ("nr_hugepages", "free_hugepages"):
        text = _read(root, hugetlb_pool_dir(node, page_bytes), name)
        if text is None or not text.strip().isdigit():
            return None
        counts.append(int(text))
    return counts[0], counts[1]


def _bracketed(text: str | None) -> str | None:
    """'always [madvise] never' -> 'madvise'."""
    if text is None:
        return None
    m = re.search(r"\[(\S+)\]", text)
    return m.group(1) if m else text.strip() or None


def thp_enabled(root: str = "/") -> str | None:
    return _bracketed(_read(root, THP_DIR, "enabled"))


def thp_defrag(root: str = "/") -> str | None:
    return _bracketed(_read(root, THP_DIR, "defrag"))


def thp_page_bytes(root: str = "/") -> int:
    """The PMD (THP) page size; 2 MiB on x86-64 if the kernel does not say."""
    text = _read(root, THP_DIR, "hpage_pmd_size")
    return int(text) if text and text.strip().isdigit() else 2 << 20
