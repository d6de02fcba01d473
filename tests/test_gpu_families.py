"""The GPU families measured on a fake device (tests/fakes/gpu.py): every code path a
GPU run takes, with durations from known rates so the arithmetic is exact — bytes
counted once or read + write, cycles and ns, seconds over K uses — and a kernel
that returns a wrong result refused rather than turned into a figure."""
import pytest

from cxlbench.benchmarks import (gpu_bandwidth, gpu_latency, gpu_storage, gpu_write_penalty,
                                 gpu_zerocopy)
from cxlbench.benchmarks.base import Skip
from cxlbench.gpu import device
from cxlbench.gpu.errors import WrongResult
from cxlbench.results.schema import Case
from cxlbench.runner.run import build_env
from cxlbench.topology.model import Gpu, Initiator, Tier

from fakes.gpu import FakeDevice


@pytest.fixture()
def env():
    e = build_env("/", [], {})
    e.initiators["gpu:0"] = Initiator("gpu:0", "gpu", node=0, gpu=0)
    e.tiers["hbm0"] = Tier("hbm0", "hbm", gpu=0)
    e.machine.gpus = [Gpu(0, "NVIDIA H200 (fake)", 1 << 30, numa_node=0)]
    return e


@pytest.fixture()
def fake(monkeypatch):
    dev = FakeDevice()
    monkeypatch.setattr(device, "open_device", lambda env, name: dev)
    return dev


def run(module, params, env, target="hbm0", kind="hbm", reps=2, warmup=1):
    info = {}
    samples = module.measure(Case(module.NAME, "gpu:0", target, kind, params, reps, warmup), env, info)
    return samples, info


def bw(op, size=1 << 20, **extra):
    p = {"op": op, "impl": "cuda", "bytes_counted": gpu_bandwidth.OPS[op][3], "iterations": 3,
         "size_bytes": size}
    group = gpu_bandwidth.OPS[op][0]
    if group == "hbm":
        p["cache"] = "cold"
    else:
        p |= {"host_memory": "pinned", "page": "4k"}
    return p | extra


# ---- arithmetic ----------------------------------------------------------------------

@pytest.mark.parametrize("op,rate", [("read", 2000), ("write", 2000), ("copy", 2000), ("triad", 2000),
                                     ("memcpy_d2d", 2000)])
def test_hbm_bandwidth_counts_bytes_as_stated(op, rate, env, fake):
    samples, info = run(gpu_bandwidth, bw(op), env)
    # the fake moves read + write bytes at 2 TB/s: a copy of n bytes takes 2n / 2e12 s, and is
    # reported as 2n bytes ("read+write"); a read of n bytes as n ("once")
    assert [s.value for s in samples] == pytest.approx([rate] * len(samples))
    assert [(s.repetition, s.params["iteration"]) for s in samples] == [(r, i) for r in range(2) for i in range(3)]
    assert all(s.metric == "bandwidth_GBps" and s.params["spin"] == "released" for s in samples)
    assert info["gpu"]["name"] == "Fake GPU" and info["gpu"]["ecc_mode"] == "on"
    if op != "memcpy_d2d":
        assert samples[0].params["block_threads"] == 512 and samples[0].params["grid_blocks"] == 16


@pytest.mark.parametrize("slow,kept,depth", [("cb_copy", "cb_copy8", 8), ("cb_copy8", "cb_copy", 4)])
def test_the_copy_times_whichever_depth_of_loads_in_flight_ran_faster_and_records_it(slow, kept, depth,
                                                                                      env, fake):
    fake.slow.add(slow)
    samples, _ = run(gpu_bandwidth, bw("copy"), env)
    assert {s.params["loads_in_flight"] for s in samples} == {depth}
    assert [s.value for s in samples] == pytest.approx([2000] * len(samples))
    timed = fake.launches[-1]
    assert timed[0] == kept and (timed[1], timed[2]) == (16, 512)


