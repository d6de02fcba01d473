"""NVMe: direct I/O latency, IOPS and bandwidth on a declared directory, and the file as memory.

Axes (case parameters):
  rw           fio's names: randread, randwrite, read, write (sequential) — or mmap-chase
  block_bytes  I/O size (4 KiB random; 128 KiB ... 4 MiB sequential)
  qd           I/Os in flight
  engine       psync (pread/pwrite, qd 1) or libaio (Linux AIO); "auto": psync at qd 1
  io           direct (O_DIRECT) or buffered (only where the suite allows it: every
               figure of a directory without working O_DIRECT is labelled so)
  buffer_page  page size of the I/O buffers (4k, as fio's malloc'ed buffers, or thp):
               a direct transfer is split at page boundaries, so on some machines
               (VMs especially) large sequential I/O is faster from huge pages
  file_bytes   test file size; host_node: the NUMA node the I/O buffers are on
  runtime_s    seconds one repetition's timed I/O lasts

Metrics, per repetition (an independent trial: a fresh random order of the
file's blocks, fio's random map; sequential I/O goes on from where the warm-up
or the previous repetition stopped, as fio's does after its ramp, wrapping at
the end of the file, so no repetition re-reads what was just read):
  iops, bandwidth_GBps (10^9 B/s of payload), and latency_ns at percentile 50,
  99 and 99.9 — each I/O's latency from its submission to its completion, the
  `percentile` column telling the three apart. Keeping the percentiles of
  every repetition rather than every I/O's latency: one repetition is 10^3-10^5
  I/Os, the inner iterations of one trial (as the chase's millions of loads
  are, which the latency family reduces to one mean); what gates and reports
  need is the distribution's shape per trial and its spread across trials,
  and the raw rows would be most of a run's results.
  mmap-chase: latency_ns per dependent load over a MAP_SHARED mapping of a
  file whose pages were written back and evicted first (verified with
  mincore), one page per step, readahead off (MADV_RANDOM): each step is a
  major fault reading one 4 KiB page, the "swap tier" latency. Stored with
  the faults counted and the pages cached before and after.
"""
from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from typing import Annotated, Literal

from cxlbench.benchmarks.base import Env, Headline, Planned, Show, Skip, free_memory, metrics, place
from cxlbench.benchmarks.spec import Count, Seconds, Size, Spec as BaseSpec, at_least
from cxlbench.results.schema import Case, Metric, Sample
from cxlbench.storage.interrupts import completion_irqs, issuing_cpu, taken

NAME = "storage"
IO_RW = ("randread", "randwrite", "read", "write")
CHASE = "mmap-chase"
PERCENTILES = (50.0, 99.0, 99.9)
RANDOM_BLOCKS = (4 << 10,)
SEQ_BLOCKS = tuple(k << 10 for k in (128, 256, 512, 1024, 2048, 4096))

METRICS = metrics(Metric("latency_ns", "ns", "lower"), Metric("iops", "IO/s", "higher"),
                  Metric("bandwidth_GBps", "GB/s", "higher"))
SHOW = Show(
    "Storage", "O_DIRECT I/O on the NVMe tier: latency, IOPS over queue depth, bandwidth over block size.",
    x="qd", facets=("rw",),
    headlines=(
        Headline("4 KiB random read, QD1, p50 latency (CPU {issue_cpu})", "latency_ns", column="QD1 read p50",
                 where={"rw": "randread", "block_bytes": 4096, "qd": 1, "percentile": 50},
                 pick="best", scale=1e-3, unit="us", digits=1),
        Headline("4 KiB random read, peak IOPS (QD{qd})", "iops", column="peak IOPS",
                 where={"rw": "randread", "block_bytes": 4096}, digits=0),
        *(Headline(f"sequential {rw} peak ({{block_bytes}}, QD{{qd}})", "bandwidth_GBps",
                   column=f"sequential {rw}", where={"rw": rw}) for rw in ("read", "write"))))


@dataclass(kw_only=True)
class Spec(BaseSpec):
    tiers: tuple[str, ...] = ("nvme",)
    rw: tuple[Literal["randread", "randwrite", "read", "write", "mmap-chase"], ...] = (*IO_RW,)
    block: tuple[Size, ...] | None = None       # default: 4 KiB random, 128 KiB-4 MiB sequential
    qd: tuple[Count, ...] = (1,)
    engine: tuple[Literal["auto", "psync", "libaio"], ...] = ("auto",)   # auto: psync at QD1
    buffer_page: tuple[Literal["4k", "thp"], ...] = ("4k",)
    file_size: Size = 1 << 30
    chase_file_size: Size = 256 << 20
    runtime_s: Seconds = 0.5
    host_node: Annotated[int, at_least(0)] | Literal["local"] = "local"    # the node of the I/O buffers
    # The CPU the I/O is issued from: the initiator's CPU that takes the device's
    # completion interrupts (storage/interrupts.py), its first CPU, or this one.
    issue_cpu: Annotated[int, at_least(0)] | Literal["completions", "first"] = "completions"
    allow_buffered: bool = False                   # where O_DIRECT does not work: label, don't refuse
