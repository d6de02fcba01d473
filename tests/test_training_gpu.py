"""The training engines on a GPU: bf16 compute on the device, state on host tiers.

Skipped without CUDA. Each test is a few tiny-config steps (seconds on any GPU);
they check behaviour — the loss falls, buffers are pinned and on their node,
offloaded activations change nothing, the FSDP2 reference runs — not speed.
"""
from __future__ import annotations

import math

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")]

from cxlbench.training.configs import model_config, train_config  # noqa: E402
from cxlbench.training.data import MarkovTokens  # noqa: E402
from cxlbench.training.engine import Fsdp2Engine, NoOffloadEngine, OffloadEngine  # noqa: E402
from cxlbench.training.placement import Placement  # noqa: E402
from planning import plan  # noqa: E402


def _gpu_node() -> int:
    """The GPU's NUMA node from sysfs (0 when the platform does not say)."""
    try:
        p = torch.cuda.get_device_properties(0)
        address = f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
        with open(f"/sys/bus/pci/devices/{address}/numa_node") as f:
            return max(int(f.read()), 0)
    except (AttributeError, OSError, ValueError, RuntimeError):
        return 0


NODE = _gpu_node() if torch.cuda.is_available() else 0


def _batches(n=12, batch=8, seq=128):
    cfg = model_config("tiny")
    return cfg, MarkovTokens(cfg.vocab_size).batches(n, batch, seq)


@pytest.mark.parametrize("where", ["ddr", "nvme", "activations"])
def test_offload_engine_trains_on_the_gpu(tmp_path, where):
    cfg, batches = _batches()
    placement = {"ddr": Placement(NODE, NODE, NODE),
                 "nvme": Placement("nvme", "nvme", NODE),
                 "activations": Placement(NODE, NODE, NODE, activations=NODE)}[where]
    engine = OffloadEngine(cfg, train_config("tiny", chunk_params=1 << 14), placement, "cuda:0",
                           nvme_dir=str(tmp_path))
    try:
        assert engine.flat.dtype == torch.bfloat16 and engine.flat.is_cuda
        assert engine.grads.is_pinned() and engine.staging.is_pinned()
        times = [engine.step(*engine.prepare(b)) for b in batches]
        engine.verify()
        memory = engine.memory()
        master = engine.master_params()
    finally:
        engine.close()
    losses = [t.loss for t in times]
    assert losses[0] == pytest.approx(math.log(cfg.vocab_size), abs=0.1)
    assert losses[-1] < losses[0] - 0.5
    assert torch.isfinite(master).all()
    assert memory["pinned"] > 0 and memory["hbm_allocated_peak"] > 0
    assert all(t.forward_s > 0 and t.backward_s > 0 and t.optimizer_s > 0 for t in times)


def test_offloaded_activations_change_nothing():
    cfg, batches = _batches(n=3)
    train = train_config("tiny", activation_checkpointing=True)
    results = []
    for act in ("device", NODE):
        engine = OffloadEngine(cfg, train, Placement(NODE, NODE, NODE, activations=act), "cuda:0")
        try:
            results.append([engine.step(*engine.prepare(b)).loss for b in batches])
        finally:
            engine.close()
    # The stash only moves bytes. The first step is the same to the bit; later ones may
    # drift by bf16 roundings since the attention backward on a GPU is not bitwise
    # deterministic (atomics), so they are held to a small absolute tolerance.
    assert results[0][0] == results[1][0]
    assert results[0] == pytest.approx(results[1], abs=0.02)


@pytest.mark.parametrize("impl", ["fused", "native"])
def test_offload_engine_follows_the_no_offload_reference(impl):
    """bf16 compute with fp32 master weights vs fp32 weights under bf16 autocast:
    different roundings, the same training — the loss curves stay close. Native is
    the one-pass update (bf16 gradients in, the staging written in its pass): the
    compute copy after the last step is the master narrowed, to the bit."""
    cfg, batches = _batches(n=10)
    train = train_config("tiny")
    ref = NoOffloadEngine(cfg, train, "cuda:0")
    ref_losses = [ref.step(*ref.prepare(b)).loss for b in batches]
    engine = OffloadEngine(cfg, train, Placement(NODE, NODE, NODE), "cuda:0", impl=impl)
    try:
        losses = [engine.step(*engine.prepare(b)).loss for b in batches]
        torch.cuda.synchronize()
        compute_copy, master = engine.flat.cpu(), engine.master_params()
    finally:
        engine.close()
    assert losses == pytest.approx(ref_losses, abs=0.15)
    assert torch.equal(compute_copy, master.to(torch.bfloat16))


