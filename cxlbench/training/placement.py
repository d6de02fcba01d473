"""Host tensors on a chosen NUMA node, and proof of where their pages are.

A `HostArena` is one buffer from the placement layer (cxlbench.memory.allocate:
bound to the node, faulted in, every page verified) that hands out torch
tensors as aligned views. `verify` asks the kernel again, any time, where
every page of a tensor or arena is, and raises PlacementError when a page is
elsewhere or not there at all: a figure measured on the wrong node is worse
than none. The engine checks before and after its timed steps.
"""
from __future__ import annotations

import ctypes
import itertools
import mmap
import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import torch

from cxlbench.memory import PlacementError, allocate
from cxlbench.memory import page_nodes as _page_nodes

PAGE = mmap.PAGESIZE

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

__all__ = ["HostArena", "Placement", "PlacementError", "page_nodes", "verify",
           "process_bytes_per_node"]


# ---- where pages are ------------------------------------------------------------

def page_nodes(addr: int, length: int) -> list[int]:
    """Node of each page of [addr, addr+length); a negative entry is -errno for that
    page (-2, ENOENT: never touched). From move_pages(2), via the placement layer."""
    return list(_page_nodes(addr, length))


PageNodes = Callable[[int, int], list[int]]


def tensor_span(t: torch.Tensor) -> tuple[int, int]:
    """(address, bytes) of the memory a tensor's elements occupy."""
    return t.data_ptr(), t.numel() * t.element_size()


def verify(t: torch.Tensor | tuple[int, int], node: int, what: str = "tensor",
           nodes_of: PageNodes = page_nodes) -> dict:
    """Check that every page of t is on `node`; returns what was found, raises
    PlacementError otherwise. `nodes_of` is injectable for tests."""
    addr, length = tensor_span(t) if isinstance(t, torch.Tensor) else t
    found = Counter(nodes_of(addr, length))
    record = {"what": what, "asked_node": node, "bytes": length,
              "pages_checked": sum(found.values()),
              "found": {str(k): v for k, v in sorted(found.items())}}
    wrong = {k: v for k, v in found.items() if k != node}
    if wrong:
        parts = ", ".join(f"{v} on node {k}" if k >= 0 else f"{v} not present ({os.strerror(-k)})"
                          for k, v in sorted(wrong.items()))
        raise PlacementError(f"{what}: asked node {node}, found {parts} "
                             f"of {record['pages_checked']} pages checked")
    return record


# ---- putting memory on a node -------------------------------------------------

