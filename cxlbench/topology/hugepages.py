"""Huge pages: hugetlb pools (system-wide and per node) and the THP mode."""
from __future__ import annotations

import re

from .model import HugePool
from .sysfs import list_dir, read_int, read_text, selected

THP_DIR = "/sys/kernel/mm/transparent_hugepage"


def read_pools(root: str, directory: str) -> dict[int, HugePool]:
    """Pools in a `hugepages/` directory (hugepages-2048kB/...), keyed by page size in bytes."""
    pools: dict[int, HugePool] = {}
    for name in list_dir(root, directory):
        m = re.fullmatch(r"hugepages-(\d+)kB", name)
        if not m:
            continue
        d = f"{directory}/{name}"
        pools[int(m.group(1)) * 1024] = HugePool(
            page_bytes=int(m.group(1)) * 1024,
            total=read_int(root, f"{d}/nr_hugepages") or 0,
            free=read_int(root, f"{d}/free_hugepages") or 0,
        )
    return dict(sorted(pools.items()))


def system_pools(root: str) -> dict[int, HugePool]:
    return read_pools(root, "/sys/kernel/mm/hugepages")


def node_pools(root: str, node: int) -> dict[int, HugePool]:
    return read_pools(root, f"/sys/devices/system/node/node{node}/hugepages")


def thp_enabled(root: str) -> str | None:
    return selected(read_text(root, f"{THP_DIR}/enabled"))


def thp_defrag(root: str) -> str | None:
    return selected(read_text(root, f"{THP_DIR}/defrag"))
