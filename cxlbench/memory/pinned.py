"""Host buffers a GPU reads or writes: placed on a tier by this layer, then pinned or not.

PinnedHost      a placement-layer buffer on a NUMA node (verified there), page-locked
                for the GPU with cudaHostRegister, mapped for in-place access: the
                pinned bytes are on the tier asked for. (torch.pin_memory() and
                cudaHostAlloc allocate wherever the driver likes, and torch rounds
                the size up to a power of two; neither is used for a tier.)
PageableHost    a placement-layer buffer on a node, not registered (pageable copies)

They live with the placement layer, which owns where host memory is; the device
they are registered with is any cxlbench.gpu device (its host_register /
host_unregister / mapped_pointer), and device-only buffers stay in
cxlbench.gpu.buffers.
"""
from __future__ import annotations

from cxlbench.closing import Closeable
from cxlbench.gpu.buffers import host_array
from cxlbench.gpu.errors import Unavailable
from cxlbench.memory.host import allocate, native_missing
from cxlbench.memory.verify import verify_on_node


class PageableHost(Closeable):
    """A host buffer on `node` with `page` pages, verified by the placement layer;
    PlacementError when it cannot be placed (the family records a skip)."""

    def __init__(self, nbytes: int, node: int, page: str = "4k"):
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
