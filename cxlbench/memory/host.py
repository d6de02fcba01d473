"""Host buffers placed on one NUMA node with a page-size policy, verified.

allocate() refuses what it cannot honour before touching memory, then maps,
binds, advises, faults in and checks where every page went and which page
size the kernel used. What was asked and what was found are both on the
buffer; a mismatch is a PlacementError, never a silent fallback.
"""
from __future__ import annotations

import errno
import resource
from dataclasses import dataclass, field

from . import sysinfo
from .errors import PlacementError, fmt_bytes
from .verify import huge_coverage, physical_contiguity, placement
from .mapping import Mapped

# page policy -> hugetlb page size (None: normal pages, 4 KiB or THP)
PAGE_KINDS: dict[str, int | None] = {
    "4k": None,
    "thp": None,
    "hugetlb-2m": 2 << 20,
    "hugetlb-1g": 1 << 30,
}

# Memory kept free on the node: a strictly bound buffer cannot spill to another
# node, so the last free memory of its node comes from reclaim (page cache
# dropped, kswapd running on the CPUs being measured) or the OOM killer, and
# either corrupts the figure. The kernel's watermarks, per-CPU page lists and
# other processes need room that grows with the node, hence 10 %; 512 MiB is
# the floor for small nodes (a 4 GiB CXL expander, a test VM).
MARGIN_FRACTION = 0.10
MARGIN_MIN_BYTES = 512 << 20

# A THP buffer is called a huge-page buffer only if at least this much of it
# is in huge pages; below it latency figures mix two page sizes.
THP_MIN_COVERAGE = 0.90

GUARD_BYTES = 4096
CAP_IPC_LOCK = 14


def native_missing() -> str | None:
    """Why the C core that places buffers cannot be used here, or None. The source
    folder cxlbench/_native/ imports as an empty namespace package when the module
    was never built, so a successful import is not enough."""
    from importlib import import_module
    try:
        native = import_module("cxlbench._native")
    except ImportError as e:
        return str(e)
    return None if getattr(native, "__file__", None) else "only its C sources were found"


def safety_margin(node_total_bytes: int) -> int:
    return max(int(node_total_bytes * MARGIN_FRACTION), MARGIN_MIN_BYTES)


def _round_up(n: int, to: int) -> int:
    return (n + to - 1) // to * to


@dataclass(eq=False)
class HostBuffer(Mapped):
    """A verified buffer: [addr, addr + length) on `node`. Close it (or use it
    as a context manager); keep it alive as long as anything reads its memory."""
    addr: int
    length: int                  # mapped bytes: length_asked rounded up to the page size
    node: int
    page_asked: str              # 4k / thp / hugetlb-2m / hugetlb-1g
    page_bytes_found: int        # page size the kernel actually used
    huge_coverage: float         # fraction of the bytes in huge pages (0.0 for 4k)
    on_node_fraction: float      # fraction of the pages found on `node` (1.0 once verified)
    locked: bool = False
    phys_contiguity: float | None = None   # verify.physical_contiguity; None where hidden
    length_asked: int = 0
    _region: tuple[int, int] = field(default=(0, 0), repr=False)   # mapping incl. guards

    def array(self, dtype: str = "float64"):
        """A numpy view of the buffer; it keeps the buffer mapped while it lives."""
        import ctypes

        import numpy as np
        if self.closed:
            raise ValueError("the buffer is closed")
        raw = (ctypes.c_char * self.length).from_address(self.addr)
        raw._owner = self            # the view -> raw -> this buffer
        return np.frombuffer(raw, dtype=dtype)

    def found(self) -> dict:
        """What was asked and what was found, for a sample's parameters."""
        return {"node": self.node, "page_asked": self.page_asked,
                "page_bytes": self.page_bytes_found, "huge_coverage": self.huge_coverage,
                "on_node_fraction": self.on_node_fraction, "locked": self.locked,
                "phys_contiguity": self.phys_contiguity}


# ---- refusals: everything decided from sysfs before any memory is touched --------

def check_node(node: int, root: str = "/") -> sysinfo.NodeMemory:
    """The node's memory, or PlacementError if it does not exist or has none."""
    mem = sysinfo.node_memory(node, root) if node >= 0 else None
    if mem is None:
        ids = sysinfo.node_ids(root)
        shown = ", ".join(map(str, ids)) if ids else "none shown under /sys/devices/system/node"
        raise PlacementError(f"NUMA node {node} does not exist on this machine (nodes: {shown}); "
                             f"pick one of those.")
    if mem.total_bytes == 0:
        with_memory = [n for n in sysinfo.node_ids(root)
                       if (m := sysinfo.node_memory(n, root)) and m.total_bytes > 0]
        raise PlacementError(f"NUMA node {node} has no memory (a CPU-only node); place the "
                             f"buffer on a node with memory: {', '.join(map(str, with_memory))}.")
    return mem


