"""The latency a load sees, as a distribution: the chase timed in blocks of k
dependent loads (cxlbench/_native/chase.c), counted into a log-linear histogram,
reduced here to percentiles of ns per load.

Why blocks and not single loads: a clock read costs ~20 ns on a VM and orders
itself after the loads before it, so timing each load alone would add a clock
read to every 100-300 ns load and measure the clock as much as the memory. A
block of k = 8 loads on DRAM or CXL (60-400 ns each) lasts 0.5-3 µs: the clock
is a few percent of it (measured and subtracted), and one load that stalls a
microsecond (a refresh, a page walk, a link retry) still moves its block by
125 ns per load, in the tail, instead of being averaged away over thousands.
On caches a block of 8 would be mostly clock, so k grows until a block lasts
BLOCK_NS; a percentile is then over means of k loads, which the histogram
records beside it.

The floor: the same timing of a chase that stays in L1 (4 KiB), on the same CPU
in the same repetition, with k chosen so its blocks last as long as the tier's.
Its spread is what the clock, interrupts and the hypervisor add to a block of
that duration; shifted onto the tier's median (`floor_p99_ns` ... = the tier's
p50 + the floor's pX - the floor's p50), it is the tail the tier would show if
its memory added none. A tier's tail at or below its floor is the machine's
(analysis.headlines.against_floor compares them repetition by repetition).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from cxlbench.results.schema import Metric, Sample

K_MIN = 8                 # loads per block on DRAM / CXL (see above)
BLOCK_NS = 500            # ... and at least this long where loads are fast
FLOOR_BYTES = 4096        # the floor's chase: 64 lines, in L1 on every CPU
FLOOR_SHARE = 4           # the floor times a quarter of the tier's blocks

#: (metric, percentile) of ns per load; max_ns is the slowest block's.
PERCENTILES = (("p50_ns", 50.0), ("p90_ns", 90.0), ("p99_ns", 99.0), ("p99_9_ns", 99.9),
               ("p99_99_ns", 99.99))
FLOOR_OF = {"p99_ns": "floor_p99_ns", "p99_9_ns": "floor_p99_9_ns", "p99_99_ns": "floor_p99_99_ns"}
TAIL_METRICS = tuple(Metric(name, "ns", "lower") for name, _ in PERCENTILES) + (
    Metric("max_ns", "ns", "lower"),)
FLOOR_METRICS = tuple(Metric(name, "ns", "lower") for name in FLOOR_OF.values())
#: Each metric in words, as a table or a gate names it: what it is a percentile of.
WORDS = {**{name: f"p{pct:g} of k-load blocks" for name, pct in PERCENTILES},
         **{floor: f"floor p{pct:g} of k-load blocks" for name, pct in PERCENTILES
            if (floor := FLOOR_OF.get(name))},
         "max_ns": "slowest k-load block"}
#: The figures a precision target does not chase (analysis.reduction.case_precision):
#: everything beyond the median, and the floor's.
FAR_TAIL = frozenset(m.name for m in TAIL_METRICS + FLOOR_METRICS if m.name != "p50_ns")
#: Where a family leaves its histograms for the store's side table (histograms.parquet).
HISTOGRAMS = "histograms"


@dataclass
class Distribution:
    """One timed pass: blocks of k loads by their ns (a histogram of kept blocks:
    those in sub-windows the thread held its CPU), the clock's cost per block."""
    k: int
    overhead_ns: float
    lower: list[int]
    width: list[int]
    count: list[int]
    n: int
    sum_ns: int
    max_ns: int
    lost_blocks: int = 0
    lost_ns: int = 0
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_native(cls, d: dict) -> "Distribution":
        h = d["kept"]
        lower, width, count = (list(col) for col in zip(*h["buckets"])) if h["buckets"] else ([], [], [])
        overhead, extra = d["overhead_ns"], {}
        fastest = min((lo for lo, c in zip(lower, count) if c), default=None)
        if fastest is not None and overhead > fastest:
            # Every block holds one clock cost, so that cost is at most the fastest block's
            # (the lower edge of its bucket). An empty-block estimate above it is wrong for
            # these blocks (seen under QEMU's TCG, where it read past the mean and made the
            # mean negative): the bound is taken, the estimate kept beside it.
            overhead, extra = float(fastest), {"overhead_estimated_ns": round(overhead, 3)}
        return cls(d["k"], overhead, lower, width, count, h["n"], h["sum_ns"], h["max_ns"],
                   d["lost_blocks"], d["lost_ns"], extra)

    def per_load(self, block_ns: float) -> float:
        """ns per load of a block that took block_ns (the clock's cost taken off)."""
        return max(block_ns - self.overhead_ns, 0.0) / self.k

    def block_at(self, pct: float) -> float:
        """The block duration at a percentile (nearest rank), the middle of its bucket."""
        if self.n == 0:
            return math.nan
        rank = max(1, math.ceil(pct / 100 * self.n))
        seen = 0
        for lo, w, c in zip(self.lower, self.width, self.count):
            seen += c
            if seen >= rank:
                return min(lo + (w - 1) / 2, self.max_ns)
        return float(self.max_ns)

    def mean_ns(self) -> float:
        """Mean ns per load of the histogram (each bucket at its middle): checked
        against the mean figure, it shows the histogram holds the loop's time."""
        if not self.n:
            return math.nan
        total = sum(c * (lo + (w - 1) / 2) for lo, w, c in zip(self.lower, self.width, self.count))
        return self.per_load(total / self.n)

    def exact_mean(self) -> float:
        """Mean ns per load of the kept blocks from their exact sum (not the buckets)."""
        return (self.sum_ns - self.n * self.overhead_ns) / (self.n * self.k) if self.n else math.nan

    def wall_mean(self) -> float:
        """Mean ns per load over every block, kept or lost: the plain wall clock, as a
        chase that does not watch its CPU (multichase, lmbench) reports it."""
        blocks = self.n + self.lost_blocks
        return (self.sum_ns + self.lost_ns - blocks * self.overhead_ns) / (blocks * self.k) if blocks else math.nan

    def percentiles(self) -> dict[str, float]:
        out = {name: self.per_load(self.block_at(p)) for name, p in PERCENTILES}
        out["max_ns"] = self.per_load(self.max_ns) if self.n else math.nan
        return out

    @classmethod
    def from_hist(cls, hist: dict, k: int, overhead_ns: float) -> "Distribution":
        """From a histogram alone (loaded_latency's: its lost blocks are not counted)."""
        return cls.from_native({"kept": hist, "k": k, "overhead_ns": overhead_ns,
                                "lost_blocks": 0, "lost_ns": 0})

    def record(self, repetition: int, kind: str, point: str = "") -> dict:
        """The histogram as the store's side table takes it: kind "chase" or "floor";
        point: which point of a curve (loaded latency's "idle", "0", "2", ...)."""
        return {"repetition": repetition, "kind": kind, "point": point, "k": self.k,
                "overhead_ns": round(self.overhead_ns, 3), "lower_ns": self.lower,
                "width_ns": self.width, "count": self.count}


