"""A buffer interleaved across NUMA nodes with weights, verified page by page.

    with allocate_interleaved(1 << 30, {0: 3, 2: 1}, page="4k") as buf:
        buf.fractions        # {0: 0.75, 2: 0.25}: where the pages really went

Two ways to place the pages, the first one the kernel offers:

weighted    MPOL_WEIGHTED_INTERLEAVE (Linux >= 6.9) on the range. Its weights are
            global (/sys/kernel/mm/mempolicy/weighted_interleave/nodeN), read when
            a page is allocated: they are set, the buffer faulted in, and the old
            weights (and `auto`) written back at once, so other processes see ours
            only for that moment. Needs root; page-granular.
ranges      mbind(MPOL_BIND) on consecutive chunks: of every sum(weights) chunks,
            the first w0 go to the first node, the next w1 to the second, ... The
            chunk is as small as the process's mapping limit allows (each range is
            a VMA): one page for buffers up to a few hundred MiB.

A single node (the 100:0 ends of a sweep) is a plain bound buffer. Proportions
found off the asked ones by more than one round of the pattern is a PlacementError.
"""
from __future__ import annotations

import errno
import math
import os
from dataclasses import dataclass, field
from fractions import Fraction
from functools import reduce

from . import sysinfo
from .errors import PlacementError, fmt_bytes
from .host import GUARD_BYTES, check_free, check_node, check_thp
from .verify import huge_coverage, page_nodes
from .mapping import Mapped

WEIGHTS_DIR = "sys/kernel/mm/mempolicy/weighted_interleave"
MAX_WEIGHT = 255             # the kernel keeps each weight in a u8
MAX_RANGES = 8192            # mbind ranges (VMAs) one buffer may use; max_map_count is ~65530
PAGE = 4096


@dataclass(eq=False)
class InterleavedBuffer(Mapped):
    """[addr, addr + length) spread over nodes; close it or use it as a context manager."""
    addr: int
    length: int
    weights: dict[int, int]          # asked, zero weights dropped
    fractions: dict[int, float]      # found: share of the pages on each node
    method: str                      # weighted / ranges / bind
    unit_bytes: int                  # bytes per interleave step (a page or a chunk)
    page_asked: str
    page_bytes_found: int
    huge_coverage: float
    notes: list[str] = field(default_factory=list)   # e.g. a kernel setting not restored
    _region: tuple[int, int] = field(default=(0, 0), repr=False)

    def found(self) -> dict:
        return {"interleave_method": self.method, "unit_bytes": self.unit_bytes,
                "page_bytes": self.page_bytes_found, "huge_coverage": self.huge_coverage,
                **{f"node{n}_fraction": f for n, f in sorted(self.fractions.items())}}


# ---- pure helpers (tested without a multi-node machine) ------------------------

