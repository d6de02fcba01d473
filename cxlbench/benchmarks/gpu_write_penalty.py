"""GPU write penalty: reads vs writes vs partial-sector writes, in HBM and in host
memory the GPU writes in place (pinned, mapped), with the GPU's ECC state beside.

The GPU's memory moves 32-byte sectors (four to a 128-byte line). Every op is
a pass of one kernel over a buffer, one access of `write_bytes` every
`stride_bytes`:

  op            access   write_bytes  stride   what it asks of the memory
  read          load     16           16       every sector read whole
  write         store    16           16       every sector written whole
  partial       store    4 | 8 | 16   32       part of every sector written: the
                                               rest must be merged (read-modify-
                                               write where ECC covers the sector)
  read_sector   load     32           128      one sector of every line
  write_sector  store    32           128      one whole sector of every line

Two metrics per timed iteration: bandwidth_GBps counting the bytes the
instructions move (bytes_counted = "instructions": a 4-byte partial write
counts 4 B), and ns_per_sector, the time per 32-byte sector touched — the
ratio of two ops' ns_per_sector is the slowdown. The GPU's ECC mode (column
`ecc`) and how its corrected / uncorrected counts moved during the case
(`ecc_corrected_delta`, `ecc_uncorrected_delta`; the readings are in the
case's info) stand beside the figures: context, not a cause by themselves.

Stores are checked (the pattern where written, the poison between), loads by
their sum: a kernel that skipped work is refused. Each repetition allocates a
fresh buffer; every timed iteration is kept (column `iteration`).
"""
from __future__ import annotations

from contextlib import ExitStack

from dataclasses import dataclass
from typing import Literal

from cxlbench.benchmarks.base import Env, Planned, Show, metrics, sweep
from cxlbench.benchmarks.gpu_common import (
    HOST_KINDS, GpuSpec, first_skip, gpu_initiators, gpu_memory_skip, hbm_tier, host_memory_skip,
    host_tiers, open_session, planned, wants_hbm)
from cxlbench.benchmarks.spec import Count, Size
from cxlbench.results.schema import Case, Metric, Sample

NAME = "gpu_write_penalty"
SECTOR = 32
#: op -> (access, write_bytes or None for the swept partial size, stride_bytes)
OPS = {
    "read": ("load", 16, 16),
    "write": ("store", 16, 16),
    "partial": ("store", None, 32),
    "read_sector": ("load", 32, 128),
    "write_sector": ("store", 32, 128),
}
PARTIAL_BYTES = (4, 8, 16)
SLOTS = 64

METRICS = metrics(Metric("bandwidth_GBps", "GB/s", "higher"),
                  Metric("ns_per_sector", "ns", "lower"))   # per 32-byte sector touched
SHOW = Show("GPU write penalty", "A GPU's full and partial-sector stores against its loads, on HBM "
            "and on host memory it writes directly.", x="write_bytes", facets=("access",))


@dataclass(kw_only=True)
class Spec(GpuSpec):
    op: tuple[Literal[tuple(OPS)], ...] = tuple(OPS)
    write_bytes: tuple[Literal[4, 8, 16, 32], ...] = PARTIAL_BYTES     # the partial op's
    size: tuple[Size, ...] = (1 << 30,)
    page: Literal["4k", "thp"] = "4k"          # host tiers' pages
    iterations: Count = 10


def plan(spec: Spec, env: Env) -> list[Planned]:
    gpus, why = gpu_initiators(env)
    sizes = list(spec.size)
    out: list[Planned] = []
    for gpu in gpus:
        targets = ([hbm_tier(env, gpu)] if wants_hbm(spec) else []) + host_tiers(spec, env, gpu)
        for tier in targets:
            host = tier.kind in HOST_KINDS
            for p in sweep(op=spec.op, size_bytes=sizes):
                op = p["op"]
                access, width, stride = OPS[op]
                for wb in [width] if width else spec.write_bytes:
                    params = {"op": op, "access": access, "write_bytes": wb, "stride_bytes": stride,
                              "size_bytes": p["size_bytes"], "bytes_counted": "instructions",
                              "iterations": spec.iterations}
                    if host:
                        params["page"] = spec.page
                    out.append(planned(NAME, gpu, tier, params, spec,
                                       first_skip(why, _cannot(params, tier, gpu, env)),
                                       _estimate(params, spec, host)))
    return out


def _cannot(params: dict, tier, gpu, env: Env) -> str | None:
    wb, size = params["write_bytes"], params["size_bytes"]
    if wb not in (4, 8, 16, 32):
        return f"write_bytes must be 4, 8, 16 or 32, not {wb}"
    if size < 4096 or size % 4096:
        return f"size must be a multiple of 4 KiB, not {size}"
    if tier.kind in HOST_KINDS:
        return host_memory_skip(env, tier, size)
    return gpu_memory_skip(env, gpu, size)


