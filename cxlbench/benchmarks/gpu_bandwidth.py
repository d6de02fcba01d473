"""GPU bandwidth: HBM kernels, copy engines to and from each host tier, the SMs reading
and writing host memory in place, and device-to-device across GPUs.

op          target      what moves                                    bytes_counted
read        hbm         a kernel sums the array (16-byte loads)        once
write       hbm         a kernel writes the array                      once
copy        hbm         a kernel copies one array to another           read+write (2×)
triad       hbm         a = b + s·c (doubles)                          read+write (3×)
memcpy_d2d  hbm         cudaMemcpyAsync device to device               read+write (2×)
h2d, d2h    host tier   cudaMemcpyAsync (copy engine) from / to the    once
                        tier's buffer, pinned (cudaHostRegister) or
                        pageable (4 KiB or THP pages)
bidir       host tier   h2d and d2h at once on two streams             once (both directions added)
sm_read,    host tier   a kernel reads / writes the tier's pinned,     once
sm_write                mapped memory in place (zero-copy)
peer        other hbm   cudaMemcpyPeerAsync to another GPU             once

GB/s is 10^9 bytes per second; `bytes_counted` says which convention a row
uses: "read+write" counts what a kernel reads plus what it writes (STREAM,
bandwidthTest), "once" counts each byte moved once (nvbandwidth). impl=torch
runs torch's copy_ on the same buffers (cxlbench.gpu.torchref): the reference
for the device check's targets.

Timing: nvbandwidth's method (cxlbench.gpu.timing): everything queued behind a
spinning kernel, events around iterations of ~1 ms, every iteration kept
(column `iteration`); kernels take the fastest of several launch shapes
(column `block_threads`, `grid_blocks`). Working sets smaller than 4× the L2
rotate through copies (`rotate_sets`) so no operation finds the previous one's
data in the L2 (cache="warm" measures the L2 on purpose). Outputs are poisoned
before the timed run and checked after it: a wrong result fails the case.
Each repetition allocates and fills its buffers afresh.
"""
from __future__ import annotations

from contextlib import ExitStack

from dataclasses import dataclass
from typing import Literal

from cxlbench.benchmarks.base import Env, Headline, Planned, Show, metrics, sweep
from cxlbench.benchmarks.gpu_common import (
    GpuSpec, first_skip, gpu_initiators, gpu_memory_skip, hbm_tier, host_memory_skip, host_tiers,
    open_session, planned, rotation)
from cxlbench.benchmarks.spec import Count, Size
from cxlbench.results.schema import Case, Metric, Sample

NAME = "gpu_bandwidth"
#: op -> (group, arrays, array lengths moved per operation, bytes_counted)
OPS = {
    "read": ("hbm", 1, 1, "once"),
    "write": ("hbm", 1, 1, "once"),
    "copy": ("hbm", 2, 2, "read+write"),
    "triad": ("hbm", 3, 3, "read+write"),
    "memcpy_d2d": ("hbm", 2, 2, "read+write"),
    "h2d": ("link", 1, 1, "once"),
    "d2h": ("link", 1, 1, "once"),
    "bidir": ("link", 2, 2, "once"),
    "sm_read": ("mapped", 1, 1, "once"),
    "sm_write": ("mapped", 1, 1, "once"),
    "peer": ("peer", 1, 1, "once"),
}
TORCH_OPS = ("memcpy_d2d", "h2d", "d2h")
IMPLS = ("cuda", "torch")
DEFAULT_SIZES = tuple(k << 10 for k in (64, 1 << 10, 16 << 10, 256 << 10, 1 << 20))
TRIAD_SCALAR = 3.0
WARMUP_OPS = 4                   # nvbandwidth's warm-up copies, per suite warm-up
SLOTS = 256                      # read kernels write their partial sums round-robin here