def test_fsdp2_cpu_offload_reference_runs_at_world_size_1():
    cfg, batches = _batches(n=6)
    engine = Fsdp2Engine(cfg, train_config("tiny"), "cuda:0")
    try:
        losses = [engine.step(*engine.prepare(b)).loss for b in batches]
        memory = engine.memory()
    finally:
        engine.close()
    assert losses[-1] < losses[0] and all(math.isfinite(x) for x in losses)
    assert memory["pinned"] > 0                  # CPUOffloadPolicy(pin_memory=True)
    assert engine.impl in ("fused", "foreach")


def test_the_family_reports_mfu_and_a_model_verdict_on_the_gpu(tmp_path):
    from cxlbench.benchmarks import training
    from cxlbench.runner.run import build_env
    env = build_env("/", [f"nvme={tmp_path}"], {})
    spec = {"name": "training", "config": ["tiny"], "steps": 5, "warmup_steps": 2,
            "engine": ["offload", "none"], "optimizer_on": ["ddr", "hbm"]}
    cases = [p.case for p in plan(training, spec, env) if p.skip is None]
    assert {c.params["engine"] for c in cases} == {"offload", "none"}
    for case in cases:
        info: dict = {}
        samples = training.measure(case, env, info)
        mfu = [s.value for s in samples if s.metric == "mfu"]
        assert len(mfu) == 5 and all(0 < m < 1 for m in mfu)
        assert "GPU offload" in info["what_was_measured"] or case.params["engine"] == "none"
        assert "step_model" in info and info["loss_fell"]
        # the compute term is the replay's, not FLOPs at the GEMM rate: the first H200
        # runs' twin ran other attention kernels, so the probe never ran there
        assert info["step_model"]["prediction"]["compute_basis"] == "probe", info.get("notes")


def test_pinned_copy_probe_is_in_pcie_range():
    from cxlbench.training.placement import HostArena
    from cxlbench.training.probes import copy_Bps
    with HostArena(256 << 20, NODE, "probe") as arena:
        arena.pin()
        host = arena.take(64 << 20, torch.float32)
        dev = torch.empty(64 << 20, device="cuda:0")
        h2d = copy_Bps(dev, host)
    assert 1e9 < h2d < 1e12           # between a slow PCIe 3 x4 and anything real


@pytest.mark.parametrize("where", ["ddr", "nvme"])
def test_the_delayed_update_on_the_gpu_reads_parameters_one_update_stale(tmp_path, where):
    """DPU on a GPU: after warm-up each step's bf16 compute copy is the master as the
    update before last left it, narrowed; the copies back run on their own stream;
    the loss falls; close ends the update thread."""
    import threading
    cfg, batches = _batches(n=8)
    train = train_config("tiny", chunk_params=1 << 14, dpu=True, dpu_warmup_steps=2)
    placement = Placement(NODE, NODE, NODE) if where == "ddr" else Placement("nvme", "nvme", NODE)
    engine = OffloadEngine(cfg, train, placement, "cuda:0", nvme_dir=str(tmp_path))
    used, master_after = [], []
    engine.model.register_forward_pre_hook(
        lambda m, a: used.append(torch.cat([p.detach().reshape(-1) for p in m.parameters()]).cpu()))
    opt = engine.nvme if engine.nvme is not None else engine.host_opt
    real = opt.step

    def recording_step(grads, on_chunk=None):
        shipped = torch.empty(engine.numel, dtype=torch.bfloat16)

        def ship(s, e, p32):
            shipped[s:e].copy_(p32)               # what this update sends to the GPU
            on_chunk(s, e, p32)
        out = real(grads, ship)
        master_after.append(shipped)
        return out
    opt.step = recording_step
    try:
        assert engine.h2d_stream != torch.cuda.current_stream() and engine._back.is_cuda
        assert engine.arenas["grads_next"].pinned
        times = [engine.step(*engine.prepare(b)) for b in batches]
        torch.cuda.synchronize()
    finally:
        engine.close()
    assert [t.staleness for t in times] == [0, 0, 0] + [1] * 5
    for i in range(3, len(batches)):
        assert torch.equal(used[i], master_after[i - 2])
    losses = [t.loss for t in times]
    assert losses[-1] < losses[0] - 0.3
    assert not [t for t in threading.enumerate() if t.name.startswith("dpu-update")]


def test_the_dpu_check_prints_a_row_with_and_without_the_delayed_update():
    from cxlbench.cli.devicecheck import dpu_check
    lines = list(dpu_check(["tiny"], ["ddr"], "gpu", steps=4))
    rows = [line for line in lines[2:] if line.startswith("|")]
    assert len(rows) == 2, lines
    assert "| off |" in rows[0] and "| overlapped |" in rows[0]
    assert "| on (warm-up 2, staleness 1) |" in rows[1] and "| dpu |" in rows[1]
