"""torch's own copies on our buffers: the reference the device check's targets use.

The bandwidth family measures `impl=torch` cases with exactly the same buffers
(device memory from cudaMalloc, host memory from the placement layer,
page-locked with cudaHostRegister), timed the same way (queued behind the spin
kernel on the same stream, events around each iteration); only the copy is
torch's: `dst.copy_(src, non_blocking=True)`, which runs cudaMemcpyAsync for
contiguous same-dtype tensors. So "ours ÷ torch's" compares the copies alone.

torch is imported only here, only for those cases.
"""
from __future__ import annotations

import ctypes


class TorchCopies:
    """Tensors over raw ranges and copy operations on a given (cupy) stream."""

    def __init__(self, dev, stream):
        import torch
        self.torch = torch
        if not torch.cuda.is_available():
            from cxlbench.gpu.errors import Unavailable
            raise Unavailable("torch has no CUDA here (a CPU-only build?)")
        self.device = torch.device("cuda", dev.ordinal)
        torch.cuda.set_device(self.device)
        self.dev = dev
        self.stream = torch.cuda.ExternalStream(stream.ptr, device=self.device)

    def device_tensor(self, ptr: int, nbytes: int):
        """A uint8 tensor over device memory (through __cuda_array_interface__, no copy)."""
        return self.torch.as_tensor(self.dev.view(ptr, nbytes, "uint8"), device=self.device)

    def host_tensor(self, addr: int, nbytes: int, owner=None):
        """A uint8 CPU tensor over host memory (no copy); is_pinned() is True when the
        range is page-locked (cudaHostRegister)."""
        raw = (ctypes.c_char * nbytes).from_address(addr)
        raw._owner = owner
        return self.torch.frombuffer(raw, dtype=self.torch.uint8)

    def pinned(self, tensor) -> bool:
        """Whether torch sees a host tensor as page-locked (then copy_ is asynchronous)."""
        return bool(tensor.is_pinned())

    def copy_op(self, dsts: list, srcs: list, touched: dict | None = None):
        """op(k, stream): dsts[k % n].copy_(srcs[k % n]) on the timer's stream."""
        torch, stream, n = self.torch, self.stream, len(dsts)

        def op(k, _stream):
            j = k % n
            if touched is not None:
                touched[j] = True
            with torch.cuda.stream(stream):
                dsts[j].copy_(srcs[j], non_blocking=True)
        return op

    def version(self) -> str:
        return self.torch.__version__