def test_the_copy_depths_take_turns_going_first_from_one_launch_shape_to_the_next(env, fake):
    from cxlbench.gpu.timing import SHAPES
    run(gpu_bandwidth, bw("copy"), env, reps=1)
    order = []                                   # (shape, kernel) in the order first launched
    for name, grid, block, _ in fake.launches:
        key = ((block, grid // fake.sm_count), name)
        if name.startswith("cb_copy") and key not in order:
            order.append(key)
    shapes = [(sh.block, sh.per_sm) for sh in SHAPES]
    assert [s for s, _ in order[:2 * len(shapes)]] == [s for s in shapes for _ in (0, 1)]
    assert [k for _, k in order[:4]] == ["cb_copy", "cb_copy8", "cb_copy8", "cb_copy"]


def test_small_arrays_rotate_past_the_l2_unless_the_l2_is_asked_for(env, fake):
    cold, _ = run(gpu_bandwidth, bw("read", 64 << 10), env)
    warm, _ = run(gpu_bandwidth, bw("read", 64 << 10, cache="warm"), env)
    assert cold[0].params["rotate_sets"] == 4 * fake.l2_bytes // (64 << 10)
    assert warm[0].params["rotate_sets"] == 1


@pytest.mark.parametrize("op,memory,rate", [("h2d", "pinned", 50), ("d2h", "pinned", 40),
                                            ("bidir", "pinned", 80), ("h2d", "pageable", 10),
                                            ("d2h", "pageable", 10), ("bidir", "pageable", 20)])
def test_copy_engine_bandwidth_counts_each_byte_once(op, memory, rate, env, fake):
    samples, _ = run(gpu_bandwidth, bw(op, host_memory=memory), env, "ddr0", "ddr")
    # bidir: both directions at once; each op waits for the slower (d2h at 40), 2n bytes moved
    assert [s.value for s in samples] == pytest.approx([rate] * len(samples))
    assert samples[0].params["pinned"] == ("cudaHostRegister" if memory == "pinned" else "no")
    assert samples[0].params["spin"] == ("released" if memory == "pinned" else "off")
    assert samples[0].params["page_bytes"] == 4096


@pytest.mark.parametrize("op", ["sm_read", "sm_write"])
def test_sm_access_to_a_host_tier_goes_through_the_mapping(op, env, fake):
    samples, _ = run(gpu_bandwidth, bw(op), env, "ddr0", "ddr")
    assert [s.value for s in samples] == pytest.approx([20] * len(samples))
    names = {name for name, *_ in fake.launches}
    assert ("cb_load_w16" if op == "sm_read" else "cb_store_w16") in names


def test_latency_is_ns_and_cycles_per_load_with_the_clock_it_ran_at(env, fake):
    p = {"pattern": "random", "stride_bytes": 64, "working_set_bytes": 64 << 10, "load": "ca"}
    samples, _ = run(gpu_latency, p, env)
    by = {(s.metric, s.repetition): s for s in samples}
    assert by[("latency_ns", 0)].value == pytest.approx(500)
    assert by[("cycles", 1)].value == pytest.approx(750)
    assert by[("cycles", 0)].params["clock_mhz_effective"] == pytest.approx(1500)
    assert by[("cycles", 0)].params["sm_clock_mhz"] == 1500
    assert by[("latency_ns", 0)].params["warm_steps"] == 1024       # the whole chain fits the L2
    chases = [a for name, _, _, a in fake.launches if name == "cb_chase"]
    assert chases[-1]["steps"] >= gpu_latency.MIN_STEPS["ca"]


def test_host_tiers_are_chased_in_place_with_uncached_loads(env, fake):
    p = {"pattern": "random", "stride_bytes": 64, "working_set_bytes": 1 << 20, "load": "cv", "page": "4k"}
    samples, _ = run(gpu_latency, p, env, "ddr0", "ddr")
    assert samples[0].value == pytest.approx(1500)
    assert samples[0].params["pinned"] == "cudaHostRegister" and samples[0].params["page_bytes"] == 4096
    assert {name for name, *_ in fake.launches} >= {"cb_chase_cv"}


def test_write_penalty_times_sectors_and_keeps_the_ecc_state(env, fake):
    full, _ = run(gpu_write_penalty, {"op": "write", "access": "store", "write_bytes": 16, "stride_bytes": 16,
                                      "size_bytes": 1 << 20, "bytes_counted": "instructions", "iterations": 3}, env)
    part, info = run(gpu_write_penalty, {"op": "partial", "access": "store", "write_bytes": 4,
                                         "stride_bytes": 32, "size_bytes": 1 << 20,
                                         "bytes_counted": "instructions", "iterations": 3}, env)
    ns = {16: next(s.value for s in full if s.metric == "ns_per_sector"),
          4: next(s.value for s in part if s.metric == "ns_per_sector")}
    assert ns[16] == pytest.approx(32 / 2000)                # a 32 B sector at 2 TB/s
    assert ns[4] == pytest.approx(2 * ns[16])                # the fake's read-modify-write
    gbps = [s.value for s in part if s.metric == "bandwidth_GBps"]
    assert gbps[0] == pytest.approx(4 / (64 / 2000))         # only the 4 bytes stored count
    assert part[0].params["sectors"] == (1 << 20) // 32 and part[0].params["ecc"] == "on"
    assert part[0].params["ecc_corrected_delta"] == 0 and info["ecc"]["changes"] == []


def test_ecc_counts_that_move_during_a_case_are_warned_about(env, fake):
    real = fake.telemetry.backend.ecc_counts
    calls = []

    def counting():
        calls.append(1)
        out = real()
        out["ecc_corrected_volatile"] = len(calls) - 1
        return out
    fake.telemetry.backend.ecc_counts = counting
    samples, info = run(gpu_write_penalty, {"op": "read", "access": "load", "write_bytes": 16,
                                            "stride_bytes": 16, "size_bytes": 1 << 20,
                                            "bytes_counted": "instructions", "iterations": 2}, env)
    assert samples[0].params["ecc_corrected_delta"] == 1
    assert info["warnings"] == ["GPU ECC during the case: ecc corrected volatile: 0 -> 2"]


def test_zero_copy_stores_seconds_for_every_number_of_uses(env, fake):
    p = {"strategy": "memcpy", "data_bytes": 1 << 20, "max_uses": 4, "page": "4k"}
    samples, _ = run(gpu_zerocopy, p, env, "ddr0", "ddr")
    rep0 = [s for s in samples if s.repetition == 0]
    assert [s.params["uses"] for s in rep0] == [0, 1, 2, 3, 4]
    prep, use = (1 << 20) / 50e9, (1 << 20) / 2e12 / 0.8        # copy at 50 GB/s; uses at HBM rate
    assert [s.value for s in rep0] == pytest.approx([prep + k * use for k in range(5)], rel=1e-6)
    fault, _ = run(gpu_zerocopy, {"strategy": "managed_fault", "data_bytes": 1 << 20, "max_uses": 2,
                                  "host_placement": "first-touch"}, env, "ddr0", "ddr")
    first = [s.value for s in fault if s.repetition == 1]
    assert first[0] < 2e-6 and first[1] - first[0] > (1 << 20) / 5e9   # the first use faults pages over
    assert first[2] - first[1] < first[1] - first[0]



def test_managed_strategies_are_skipped_without_concurrent_managed_access(env, fake):
    fake.concurrent_managed = False
    with pytest.raises(Skip, match="no concurrent managed access"):
        run(gpu_zerocopy, {"strategy": "managed_fault", "data_bytes": 1 << 20, "max_uses": 2,
                           "host_placement": "first-touch"}, env, "ddr0", "ddr")
    assert fake.ranges == []

def test_zero_copy_crossovers_come_out_of_the_curves(env, fake):
    import pandas as pd

    from cxlbench.cli.devicecheck import crossovers
    rows = []
    for strategy in ("in_place", "memcpy"):
        p = {"strategy": strategy, "data_bytes": 1 << 20, "max_uses": 8, "page": "4k"}
        samples, _ = run(gpu_zerocopy, p, env, "ddr0", "ddr")
        rows += [{"benchmark": "gpu_zerocopy", "metric": s.metric, "value": s.value, "repetition": s.repetition,
                  "initiator": "gpu:0", "target": "ddr0", **p, **s.params} for s in samples]
    x = crossovers(pd.DataFrame(rows))
    # in place: 1 MiB at 20 GB/s a use; memcpy: 1 MiB at 50 GB/s once, then 1.6 TB/s a use
    per_in, prep, per_hbm = (1 << 20) / 20e9 / 0.8, (1 << 20) / 50e9, (1 << 20) / 2e12 / 0.8
    assert x.iloc[0]["crossover_uses"] == pytest.approx(prep / (per_in - per_hbm), rel=0.05)


def test_storage_reads_a_file_into_hbm_through_bounce_buffers(env, fake, tmp_path):
    env.tiers["nvme0"] = Tier("nvme0", "nvme", path=str(tmp_path))
    p = {"path": "bounce", "file_bytes": 8 << 20, "chunk_bytes": 1 << 20, "iterations": 1,
         "bytes_counted": "once", "io": "direct"}
    try:
        samples, _ = run(gpu_storage, p, env, "nvme0", "nvme")
    except Skip as e:
        pytest.skip(f"this filesystem: {e}")
    assert len(samples) == 2 and all(s.value > 0 for s in samples)
    assert list(tmp_path.iterdir()) == []                     # the test file is gone
    copies = [n for kind, n in fake.copies if kind == 1]
    assert copies.count(1 << 20) == 16                        # 8 chunks a repetition


# ---- wrong results are refused ---------------------------------------------------------------

@pytest.mark.parametrize("op,kernel", [("read", "cb_load_w16"), ("write", "cb_store_w16"), ("copy", "cb_copy"),
                                       ("copy", "cb_copy8"), ("triad", "cb_triad"), ("memcpy_d2d", "memcpy")])
def test_a_wrong_hbm_kernel_gives_no_figure(op, kernel, env, fake):
    fake.wrong.add(kernel)
    if op == "copy":                                  # the other depth runs slower: this one is timed
        fake.slow.add({"cb_copy": "cb_copy8", "cb_copy8": "cb_copy"}[kernel])
    with pytest.raises(WrongResult):
        run(gpu_bandwidth, bw(op), env)


@pytest.mark.parametrize("op", ["h2d", "d2h", "bidir"])
def test_a_wrong_copy_gives_no_figure(op, env, fake):
    fake.wrong.add("memcpy")
    with pytest.raises(WrongResult, match="rotation set"):
        run(gpu_bandwidth, bw(op), env, "ddr0", "ddr")


def test_a_chase_that_skips_a_load_is_refused(env, fake):
    fake.wrong.add("cb_chase")
    with pytest.raises(WrongResult, match="did not follow the chain"):
        run(gpu_latency, {"pattern": "random", "stride_bytes": 64, "working_set_bytes": 64 << 10,
                          "load": "ca"}, env)


@pytest.mark.parametrize("op,kernel,wb,stride", [("partial", "cb_store_w4", 4, 32),
                                                 ("read_sector", "cb_load_w32", 32, 128)])
def test_a_wrong_write_penalty_kernel_is_refused(op, kernel, wb, stride, env, fake):
    fake.wrong.add(kernel)
    with pytest.raises(WrongResult):
        run(gpu_write_penalty, {"op": op, "access": gpu_write_penalty.OPS[op][0], "write_bytes": wb,
                                "stride_bytes": stride, "size_bytes": 1 << 20,
                                "bytes_counted": "instructions", "iterations": 2}, env)


def test_a_wrong_use_in_zero_copy_is_refused(env, fake):
    fake.wrong.add("cb_load_w16")
    with pytest.raises(WrongResult, match="use 1"):
        run(gpu_zerocopy, {"strategy": "in_place", "data_bytes": 1 << 20, "max_uses": 2, "page": "4k"},
            env, "ddr0", "ddr")


# ---- torch's reference and the missing GPU ----------------------------------------------------

class FakeTorchCopies:
    """torchref.TorchCopies on the fake: the same buffers, the copy done by dev.memcpy."""

    def __init__(self, dev, stream):
        self.dev = dev

    def device_tensor(self, ptr, nbytes):
        return ("dev", ptr, nbytes)

    def host_tensor(self, addr, nbytes, owner=None):
        return ("host", addr, nbytes)

    def pinned(self, tensor):
        return True

    def copy_op(self, dsts, srcs, touched=None):
        kinds = {("dev", "host"): 1, ("host", "dev"): 2, ("dev", "dev"): 3}

        def op(k, stream):
            j = k % len(dsts)
            if touched is not None:
                touched[j] = True
            (dk, dp, n), (sk, sp, _) = dsts[j], srcs[j]
            self.dev.memcpy(dp, sp, n, kinds[(dk, sk)], stream)
        return op


@pytest.mark.parametrize("op,target,rate", [("memcpy_d2d", "hbm0", 2000), ("h2d", "ddr0", 50),
                                            ("d2h", "ddr0", 40)])
def test_torch_reference_runs_on_the_same_kind_of_buffers(op, target, rate, env, fake, monkeypatch):
    from cxlbench.gpu import torchref
    monkeypatch.setattr(torchref, "TorchCopies", FakeTorchCopies)
    kind = "hbm" if target.startswith("hbm") else "ddr"
    samples, _ = run(gpu_bandwidth, bw(op, impl="torch"), env, target, kind)
    assert [s.value for s in samples] == pytest.approx([rate] * len(samples))
    if kind == "ddr":
        assert samples[0].params["torch_pinned"] is True and samples[0].params["spin"] == "released"


def test_without_cupy_a_case_is_skipped_with_the_reason(env, monkeypatch):
    monkeypatch.setattr(device, "runtime_missing", lambda: "cupy is not installed (pip install cupy-cuda12x)")
    with pytest.raises(Skip, match="cupy is not installed"):
        run(gpu_latency, {"pattern": "random", "stride_bytes": 64, "working_set_bytes": 64 << 10,
                          "load": "ca"}, env)



def test_an_unbuilt_c_core_is_a_skip_not_a_crash(env, fake, monkeypatch):
    # without the extension module, its source folder cxlbench/_native/ still imports
    # (an empty namespace package): host buffers must say the C core is not built
    import sys
    import types

    import cxlbench
    empty = types.ModuleType("cxlbench._native")
    monkeypatch.setitem(sys.modules, "cxlbench._native", empty)
    monkeypatch.setattr(cxlbench, "_native", empty, raising=False)
    with pytest.raises(Skip, match="C core"):
        run(gpu_bandwidth, bw("h2d"), env, "ddr0", "ddr")
    assert fake.ranges == []

def test_a_placement_refusal_becomes_a_skip(env, fake):
    env.tiers["ddr9"] = Tier("ddr9", "ddr", node=9)          # a node this machine does not have
    p = {"pattern": "random", "stride_bytes": 64, "working_set_bytes": 1 << 20, "load": "cv", "page": "4k"}
    with pytest.raises(Skip, match="NUMA node 9 does not exist"):
        run(gpu_latency, p, env, "ddr9", "ddr")
    assert fake.ranges == []                                  # what was allocated is freed


def test_buffers_are_all_freed_after_a_case(env, fake):
    run(gpu_bandwidth, bw("copy"), env)
    run(gpu_bandwidth, bw("h2d"), env, "ddr0", "ddr")
    run(gpu_zerocopy, {"strategy": "managed_prefetch", "data_bytes": 1 << 20, "max_uses": 2,
                       "host_placement": "first-touch"}, env, "ddr0", "ddr")
    assert fake.ranges == []                                   # device, managed, pinned, the flag