ALIGN = 4096                      # O_DIRECT: whole logical blocks; 4 KiB suits every device
PAGE = 4096
NO_TIER = "no NVMe tier: declare a directory on one with --tier nvme=/path/to/dir"


# ---- planning ----------------------------------------------------------------------

def plan(spec: Spec, env: Env) -> list[Planned]:
    from cxlbench.storage import StorageError, inspect_directory, sweep_stale

    points = _points(spec)
    reps, warmup = spec.repetitions, spec.warmup
    tiers = _tiers(spec, env)
    if not tiers:
        cpu = _cpu_initiators(env)
        who = cpu[0].name if cpu else "cpu"
        return [Planned(Case(NAME, who, "nvme", "nvme", p, reps, warmup), NO_TIER, 0.0)
                for p in points]
    planned = []
    for tier in tiers:
        refusal, io, numa = None, "direct", None
        try:
            d = inspect_directory(tier.path)
            sweep_stale(d.path)             # the start's sweep: files of killed workers
            io, numa = d.io_mode(spec.allow_buffered), d.numa_node
        except StorageError as e:
            refusal = str(e)
        initiator, host_node = _placement(env, numa, spec.host_node)
        for p in points:
            params = {**p, "io": io, "host_node": host_node}
            case = Case(NAME, initiator, tier.name, tier.kind, params, reps, warmup)
            planned.append(Planned(case, refusal or _cannot(params, tier, env), _estimate(params, spec)))
    return planned


def _tiers(spec: Spec, env: Env) -> list:
    wanted = set(spec.tiers)
    return [t for t in env.tiers.values() if t.kind == "nvme" and (t.kind in wanted or t.name in wanted)]


def _cpu_initiators(env: Env) -> list:
    return sorted((i for i in env.initiators.values() if i.kind == "cpu"), key=lambda i: i.node or 0)


def _placement(env: Env, device_node: int | None, host_node) -> tuple[str, int]:
    """The CPUs that issue the I/O (those of the disk controller's node when sysfs names it,
    else the first CPU node's) and the node the I/O buffers are on (theirs, unless asked)."""
    cpus = _cpu_initiators(env)
    near = [i for i in cpus if device_node is not None and i.node == device_node]
    initiator = (near or cpus)[0] if cpus else None
    name = initiator.name if initiator else "cpu"
    if host_node == "local":
        node = initiator.node if initiator and initiator.node is not None else 0
    else:
        node = int(host_node)
    return name, node


def _points(spec: Spec) -> list[dict]:
    file_bytes, runtime_s = spec.file_size, float(spec.runtime_s)
    points, seen = [], set()
    for rw in spec.rw:
        if rw == CHASE:
            p = {"rw": CHASE, "file_bytes": spec.chase_file_size, "advice": "random", "runtime_s": runtime_s}
        else:
            default = RANDOM_BLOCKS if rw.startswith("rand") else SEQ_BLOCKS
            for block in spec.block or default:
                for qd in spec.qd:
                    for engine in spec.engine:
                        if engine == "auto":
                            engine = "psync" if qd == 1 else "libaio"
                        for page in spec.buffer_page:
                            points.append({"rw": rw, "block_bytes": block, "qd": qd, "engine": engine,
                                           "buffer_page": page, "file_bytes": file_bytes,
                                           "runtime_s": runtime_s})
            continue
        key = tuple(sorted(p.items()))
        if key not in seen:
            seen.add(key)
            points.append(p)
    return points


