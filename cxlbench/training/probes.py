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


def device_adamw_params_per_s(n: int, device: torch.device, impl: str = "fused", reps: int = 5) -> float:
    """AdamW on n fp32 parameters held on device (the no-offload engine's optimizer)."""
    from cxlbench.training.optimizer import AdamWHyper, adamw_update
    p, g = torch.randn(n, device=device), torch.randn(n, device=device)
    m, v = torch.zeros(n, device=device), torch.zeros(n, device=device)
    step = torch.zeros((), dtype=torch.float32, device=device if impl == "fused" else "cpu")
    h = AdamWHyper()
    s = _median_seconds(lambda: adamw_update([p], [g], [m], [v], [step], h, impl), device, reps)
    return n / s