METRICS = metrics(Metric("bandwidth_GBps", "GB/s", "higher"))
SHOW = Show("GPU bandwidth", "HBM kernels and copies, host<->device copies over the link, and SM "
            "reads of mapped host memory, over the transfer size. Each chart's bytes_counted says "
            "whether a copy's bytes count once or read + write.",
            x="size_bytes", facets=("op",),
            headlines=tuple(Headline(f"GPU {op} peak ({{size_bytes}})", "bandwidth_GBps",
                                     column=f"GPU {op}", where={"op": op}) for op in ("read", "h2d")))


@dataclass(kw_only=True)
class Spec(GpuSpec):
    op: tuple[Literal[tuple(OPS)], ...] = ("read", "write", "copy", "triad")
    impl: tuple[Literal[IMPLS], ...] = ("cuda",)
    size: tuple[Size, ...] = DEFAULT_SIZES
    cache: tuple[Literal["cold", "warm"], ...] = ("cold",)
    host_memory: tuple[Literal["pinned", "pageable"], ...] = ("pinned",)
    page: tuple[Literal["4k", "thp"], ...] = ("4k",)
    iterations: Count = 10


# ---- planning ----------------------------------------------------------------------------

def plan(spec: Spec, env: Env) -> list[Planned]:
    gpus, why = gpu_initiators(env)
    sizes = list(spec.size)
    common = {"iterations": spec.iterations}
    out: list[Planned] = []
    for gpu in gpus:
        for op in spec.op:
            for impl in spec.impl:
                if impl == "torch" and op not in TORCH_OPS:
                    continue                 # torch is the reference for copies only
                group, arrays, _, counted = OPS[op]
                base = {"op": op, "impl": impl, "bytes_counted": counted, **common}
                for tier, params in _cases(spec, env, gpu, gpus, group, base, sizes):
                    out.append(planned(NAME, gpu, tier, params, spec,
                                       first_skip(why, _cannot(params, group, arrays, tier, gpu, gpus, env)),
                                       _estimate(params, spec)))
    return out


def _cases(spec, env, gpu, gpus, group, base, sizes):
    if group == "hbm":
        for p in sweep(cache=spec.cache, size_bytes=sizes):
            yield hbm_tier(env, gpu), {**base, **p}
    elif group in ("link", "mapped"):
        memory = ["pinned"] if group == "mapped" or base["impl"] == "torch" else spec.host_memory
        for tier in host_tiers(spec, env, gpu):
            for p in sweep(host_memory=memory, page=spec.page, size_bytes=sizes):
                yield tier, {**base, **p}
    else:                                            # peer: every other GPU
        others = [g for g in gpus if g.name != gpu.name and g.gpu is not None]
        for peer in others or [None]:
            tier = hbm_tier(env, peer) if peer else hbm_tier(env, gpu)
            for size in sizes:
                yield tier, {**base, "peer": peer.name if peer else "none", "size_bytes": size}


def _cannot(params, group, arrays, tier, gpu, gpus, env) -> str | None:
    size = params["size_bytes"]
    if size < 4096 or size % 4096:
        return f"size must be a multiple of 4 KiB, not {size}"
    if group == "peer" and params["peer"] == "none":
        return "one GPU: no peer to copy to"
    if group in ("link", "mapped"):
        return host_memory_skip(env, tier, arrays * size) or \
            gpu_memory_skip(env, gpu, (2 * arrays if group == "link" else 0) * size)
    return gpu_memory_skip(env, gpu, arrays * size)