def _map_anywhere(length: int) -> int:
    """An anonymous mapping with no policy (the process default: first touch)."""
    prot, flags = mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    addr = _libc.mmap(None, length, prot, flags, -1, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        raise PlacementError(f"mmap of {length} bytes failed: {os.strerror(ctypes.get_errno())}")
    return addr


class HostArena:
    """`nbytes` of host memory on `node` (None: wherever the kernel puts it), faulted in,
    handing out tensors as aligned slices. pin() registers it with CUDA so copies to
    and from a GPU are asynchronous DMA.

    No two slices sit a large power of two apart. The kernel starts big mappings on
    2 MiB boundaries, so arenas of 2^k bytes lie exactly 2^k apart, and AdamW's four
    streams (p, m, v, g) then met in the same cache sets and DRAM banks: on the AMD
    EPYC VM 2^26 parameters stepped at 610 M params/s in such arenas against 1,700 with
    the same bytes a page or more out of step (STREAM pads its arrays for the same
    reason). So successive arenas start their first slice at 0, 8, 16 ... 56 KiB modulo
    64 KiB of its address, in turn, and the next STEPPED slices of an arena each start
    a page past the one before: neighbouring arenas' slices, two each as the engine's
    m and v, start at distinct offsets modulo 64 KiB. The arena maps the room for
    both beyond the nbytes asked, so a caller's sizing holds."""

    ALIGN = 4096      # every slice starts on a page: O_DIRECT I/O and clean page checks
    SPAN = 64 << 10   # the offsets are taken modulo this
    COLOURS = 8       # first-slice offsets (SPAN / COLOURS apart) that successive arenas take in turn
    STEPPED = 15      # later slices that start a page past the one before
    _colour = itertools.count()

    def __init__(self, nbytes: int, node: int | None, name: str = "arena", page: str = "4k"):
        if node is None and page != "4k":
            raise PlacementError(f"{name}: {page} pages are asked of a node, and none was given")
        self.name, self.node, self.page = name, node, page
        room = self.SPAN + self.STEPPED * self.ALIGN
        self.length = max(PAGE, -(-(nbytes + room) // PAGE) * PAGE)
        self._buffer = None
        if node is not None:
            self._buffer = allocate(self.length, node, page=page)   # bound, faulted in, verified
            self.addr = int(self._buffer.addr)
        else:
            self.addr = _map_anywhere(self.length)
        colour = next(HostArena._colour) % self.COLOURS * (self.SPAN // self.COLOURS)
        self.first = (colour - self.addr) % self.SPAN        # the first slice's address ≡ colour
        raw = (ctypes.c_char * self.length).from_address(self.addr)
        self.bytes = torch.frombuffer(raw, dtype=torch.uint8, count=self.length)
        self.bytes.zero_()                   # (re)touch every page now, not inside a timed step
        self.used, self.slices = self.first, 0
        self.pinned = False

    @classmethod
    def bytes_for(cls, numel: int, dtype: torch.dtype, count: int = 1) -> int:
        """Arena bytes that hold `count` slices of numel elements (each slice aligned)."""
        size = numel * torch.tensor([], dtype=dtype).element_size()
        return count * (-(-size // cls.ALIGN) * cls.ALIGN)

    def take(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        """The next free slice as a 1-D tensor of `numel` elements."""
        size = numel * torch.tensor([], dtype=dtype).element_size()
        start = -(-self.used // self.ALIGN) * self.ALIGN
        if 0 < self.slices <= self.STEPPED:
            start += self.ALIGN              # out of step with the slice before (room mapped for it)
        if start + size > self.length:
            raise PlacementError(f"{self.name}: {size} bytes do not fit ({self.length - start} left)")
        self.used, self.slices = start + size, self.slices + 1
        return self.bytes[start:start + size].view(dtype)

    def reset(self) -> None:
        self.used, self.slices = self.first, 0

    def pages_found(self) -> dict | None:
        """The page size the kernel gave and the share of bytes in huge pages (None
        where the arena is not bound to a node: no buffer of ours to ask)."""
        if self._buffer is None:
            return None
        return {"page_bytes": self._buffer.page_bytes_found, "huge_coverage": self._buffer.huge_coverage}

    def verify(self, nodes_of: PageNodes = page_nodes) -> dict:
        if self.node is None:
            return {"what": self.name, "asked_node": None, "bytes": self.length}
        return verify((self.addr, self.length), self.node, self.name, nodes_of)

    def pin(self) -> None:
        import torch.cuda
        err = int(torch.cuda.cudart().cudaHostRegister(self.addr, self.length, 1))  # Portable
        if err != 0:
            raise PlacementError(f"{self.name}: cudaHostRegister of {self.length} bytes failed "
                                 f"(cudaError {err}); pinned memory exhausted or locked-memory limit")
        self.pinned = True

    def close(self) -> None:
        if self.pinned:
            import torch.cuda
            torch.cuda.cudart().cudaHostUnregister(self.addr)
            self.pinned = False
        self.bytes = None
        if self._buffer is not None:
            self._buffer.close()
            self._buffer = None
        elif self.addr:
            _libc.munmap(self.addr, self.length)
        self.addr = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- what the process holds on each node --------------------------------------

_NODE_PAGES = re.compile(r"\bN(\d+)=(\d+)")
_PAGE_KB = re.compile(r"kernelpagesize_kB=(\d+)")


def process_bytes_per_node(numa_maps: str | None = None) -> dict[int, int]:
    """Resident bytes of this process on each node, from /proc/self/numa_maps."""
    if numa_maps is None:
        try:
            with open("/proc/self/numa_maps") as f:
                numa_maps = f.read()
        except OSError:
            return {}
    total: Counter[int] = Counter()
    for line in numa_maps.splitlines():
        kb = _PAGE_KB.search(line)
        page = int(kb.group(1)) * 1024 if kb else PAGE
        for node, pages in _NODE_PAGES.findall(line):
            total[int(node)] += int(pages) * page
    return dict(total)


@dataclass
class Placement:
    """Where each piece of training state lives: a host node, 'nvme', or 'device'."""
    params: int | str        # fp32 master parameters
    optimizer: int | str     # Adam moments
    grads: int | str         # gradients as the optimizer reads them
    activations: int | str = "device"   # saved activations / checkpoints

    def host_nodes(self) -> set[int]:
        return {v for v in (self.params, self.optimizer, self.grads, self.activations)
                if isinstance(v, int)}