def reduce_weights(weights: dict[int, int | float]) -> dict[int, int]:
    """Drop zero weights, divide by the common divisor, and scale into the kernel's
    1..255 (keeping the ratio as near as integers allow)."""
    if any(w < 0 for w in weights.values()):
        raise ValueError(f"weights must be non-negative: {weights}")
    kept = {int(n): w for n, w in weights.items() if w > 0}
    if not kept:
        raise ValueError("at least one node needs a positive weight")
    fracs = {n: Fraction(w).limit_denominator(1000) for n, w in kept.items()}
    scale = reduce(math.lcm, (f.denominator for f in fracs.values()))
    ints = {n: int(f * scale) for n, f in fracs.items()}
    g = reduce(math.gcd, ints.values())
    ints = {n: w // g for n, w in ints.items()}
    if max(ints.values()) <= MAX_WEIGHT:
        return dict(sorted(ints.items()))
    top = max(kept.values())
    return dict(sorted((n, max(1, round(w * MAX_WEIGHT / top))) for n, w in kept.items()))


def range_plan(length: int, weights: dict[int, int], unit: int) -> list[tuple[int, int, int]]:
    """(offset, length, node) ranges that bind `length` bytes in the weights' pattern:
    of every sum(weights) units, the first w0 to the first node, and so on.
    Consecutive units of one node are one range."""
    if unit <= 0 or length % unit:
        raise ValueError(f"length {length} is not a whole number of {unit}-byte units")
    nodes = list(weights.items())
    ranges: list[tuple[int, int, int]] = []
    off = 0
    while off < length:
        for node, w in nodes:
            size = min(w * unit, length - off)
            if size <= 0:
                break
            if ranges and ranges[-1][2] == node and ranges[-1][0] + ranges[-1][1] == off:
                ranges[-1] = (ranges[-1][0], ranges[-1][1] + size, node)
            else:
                ranges.append((off, size, node))
            off += size
    return ranges


def range_unit(length: int, weights: dict[int, int], page_bytes: int,
               max_ranges: int = MAX_RANGES) -> int:
    """The smallest chunk (a multiple of page_bytes) that keeps the ranges under max_ranges."""
    pages = -(-length // page_bytes)
    per_round = sum(weights.values())
    rounds_allowed = max(1, max_ranges // max(len(weights), 1))
    unit_pages = max(1, -(-pages // (per_round * rounds_allowed)))
    return unit_pages * page_bytes


def expected_fractions(weights: dict[int, int]) -> dict[int, float]:
    total = sum(weights.values())
    return {n: w / total for n, w in weights.items()}


def check_fractions(found: dict[int, float], weights: dict[int, int], length: int,
                    unit: int) -> str | None:
    """Why the found shares are not the asked ones (None when they are): every page on
    an asked node, each share within one round of the pattern (plus 0.5%)."""
    want = expected_fractions(weights)
    stray = {n: f for n, f in found.items() if n not in want and f > 0}
    if stray:
        return ", ".join(f"{f:.1%} on node {n}" for n, f in sorted(stray.items())) + \
            " (not asked for)"
    slack = 0.005 + sum(weights.values()) * unit / max(length, 1)
    off = {n: (found.get(n, 0.0), w) for n, w in want.items()
           if abs(found.get(n, 0.0) - w) > slack}
    if off:
        return ", ".join(f"node {n} has {f:.1%} of the pages, not {w:.1%}"
                         for n, (f, w) in sorted(off.items()))
    return None


# ---- the kernel's weights --------------------------------------------------------

def weights_dir(root: str = "/") -> str:
    return os.path.join(root, WEIGHTS_DIR)


def has_weighted_interleave(root: str = "/") -> bool:
    return os.path.isdir(weights_dir(root))


def read_kernel_weights(root: str = "/") -> dict[str, str]:
    """Every file of the weighted_interleave directory (nodeN, and `auto` on Linux >= 6.16)."""
    d = weights_dir(root)
    out = {}
    for name in sorted(os.listdir(d)):
        try:
            with open(os.path.join(d, name), encoding="utf-8") as f:
                out[name] = f.read().strip()
        except OSError:
            pass
    return out


def write_kernel_weights(weights: dict[int, int], root: str = "/") -> list[int]:
    """Set the nodes' weights; only those that differ are written (writing one turns
    the kernel's `auto` mode off). Returns the nodes written."""
    d = weights_dir(root)
    current = read_kernel_weights(root)
    written = []
    for node, w in weights.items():
        if current.get(f"node{node}") == str(w):
            continue
        with open(os.path.join(d, f"node{node}"), "w", encoding="utf-8") as f:
            f.write(f"{w}\n")
        written.append(node)
    return written


def restore_kernel_weights(saved: dict[str, str], root: str = "/") -> list[str]:
    """Write back what read_kernel_weights saw, where it changed: node weights first,
    then the rest — `auto` (Linux >= 6.16; some builds name it `__auto_type`), which
    recomputes the weights from the firmware's bandwidths. Returns what could not
    be restored (a kernel without firmware bandwidths refuses auto=true: ENODEV)."""
    d = weights_dir(root)
    now = read_kernel_weights(root)
    names = [n for n in saved if n.startswith("node")] + \
        [n for n in saved if not n.startswith("node")]
    failed = []
    for name in names:
        if now.get(name) == saved[name]:
            continue
        try:
            with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                f.write(saved[name] + "\n")
        except OSError as e:
            failed.append(f"{name}={saved[name]} ({e.strerror})")
    return failed


# ---- allocation ---------------------------------------------------------------------

def allocate_interleaved(length: int, weights: dict[int, int | float], page: str = "4k",
                         method: str = "auto", root: str = "/") -> InterleavedBuffer:
    """A buffer of at least `length` bytes whose pages are spread over the weights'
    nodes in their proportions, faulted in and verified.

    page: "4k" or "thp" (the interleave step is then a 2 MiB page). method: "auto"
    (weighted where the kernel has it and we may set its weights, else ranges),
    "weighted" or "ranges". Raises PlacementError with what to do."""
    if page not in ("4k", "thp"):
        raise PlacementError(f"interleaved buffers take page='4k' or 'thp', not {page!r}.")
    if method not in ("auto", "weighted", "ranges"):
        raise ValueError(f"method must be auto, weighted or ranges, not {method!r}")
    if length <= 0:
        raise ValueError(f"length must be positive, not {length}")
    try:
        w = reduce_weights(weights)
    except ValueError as e:
        raise PlacementError(f"interleave weights {weights}: {e}.") from None
    if len(w) == 1:
        return _single(length, next(iter(w)), w, page, root)

    page_bytes = PAGE
    if page == "thp":
        check_thp(root)
        page_bytes = sysinfo.thp_page_bytes(root)
    size = -(-length // page_bytes) * page_bytes
    shares = expected_fractions(w)
    for node, share in shares.items():
        mem = check_node(node, root)
        check_free(mem, int(size * share) + page_bytes * sum(w.values()))

    if method == "auto":
        method = "weighted" if _may_set_weights(root) else "ranges"
    elif method == "weighted" and not has_weighted_interleave(root):
        raise PlacementError("this kernel has no weighted interleave (Linux >= 6.9, "
                             f"/{WEIGHTS_DIR}); use method='ranges'.")

    from cxlbench import _native
    region_size = size + page_bytes + 2 * GUARD_BYTES
    region = _native.reserve(region_size)
    try:
        start = -(-(region + GUARD_BYTES) // page_bytes) * page_bytes
        _native.map_anonymous(size, 0, start)
        _native.madvise(start, size, _native.MADV_HUGEPAGE if page == "thp"
                        else _native.MADV_NOHUGEPAGE)
        notes: list[str] = []
        if method == "weighted":
            try:
                notes = _place_weighted(start, size, w, root)
                unit = page_bytes
            except _NoWeighted:
                method = "ranges"
        if method == "ranges":
            unit = range_unit(size, w, page_bytes)
            for off, n, node in range_plan(size, w, unit):
                _native.mbind(start + off, n, [node], "bind", strict=True)
            _populate(start, size, w)
        coverage, kernel_page = huge_coverage(start)
        if page == "thp" and coverage < 0.9:
            raise PlacementError(f"THP backed only {coverage:.0%} of the interleaved "
                                 f"{fmt_bytes(size)} buffer; compact memory or use page='4k'.")
        found = _fractions(start, size)
        why = check_fractions(found, w, size, unit)
        if why:
            raise PlacementError(f"the {fmt_bytes(size)} buffer interleaved {_ratio(w)} by "
                                 f"{method} did not land as asked: {why}; the nodes may be short "
                                 f"of free memory.")
        return InterleavedBuffer(start, size, w, found, method, unit, page,
                                 page_bytes if page == "thp" else kernel_page,
                                 coverage if page == "thp" else 0.0, notes, (region, region_size))
    except BaseException:
        _native.unmap(region, region_size)
        raise


class _NoWeighted(Exception):
    pass


def _may_set_weights(root: str) -> bool:
    d = weights_dir(root)
    return has_weighted_interleave(root) and os.access(d, os.W_OK) and \
        all(os.access(os.path.join(d, n), os.W_OK) for n in os.listdir(d))


def _place_weighted(start: int, size: int, w: dict[int, int], root: str) -> list[str]:
    """Weighted interleave with our weights set only while the pages are allocated;
    returns notes on what could not be put back."""
    from cxlbench import _native
    try:
        _native.mbind(start, size, list(w), "weighted_interleave", strict=True)
    except OSError as e:
        if e.errno == errno.EINVAL:          # the kernel has no mode 6
            raise _NoWeighted() from None
        raise
    saved = read_kernel_weights(root)
    failed: list[str] = []
    try:
        write_kernel_weights(w, root)
        _populate(start, size, w)
    except PermissionError:
        raise _NoWeighted() from None
    finally:
        failed = restore_kernel_weights(saved, root)
    return [f"the kernel's weighted-interleave setting {f} could not be restored after "
            f"placing the buffer" for f in failed]


def _populate(start: int, size: int, w: dict[int, int]) -> None:
    from cxlbench import _native
    try:
        _native.madvise(start, size, _native.MADV_POPULATE_WRITE)
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise PlacementError(f"could not allocate {fmt_bytes(size)} over nodes "
                                 f"{', '.join(map(str, w))}: {e.strerror}; ask for less.") from None
        _native.fault_in(start, size, PAGE)


def _fractions(start: int, size: int) -> dict[int, float]:
    nodes = page_nodes(start, size, PAGE)
    counts: dict[int, int] = {}
    for n in nodes:
        counts[n] = counts.get(n, 0) + 1
    bad = {n: c for n, c in counts.items() if n < 0}
    if bad:
        raise PlacementError(f"{sum(bad.values())} pages of the interleaved buffer are not "
                             f"present after faulting it in; ask for less memory.")
    return {n: c / len(nodes) for n, c in sorted(counts.items())}


def _ratio(w: dict[int, int]) -> str:
    return ":".join(str(v) for v in w.values()) + " over nodes " + ",".join(map(str, w))


def _single(length: int, node: int, w: dict[int, int], page: str, root: str) -> InterleavedBuffer:
    """One node: a plain bound buffer, under the same interface."""
    from .host import allocate
    buf = allocate(length, node, page=page, root=root)
    region = buf._region
    buf._region = (0, 0)                      # ownership moves to the interleaved buffer
    return InterleavedBuffer(buf.addr, buf.length, w, {node: buf.on_node_fraction}, "bind",
                             buf.length, page, buf.page_bytes_found, buf.huge_coverage, [], region)


__all__ = ["InterleavedBuffer", "allocate_interleaved", "reduce_weights", "range_plan",
           "range_unit", "check_fractions", "expected_fractions", "has_weighted_interleave",
           "read_kernel_weights", "write_kernel_weights", "restore_kernel_weights"]