def _estimate(params: dict, spec: Spec) -> float:
    group, arrays, moved, _ = OPS[params["op"]]
    size = params["size_bytes"]
    rate = {"hbm": 2e12, "link": 2e10, "mapped": 1.5e10, "peer": 5e10}[group]
    if params.get("host_memory") == "pageable":
        rate = 8e9
    per_op = max(moved * size / rate, 5e-6)
    timed = (params["iterations"] + 3) * max(per_op, 1e-3) + WARMUP_OPS * per_op
    from cxlbench.gpu.kernels import COPY_KERNELS
    from cxlbench.gpu.timing import SHAPES
    tuned = params["op"] in ("read", "write", "copy", "triad", "sm_read", "sm_write")
    # each launch shape, at each depth of loads in flight for the copy, in 4 short timings
    tried = len(SHAPES) * (len(COPY_KERNELS) if params["op"] == "copy" else 1) if tuned else 0
    shapes = tried * 4 * max(per_op, 2.5e-4)
    setup = arrays * size * (1.5e-9 if group in ("link", "mapped") else 2e-11)  # fault + pin
    return spec.repetitions * (timed + shapes + setup + 0.05)


# ---- measuring -----------------------------------------------------------------------------

def measure(case: Case, env: Env, info: dict) -> list[Sample]:
    group = OPS[case.params["op"]][0]
    with open_session(case, env, info) as s:
        return {"hbm": _hbm, "link": _link, "mapped": _mapped, "peer": _peer}[group](case, env, s)


def _samples(case: Case, rep: int, timed, bytes_per_op: int, params: dict) -> list[Sample]:
    return [Sample("bandwidth_GBps", bytes_per_op * timed.ops / sec / 1e9, rep,
                   {**params, "iteration": i, "ops_per_iteration": timed.ops, "spin": timed.spin})
            for i, sec in enumerate(timed.seconds)]


def _warmup(case: Case) -> int:
    return WARMUP_OPS * max(case.warmup, 0)


