"""Write penalty: read vs write vs read-modify-write, R:W mixes, regular vs
non-temporal stores, and partial-line writes against full-line writes, per tier.

Every op is a pass over 64-byte lines of one buffer (cxlbench/_native/lines.c):

  read       every line read                     64 B counted per line
  3:1 2:1 1:1  of every R+W lines, R read, W written with full-line stores
  write      every line written (full line)     64 B
  rmw        every line loaded, changed, stored  128 B (64 read + 64 written)
  partial    the first `write_bytes` (default 8) bytes of every line stored:
             a cached partial store still moves whole lines (the cache fills the
             line first); a non-temporal one leaves the write-combining buffer
             partly written, which makes the memory controller read, merge and
             re-write the line where the ECC word is larger than the write.

store = regular | nt (non-temporal). Two metrics per iteration: bandwidth_GBps,
counting the bytes the instructions read and write as STREAM does (so a
partial write of 8 B per line counts 8 B; a regular store's write-allocate read
is not counted), and ns_per_line, the time per 64-byte line touched (all
threads together, timed by the slowest thread's CPU clock so that time another
process held a CPU is not counted) — the ratio of two ops' ns_per_line is the
slowdown. The
ratios, and the ECC state beside them, are derived by
cxlbench.analysis.derive.penalty_ratios: a ratio is what was measured, never
an "ECC penalty" by itself.

Each repetition allocates a fresh buffer on the tier; every timed iteration is
kept (column `iteration`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from cxlbench.benchmarks.bandwidth import thread_counts
from cxlbench.benchmarks.base import (Env, Planned, Show, host_pairs, memory_short, metrics, place,
                                      placement_found, sweep)
from cxlbench.benchmarks.sizes import array_bytes
from cxlbench.benchmarks.spec import Count, Size, Spec as BaseSpec, Threads as ThreadCount, within
from cxlbench.results.schema import Case, Metric, Sample

NAME = "write_penalty"
LINE = 64
OPS = {
    "read": {"reads": 1, "writes": 0},
    "3:1": {"reads": 3, "writes": 1},
    "2:1": {"reads": 2, "writes": 1},
    "1:1": {"reads": 1, "writes": 1},
    "write": {"reads": 0, "writes": 1},
    "rmw": {"reads": 0, "writes": 1, "rmw": True},
    "partial": {"reads": 0, "writes": 1},
}
STORES = ("regular", "nt")
#: An iteration's time is its slowest thread's CPU time: on a shared machine the
#: time another process held a CPU is not the op's (on an idle one it is the wall
#: clock). The ratios are the finding; they must not move with the neighbours.
CLOCK = "cpu"

METRICS = metrics(Metric("bandwidth_GBps", "GB/s", "higher"),
                  Metric("ns_per_line", "ns", "lower"))    # per 64-byte line, all threads
SHOW = Show("Write penalty", "Read, write and partial-line write bandwidth per tier.",
            x="threads", facets=("store",))

#: Thread counts: "auto" (1, 2, 4 ... every CPU), or counts where "all" is every CPU.
Threads = tuple[ThreadCount | Literal["all"], ...] | Literal["auto"]


@dataclass(kw_only=True)
class Spec(BaseSpec):
    op: tuple[Literal["read", "3:1", "2:1", "1:1", "write", "rmw", "partial"], ...] = tuple(OPS)
    store: tuple[Literal["regular", "nt"], ...] = STORES
    partial_bytes: tuple[Annotated[int, within(4, 64)], ...] = (8,)   # bytes a partial write stores per line
    threads: Threads = (1,)
    page: tuple[Literal["4k", "thp"], ...] = ("4k",)
    array_bytes: Size | Literal["auto"] = "auto"
    iterations: Count = 10


def plan(spec: Spec, env: Env) -> list[Planned]:
    size = array_bytes(spec.array_bytes, env.machine)
    planned = []
    for initiator, tier in host_pairs(spec, env):
        threads = thread_list(spec.threads, len(initiator.cpus))
        for p in sweep(op=spec.op, store=spec.store, threads=threads, page=spec.page):
            if p["op"] == "read" and p["store"] == "nt":
                continue                       # no stores to make non-temporal
            for wb in (spec.partial_bytes if p["op"] == "partial" else [LINE]):
                params = {**p, "write_bytes": wb, "array_bytes": size, "iterations": spec.iterations}
                case = Case(NAME, initiator.name, tier.name, tier.kind, params, spec.repetitions, spec.warmup)
                planned.append(Planned(case, cannot(params, tier, env), estimate(params, spec)))
    return planned


def thread_list(value, ncpus: int) -> list[int]:
    """Thread counts (see Threads); counts above the initiator's CPUs are dropped."""
    if value == "auto":
        return thread_counts(value, ncpus)
    counts = [ncpus if v == "all" else int(v) for v in value]
    return sorted({n for n in counts if 1 <= n <= ncpus})


def line_op(params: dict) -> dict:
    """The keyword arguments of _native.lines for a case's op."""
    op = dict(OPS[params["op"]])
    op["write_bytes"] = params["write_bytes"]
    op["nt"] = params["store"] == "nt"
    return op


def bytes_per_line(params: dict) -> float:
    op = line_op(params)
    per_write = 2 * LINE if op.get("rmw") else op["write_bytes"]
    return (op["reads"] * LINE + op["writes"] * per_write) / (op["reads"] + op["writes"])


def cannot(params: dict, tier, env: Env) -> str | None:
    wb = params["write_bytes"]
    if wb % 4 or not 4 <= wb <= LINE:
        return f"write_bytes {wb}: a multiple of 4 from 4 to 64"
    return memory_short(env, tier.node, params["array_bytes"])


def estimate(params: dict, spec: Spec) -> float:
    """Seconds, assuming ~2 GB/s of lines per thread in the worst case (partial NT) and
    ~1 GB/s to fault memory in."""
    lines_s = params["array_bytes"] / 2e9 / params["threads"]
    return 0.3 + spec.repetitions * (params["array_bytes"] / 1e9 + (params["iterations"] + spec.warmup) * lines_s)


def measure(case: Case, env: Env, info: dict) -> list[Sample]:
    from cxlbench import _native
    from cxlbench.topology import ecc
    p = case.params
    tier = env.tier(case.target)
    cpus = env.initiator(case.initiator).cpus[:p["threads"]]
    op = line_op(p)
    per_line = bytes_per_line(p)
    before = ecc.snapshot(env.root)
    samples = []
    for rep in range(case.repetitions):
        with place(p["array_bytes"], tier.node, p["page"]) as buf:
            lines = buf.length // LINE
            if case.warmup:
                _native.lines(buf.addr, buf.length, cpus, iterations=case.warmup, value=rep + 1, **op)
            times = _native.lines(buf.addr, buf.length, cpus, iterations=p["iterations"],
                                  value=rep + 1, clock=CLOCK, **op)
            found = placement_found(buf)
        for i, t in enumerate(times):
            where = {**found, "iteration": i}
            samples.append(Sample("bandwidth_GBps", lines * per_line / t / 1e9, rep, where))
            samples.append(Sample("ns_per_line", t * 1e9 / lines, rep, where))
    info["cpus"] = cpus
    info["ecc"] = ecc.describe(ecc.snapshot(env.root), tier, env.machine)
    moved = ecc.changes(before, ecc.snapshot(env.root))
    if moved:
        info.setdefault("warnings", []).extend(f"during this case: {m}" for m in moved)
    return samples
