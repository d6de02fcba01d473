"""Scatter the kernel's free pool, so that two tools started while this runs draw
their 4 KiB pages from the same kind of frames.

Why: on a KVM guest a 4 KiB-page chase over 1 GiB reads up to a third slower on
scattered frames than on a buffer carved from one free block (docs/validation.md),
and two processes started a minute apart can get frames as unlike as that. Taking
GIB in 4 KiB pages and giving a random half back leaves no free block larger than a
few pages there; order-0 allocations then come from those first, for both tools.
Usage: python scripts/scatter_free_pool.py GIB   (prints "ready", holds until SIGTERM)
"""
import mmap
import random
import signal
import sys

PAGE = 4096


def main(gib: int) -> None:
    pages = gib << 18
    m = mmap.mmap(-1, pages * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_NOHUGEPAGE)     # 4 KiB frames, or the half given back is whole 2 MiB pages
    for i in range(pages):
        m[i * PAGE] = 1
    order = list(range(pages))
    random.Random(1).shuffle(order)
    for i in order[: pages // 2]:
        m.madvise(mmap.MADV_DONTNEED, i * PAGE, PAGE)
    print("ready", flush=True)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    signal.sigwait({signal.SIGTERM, signal.SIGINT})


if __name__ == "__main__":
    main(int(sys.argv[1]))
