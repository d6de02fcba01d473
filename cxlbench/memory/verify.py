"""Where a range's pages really are: the node of every page (move_pages), the page
sizes the kernel used for a mapping (/proc/self/smaps) and how contiguous its
physical frames are (/proc/self/pagemap)."""
from __future__ import annotations

import array
import errno
from collections import Counter
from dataclasses import dataclass, field

from .errors import PlacementError, fmt_bytes


def page_nodes(addr: int, length: int, page_bytes: int = 4096) -> array.array:
    """Node of every page of [addr, addr + length) as an array of int; a negative
    entry is -errno for that page (-ENOENT: not faulted in, -EFAULT: not mapped)."""
    from cxlbench import _native
    start = addr - addr % page_bytes
    nodes = array.array("i")
    nodes.frombytes(_native.page_nodes(start, addr + length - start, page_bytes))
    return nodes


@dataclass
class PagePlacement:
    """Where the pages of a range are, counted."""
    node: int                                  # the node they should be on
    pages: int
    page_bytes: int
    by_node: dict[int, int] = field(default_factory=dict)     # node -> pages there
    not_present: int = 0                       # pages not faulted in (-ENOENT)
    errors: dict[int, int] = field(default_factory=dict)      # other -errno -> pages

    @property
    def on_node(self) -> int:
        return self.by_node.get(self.node, 0)

    @property
    def fraction(self) -> float:
        return self.on_node / self.pages if self.pages else 0.0

    def describe(self) -> str:
        parts = [f"{n} on node {node}" for node, n in sorted(self.by_node.items())
                 if node != self.node]
        if self.not_present:
            parts.append(f"{self.not_present} not faulted in")
        parts += [f"{n} unreadable ({errno.errorcode.get(e, e)})" for e, n in self.errors.items()]
        return ", ".join(parts) or "none elsewhere"


def placement(addr: int, length: int, node: int, page_bytes: int = 4096) -> PagePlacement:
    """Count where the pages of a range are, without judging."""
    counts = Counter(page_nodes(addr, length, page_bytes))
    result = PagePlacement(node=node, pages=sum(counts.values()), page_bytes=page_bytes)
    for value, n in counts.items():
        if value >= 0:
            result.by_node[value] = n
        elif -value == errno.ENOENT:
            result.not_present += n
        else:
            result.errors[-value] = n
    return result


def verify_on_node(addr: int, length: int, node: int, page_bytes: int = 4096) -> PagePlacement:
    """Check that every page of [addr, addr + length) is present on `node`.

    Works on any mapping of this process (a HostBuffer, a torch tensor's
    storage: pass tensor.data_ptr() and its size in bytes; fault it in first).
    Returns the counts; raises PlacementError if a single page is elsewhere or
    not present, since a figure measured there would belong to another tier.
    """
    found = placement(addr, length, node, page_bytes)
    if found.pages and found.on_node == found.pages:
        return found
    raise PlacementError(
        f"only {found.on_node} of the {found.pages} pages of the {fmt_bytes(length)} range at "
        f"{addr:#x} are on node {node} ({found.describe()}); the node may be short of free "
        f"memory or the range was not bound to it, so it is not measured as node {node}.")


PAGEMAP_PFN_MASK = (1 << 55) - 1
PAGEMAP_PRESENT = 1 << 63
PAGEMAP_CHUNK = 1 << 18        # entries read at a time: 2 MiB of map for 1 GiB of buffer


def physical_contiguity(addr: int, length: int, pagemap: str = "/proc/self/pagemap") -> float | None:
    """The fraction of the range's 4 KiB pages whose physical frame is next to the
    previous page's (either side: the allocator may hand a block out downwards): 1.0
    for a buffer carved from one free block, low for one gathered from scattered
    free pages.

    Why it is recorded: node and page size do not fix what a 4 KiB-page buffer reads
    at. On a KVM guest (the AMD EPYC VM of docs/validation.md, run L) the most
    scattered 512 MiB buffer of a process read 0.79-0.89x the round's geometric mean
    over all its buffers, and a page-stride chase over it ran 4-19% slower: what
    backs those guest frames on the host differs, which the guest cannot see. The
    figure lets two runs' buffers be compared. None where the frames are hidden
    (Linux shows them only with CAP_SYS_ADMIN; found on the first page, so nothing
    more is read) or a page is not present.
    """
    import numpy as np
    first, pages = addr // 4096, (addr + length + 4095) // 4096 - addr // 4096
    if pages < 2:
        return None
    adjacent, previous = 0, None
    try:
        with open(pagemap, "rb") as f:
            f.seek(first * 8)
            for done in range(0, pages, PAGEMAP_CHUNK):
                # in chunks: a whole 100 GiB buffer's map would be 200 MiB of this process
                want = min(PAGEMAP_CHUNK, pages - done)
                entries = np.frombuffer(f.read(want * 8), dtype=np.uint64)
                if len(entries) != want:
                    return None
                frames = (entries & np.uint64(PAGEMAP_PFN_MASK)).astype(np.int64)
                if not ((entries & np.uint64(PAGEMAP_PRESENT)).all() and frames.all()):
                    return None
                if previous is not None:
                    frames = np.concatenate(([previous], frames))
                adjacent += int(np.count_nonzero(np.abs(np.diff(frames)) == 1))
                previous = frames[-1]
    except OSError:
        return None
    return adjacent / (pages - 1)


def smaps_vma(addr: int, smaps_path: str = "/proc/self/smaps") -> dict[str, int] | None:
    """The /proc/self/smaps record of the mapping containing addr: 'start', 'end'
    and every 'Key: N kB' field in bytes (Rss, AnonHugePages, KernelPageSize,
    Private_Hugetlb, ...). None if no mapping contains addr."""
    record: dict[str, int] | None = None
    with open(smaps_path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):      # a mapping's header line
                if record is not None:
                    return record
                start, end = (int(x, 16) for x in head.split("-"))
                if start <= addr < end:
                    record = {"start": start, "end": end}
            elif record is not None and head.endswith(":"):
                parts = line.split()
                if len(parts) >= 2 and parts[1].isdigit():
                    scale = 1024 if len(parts) >= 3 and parts[2] == "kB" else 1
                    record[head[:-1]] = int(parts[1]) * scale
    return record


def huge_coverage(addr: int, hugetlb: bool = False) -> tuple[float, int]:
    """(fraction of the mapping backed by huge pages, the kernel page size of the
    mapping) for the mapping containing addr. THP: AnonHugePages / Rss;
    hugetlb: Private_Hugetlb / mapping size."""
    vma = smaps_vma(addr)
    if vma is None:
        raise PlacementError(f"no mapping contains {addr:#x} in /proc/self/smaps; "
                             f"the buffer was unmapped while being verified.")
    kernel_page = vma.get("KernelPageSize", 4096)
    if hugetlb:
        size = vma["end"] - vma["start"]
        held = vma.get("Private_Hugetlb", 0) + vma.get("Shared_Hugetlb", 0)
        return (held / size if size else 0.0), kernel_page
    rss = vma.get("Rss", 0)
    return (vma.get("AnonHugePages", 0) / rss if rss else 0.0), kernel_page
