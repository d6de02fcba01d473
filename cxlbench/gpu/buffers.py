"""Buffers a GPU case uses, each closed exactly once (use them with `with` or an ExitStack).

DeviceBuffer    cudaMalloc'ed device memory (HBM)
PinnedHost      a placement-layer buffer on a NUMA node (verified there), page-locked
                for the GPU with cudaHostRegister, mapped for in-place access: the
                pinned bytes are on the tier asked for. (torch.pin_memory() and
                cudaHostAlloc allocate wherever the driver likes, and torch rounds
                the size up to a power of two; neither is used for a tier.)
PageableHost    a placement-layer buffer on a node, not registered (pageable copies)
ManagedBuffer   cudaMallocManaged memory, first touched on the host

host_array() views any host range as numpy; dev.view() views device-accessible
memory as an array of the device's array module.
"""
from __future__ import annotations

import ctypes

from cxlbench.closing import Closeable
from cxlbench.gpu.errors import Unavailable


def host_array(addr: int, nbytes: int, dtype="uint8", owner=None):
    """A numpy view of host memory [addr, addr + nbytes) (owner kept alive by it)."""
    import numpy as np
    raw = (ctypes.c_char * nbytes).from_address(addr)
    raw._owner = owner
    return np.frombuffer(raw, dtype=dtype)


class DeviceBuffer(Closeable):
    def __init__(self, dev, nbytes: int):
        free, _ = dev.mem_info()
        if nbytes > free:
            raise Unavailable(f"{nbytes >> 20} MiB of device memory asked, {free >> 20} MiB free")
        self.dev, self.nbytes = dev, nbytes
        self.ptr = dev.malloc(nbytes)

    def view(self, dtype="uint8", offset: int = 0, nbytes: int | None = None):
        n = self.nbytes - offset if nbytes is None else nbytes
        return self.dev.view(self.ptr + offset, n, dtype, self)

    def close(self) -> None:
        if self.ptr:
            self.dev.free(self.ptr)
            self.ptr = 0


class PageableHost(Closeable):
    """A host buffer on `node` with `page` pages, verified by the placement layer;
    PlacementError when it cannot be placed (the family records a skip)."""

    def __init__(self, nbytes: int, node: int, page: str = "4k"):
        from cxlbench.memory import allocate, native_missing
        why = native_missing()            # the placement layer's system calls
        if why:
            raise Unavailable(f"the C core (cxlbench._native) is not built here ({why}), so host "
                              f"buffers cannot be placed on a node; build it with `python setup.py "
                              f"build_ext --inplace`")
        self.buf = allocate(nbytes, node, page=page)
        self.nbytes = nbytes
        self.node = node
        self.addr = self.buf.addr

    @property
    def length(self) -> int:
        return self.buf.length

    def array(self, dtype="uint8", offset: int = 0, nbytes: int | None = None):
        n = self.nbytes - offset if nbytes is None else nbytes
        return host_array(self.addr + offset, n, dtype, self)

    def found(self) -> dict:
        f = self.buf.found()
        return {"page_bytes": f["page_bytes"], "huge_coverage": f["huge_coverage"],
                "pinned": "no"}

    def close(self) -> None:
        self.buf.close()


class PinnedHost(PageableHost):
    """A verified host buffer on `node`, page-locked with cudaHostRegister and mapped:
    `device` is its address for kernels. Its pages are checked on the node again after
    registering (page-locking must not have moved them)."""

    def __init__(self, dev, nbytes: int, node: int, page: str = "4k", mapped: bool = True):
        super().__init__(nbytes, node, page)
        self.dev = dev
        self.registered = False
        try:
            dev.host_register(self.addr, self.buf.length, mapped)
            self.registered = True
            self.device = dev.mapped_pointer(self.addr) if mapped else 0
            from cxlbench.memory import verify_on_node
            verify_on_node(self.addr, self.buf.length, node,
                           self.buf.page_bytes_found if page.startswith("hugetlb") else 4096)
        except BaseException:
            self.close()
            raise

    def found(self) -> dict:
        return {**super().found(), "pinned": "cudaHostRegister"}

    def close(self) -> None:
        if self.registered:
            self.registered = False
            try:
                self.dev.host_unregister(self.addr)
            finally:
                super().close()
        else:
            super().close()


class ManagedBuffer(Closeable):
    """cudaMallocManaged memory: `ptr` is valid on the host and the device."""

    def __init__(self, dev, nbytes: int, keep_free: float = 0.1):
        free, total = dev.mem_info()
        if nbytes > free - keep_free * total:
            raise Unavailable(f"a {nbytes >> 20} MiB managed allocation would not fit in the "
                              f"GPU's free memory ({free >> 20} MiB free, {int(keep_free * 100)}% "
                              f"kept back): managed memory is never oversubscribed here")
        self.dev, self.nbytes = dev, nbytes
        self.ptr = dev.malloc_managed(nbytes)

    def array(self, dtype="uint8"):
        """The host's view (touching it from the CPU brings pages to the host)."""
        return host_array(self.ptr, self.nbytes, dtype, self)

    def close(self) -> None:
        if self.ptr:
            self.dev.free(self.ptr)
            self.ptr = 0
