"""The physical contiguity of another process's largest anonymous mapping (a peer
tool's arena), read once its pages are in: the share of its present 4 KiB pages whose
frame is next to the previous page's, as cxlbench records `phys_contiguity` for its
own buffers. Needs root (Linux hides frames otherwise): prints "hidden" then.
Usage: python scripts/arena_contiguity.py PID   (prints a fraction, or "hidden"/"gone")
"""
import sys
import time

import numpy as np

PAGE = 4096


def largest_anonymous(pid: str) -> tuple[int, int]:
    best = (0, 0)
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) == 5:        # no backing file: anonymous
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                if hi - lo > best[1] - best[0]:
                    best = (lo, hi)
    return best


def resident_kib(pid: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def contiguity(pid: str) -> str:
    lo, hi = largest_anonymous(pid)
    # wait for the arena to be faulted in (the peer writes its chase first), polling
    # the cheap RSS rather than walking the page tables beside the chase
    deadline = time.monotonic() + 30
    while resident_kib(pid) * 1024 < 0.95 * (hi - lo) and time.monotonic() < deadline:
        time.sleep(0.2)
    with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        pagemap.seek(lo // PAGE * 8)
        entries = np.frombuffer(pagemap.read((hi - lo) // PAGE * 8), dtype=np.uint64)
    present = (entries >> np.uint64(63)) == 1
    frames = (entries & np.uint64((1 << 55) - 1)).astype(np.int64)
    if present.any() and not frames[present].any():
        return "hidden"
    both = present[1:] & present[:-1]
    adjacent = both & (np.abs(np.diff(frames)) == 1)
    return f"{adjacent.sum() / max(both.sum(), 1):.4f}"


if __name__ == "__main__":
    try:
        print(contiguity(sys.argv[1]))
    except (FileNotFoundError, ProcessLookupError, StopIteration):
        print("gone")
