"""The microbenchmark rates the step-time model needs, measured in the run itself.

Each probe times work in ATen kernels (or on the GPU with CUDA events) long
enough to dwarf the timer, and returns the median of a few repetitions.
"""
from __future__ import annotations

import statistics
import time

import torch


def _median_seconds(fn, device: torch.device, reps: int = 5, min_s: float = 0.02) -> float:
    """Median seconds per call of fn over `reps` repetitions, each lasting about min_s.

    On a GPU each repetition is n calls between two CUDA events, n calibrated on the
    warm-up calls. On a CPU each repetition calls fn until min_s has passed, so a
    stall (another process on the cores) lengthens one repetition, not the probe."""
    if device.type == "cuda":
        def timed(n: int) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(n):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3

        first = min(timed(1) for _ in range(3))      # warm-up; min: a stall is not the cost
        n = max(1, int(min_s / max(first, 1e-9)))
        return statistics.median(timed(n) / n for _ in range(reps))

    fn()                                             # warm-up
    per_call = []
    for _ in range(reps):
        count, t0 = 0, time.perf_counter()
        while True:
            fn()
            count += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= min_s:
                break
        per_call.append(elapsed / count)
    return statistics.median(per_call)


def matmul_flops(device: torch.device, dtype: torch.dtype, m: int, k: int, n: int,
                 reps: int = 5, min_s: float = 0.02) -> float:
    """FLOP/s of (m×k)@(k×n) in dtype on device (2·m·k·n FLOPs per product)."""
    a = torch.randn(m, k, device=device).to(dtype)
    b = torch.randn(k, n, device=device).to(dtype)
    out = torch.empty(m, n, device=device, dtype=dtype)
    s = _median_seconds(lambda: torch.matmul(a, b, out=out), device, reps, min_s)
    return 2 * m * k * n / s


def peak_matmul_flops(device: torch.device, dtype: torch.dtype) -> float:
    """The matrix rate the MFU is quoted against: a large square product (8192³ on a
    GPU in bf16; 1024³ on a CPU, in the compute dtype)."""
    size = 8192 if device.type == "cuda" else 1024
    return matmul_flops(device, dtype, size, size, size, reps=5, min_s=0.1 if device.type == "cuda" else 0.05)


def copy_Bps(dst: torch.Tensor, src: torch.Tensor, reps: int = 5, min_s: float = 0.02) -> float:
    """Bytes/s of dst.copy_(src): H2D or D2H between pinned host and a GPU (timed on
    the GPU), or a host memcpy between two buffers."""
    device = dst.device if dst.device.type == "cuda" else src.device
    nbytes = src.numel() * src.element_size()
    s = _median_seconds(lambda: dst.copy_(src, non_blocking=True), device, reps, min_s)
    return nbytes / s


def seconds(fn, device: torch.device) -> float:
    """Wall-clock seconds of one call of fn, the device synchronised on both sides (a
    GPU's queued work is counted, not only its launch)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


def copy_spans_Bps(dst: torch.Tensor, src: torch.Tensor, spans: list[tuple[int, int]],
                   reps: int = 5, min_s: float = 0.02) -> float:
    """Bytes/s of copying src into dst span by span, as the engine does (one copy per
    parameter tensor from the gradient hooks, one per optimizer chunk back): a small
    model's copies cost their calls, not their bytes."""
    device = dst.device if dst.device.type == "cuda" else src.device
    nbytes = sum(n for _, n in spans) * src.element_size()

    def copies() -> None:
        for start, n in spans:
            dst[start:start + n].copy_(src[start:start + n], non_blocking=True)
    return nbytes / _median_seconds(copies, device, reps, min_s)


def evictor(nbytes: int):
    """A call that writes nbytes of its own (twice the LLC): what the forward and
    backward do to the caches before the optimizer steps. None when nbytes is 0."""
    if nbytes <= 0:
        return None
    buf = torch.zeros(nbytes // 4, dtype=torch.float32)
    return lambda: buf.add_(1.0)


def optimizer_params_per_s(opt: torch.optim.Optimizer, reps: int = 5, before_each=None) -> float:
    """Parameters/s of an optimizer's own step over its own parameter tensors (one
    kernel call per tensor, or per group for foreach and fused): the no-offload
    engine's R_opt. Gives every parameter a gradient first; the parameters move on."""
    params = [p for g in opt.param_groups for p in g["params"]]
    for p in params:
        p.grad = torch.randn_like(p).mul_(1e-3)
    device = params[0].device
    times = []
    for i in range(reps + 1):
        if before_each is not None:
            before_each()
        elapsed = seconds(opt.step, device)
        if i:
            times.append(elapsed)
    return sum(p.numel() for p in params) / statistics.median(times)