def _range_sum(first: int, count: int) -> int:
    """first + (first + 1) + ... + (first + count - 1), mod 2^64."""
    return (count * (2 * first + count - 1) // 2) & ((1 << 64) - 1)


def _fill(dev, stream, ptr: int, nbytes: int, seed: int) -> None:
    """Words i ^ seed over a device-accessible range, by kernel."""
    dev.launch("cb_fill_words", 4 * dev.sm_count, 256, (ptr, nbytes // 8, seed), stream)


def _max_grid(dev) -> int:
    from cxlbench.gpu.timing import SHAPES
    return max(sh.grid(dev.sm_count) for sh in SHAPES)


def _kernel_ops(s, case: Case, ptrs: dict, size: int, sets: int, partials, touched: dict,
                copy_kernel: str = "cb_copy"):
    """make_op(shape) for the kernel ops (read, write, copy, triad; sm_read, sm_write)."""
    dev, op = s.dev, case.params["op"]
    max_grid = _max_grid(dev)
    n16 = size // 16

    def make(shape):
        grid, block = shape.grid(dev.sm_count), shape.block

        def run(k, stream):
            j = k % sets
            off = j * size
            if op in ("read", "sm_read"):
                slot = k % SLOTS
                touched[slot] = (j, grid)
                dev.launch("cb_load_w16", grid, block,
                           (ptrs["a"] + off, n16, 16, partials.ptr + slot * max_grid * 8), stream)
            elif op in ("write", "sm_write"):
                touched[j] = True
                dev.launch("cb_store_w16", grid, block, (ptrs["a"] + off, n16, 16, ptrs["seed"]), stream)
            elif op == "copy":
                touched[j] = True
                dev.launch(copy_kernel, grid, block, (ptrs["b"] + off, ptrs["a"] + off, n16), stream)
            else:                                               # triad: a = b + s * c
                touched[j] = True
                dev.launch("cb_triad", grid, block, (ptrs["a"] + off, ptrs["b"] + off,
                                                     ptrs["c"] + off, TRIAD_SCALAR, n16), stream)
        return run
    return make


def _tuned(s, case: Case, ptrs: dict, size: int, sets: int, partials, touched: dict):
    """The fastest launch shape, and for the copy the fastest depth of loads in flight
    with it (which keeps HBM busiest differs by GPU): (the op, what was chosen). Both
    depths are timed at each shape, first one then the other by turns, so neither is
    always the one timed while the clocks still ramp."""
    from cxlbench.gpu.kernels import COPY_KERNELS
    from cxlbench.gpu.timing import SHAPES, fastest_shape
    if case.params["op"] != "copy":
        make = _kernel_ops(s, case, ptrs, size, sets, partials, touched)
        shape, _ = fastest_shape(s.timer, make)
        return make(shape), _shape_found(s, shape)
    makes = {d: _kernel_ops(s, case, ptrs, size, sets, partials, touched, k) for d, k in COPY_KERNELS.items()}
    depths = list(makes)
    tried = [(shape, d) for i, shape in enumerate(SHAPES) for d in (depths if i % 2 == 0 else depths[::-1])]
    (shape, depth), _ = fastest_shape(s.timer, lambda t: makes[t[1]](t[0]), shapes=tried)
    return makes[depth](shape), _shape_found(s, shape) | {"loads_in_flight": depth}


def _shape_found(s, shape) -> dict:
    return {"block_threads": shape.block, "grid_blocks": shape.grid(s.dev.sm_count)}


def _check_kernel_outputs(s, case: Case, views: dict, size: int, partials, max_grid: int,
                          touched: dict, seed: int) -> None:
    from cxlbench.gpu import correctness as check
    xp, op = s.xp, case.params["op"]
    words = size // 8
    if op in ("read", "sm_read"):
        parts = partials.view("uint64")
        for slot, (j, grid) in touched.items():
            got = check.partial_sum(xp, parts[slot * max_grid: slot * max_grid + grid])
            check.expect_sum(got, _range_sum(j * words, words), f"{op} of rotation set {j}")
        return
    for j in sorted(touched):
        lo, hi = j * words, (j + 1) * words
        if op in ("write", "sm_write"):
            check.expect_pattern(xp, views["a"][lo:hi], seed, f"{op} of rotation set {j}")
        elif op in ("copy", "memcpy_d2d"):
            check.expect_pattern(xp, views["b"][lo:hi], seed, f"{op} of rotation set {j}", first=lo)
        else:
            a, b, c = (views[x].view(xp.float64)[lo:hi] for x in "abc")
            for clo in range(0, hi - lo, 1 << 25):
                want = b[clo:clo + (1 << 25)] + TRIAD_SCALAR * c[clo:clo + (1 << 25)]
                check.expect_equal(xp, a[clo:clo + (1 << 25)], want, f"triad of rotation set {j}")


def _hbm(case: Case, env: Env, s) -> list[Sample]:
    from cxlbench.gpu import correctness as check
    from cxlbench.gpu.buffers import DeviceBuffer

    dev, xp, p = s.dev, s.xp, case.params
    op, size = p["op"], p["size_bytes"]
    _, arrays, moved, _ = OPS[op]
    free, _ = dev.mem_info()
    sets = rotation(size, arrays, dev.l2_bytes, p["cache"], free // (4 * arrays))
    span = sets * size
    stream = s.timer.stream
    samples: list[Sample] = []
    for rep in range(case.repetitions):
        seed = 0x5EED0000 + rep
        with ExitStack() as st:
            bufs = {x: st.enter_context(DeviceBuffer(dev, span)) for x in "abc"[:arrays]}
            ptrs = {x: b.ptr for x, b in bufs.items()} | {"seed": seed}
            views = {x: b.view("uint64") for x, b in bufs.items()}
            partials = None
            if op == "read":
                _fill(dev, stream, ptrs["a"], span, 0)
            elif op in ("copy", "memcpy_d2d"):
                _fill(dev, stream, ptrs["a"], span, seed)
            elif op == "triad":
                dev.launch("cb_fill_doubles", 4 * dev.sm_count, 256, (ptrs["b"], span // 8, 1, 1024), stream)
                dev.launch("cb_fill_doubles", 4 * dev.sm_count, 256, (ptrs["c"], span // 8, 7, 1024), stream)
            dev.sync_stream(stream)
            touched: dict = {}
            found = {"rotate_sets": sets}
            max_grid = _max_grid(dev)
            if op == "memcpy_d2d":
                run = _d2d_op(s, p["impl"], bufs, size, sets, touched)
            else:
                if op == "read":
                    partials = st.enter_context(DeviceBuffer(dev, SLOTS * max_grid * 8))
                run, chosen = _tuned(s, case, ptrs, size, sets, partials, touched)
                found |= chosen
            outputs = {"read": [], "write": ["a"], "copy": ["b"], "memcpy_d2d": ["b"], "triad": ["a"]}[op]
            for x in outputs:
                check.poison(xp, views[x])
            if partials is not None:
                check.poison(xp, partials.view("uint64"))
            dev.synchronize()
            touched.clear()
            with s.sampler() as smp:
                timed = s.timer.measure(run, p["iterations"], _warmup(case))
            dev.synchronize()
            _check_kernel_outputs(s, case, views, size, partials, max_grid, touched, seed)
        samples += _samples(case, rep, timed, moved * size,
                            {**s.params(), **smp.summary(), **found})
    return samples


def _d2d_op(s, impl: str, bufs: dict, size: int, sets: int, touched: dict):
    from cxlbench.gpu.device import MEMCPY_D2D
    dev = s.dev
    if impl == "torch":
        from cxlbench.gpu.torchref import TorchCopies
        tc = TorchCopies(dev, s.timer.stream)
        srcs = [tc.device_tensor(bufs["a"].ptr + j * size, size) for j in range(sets)]
        dsts = [tc.device_tensor(bufs["b"].ptr + j * size, size) for j in range(sets)]
        return tc.copy_op(dsts, srcs, touched)

    def run(k, stream):
        j = k % sets
        touched[j] = True
        dev.memcpy(bufs["b"].ptr + j * size, bufs["a"].ptr + j * size, size, MEMCPY_D2D, stream)
    return run


def _link(case: Case, env: Env, s) -> list[Sample]:
    """h2d, d2h, bidir between a host tier's buffer and device memory."""
    from cxlbench.gpu import correctness as check
    from cxlbench.gpu.buffers import DeviceBuffer
    from cxlbench.gpu.device import MEMCPY_D2H, MEMCPY_H2D
    from cxlbench.memory.pinned import PageableHost, PinnedHost

    dev, xp, p = s.dev, s.xp, case.params
    op, size = p["op"], p["size_bytes"]
    node = env.tier(case.target).node
    pinned = p["host_memory"] == "pinned"
    free, _ = dev.mem_info()
    sets = rotation(size, 1, dev.l2_bytes, "cold", min(free // 8, 4 << 30))
    span = sets * size
    words = size // 8
    stream = s.timer.stream
    samples: list[Sample] = []
    for rep in range(case.repetitions):
        seed = 0x5EED0000 + rep
        with ExitStack() as st:
            def host_buffer():
                if pinned:
                    return st.enter_context(PinnedHost(dev, span, node, p["page"], mapped=False))
                return st.enter_context(PageableHost(span, node, p["page"]))
            up = op in ("h2d", "bidir")
            down = op in ("d2h", "bidir")
            h_src = host_buffer() if up else None         # h2d: host -> d_dst
            d_dst = st.enter_context(DeviceBuffer(dev, span)) if up else None
            d_src = st.enter_context(DeviceBuffer(dev, span)) if down else None
            h_dst = host_buffer() if down else None       # d2h: d_src -> host
            if up:                                        # the pattern reaches the host by copy
                _fill(dev, stream, d_dst.ptr, span, seed)
                dev.memcpy(h_src.addr, d_dst.ptr, span, MEMCPY_D2H, stream)
                dev.sync_stream(stream)
            if down:
                _fill(dev, stream, d_src.ptr, span, seed)
                h_dst.array("uint8")[:] = 0xFF
            touched: dict = {}
            if p["impl"] == "torch":
                run = _torch_link_op(s, op, h_src or h_dst, d_dst or d_src, size, sets, touched)
            elif op == "bidir":
                run = _bidir_op(s, st, h_src, d_dst, d_src, h_dst, size, sets, touched)
            else:
                def run(k, stream_, up=up):
                    j = k % sets
                    touched[j] = True
                    if up:
                        dev.memcpy(d_dst.ptr + j * size, h_src.addr + j * size, size, MEMCPY_H2D, stream_)
                    else:
                        dev.memcpy(h_dst.addr + j * size, d_src.ptr + j * size, size, MEMCPY_D2H, stream_)
            if up:
                check.poison(xp, d_dst.view("uint64"))
            dev.synchronize()
            host = h_src or h_dst
            found = {**host.found(), "rotate_sets": sets}
            if p["impl"] == "torch":
                found["torch_pinned"] = bool(getattr(run, "pinned", True))
            with s.sampler() as smp:
                timed = s.timer.measure(run, p["iterations"], _warmup(case),
                                        spin=pinned and getattr(run, "pinned", True))
            dev.synchronize()
            if up:
                for j in sorted(touched):
                    check.expect_pattern(xp, d_dst.view("uint64")[j * words:(j + 1) * words], seed,
                                         f"h2d of rotation set {j}", first=j * words)
            if down:                                  # back to the device, compared there
                back = st.enter_context(DeviceBuffer(dev, span))
                check.poison(xp, back.view("uint64"))
                # the poison runs on cupy's (legacy default) stream, which does not order
                # work on the timer's non-blocking stream: finish it before the copy back
                dev.synchronize()
                dev.memcpy(back.ptr, h_dst.addr, span, MEMCPY_H2D, stream)
                dev.sync_stream(stream)
                for j in sorted(touched):
                    check.expect_pattern(xp, back.view("uint64")[j * words:(j + 1) * words], seed,
                                         f"d2h of rotation set {j}", first=j * words)
        samples += _samples(case, rep, timed, OPS[op][2] * size, {**s.params(), **smp.summary(), **found})
    return samples


def _bidir_op(s, st, h_src, d_dst, d_src, h_dst, size: int, sets: int, touched: dict):
    """Both directions at once: h2d on the timer's stream, d2h on a second one that
    forks from and joins the first around every operation."""
    from cxlbench.gpu.device import MEMCPY_D2H, MEMCPY_H2D
    dev = s.dev
    other = dev.stream()
    fork, join = dev.event(), dev.event()
    st.callback(dev.destroy_event, fork)
    st.callback(dev.destroy_event, join)

    def run(k, stream):
        j = k % sets
        touched[j] = True
        dev.record(fork, stream)
        dev.wait_event(other, fork)
        dev.memcpy(d_dst.ptr + j * size, h_src.addr + j * size, size, MEMCPY_H2D, stream)
        dev.memcpy(h_dst.addr + j * size, d_src.ptr + j * size, size, MEMCPY_D2H, other)
        dev.record(join, other)
        dev.wait_event(stream, join)
    run.weight = 3
    return run


def _torch_link_op(s, op: str, host, dbuf, size: int, sets: int, touched: dict):
    from cxlbench.gpu.torchref import TorchCopies
    tc = TorchCopies(s.dev, s.timer.stream)
    hosts = [tc.host_tensor(host.addr + j * size, size, host) for j in range(sets)]
    devs = [tc.device_tensor(dbuf.ptr + j * size, size) for j in range(sets)]
    run = tc.copy_op(devs, hosts, touched) if op == "h2d" else tc.copy_op(hosts, devs, touched)
    run.pinned = tc.pinned(hosts[0])
    return run


def _mapped(case: Case, env: Env, s) -> list[Sample]:
    """The SMs read or write a host tier's pinned memory in place."""
    from cxlbench.gpu import correctness as check
    from cxlbench.gpu.buffers import DeviceBuffer
    from cxlbench.memory.pinned import PinnedHost

    dev, xp, p = s.dev, s.xp, case.params
    op, size = p["op"], p["size_bytes"]
    node = env.tier(case.target).node
    sets = rotation(size, 1, dev.l2_bytes, "cold", 4 << 30)
    span = sets * size
    stream = s.timer.stream
    samples: list[Sample] = []
    for rep in range(case.repetitions):
        seed = 0x5EED0000 + rep
        with ExitStack() as st:
            buf = st.enter_context(PinnedHost(dev, span, node, p["page"], mapped=True))
            view = dev.view(buf.device, span, "uint64", buf)
            if op == "sm_read":
                _fill(dev, stream, buf.device, span, 0)
                dev.sync_stream(stream)
            touched: dict = {}
            ptrs = {"a": buf.device, "seed": seed}
            max_grid = _max_grid(dev)
            partials = None
            if op == "sm_read":
                partials = st.enter_context(DeviceBuffer(dev, SLOTS * max_grid * 8))
            run, chosen = _tuned(s, case, ptrs, size, sets, partials, touched)
            if op == "sm_write":
                check.poison(xp, view)
            else:
                check.poison(xp, partials.view("uint64"))
            dev.synchronize()
            touched.clear()
            with s.sampler() as smp:
                timed = s.timer.measure(run, p["iterations"], _warmup(case))
            dev.synchronize()
            _check_kernel_outputs(s, case, {"a": view}, size, partials, max_grid, touched, seed)
            found = {**buf.found(), "rotate_sets": sets, **chosen}
        samples += _samples(case, rep, timed, size, {**s.params(), **smp.summary(), **found})
    return samples


def _peer(case: Case, env: Env, s) -> list[Sample]:
    """cudaMemcpyPeerAsync from this GPU's memory to another GPU's."""
    from cxlbench.gpu import correctness as check
    from cxlbench.gpu.buffers import DeviceBuffer
    from cxlbench.gpu.device import CudaDevice, cuda_ordinal
    from cxlbench.gpu.errors import Unavailable

    dev, p = s.dev, case.params
    size = p["size_bytes"]
    peer_init = env.initiators[p["peer"]]
    record = next((g for g in env.machine.gpus if g.index == peer_init.gpu), None)
    peer_ordinal = cuda_ordinal(dev.rt, record.pci_bus_id if record else None, peer_init.gpu)
    if not dev.enable_peer(peer_ordinal):
        raise Unavailable(f"{case.initiator} cannot access {p['peer']} as a peer")
    words = size // 8
    stream = s.timer.stream
    samples: list[Sample] = []
    for rep in range(case.repetitions):
        seed = 0x5EED0000 + rep
        with ExitStack() as st:
            peer = CudaDevice(peer_ordinal)               # makes the peer current
            dst = st.enter_context(DeviceBuffer(peer, size))
            check.poison(peer.xp, dst.view("uint64"))
            peer.synchronize()
            dev.cp.cuda.Device(dev.ordinal).use()
            src = st.enter_context(DeviceBuffer(dev, size))
            _fill(dev, stream, src.ptr, size, seed)
            dev.sync_stream(stream)

            def run(k, stream_):
                dev.memcpy_peer(dst.ptr, peer_ordinal, src.ptr, dev.ordinal, size, stream_)
            with s.sampler() as smp:
                timed = s.timer.measure(run, p["iterations"], _warmup(case))
            peer.cp.cuda.Device(peer_ordinal).use()
            check.expect_pattern(peer.xp, dst.view("uint64")[:words], seed, "peer copy")
            dev.cp.cuda.Device(dev.ordinal).use()
        samples += _samples(case, rep, timed, size, {**s.params(), **smp.summary()})
    return samples
