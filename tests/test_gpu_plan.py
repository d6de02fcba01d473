"""Planning the GPU families: on the GPU-node fixture the cases a GPU machine runs; on
machines without a GPU (this one, the two-socket CXL fixture) every case planned and
skipped with "no GPU"; the bytes_counted convention stated on every bandwidth case."""
from pathlib import Path

import pytest

from cxlbench.benchmarks import FAMILIES, family, gpu_zerocopy, spec
from cxlbench.runner.run import build_env, plan_suite
from cxlbench.runner.suite import families, load_suite
from planning import plan

FIXTURES = Path(__file__).parent / "fixtures"
GPU_FAMILIES = ["gpu_latency", "gpu_bandwidth", "gpu_write_penalty", "gpu_zerocopy", "gpu_storage"]
SPEC = {"repetitions": 3, "warmup": 1}


@pytest.fixture(scope="module")
def gpu_node():
    return build_env(str(FIXTURES / "gpu_node"), [], {})


@pytest.fixture(scope="module")
def cxl_node():
    return build_env(str(FIXTURES / "two_socket_cxl"), [], {})


@pytest.fixture(scope="module")
def here():
    return build_env("/", [], {})


def test_the_gpu_families_are_registered():
    for name in GPU_FAMILIES:
        assert name in FAMILIES and family(name).NAME == name


def test_the_gpu_suite_plans_on_the_gpu_node_without_overlaps(gpu_node):
    planned = plan_suite(load_suite("gpu"), gpu_node)          # raises on a case planned twice
    run = [p for p in planned if not p.skip]
    assert {p.case.benchmark for p in run} == {"gpu_latency", "gpu_bandwidth", "gpu_write_penalty",
                                               "gpu_zerocopy"}
    assert all(p.case.initiator == "gpu:0" for p in planned)
    assert {p.case.target for p in run} == {"hbm0", "ddr0"}
    reasons = {p.skip for p in planned if p.skip}
    assert reasons == {"one GPU: no peer to copy to",
                       "no NVMe tier declared (declare one: nvme=/path/to/scratch)"}
    # sized for the device check: a few minutes of estimated work
    assert 60 < sum(p.estimate_s for p in run) < 330


@pytest.mark.parametrize("where", ["here", "cxl_node"])
def test_without_a_gpu_every_case_is_planned_and_skipped_with_no_gpu(where, request):
    env = request.getfixturevalue(where)
    if where == "here" and env.machine.gpus:
        pytest.skip("this machine has a GPU")
    planned = plan_suite(load_suite("gpu"), env)
    assert planned and all(p.skip == "no GPU" for p in planned)
    assert {p.case.initiator for p in planned} == {"gpu:0"}
    kinds = {p.case.tier_kind for p in planned}
    assert "hbm" in kinds and "ddr" in kinds
    if where == "cxl_node":                # every host tier, CXL included, is a planned target
        assert {"ddr0", "ddr1", "cxl2"} <= {p.case.target for p in planned}


def test_every_family_plans_no_gpu_on_a_cpu_machine(cxl_node):
    for name in GPU_FAMILIES:
        planned = plan(family(name), dict(SPEC), cxl_node)
        assert planned and all(p.skip == "no GPU" for p in planned), name


def test_bandwidth_states_its_unit_convention(gpu_node):
    from cxlbench.benchmarks import gpu_bandwidth
    spec = {**SPEC, "op": list(gpu_bandwidth.OPS), "impl": ["cuda", "torch"], "size": ["1MiB"],
            "host_memory": ["pinned", "pageable"]}
    planned = plan(gpu_bandwidth, spec, gpu_node)
    counted = {p.case.params["op"]: p.case.params["bytes_counted"] for p in planned}
    assert counted == {"read": "once", "write": "once", "copy": "read+write", "triad": "read+write",
                       "memcpy_d2d": "read+write", "h2d": "once", "d2h": "once", "bidir": "once",
                       "sm_read": "once", "sm_write": "once", "peer": "once"}
    torch_ops = {p.case.params["op"] for p in planned if p.case.params["impl"] == "torch"}
    assert torch_ops == {"memcpy_d2d", "h2d", "d2h"}           # the reference is for copies only
    assert not [p for p in planned if p.case.params["impl"] == "torch"
                and p.case.params.get("host_memory") == "pageable"]


def test_local_means_the_gpus_own_node(cxl_node):
    from cxlbench.benchmarks.gpu_common import host_tiers
    from cxlbench.topology.model import Initiator
    gpu = Initiator("gpu:0", "gpu", node=1, gpu=0)
    def tiers(**table):
        return [t.name for t in host_tiers(spec.of(gpu_zerocopy, table), cxl_node, gpu)]
    assert tiers(tiers=["local"]) == ["ddr1"]
    assert tiers(tiers=["local", "cxl"]) == ["cxl2", "ddr1"]
    assert tiers() == ["cxl2", "ddr0", "ddr1"]


def test_cases_that_cannot_run_say_why(gpu_node):
    from cxlbench.benchmarks import gpu_bandwidth, gpu_latency, gpu_zerocopy
    lat = plan(gpu_latency, {**SPEC, "tiers": ["hbm", "ddr"], "working_set": ["32B", "1MiB", "100TiB"],
                            "stride": ["64B", "12B"]}, gpu_node)
    skips = {(p.case.target, p.case.params["working_set_bytes"], p.case.params["stride_bytes"]): p.skip
             for p in lat}
    assert "fewer than 2" in skips[("hbm0", 32, 64)]
    assert "multiple of 8" in skips[("hbm0", 1 << 20, 12)]
    assert "free memory" in skips[("ddr0", 100 << 40, 64)]
    assert skips[("hbm0", 1 << 20, 64)] is None and skips[("ddr0", 1 << 20, 64)] is None
    bw = plan(gpu_bandwidth, {**SPEC, "op": ["read"], "size": ["1000B"]}, gpu_node)
    assert any("multiple of 4 KiB" in (p.skip or "") for p in bw)
    with pytest.raises(spec.SpecError, match="op = .*nope"):       # a value no family has: the suite's error
        plan(gpu_bandwidth, {**SPEC, "op": ["nope", "read"]}, gpu_node)
    zc = plan(gpu_zerocopy, {**SPEC, "data": ["1MiB"]}, gpu_node)
    assert all(p.skip is None for p in zc) and len(zc) == 4


def test_managed_memory_is_measured_from_the_gpus_node_only(cxl_node):
    from cxlbench.benchmarks import gpu_zerocopy
    from cxlbench.benchmarks.gpu_common import gpu_initiators
    from cxlbench.topology.model import Initiator
    env = build_env(str(FIXTURES / "two_socket_cxl"), [], {})
    env.initiators["gpu:0"] = Initiator("gpu:0", "gpu", node=0, gpu=0)
    assert gpu_initiators(env)[1] is None                    # a fixture: no runtime check
    planned = plan(gpu_zerocopy, {**SPEC, "data": ["1MiB"]}, env)
    managed = {p.case.target: p.skip for p in planned if p.case.params["strategy"] == "managed_fault"}
    assert managed["ddr0"] is None
    assert "first touch" in managed["ddr1"] and "first touch" in managed["cxl2"]
    assert all(p.skip is None for p in planned if p.case.params["strategy"] == "in_place")


def test_specs_of_the_suite_are_all_gpu_families():
    specs = [spec for _, _, spec in families(load_suite("gpu"))]
    assert {s.name for s in specs} <= set(GPU_FAMILIES)
    assert all(s.repetitions >= 3 for s in specs)