def block_loads(ns_per_load: float) -> int:
    """k: K_MIN on memory, more where loads are so fast a block would be under BLOCK_NS."""
    if not ns_per_load or ns_per_load <= 0 or math.isnan(ns_per_load):
        return K_MIN
    return max(K_MIN, math.ceil(BLOCK_NS / ns_per_load))


def timed_distribution(head: int, loads: int) -> tuple[float | None, Distribution]:
    """The chain from head timed in blocks, about `loads` loads (a short untimed
    pass first picks k): (the mean figure, the distribution). Both are over the kept
    blocks, those of sub-windows in which the thread held its CPU: a window it lost
    holds time no load was waiting on memory (another thread ran, or the hypervisor
    ran another guest), and counting it would add the machine's contention to the
    memory's latency (as loaded_latency's chase figure does not either). The mean
    figure is their sum less the clock's cost per block, per load; None when no
    block was kept. The wall clock over every block is wall_mean()."""
    from cxlbench import _native
    probe = min(loads, 1 << 16)
    k = block_loads(_native.chase_run([head], probe) / probe)
    d = Distribution.from_native(_native.chase_dist(head, k, max(loads // k, 1)))
    return (d.exact_mean() if d.n else None), d


def floor_distribution(buf_addr: int, tier: Distribution, tier_ns: float, seed: int) -> Distribution:
    """The L1 chase (a FLOOR_BYTES buffer already placed at buf_addr) timed in blocks
    as long as the tier's; its percentiles are in the tier's units (block ns / the
    tier's k)."""
    from cxlbench import _native
    heads = _native.chase_init(buf_addr, FLOOR_BYTES, 64, 0, 1, seed)
    steps = 1 << 18
    _native.chase_run(heads, steps)                       # warm: every line in L1
    l1_ns = _native.chase_run(heads, steps) / steps
    k = max(tier.k, round(tier.k * tier_ns / max(l1_ns, 0.01)))
    d = Distribution.from_native(_native.chase_dist(heads[0], k, max(tier.n // FLOOR_SHARE, 1024)))
    d.extra.update({"l1_ns_per_load": round(l1_ns, 3), "l1_loads_per_block": k})
    d.k = tier.k      # per tier load: a block of the same duration holds tier.k loads there
    return d


def floor_metrics(tier: dict[str, float], floor: Distribution) -> dict[str, float]:
    """The tier's p50 plus the floor's spread above its own p50, per percentile."""
    f = floor.percentiles()
    return {FLOOR_OF[name]: tier["p50_ns"] + (f[name] - f["p50_ns"]) for name in FLOOR_OF}


def samples(rep: int, where: dict, dist: Distribution, floor: Distribution | None) -> list[Sample]:
    """The percentile samples of one repetition (and the floor's, when measured); none
    for a repetition that kept no block (its thread lost its CPU in every window): a
    tail of nothing is not a figure. The same holds for the floor's own chase alone
    (seen in the QEMU test bed, whose emulated CPUs lose every window at times): its
    figures are left out of that repetition, and the tier's stand."""
    if dist.n == 0:
        return []
    pct = dist.percentiles()
    out = [Sample(name, value, rep, where) for name, value in pct.items()]
    if floor is not None and floor.n:
        out += [Sample(name, value, rep, where) for name, value in floor_metrics(pct, floor).items()]
    return out
