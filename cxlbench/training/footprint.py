"""What one GPU holds in HBM during a training step, part by part: the what-if's and
the advisor's "fits" come from here, so that one GPU priced either way holds the same.

The engines it describes free each parameter's gradient once it is on its way to the
host (cxlbench's offload engine copies it in a post-accumulate hook and drops it;
DeepSpeed reduces into a bucket and moves the partition), so an offloaded GPU holds
its bf16 parameters, a bucket of gradients in flight and the activations.
"""
from __future__ import annotations

#: The gradients' reduce bucket a GPU holds while the partitions go to the host:
#: DeepSpeed's default, zero_optimization.reduce_bucket_size = 5e8 elements, bf16
REDUCE_BUCKET_BYTES = 2 * 500_000_000


def hbm_parts(zero: int, offload: bool, n: int, gpus: int, unit_params: float, activations: int) -> dict[str, float]:
    """What one GPU holds, part by part (bytes): the bf16 parameters whole (ZeRO-2), or
    its partition of them and two gathered units, the one computing and the one
    prefetched (ZeRO-3; `unit_params` the largest module gathered at once); the
    gradients' reduce bucket, and with the optimizer in HBM its gradient partition and
    its partition of the fp32 master, m and v (12 B a parameter) — offloaded, DeepSpeed
    keeps the gradient partitions on the host; and the activations."""
    share = f"(its 1/{gpus})"
    parts = {"bf16 parameters (whole)": 2 * n} if zero == 2 else {
        f"bf16 parameters {share}": 2 * n / gpus, "two gathered units": 2 * 2 * unit_params}
    if offload or gpus > 1:          # one GPU with its whole gradients has nothing to bucket
        parts["reduce bucket"] = min(REDUCE_BUCKET_BYTES, 2 * n)    # never more than all the gradients
    if not offload:
        parts[f"bf16 gradients {share}"] = 2 * n / gpus
        parts[f"fp32 master, m and v {share}"] = 12 * n / gpus
    parts["activations"] = activations
    return parts


def hbm_need(zero: int, offload: bool, n: int, gpus: int, unit_params: float, activations: int) -> int:
    """What one GPU holds (hbm_parts), in all."""
    return int(sum(hbm_parts(zero, offload, n, gpus, unit_params, activations).values()))


__all__ = ["REDUCE_BUCKET_BYTES", "hbm_parts", "hbm_need"]
