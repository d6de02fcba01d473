"""On a real GPU (skipped with "no GPU" elsewhere): the kernels compile, mapped host
memory is reached through the right address, the spin kernel holds and releases a
stream, and every family measures a small case end to end with its checks passing.
The device check runs these first (a minute at most) so a broken piece shows up
with a clear message before the suite runs."""
import importlib.util

import pytest

pytestmark = pytest.mark.gpu


def _cuda_devices() -> int:
    if importlib.util.find_spec("cupy") is None:
        return 0
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount()
    except Exception:            # noqa: BLE001 - no driver
        return 0


if not _cuda_devices():
    pytest.skip("no GPU", allow_module_level=True)

from cxlbench.benchmarks import (gpu_bandwidth, gpu_latency, gpu_storage, gpu_write_penalty,  # noqa: E402
                                 gpu_zerocopy)
from cxlbench.benchmarks.base import Skip  # noqa: E402
from cxlbench.results.schema import Case  # noqa: E402
from cxlbench.runner.run import build_env  # noqa: E402


@pytest.fixture(scope="module")
def env():
    e = build_env("/", [], {})
    assert "gpu:0" in e.initiators, "the topology found no GPU although CUDA sees one"
    return e


@pytest.fixture(scope="module")
def dev(env):
    from cxlbench import gpu
    return gpu.open(env, "gpu:0")


@pytest.fixture(scope="module")
def host(env):
    from cxlbench.benchmarks.gpu_common import local_host_tier
    tier = local_host_tier(env, env.initiators["gpu:0"])
    if tier is None:
        pytest.skip("no host tier (no NUMA information here)")
    return tier


def test_every_kernel_compiles_and_loads(dev):
    from cxlbench.gpu.kernels import SIGNATURES
    for name in SIGNATURES:
        dev.kernel(name)
    print(dev.describe(), dev.telemetry.source, dev.telemetry.static())


def test_mapped_host_memory_is_read_and_written_in_place(dev, host):
    import numpy as np

    from cxlbench.gpu.buffers import DeviceBuffer
    from cxlbench.memory.pinned import PinnedHost
    with PinnedHost(dev, 1 << 20, host.node) as buf, DeviceBuffer(dev, 4096) as out:
        words = buf.array("uint64", 0, 1 << 20)
        words[:] = np.arange(len(words), dtype=np.uint64)
        s = dev.stream()
        dev.launch("cb_load_w8", 1, 32, (buf.device, len(words), 8, out.ptr), s)
        dev.launch("cb_store_w8", 4, 256, (buf.device + 8192, 16, 8, 0x55), s)
        dev.sync_stream(s)
        assert int(out.view("uint64")[0].get()) == len(words) * (len(words) - 1) // 2
        assert list(words[1024:1040]) == [i ^ 0x55 for i in range(16)]


def test_the_spin_kernel_holds_the_stream_and_gives_up_after_its_timeout(dev):
    from cxlbench.gpu import timing
    from cxlbench.gpu.buffers import DeviceBuffer
    timer = timing.Timer(dev)
    with DeviceBuffer(dev, 64 << 20) as a:
        dev.memset(a.ptr, 0, 64 << 20, timer.stream)   # whatever a first memset loads, not behind a spin
        dev.sync_stream(timer.stream)
        t = timer.run(lambda k, s: dev.memset(a.ptr, k & 0xFF, 64 << 20, s), iterations=3, ops=4, warmup=2)
        assert t.spin == "released" and all(x > 0 for x in t.seconds)
        timer.flag.arm()
        dev.launch("cb_spin", 1, 1, (timer.flag.device, 2_000_000), timer.stream)   # never released
        dev.sync_stream(timer.stream)
        assert timer.flag.timed_out
    timer.close()


def _measure(module, target, kind, params, env, reps=1):
    info = {}
    samples = module.measure(Case(module.NAME, "gpu:0", target, kind, params, reps, 1), env, info)
    assert samples, module.NAME
    return samples, info