def _estimate(params: dict, spec: Spec, host: bool) -> float:
    rate = 1.5e10 if host else 1e12
    per_op = params["size_bytes"] / rate
    timed = (params["iterations"] + 3 + 6 * 4) * max(per_op, 1e-3)
    setup = params["size_bytes"] * (1.5e-9 if host else 2e-11)
    return spec.repetitions * (timed + setup + 0.05)


def sectors(size: int, stride: int) -> int:
    """32-byte sectors an op touches in a `size`-byte buffer."""
    return size // max(stride, SECTOR)


def measure(case: Case, env: Env, info: dict) -> list[Sample]:
    from cxlbench.gpu import correctness as check
    from cxlbench.gpu.buffers import DeviceBuffer
    from cxlbench.gpu.kernels import WORD_BYTES
    from cxlbench.gpu.telemetry import ECC_KEYS
    from cxlbench.gpu.timing import SHAPES, fastest_shape
    from cxlbench.memory.pinned import PinnedHost

    p = case.params
    size, width, stride = p["size_bytes"], p["write_bytes"], p["stride_bytes"]
    count = size // stride
    load = p["access"] == "load"
    kernel = f"cb_{p['access']}_w{width}"
    word = WORD_BYTES[width]
    samples: list[Sample] = []
    with open_session(case, env, info) as s:
        dev, xp = s.dev, s.xp
        stream = s.timer.stream
        max_grid = max(sh.grid(dev.sm_count) for sh in SHAPES)
        for rep in range(case.repetitions):
            seed = 0x5EED0000 + rep
            with ExitStack() as st:
                if case.tier_kind in HOST_KINDS:
                    buf = st.enter_context(PinnedHost(dev, size, env.tier(case.target).node, p["page"]))
                    base, found = buf.device, buf.found()
                    data = dev.view(base, size, "uint8", buf)
                else:
                    dbuf = st.enter_context(DeviceBuffer(dev, size))
                    base, found, data = dbuf.ptr, {}, dbuf.view("uint8")
                partials = st.enter_context(DeviceBuffer(dev, SLOTS * max_grid * 8)) if load else None
                want_sum = None
                if load:
                    dev.launch("cb_fill_words", 4 * dev.sm_count, 256, (base, size // 8, seed), stream)
                    dev.sync_stream(stream)
                    want_sum = check.strided_sum(xp, data, count, stride, width, word)
                touched: dict = {}

                def make(shape):
                    grid = shape.grid(dev.sm_count)

                    def run(k, stream_):
                        if load:
                            slot = k % SLOTS
                            touched[slot] = grid
                            last = partials.ptr + slot * max_grid * 8
                        else:
                            last = seed
                        dev.launch(kernel, grid, shape.block, (base, count, stride, last), stream_)
                    return run

                best, _ = fastest_shape(s.timer, make)
                check.poison(xp, partials.view("uint64") if load else data)
                dev.synchronize()
                touched.clear()
                with s.sampler() as smp:
                    timed = s.timer.measure(make(best), p["iterations"], 4 * max(case.warmup, 0))
                dev.synchronize()
                if load:
                    parts = partials.view("uint64")
                    for slot, grid in touched.items():
                        got = check.partial_sum(xp, parts[slot * max_grid: slot * max_grid + grid])
                        check.expect_sum(got, want_sum, f"{p['op']} loads")
                else:
                    check.expect_strided_stores(xp, data, count, stride, width, word, seed,
                                                f"{p['op']} of {width} B every {stride} B")
            params = {**s.params(), **smp.summary(), **found, "sectors": sectors(size, stride),
                      "block_threads": best.block, "grid_blocks": best.grid(dev.sm_count),
                      "spin": timed.spin}
            for i, sec in enumerate(timed.seconds):
                it = {**params, "iteration": i, "ops_per_iteration": timed.ops}
                samples.append(Sample("bandwidth_GBps", count * width * timed.ops / sec / 1e9, rep, it))
                samples.append(Sample("ns_per_sector", sec / (timed.ops * sectors(size, stride)) * 1e9,
                                      rep, it))
        after = dev.telemetry.ecc_counts()
        before = s.ecc_before
    delta = {}
    for key, name in ((ECC_KEYS[0], "ecc_corrected_delta"), (ECC_KEYS[1], "ecc_uncorrected_delta")):
        if before.get(key) is not None and after.get(key) is not None:
            delta[name] = after[key] - before[key]
        else:
            delta[name] = None
    for smp_ in samples:
        smp_.params.update(delta)
    return samples
