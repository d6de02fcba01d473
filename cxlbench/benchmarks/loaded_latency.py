"""Loaded latency (Intel MLC's signature figure): chase latency on a tier while
load threads on the same initiator stream to that tier, from idle to saturation.

One CPU of the initiator chases a random cycle over `working_set_bytes`; the
`load_threads` next CPUs each loop over their own `load_bytes` doing the
`mix` (read, or R:W like 3:1 / 2:1 / 1:1 — of every R+W lines, R read and W
written with full-line stores, `nt` non-temporal), waiting `delay` units after
every line. The delays are MLC's list (0 … 20000); a unit is one iteration of
an empty loop, about a core cycle (each case's info has the ns it took here).
Both figures of a point come from the same 250 µs sub-windows, kept only when
every thread had its CPU (see cxlbench/_native/loaded.c): `latency_ns` (ns per
dependent load) and `bandwidth_GBps` (what the load threads moved, counted as
STREAM counts: no write-allocate). The idle point is `load_threads` 0 (no load
thread, same code path), at bandwidth 0. The chase is timed in blocks of
tails.K_MIN loads, so every point also has its distribution (p50 … p99.99, max;
benchmarks.tails) and a histogram in the run's histograms.parquet; latency_ns
is that loop's mean less the clock's cost per block.

Each repetition is an independent trial: fresh buffers, a fresh random cycle,
every delay in turn. `delay` and `load_threads` are sample-level axes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cxlbench.benchmarks import tails
from cxlbench.benchmarks.base import (Env, Planned, Show, as_list, host_pairs, memory_short, metrics, place,
                                      placement_found, sweep)
from cxlbench.benchmarks.sizes import PAGE_BYTES, Page, array_bytes, hugetlb_short
from cxlbench.benchmarks.spec import Delays, Mix, Size, Spec as BaseSpec, Threads
from cxlbench.results.schema import Case, Metric, Sample

NAME = "loaded_latency"
METRICS = metrics(Metric("latency_ns", "ns", "lower"), Metric("bandwidth_GBps", "GB/s", "higher"),
                  *tails.TAIL_METRICS)
SHOW = Show("Loaded latency", "Pointer-chase latency while load threads stream to the same tier at "
            "decreasing injection delays: latency against the bandwidth achieved. The bandwidth is the bytes "
            "the load threads' instructions read and wrote (STREAM's counting): a store's write-allocate read "
            "is not counted, so at a 2:1 mix the memory moved a third more than shown (4 lines for 3: two reads, "
            "the store's write-allocate read and its write-back), twice as much at a write mix without nt stores.",
            facets=("mix",), pair=("bandwidth_GBps", "latency_ns"))


@dataclass(kw_only=True)
class Spec(BaseSpec):
    working_set: Size | Literal["auto"] = "auto"     # the chase's; auto: 4x the caches
    load_bytes: Size | Literal["auto"] = "auto"      # each load thread's
    load_threads: tuple[Threads, ...] | Literal["auto"] = "auto"   # auto: every CPU but the chase's
    delays: Delays = "mlc"                             # "mlc", "idle", or the delays
    page: tuple[Page, ...] = ("4k",)
    mix: tuple[Mix, ...] = ("read", "2:1")             # read, write or R:W
    nt: tuple[bool, ...] = (False,)
LINE = 64
MLC_DELAYS = (0, 2, 8, 15, 50, 100, 200, 300, 400, 500, 700, 1000, 1300, 1700, 2500, 3500,
              5000, 9000, 20000)
WARMUP_NS = 50_000_000
MIN_KEPT = 0.1           # a point needs a tenth of its duration in kept sub-windows (>= 10 ms at 0.1 s)
LIMIT = 6                # ... within 6 durations (a busy machine keeps few sub-windows)


def parse_mix(mix: str) -> tuple[int, int]:
    """"read" -> (1, 0), "write" -> (0, 1), "R:W" -> (R, W)."""
    named = {"read": (1, 0), "write": (0, 1)}
    if mix in named:
        return named[mix]
    try:
        r, w = (int(x) for x in str(mix).split(":"))
    except ValueError:
        raise ValueError(f"mix {mix!r}: use read, write or R:W (3:1, 2:1, 1:1)") from None
    if r < 0 or w < 0 or r + w == 0:
        raise ValueError(f"mix {mix!r}: R and W are non-negative, not both zero")
    return r, w


def parse_delays(value) -> list[int]:
    """"mlc" (MLC's 19 delays), "idle" or [] (the idle point alone), or a list /
    comma-separated string of non-negative ints."""
    if value in (None, "mlc"):
        return list(MLC_DELAYS)
    if value in ("idle", "", []):
        return []
    items = value.split(",") if isinstance(value, str) else as_list(value)
    delays = [int(x) for x in items]
    if any(d < 0 for d in delays):
        raise ValueError(f"delays must be non-negative: {value!r}")
    return delays


def delays_param(value) -> str:
    """How a case records its delays: "mlc", "idle", or "0,100,1000" (a plain string
    column)."""
    if value in (None, "mlc"):
        return "mlc"
    if not parse_delays(value):
        return "idle"
    return ",".join(str(d) for d in parse_delays(value))


def load_thread_counts(value, ncpus: int) -> list[int]:
    """"auto": every CPU of the initiator but the chase's (MLC's default); else the
    listed counts."""
    if value in (None, "auto"):
        return [max(ncpus - 1, 1)]
    return [int(n) for n in as_list(value)]


def plan(spec: Spec, env: Env) -> list[Planned]:
    chase_bytes = array_bytes(spec.working_set, env.machine)
    load_bytes = array_bytes(spec.load_bytes, env.machine)
    delays = delays_param(spec.delays)
    planned = []
    for initiator, tier in host_pairs(spec, env):
        counts = load_thread_counts(spec.load_threads, len(initiator.cpus))
        for p in sweep(page=spec.page, mix=spec.mix, nt=spec.nt, load_threads=counts):
            if p["nt"] and p["mix"] == "read":
                continue                      # nothing to store non-temporally
            params = {**p, "working_set_bytes": chase_bytes, "load_bytes": load_bytes,
                      "delays": delays, "line_bytes": LINE}
            case = Case(NAME, initiator.name, tier.name, tier.kind, params, spec.repetitions, spec.warmup)
            planned.append(Planned(case, cannot(params, initiator, tier, env),
                                   estimate(params, spec)))
    return planned


def cannot(params: dict, initiator, tier, env: Env) -> str | None:
    """Why a loaded-latency case cannot run here (None when it can)."""
    try:
        parse_mix(params["mix"])
        parse_delays(params["delays"])
    except ValueError as e:
        return str(e)
    ncpus = len(initiator.cpus)
    if ncpus < 2 and parse_delays(params["delays"]):
        return (f"{initiator.name} has {ncpus} CPU: loaded latency needs one to chase and at "
                f"least one to load")
    if parse_delays(params["delays"]) and params["load_threads"] > ncpus - 1:
        return (f"{params['load_threads']} load threads need {params['load_threads'] + 1} CPUs "
                f"on {initiator.name}, which has {ncpus}")
    page = params["page"]
    loads = params["load_threads"] if parse_delays(params["delays"]) else 0
    short = memory_short(env, tier.node, params["working_set_bytes"] + loads * params["load_bytes"])
    if short:
        return short
    if page.startswith("hugetlb"):
        return hugetlb_short(env.machine, tier.node, page, -(-params["working_set_bytes"] // PAGE_BYTES[page]) +
                             params["load_threads"] * -(-params["load_bytes"] // PAGE_BYTES[page]))
    return None


def estimate(params: dict, spec: BaseSpec) -> float:
    """Seconds: per repetition, every point (idle + delays) for about min_sample_s
    plus the warm-up (up to LIMIT times that on a busy machine); building the chain
    and faulting the buffers in (~0.2 µs per line, ~1 GB/s)."""
    points = 1 + len(parse_delays(params["delays"]))
    point_s = spec.min_sample_s + WARMUP_NS / 1e9
    setup = params["working_set_bytes"] / LINE * 2e-7 + \
        (params["working_set_bytes"] + params["load_threads"] * params["load_bytes"]) / 1e9
    return 0.5 + spec.repetitions * (1.5 * points * point_s + setup)


# ---- measuring ----------------------------------------------------------------------

def measure(case: Case, env: Env, info: dict) -> list[Sample]:
    p = case.params
    tier = env.tier(case.target)
    cpus = env.initiator(case.initiator).cpus
    samples: list[Sample] = []
    for rep in range(case.repetitions):
        chase = place(p["working_set_bytes"], tier.node, p["page"])
        loads = p["load_threads"] if parse_delays(p["delays"]) else 0    # idle only: none
        load = place(max(p["load_bytes"] * loads, 4096), tier.node, p["page"])
        with chase, load:
            found = placement_found(chase, load)
            samples += curve(chase, load, cpus, p, rep, found, env, info, seed=case.seed(rep),
                             first=case.first_repetition, tails_too=True)
    return samples


def curve(chase, load, cpus: list[int], p: dict, rep: int, found: dict, env: Env,
          info: dict, extra: dict | None = None, *, seed: int, first: int = 0,
          tails_too: bool = False) -> list[Sample]:
    """One repetition's points — idle, then every delay — on buffers already placed
    (any object with addr and length: a HostBuffer, an interleaved buffer); seed: the
    chase's cycle (Case.seed(rep), distinct across processes); first: where this
    process's repetitions start in the case's (Case.first_repetition), so that a
    warning names the run's repetition, and two processes' drops stay two warnings. tails_too: each point's
    tail metrics and histogram as well (a family that declares tails.TAIL_METRICS)."""
    from cxlbench import _native
    reads, writes = parse_mix(p["mix"])
    chase_cpu, load_cpus = cpus[0], list(cpus[1:1 + p["load_threads"]])
    duration_ns = int(env.spec.min_sample_s * 1e9)
    heads = _native.chase_init(chase.addr, chase.length, LINE, 0, 1, seed)
    op = {"reads": reads, "writes": writes, "nt": bool(p.get("nt", False))}
    if rep == 0:
        info["chase_cpu"], info["load_cpus"] = chase_cpu, load_cpus
        info["delay_ns_per_unit"] = round(_delay_ns(chase_cpu), 4)
        info["kept_fraction"] = {}
    out: list[Sample] = []
    points = [(0, [])] + [(d, load_cpus) for d in parse_delays(p["delays"])]
    for delay, threads in points:
        r = _native.loaded_latency(heads, chase_cpu, load.addr, load.length, threads,
                                   delay=delay, warmup_ns=WARMUP_NS, duration_ns=duration_ns,
                                   limit_ns=LIMIT * duration_ns, k=tails.K_MIN, **op)
        kept = r["chase_ns"] / duration_ns
        label = "idle" if not threads else str(delay)
        info["kept_fraction"][label] = round(min(kept, info["kept_fraction"].get(label, 9.9)), 3)
        # the plain wall-clock figure over every sub-window, for comparison
        all_clock_ns = r["overhead_ns"] * r["all_chase_steps"] / r["k"]
        info.setdefault("wall_clock_latency_ns", {}).setdefault(label, []).append(
            round((r["all_chase_ns"] - all_clock_ns) / max(r["all_chase_steps"], 1), 2))
        info.setdefault("timer_overhead_ns", {}).setdefault(label, []).append(
            round(r["overhead_ns"], 2))
        if kept < MIN_KEPT or r["chase_steps"] == 0:
            info.setdefault("warnings", []).append(
                f"repetition {first + rep}, delay {label}: only {r['windows_kept']} of {r['windows']} "
                f"sub-windows had every thread on its CPU (the machine is busy); point dropped")
            continue
        where = {**found, **(extra or {}), "delay": delay, "load_threads": len(threads)}
        dist = tails.Distribution.from_hist(r["hist"], r["k"], r["overhead_ns"])
        clock_ns = r["overhead_ns"] * r["chase_steps"] / r["k"]     # one clock read a block
        out.append(Sample("latency_ns", (r["chase_ns"] - clock_ns) / r["chase_steps"], rep, where))
        if tails_too:
            out += tails.samples(rep, where, dist, None)
            info.setdefault(tails.HISTOGRAMS, []).append(dist.record(rep, "chase", label))
        bw = r["load_bytes"] / r["load_ns"] if threads and r["load_ns"] else 0.0
        out.append(Sample("bandwidth_GBps", bw, rep, where))
    return out


def _delay_ns(cpu: int) -> float:
    """ns per delay unit on the chase CPU (the load CPUs are the same kind)."""
    import os

    from cxlbench import _native
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, [cpu])
        return _native.delay_ns_per_unit()
    finally:
        os.sched_setaffinity(0, before)
