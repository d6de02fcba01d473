"""Buffers a GPU case uses, each closed exactly once (use them with `with` or an ExitStack).

DeviceBuffer    cudaMalloc'ed device memory (HBM)
ManagedBuffer   cudaMallocManaged memory, first touched on the host

Host buffers on a tier, pinned (PinnedHost) or pageable (PageableHost), are the
placement layer's: cxlbench.memory.pinned.

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