def check_free(mem: sysinfo.NodeMemory, size: int) -> None:
    margin = safety_margin(mem.total_bytes)
    room = max(mem.free_bytes - margin, 0)
    if size > room:
        raise PlacementError(
            f"{fmt_bytes(size)} asked on node {mem.node}, but it has {fmt_bytes(mem.free_bytes)} "
            f"free and keeps {fmt_bytes(margin)} back as a safety margin, so at most "
            f"{fmt_bytes(room)} can be placed there; ask for less or free memory on that node.")


def check_hugetlb(node: int, page_bytes: int, size: int, root: str = "/") -> None:
    sizes = sysinfo.hugetlb_sizes(root)
    if page_bytes not in sizes:
        offered = ", ".join(fmt_bytes(s) for s in sizes) or "none"
        raise PlacementError(f"this kernel offers no {fmt_bytes(page_bytes)} huge pages "
                             f"(sizes offered: {offered}); use page='thp' or another size.")
    nr, free = sysinfo.hugetlb_pool(node, page_bytes, root) or (0, 0)
    need = size // page_bytes
    if free < need:
        path = "/" + sysinfo.hugetlb_pool_dir(node, page_bytes) + "/nr_hugepages"
        raise PlacementError(
            f"{fmt_bytes(size)} in {fmt_bytes(page_bytes)} hugetlb pages needs {need} free pages "
            f"on node {node} but {free} are free there ({nr} reserved); reserve "
            f"{need - free} more (as root: echo {nr + need - free} > {path}) or use page='thp'.")


def check_thp(root: str = "/") -> None:
    enabled = sysinfo.thp_enabled(root)
    if enabled is None:
        raise PlacementError("this kernel has no transparent huge pages "
                             "(/sys/kernel/mm/transparent_hugepage is missing); use "
                             "page='hugetlb-2m' with reserved pages.")
    if enabled == "never":
        raise PlacementError("transparent huge pages are disabled (enabled=never); set "
                             "/sys/kernel/mm/transparent_hugepage/enabled to madvise or always, "
                             "or use page='hugetlb-2m'.")


def check_memlock(size: int, soft_limit: int, locked_bytes: int, has_ipc_lock: bool) -> None:
    """Refuse to lock `size` more bytes past RLIMIT_MEMLOCK (CAP_IPC_LOCK ignores it)."""
    if has_ipc_lock or soft_limit == resource.RLIM_INFINITY:
        return
    if locked_bytes + size > soft_limit:
        raise PlacementError(
            f"locking {fmt_bytes(size)} needs RLIMIT_MEMLOCK of at least "
            f"{fmt_bytes(locked_bytes + size)} but it is {fmt_bytes(soft_limit)} "
            f"({fmt_bytes(locked_bytes)} already locked); raise it (ulimit -l unlimited, or "
            f"memlock in /etc/security/limits.conf) or run with CAP_IPC_LOCK.")