def _cannot(params: dict, tier, env: Env) -> str | None:
    """Why a case cannot run here, decided before spending time on it."""
    from cxlbench.storage.scratch import room_for

    rw, size = params["rw"], params["file_bytes"]
    if size <= 0 or size % (1 << 20):
        return f"file size {size} B is not a whole number of MiB"
    room = room_for(tier.path)
    if room is not None and size > room:
        return (f"a {size >> 20} MiB test file does not fit in {tier.path} ({room >> 20} MiB may "
                f"be used there); ask for a smaller file_size")
    node = env.machine.nodes.get(params["host_node"])
    if node is not None and not node.mem_total_bytes:
        return f"host_node {params['host_node']} has no memory for the I/O buffers"
    free = free_memory(env, params["host_node"])
    if rw == CHASE:
        if free is not None and size > free[0] * 0.5:
            return (f"the {size >> 20} MiB chase file is built in the page cache and needs half of "
                    f"{free[1]} at most; ask for a smaller chase_file_size")
        return None
    block, qd, engine = params["block_bytes"], params["qd"], params["engine"]
    if engine == "psync" and qd != 1:
        return f"psync keeps one I/O in flight; qd {qd} needs engine libaio"
    if qd < 1:
        return f"qd must be at least 1, not {qd}"
    if block < ALIGN or block % ALIGN:
        return f"block {block} B is not a whole number of 4 KiB units (O_DIRECT alignment)"
    if size < block * max(qd, 2):
        return f"a {size >> 20} MiB file is too small for {qd} I/Os of {block >> 10} KiB in flight"
    buffers = block * qd
    if free is not None and buffers > free[0] * 0.5:
        return f"{buffers >> 20} MiB of I/O buffers exceed half of {free[1]}"
    return None


def _estimate(params: dict, spec: Spec) -> float:
    """Seconds: prefilling the file (~1 GB/s), warm-up and timed runs, worker start."""
    runs = spec.repetitions + max(spec.warmup, 1) * 0.25
    fill = params["file_bytes"] / 1e9
    if params["rw"] == CHASE:
        fill *= 2                         # populate and chain, then write back
        runs = spec.repetitions * 1.5 + 0.5
    return 0.5 + fill + runs * params["runtime_s"]


# ---- measuring ---------------------------------------------------------------------

def measure(case: Case, env: Env, info: dict) -> list[Sample]:
    from cxlbench.storage import ScratchFile, StorageError, inspect_directory, sweep_stale

    p = case.params
    tier = env.tier(case.target)
    initiator = env.initiator(case.initiator)
    try:
        d = inspect_directory(tier.path)
        io = d.io_mode(allow_buffered=p["io"] == "buffered")
    except StorageError as e:
        raise Skip(str(e)) from None
    if io != p["io"]:
        raise Skip(f"planned as io={p['io']} but {tier.path} now gives io={io}; plan again")
    irqs = completion_irqs(d.device, env.root)
    cpu, why = _issuing_cpu(env.spec, initiator.cpus, irqs)
    os.sched_setaffinity(0, [cpu])
    info.update({"cpu": cpu, "cpu_why": why, "directory": d.as_dict()})
    if d.warnings:
        info.setdefault("warnings", []).extend(d.warnings)
    swept = sweep_stale(d.path)
    if swept:
        info["stale_files_removed"] = swept
    seed = int.from_bytes(os.urandom(4), "little") | 1
    try:
        f = ScratchFile.create(d.path, p["file_bytes"], direct=io == "direct", seed=seed,
                               prefill=p["rw"] != CHASE, buffer_node=p["host_node"])
    except StorageError as e:
        raise Skip(str(e)) from None
    with f:
        info["fill_s"] = round(f.fill_seconds, 3)
        found = {"device": d.device or d.fs_type or "none", "issue_cpu": cpu}
        before = completion_irqs(d.device, env.root)
        samples = _chase(case, f, found, info) if p["rw"] == CHASE else measure_io(case, f, found, info)
        info["completions"] = {"irqs": [{"irq": i.number, "name": i.name, "affinity": i.affinity}
                                        for i in irqs],
                               "taken_by_cpu": taken(before, completion_irqs(d.device, env.root))}
        return samples


def _issuing_cpu(spec, cpus: list[int], irqs) -> tuple[int, str]:
    """The CPU to issue from, as the table asks, and why (see storage.interrupts)."""
    choice = getattr(spec, "issue_cpu", "completions")
    if choice == "first":
        return cpus[0], "the initiator's first CPU, as the suite asks"
    if isinstance(choice, int):
        if choice not in cpus:
            raise Skip(f"issue_cpu {choice} is not one of the initiator's CPUs ({cpus})")
        return choice, "as the suite asks"
    return issuing_cpu(cpus, irqs)


