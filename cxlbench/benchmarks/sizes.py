"""Working-set sweeps derived from the machine's caches (DESIGN principle 6)."""
from __future__ import annotations

from typing import Literal

from cxlbench.topology.model import Machine
from cxlbench.units import parse_size

PAGE_BYTES = {"4k": 4096, "thp": 2 << 20, "hugetlb-2m": 2 << 20, "hugetlb-1g": 1 << 30}
#: The page policies a host buffer can be asked for (memory.allocate's `page`).
Page = Literal["4k", "thp", "hugetlb-2m", "hugetlb-1g"]


def hugetlb_short(machine: Machine, node: int, page: str, pages: int) -> str | None:
    """Why `pages` of a hugetlb `page` size cannot be had on `node` (None where they
    can): the pool holds what root reserved, and the line says how."""
    found = machine.nodes.get(node)
    pool = found.hugepages.get(PAGE_BYTES[page]) if found else None
    if pool is None:                # no such pool to raise (1 GiB pages on a VM without pdpe1gb)
        return f"node {node} offers no {page} pages (no hugepages-{PAGE_BYTES[page] >> 10}kB pool)"
    have = pool.free
    if have >= pages:
        return None
    return (f"needs {pages} free {page} pages on node {node}, {have} reserved: as root, raise "
            f"/sys/devices/system/node/node{node}/hugepages/hugepages-{PAGE_BYTES[page] >> 10}kB/nr_hugepages "
            f"by {pages - have}")


def cache_sizes(machine: Machine) -> list[int]:
    """Data/unified cache size per level (one instance), smallest first."""
    by_level: dict[int, int] = {}
    for c in machine.cpu.caches:
        if c.kind in ("Data", "Unified"):
            by_level[c.level] = max(by_level.get(c.level, 0), c.size_bytes)
    return [by_level[k] for k in sorted(by_level)]


def latency_sweep(machine: Machine, lo: int, hi: int) -> list[int]:
    """Powers of two from lo to hi, with midpoints (×1.5) around the caches.

    Caches in VMs behave smaller than reported (an effective LLC of 2-4 MiB
    where 32 MiB is reported), so the fine region spans from half the L2 to
    twice the last level rather than trusting the reported sizes alone.
    """
    caches = cache_sizes(machine)
    fine_lo = caches[1] // 2 if len(caches) > 1 else (caches[0] if caches else 0)
    fine_hi = 2 * caches[-1] if caches else 0
    sizes, n = [], _pow2_at_least(lo)
    while n <= hi:
        sizes.append(n)
        if fine_lo <= n < fine_hi and n * 3 // 2 <= hi:
            sizes.append(n * 3 // 2)
        n *= 2
    return sizes


def stream_array_bytes(machine: Machine, floor: int = 256 << 20) -> int:
    """Per-array size for streaming kernels: at least 4× all caches (STREAM's rule)."""
    total = sum(c.size_bytes for c in machine.cpu.caches if c.kind in ("Data", "Unified"))
    return max(floor, _pow2_at_least(4 * total))


def array_bytes(value: int | str, machine: Machine) -> int:
    """A buffer size from a suite, "auto" meaning STREAM's (see stream_array_bytes)."""
    return stream_array_bytes(machine) if value == "auto" else int(value)


def resolve_sizes(value, machine: Machine, lo: int, hi: int) -> list[int]:
    if value in (None, "auto"):
        return latency_sweep(machine, lo, hi)
    values = value if isinstance(value, (list, tuple)) else [value]
    return [parse_size(v) for v in values]


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p