def _memlock_state() -> tuple[int, int, bool]:
    """(RLIMIT_MEMLOCK soft limit, bytes this process has locked, has CAP_IPC_LOCK)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    locked, caps = 0, 0
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmLck:"):
                locked = int(line.split()[1]) * 1024
            elif line.startswith("CapEff:"):
                caps = int(line.split()[1], 16)
    return soft, locked, bool(caps >> CAP_IPC_LOCK & 1)


# ---- allocation ------------------------------------------------------------------

def allocate(length: int, node: int, page: str = "4k", lock: bool = False,
             root: str = "/") -> HostBuffer:
    """A buffer of at least `length` bytes on NUMA node `node`, every page
    faulted in and verified there.

    page: "4k" (MADV_NOHUGEPAGE, so 4 KiB even when THP is "always"), "thp"
    (2 MiB aligned, MADV_HUGEPAGE, >= 90 % coverage required), "hugetlb-2m",
    "hugetlb-1g" (pages reserved on the node). lock: mlock it (for pinning to a
    GPU later). root: where sysfs is read for the refusals (a fixture tree in
    tests); the memory itself is always this machine's.
    Raises PlacementError with what is wrong and what to do.
    """
    if page not in PAGE_KINDS:
        raise PlacementError(f"unknown page policy {page!r}; use one of "
                             f"{', '.join(PAGE_KINDS)}.")
    if length <= 0:
        raise ValueError(f"length must be positive, not {length}")
    hugetlb = PAGE_KINDS[page]
    mem = check_node(node, root)
    if hugetlb:
        align = hugetlb
        size = _round_up(length, align)
        check_hugetlb(node, hugetlb, size, root)
    else:
        if page == "thp":
            check_thp(root)
            align = sysinfo.thp_page_bytes(root)
        else:
            align = 4096
        size = _round_up(length, align)
        check_free(mem, size)
    if lock:
        check_memlock(size, *_memlock_state())

    from cxlbench import _native

    # PROT_NONE guard regions on both sides keep the buffer its own mapping
    # (nothing merges into it, so its smaps record is the buffer alone) and
    # make an overrun fault instead of corrupting a neighbour.
    region_size = size + align + 2 * GUARD_BYTES
    region = _native.reserve(region_size)
    try:
        start = _round_up(region + GUARD_BYTES, align)
        buf = _place(start, size, node, page, hugetlb, align, lock)
        buf.length_asked = length
        buf._region = (region, region_size)
        return buf
    except BaseException:
        _native.unmap(region, region_size)
        raise


def _place(start: int, size: int, node: int, page: str, hugetlb: int | None, align: int,
           lock: bool) -> HostBuffer:
    from cxlbench import _native
    try:
        _native.map_anonymous(size, hugetlb or 0, start)
    except OSError as e:
        what = ("reserve more huge pages" if hugetlb else
                "check vm.overcommit_memory and the process's address-space limit")
        raise PlacementError(f"the kernel refused to map {fmt_bytes(size)} of {page} pages "
                             f"({e.strerror}); {what} or ask for less.") from None
    # Policy first: pages are allocated where the policy says when first touched.
    _native.mbind(start, size, [node], "bind", strict=True)
    if page == "thp":
        _native.madvise(start, size, _native.MADV_HUGEPAGE)
    elif page == "4k":
        _native.madvise(start, size, _native.MADV_NOHUGEPAGE)
    _fault_in(start, size, hugetlb or 4096, node, page)
    if lock:
        try:
            _native.mlock(start, size)
        except OSError as e:
            raise PlacementError(f"mlock of {fmt_bytes(size)} failed: {e.strerror}; raise "
                                 f"RLIMIT_MEMLOCK or lock less.") from None

    where = _verify_nodes(start, size, node, hugetlb)
    coverage, kernel_page = huge_coverage(start, hugetlb=bool(hugetlb))
    if page == "thp" and coverage < THP_MIN_COVERAGE:
        # The fault path could not find free 2 MiB blocks: ask the kernel to
        # collapse the range synchronously (Linux >= 6.1), then judge again.
        try:
            _native.madvise(start, size, _native.MADV_COLLAPSE)
        except OSError:
            pass
        where = _verify_nodes(start, size, node, hugetlb)
        coverage, kernel_page = huge_coverage(start)
        if coverage < THP_MIN_COVERAGE:
            raise PlacementError(
                f"THP backed only {coverage:.0%} of the {fmt_bytes(size)} buffer on node {node} "
                f"with huge pages (defrag={sysinfo.thp_defrag() or 'unknown'}, need "
                f"{THP_MIN_COVERAGE:.0%}); memory is fragmented: compact it (echo 1 > "
                f"/proc/sys/vm/compact_memory), ask for less, or use page='hugetlb-2m'.")
        found = sysinfo.thp_page_bytes()
    elif page == "thp":
        found = sysinfo.thp_page_bytes()
    elif hugetlb:
        if kernel_page != hugetlb or coverage < 1.0:
            raise PlacementError(f"the hugetlb mapping uses {fmt_bytes(kernel_page)} pages for "
                                 f"{coverage:.0%} of it, not {fmt_bytes(hugetlb)} for all of it; "
                                 f"check the node's hugetlb pool.")
        found = hugetlb
    else:
        if coverage > 0:
            raise PlacementError(f"{coverage:.0%} of a 4 KiB-page buffer came in huge pages "
                                 f"despite MADV_NOHUGEPAGE; 4 KiB figures would be wrong, check "
                                 f"the THP settings.")
        found = kernel_page
    return HostBuffer(addr=start, length=size, node=node, page_asked=page,
                      page_bytes_found=found, huge_coverage=coverage if page != "4k" else 0.0,
                      on_node_fraction=where.fraction, locked=lock,
                      phys_contiguity=physical_contiguity(start, size))


def _fault_in(start: int, size: int, page_bytes: int, node: int, page: str) -> None:
    """Allocate every page now: MADV_POPULATE_WRITE (Linux >= 5.14) reports a
    failure as an error where touching would SIGBUS (hugetlb pool empty on the
    node) or wait on reclaim; older kernels get the touching loop."""
    from cxlbench import _native
    try:
        _native.madvise(start, size, _native.MADV_POPULATE_WRITE)
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise PlacementError(f"could not allocate {fmt_bytes(size)} of {page} pages on node "
                                 f"{node}: {e.strerror}; the node (or its hugetlb pool) is "
                                 f"short of free memory, ask for less.") from None
        _native.fault_in(start, size, page_bytes)


def _verify_nodes(start: int, size: int, node: int, hugetlb: int | None):
    where = placement(start, size, node, hugetlb or 4096)
    if where.on_node != where.pages:
        raise PlacementError(
            f"only {where.fraction:.1%} of the pages of the {fmt_bytes(size)} buffer are on node "
            f"{node} ({where.describe()}); refusing to measure another tier as node {node}.")
    return where
