"""Pointer-chase chains for the GPU, built with numpy or cupy (the same code).

A chain visits n nodes, `stride` bytes apart, in one cycle: node order[i]
holds the address of node order[i + 1], the last the first. Addresses are
absolute (the base the device sees plus the offset), so the chase kernel is a
bare dependent load, `p = *p`, with no arithmetic between loads.

  random      order is a random permutation: every load misses whatever the
              working set outgrows (the stride sets how far apart lines are:
              64 B for the caches, the page size or more for the TLBs)
  sequential  order is 0, 1, 2, ...: a fixed stride, as the published GPU
              microbenchmarks use to find cache line and TLB geometry

After k steps from order[0] the chase is at order[k % n]: the kernel's final
address is checked against that, so a chase that skipped loads is refused.
"""
from __future__ import annotations

PATTERNS = ("random", "sequential")


def nodes(working_set: int, stride: int) -> int:
    if stride < 8 or stride % 8:
        raise ValueError(f"the chase stride must be a multiple of 8 bytes, not {stride}")
    n = working_set // stride
    if n < 2:
        raise ValueError(f"a {working_set} B working set holds fewer than 2 nodes {stride} B apart")
    return n


def order(n: int, pattern: str, seed: int, xp):
    """Node indices in visiting order (int64)."""
    if pattern == "random":
        try:
            return xp.random.RandomState(seed).permutation(n).astype(xp.int64)
        except Exception:            # noqa: BLE001 - cupy's cuRAND library missing: numpy's permutation
            import numpy as np
            if xp is np:
                raise
            return xp.asarray(np.random.RandomState(seed).permutation(n).astype(np.int64))
    if pattern == "sequential":
        return xp.arange(n, dtype=xp.int64)
    raise ValueError(f"unknown chase pattern {pattern!r} (use {', '.join(PATTERNS)})")


def link(words, base: int, visit, stride: int, xp) -> int:
    """Write the chain into `words` (a uint64 view of the buffer starting at the
    address `base` as the device sees it); returns the start address."""
    step = stride // 8
    nxt = xp.roll(visit, -1).astype(xp.uint64) * xp.uint64(stride) + xp.uint64(base)
    words[visit * step] = nxt
    return base + int(visit[0]) * stride


def expected(base: int, visit, stride: int, steps: int) -> int:
    """Where a chase started at visit[0] is after `steps` loads."""
    return base + int(visit[steps % len(visit)]) * stride


def walk(words, base: int, start: int, steps: int) -> int:
    """The chase on the host (tests): follow `steps` links from `start`."""
    p = start
    for _ in range(steps):
        p = int(words[(p - base) // 8])
    return p