def test_latency_hbm_and_host(env, host):
    s, info = _measure(gpu_latency, "hbm0", "hbm", {"pattern": "random", "stride_bytes": 64,
                                                    "working_set_bytes": 256 << 20, "load": "ca"}, env)
    ns = next(x.value for x in s if x.metric == "latency_ns")
    cycles = next(x.value for x in s if x.metric == "cycles")
    assert 100 < ns < 5000 and 200 < cycles < 10000, (ns, cycles)
    l1, _ = _measure(gpu_latency, "hbm0", "hbm", {"pattern": "random", "stride_bytes": 64,
                                                  "working_set_bytes": 16 << 10, "load": "ca"}, env)
    assert next(x.value for x in l1 if x.metric == "cycles") < cycles / 4
    h, _ = _measure(gpu_latency, host.name, host.kind, {"pattern": "random", "stride_bytes": 64,
                                                        "working_set_bytes": 16 << 20, "load": "cv",
                                                        "page": "4k"}, env)
    assert next(x.value for x in h if x.metric == "latency_ns") > ns
    print("HBM", ns, "ns", cycles, "cycles; L1", l1[1].value, "cycles; host", h[0].value, "ns", info["gpu"])


@pytest.mark.parametrize("op", ["read", "write", "copy", "triad", "memcpy_d2d"])
def test_hbm_bandwidth(op, env):
    p = {"op": op, "impl": "cuda", "bytes_counted": gpu_bandwidth.OPS[op][3], "iterations": 3,
         "size_bytes": 256 << 20, "cache": "cold"}
    s, _ = _measure(gpu_bandwidth, "hbm0", "hbm", p, env)
    assert all(300 < x.value < 20000 for x in s), [x.value for x in s]
    assert all(x.params["spin"] == "released" for x in s)


@pytest.mark.parametrize("op,memory", [("h2d", "pinned"), ("d2h", "pinned"), ("bidir", "pinned"),
                                       ("h2d", "pageable"), ("sm_read", "pinned"), ("sm_write", "pinned")])
def test_host_tier_bandwidth(op, memory, env, host):
    p = {"op": op, "impl": "cuda", "bytes_counted": "once", "iterations": 3, "size_bytes": 32 << 20,
         "host_memory": memory, "page": "4k"}
    s, _ = _measure(gpu_bandwidth, host.name, host.kind, p, env)
    assert all(0.5 < x.value < 400 for x in s), [x.value for x in s]


@pytest.mark.parametrize("op,target", [("memcpy_d2d", "hbm"), ("h2d", "host")])
def test_torch_reference(op, target, env, host):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    p = {"op": op, "impl": "torch", "bytes_counted": gpu_bandwidth.OPS[op][3], "iterations": 3,
         "size_bytes": 64 << 20}
    if target == "hbm":
        s, _ = _measure(gpu_bandwidth, "hbm0", "hbm", {**p, "cache": "cold"}, env)
    else:
        s, _ = _measure(gpu_bandwidth, host.name, host.kind, {**p, "host_memory": "pinned", "page": "4k"}, env)
        assert s[0].params["torch_pinned"] is True
    assert all(x.value > 1 for x in s)


@pytest.mark.parametrize("op,wb,stride", [("read", 16, 16), ("partial", 4, 32), ("write_sector", 32, 128)])
def test_write_penalty(op, wb, stride, env):
    p = {"op": op, "access": gpu_write_penalty.OPS[op][0], "write_bytes": wb, "stride_bytes": stride,
         "size_bytes": 256 << 20, "bytes_counted": "instructions", "iterations": 2}
    s, info = _measure(gpu_write_penalty, "hbm0", "hbm", p, env)
    assert all(x.value > 0 for x in s) and "ecc" in info


@pytest.mark.parametrize("strategy", ["in_place", "memcpy", "managed_prefetch", "managed_fault"])
def test_zero_copy(strategy, env, host):
    p = {"strategy": strategy, "data_bytes": 16 << 20, "max_uses": 3}
    p |= {"host_placement": "first-touch"} if strategy.startswith("managed") else {"page": "4k"}
    try:
        s, _ = _measure(gpu_zerocopy, host.name, host.kind, p, env)
    except Skip as e:
        pytest.skip(str(e))
    values = [x.value for x in s]
    assert values == sorted(values) and values[-1] > 0          # time only grows with uses


def test_nvme_to_hbm_through_bounce_buffers(env, tmp_path):
    from cxlbench.topology.model import Tier
    env.tiers["nvme0"] = Tier("nvme0", "nvme", path=str(tmp_path))
    p = {"path": "bounce", "file_bytes": 64 << 20, "chunk_bytes": 4 << 20, "iterations": 1,
         "bytes_counted": "once", "io": "direct"}
    try:
        s, _ = _measure(gpu_storage, "nvme0", "nvme", p, env)
    except Skip as e:
        pytest.skip(str(e))
    assert s[0].value > 0