def measure_io(case: Case, f, found: dict, info: dict, verify: bool = True) -> list[Sample]:
    """The I/O cases on an open ScratchFile `f` (the fio comparison calls this on a named
    file fio then opens too). verify: check what the reads returned, after the timed runs."""
    import numpy as np

    from cxlbench import _native

    p = case.params
    rw, block, qd, engine = p["rw"], p["block_bytes"], p["qd"], p["engine"]
    write, random = rw in ("write", "randwrite"), rw.startswith("rand")
    nblocks = f.size // block
    runtime_ns = int(p["runtime_s"] * 1e9)

    cursor = 0                              # sequential runs go on where the last stopped

    def order(trial: int):
        if random:                          # every block once per pass, in a fresh order
            rng = np.random.default_rng([f.seed, trial])
            return rng.permutation(nblocks).astype(np.uint64) * np.uint64(block)
        return (np.arange(cursor, cursor + nblocks, dtype=np.uint64) % np.uint64(nblocks)) * \
            np.uint64(block)

    def advance(done: int) -> None:
        nonlocal cursor
        cursor = (cursor + done) % nblocks

    def run(offsets, max_ios, lat=None, max_ns=0, verify=False):
        if p["io"] == "buffered":
            f.drop_cache()                  # start cold: the device, not what we just wrote
        return _native.io_run(f.fd, write, engine, buf.addr, block, qd, offsets, max_ios, lat,
                               max_ns=max_ns, verify=verify, seed=f.seed)

    buf = place(block * qd, p["host_node"], p.get("buffer_page", "4k"))
    with buf:
        page_bytes = buf.page_bytes_found
        _native.io_stamp(buf.addr, buf.length, 0, f.seed)   # writes carry data, not zeros
        rate = 0.0
        for w in range(max(case.warmup, 1)):                  # untimed; sizes the latency array
            done, elapsed, _ = run(order(1000 + w), 1 << 40, max_ns=max(runtime_ns // 4, 1))
            advance(done)
            rate = max(rate, done / max(elapsed, 1) * 1e9)
        max_ios = int(min(max(rate * p["runtime_s"] * 3, 4096), 1 << 25))
        samples = []
        for rep in range(case.repetitions):
            lat = np.empty(max_ios, dtype=np.uint64)
            done, elapsed, _ = run(order(rep), max_ios, lat, max_ns=runtime_ns)
            advance(done)
            lat = lat[:done]
            s = {**found, "ios": done, "elapsed_ns": elapsed, "buffer_page_bytes": page_bytes}
            samples.append(Sample("iops", done / elapsed * 1e9, rep, s))
            samples.append(Sample("bandwidth_GBps", done * block / elapsed, rep, s))
            for q, v in zip(PERCENTILES, np.percentile(lat, PERCENTILES)):
                samples.append(Sample("latency_ns", float(v), rep, {**s, "percentile": q}))
        if verify and not write:
            # The bytes read are the bytes written at those offsets (every 4 KiB unit
            # carries its offset and the file's seed): untimed, after the timed runs.
            n = min(nblocks, max(64, 16 * qd))
            done, _, bad = run(order(1 << 20), n, verify=True)
            if bad:
                raise RuntimeError(f"{bad} of {done * block // 4096} 4 KiB units read back "
                                   f"differ from what was written at their offsets")
            info["verified_ios"] = done
    info["rate_at_warmup"] = round(rate)
    return samples


def _chase(case: Case, f, found: dict, info: dict) -> list[Sample]:
    import mmap

    import numpy as np

    from cxlbench import _native
    from cxlbench.storage import FileMapping

    p = case.params
    direct = p["io"] == "direct"
    rng = np.random.default_rng(f.seed)
    with FileMapping.of(f) as m:
        m.advise(mmap.MADV_RANDOM)          # no readahead: one page read per fault
        m.populate()
        head = _native.chase_init(m.addr, m.length, PAGE, 0, 1, f.seed)[0]
        pages = m.pages

        def evicted() -> int:
            cached = m.evict()
            if direct and cached > pages // 1000:
                raise Skip(f"could not evict the test file: {cached} of {pages} pages still "
                           f"cached after msync, fsync, MADV_DONTNEED and POSIX_FADV_DONTNEED")
            return cached

        def start() -> int:
            return m.addr + int(rng.integers(pages)) * PAGE

        evicted()
        probe = 64
        per_step = _native.chase_run([start()], probe) / probe    # calibration
        steps = int(min(max(p["runtime_s"] * 1e9 / max(per_step, 1.0), 256), pages // 4))
        for _ in range(case.warmup):                               # untimed, as long as a sample
            evicted()
            _native.chase_run([start()], steps)
        samples = []
        for rep in range(case.repetitions):
            cached = evicted()
            first = start()
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
            ns = _native.chase_run([first], steps)
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_majflt - faults
            samples.append(Sample("latency_ns", ns / steps, rep, {
                **found, "steps": steps, "major_faults": faults, "cached_before": cached,
                "cached_after": m.resident()}))
        info.update({"chain_head_offset": head - m.addr, "pages": pages})
    return samples
