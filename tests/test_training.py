"""Training workload: the model, the data, the engines, the NVMe optimizer, placement
checks, planning with and without a GPU, and the step-time model's arithmetic.

Behaviour only, no timing assertions. One torch thread: the figures do not matter
here, and two OpenMP threads on a shared 2-core VM stall each other badly.
"""
from __future__ import annotations

import math
import os
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch

from cxlbench.training.configs import MODELS, model_config, train_config
from cxlbench.training.data import MarkovTokens
from cxlbench.training.engine import NoOffloadEngine, OffloadEngine
from cxlbench.training.model import Attention, Transformer, apply_rope, loss_fn, rope_tables
from cxlbench.training.nvme_optimizer import NvmeAdamW
from cxlbench.training.optimizer import AdamWHyper, HostAdamW, unavailable
from cxlbench.training.placement import (HostArena, Placement, PlacementError,
                                         process_bytes_per_node, verify)
from cxlbench.training.stepmodel import (Rates, Workload, compare, predict,
                                         tokens_to_hide_optimizer)
from planning import plan

NODE0 = 0 if os.path.isdir("/sys/devices/system/node/node0") else None


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---- the model ----------------------------------------------------------------

def test_config_parameter_count_matches_the_module():
    for name in ("tiny", "small"):
        cfg = model_config(name)
        model = Transformer(cfg, max_seq_len=32)
        assert sum(p.numel() for p in model.parameters()) == cfg.num_params()
        assert cfg.num_params(embeddings=False) == cfg.num_params() - cfg.vocab_size * cfg.dim
    # the published shapes: Llama 3.1 8B untied has 8.03e9 parameters
    assert abs(MODELS["8b"].num_params() - 8.03e9) / 8.03e9 < 0.01
    assert 1.2e9 < MODELS["1b"].num_params() < 1.6e9


def test_forward_shapes_and_loss_at_init_is_log_vocab():
    cfg = model_config("tiny")
    torch.manual_seed(0)
    model = Transformer(cfg, max_seq_len=64)
    inputs, labels = MarkovTokens(cfg.vocab_size).batch(0, batch=4, seq_len=64)
    logits = model(inputs)
    assert logits.shape == (4, 64, cfg.vocab_size)
    # The final RMSNorm gives h unit RMS, the output weights are N(0, init_std²), so each
    # logit is ~N(0, σ²) with σ² = dim·init_std² = 64·4e-4 = 0.0256. For such logits
    # E[cross-entropy] ≈ log V + σ²/2 = log V + 0.013; the mean over 256 tokens varies
    # by a few thousandths. 0.05 nats holds that with a wide margin, yet catches a
    # wrong init scale (σ = 1 would add 0.5) or a broken softmax.
    loss = loss_fn(logits, labels).item()
    assert abs(loss - math.log(cfg.vocab_size)) < 0.05


def _naive_attention(attn: Attention, x, cos, sin):
    """Grouped-query attention written out: per head, softmax(q kᵀ/√d + causal mask) v."""
    b, s, _ = x.shape
    q = apply_rope(attn.wq(x).view(b, s, attn.n_heads, attn.head_dim), cos, sin)
    k = apply_rope(attn.wk(x).view(b, s, attn.n_kv_heads, attn.head_dim), cos, sin)
    v = attn.wv(x).view(b, s, attn.n_kv_heads, attn.head_dim)
    group = attn.n_heads // attn.n_kv_heads
    heads = []
    mask = torch.full((s, s), float("-inf")).triu(1)
    for h in range(attn.n_heads):
        kv = h // group                       # query head h reads kv head h // group
        scores = q[:, :, h] @ k[:, :, kv].transpose(1, 2) / math.sqrt(attn.head_dim) + mask
        heads.append(scores.softmax(-1) @ v[:, :, kv])
    return attn.wo(torch.cat(heads, dim=-1))


def test_gqa_attention_matches_a_naive_reference():
    cfg = model_config("tiny")                # 4 query heads share 2 kv heads
    torch.manual_seed(1)
    attn = Attention(cfg)
    cos, sin = rope_tables(cfg.head_dim, 16, cfg.rope_theta)
    x = torch.randn(2, 16, cfg.dim)
    torch.testing.assert_close(attn(x, cos, sin), _naive_attention(attn, x, cos, sin),
                               rtol=1e-5, atol=1e-5)


def test_rope_depends_only_on_relative_position():
    cos, sin = rope_tables(16, 32, 10000.0)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def at(x, pos):                           # x placed at position pos
        seq = torch.zeros(1, pos + 1, 1, 16)
        seq[:, pos] = x[:, 0]
        return apply_rope(seq, cos, sin)[:, pos]

    dot = lambda m, n: (at(q, m) * at(k, n)).sum()  # noqa: E731
    torch.testing.assert_close(dot(5, 2), dot(13, 10))
    assert at(q, 7).norm() == pytest.approx(q.norm().item(), rel=1e-5)


def test_data_is_deterministic_and_learnable():
    data = MarkovTokens(256, seed=3)
    a, b = data.batch(5, 2, 32), data.batch(5, 2, 32)
    assert torch.equal(a[0], b[0]) and torch.equal(a[0][:, 1:], a[1][:, :-1])
    assert not torch.equal(a[0], data.batch(6, 2, 32)[0])
    assert data.entropy < 0.3 * math.log(256)     # far below where the model starts


def test_loss_falls_on_the_tiny_config():
    cfg = model_config("tiny")
    train = train_config("tiny", batch=8, seq_len=64)
    engine = NoOffloadEngine(cfg, train, "cpu")
    data = MarkovTokens(cfg.vocab_size)
    losses = [engine.step(*b).loss for b in data.batches(40, 8, 64)]
    assert losses[0] == pytest.approx(math.log(cfg.vocab_size), abs=0.05)
    assert sum(losses[-5:]) / 5 < losses[0] - 1.5


# ---- optimizers -----------------------------------------------------------------

def _reference_adamw(p0: torch.Tensor, grads: list[torch.Tensor], hyper: AdamWHyper, impl: str):
    p = torch.nn.Parameter(p0.clone())
    opt = torch.optim.AdamW([p], lr=hyper.lr, betas=hyper.betas, eps=hyper.eps,
                            weight_decay=hyper.weight_decay, fused=impl == "fused",
                            foreach=impl == "foreach")
    for g in grads:
        p.grad = g.clone()
        opt.step()
    return p.detach()


@pytest.mark.parametrize("impl", ["fused", "foreach", "forloop"])
@pytest.mark.parametrize("params_in_file", [True, False])
def test_nvme_optimizer_gives_the_same_parameters_as_in_memory_adamw(tmp_path, impl, params_in_file):
    if unavailable(impl):
        pytest.skip(unavailable(impl))
    n = 50_000 + 13                            # not a multiple of the chunk: a short last record
    hyper = AdamWHyper(lr=1e-2)
    p0 = torch.randn(n, generator=torch.Generator().manual_seed(0)) * 0.02
    grads = [torch.randn(n, generator=torch.Generator().manual_seed(s)) * 1e-2 for s in range(1, 6)]
    master = None if params_in_file else p0.clone()
    with NvmeAdamW(str(tmp_path), n, hyper, impl, chunk=8192, buffer_node=NODE0, master=master,
                   n_buffers=2) as opt:
        opt.initialize(p0 if params_in_file else None)
        for g in grads:
            io = opt.step(g)
        assert io.bytes_read == io.bytes_written == opt.file_bytes
        got = opt.read_params()
    # the same ATen kernel on the same elements: bitwise equal
    assert torch.equal(got, _reference_adamw(p0, grads, hyper, impl))


def test_host_adamw_in_chunks_with_bf16_grads_matches_whole_tensor_adamw():
    n = 10_000
    hyper = AdamWHyper()
    p0 = torch.randn(n) * 0.02
    grads = [(torch.randn(n) * 1e-2).bfloat16() for _ in range(3)]
    opt = HostAdamW(p0.clone(), torch.zeros(n), torch.zeros(n), n, hyper, "fused", chunk=3000,
                    scratch=torch.empty(3000))
    for g in grads:
        opt.step(g)
    assert torch.equal(opt.p, _reference_adamw(p0, [g.float() for g in grads], hyper, "fused"))


def _engine_pair(**placement):
    cfg = model_config("tiny")
    train = train_config("tiny", batch=4, seq_len=32, chunk_params=1 << 14)
    return cfg, train, MarkovTokens(cfg.vocab_size).batches(4, 4, 32)


@pytest.mark.parametrize("where", ["ddr", "nvme", "activations"])
def test_offload_engine_trains_like_plain_training(tmp_path, where):
    cfg, train, batches = _engine_pair()
    ref = NoOffloadEngine(cfg, train, "cpu")
    ref_losses = [ref.step(*b).loss for b in batches]
    placement = {"ddr": Placement(NODE0, NODE0, NODE0),
                 "nvme": Placement("nvme", "nvme", NODE0),
                 "activations": Placement(NODE0, NODE0, NODE0, activations=NODE0)}[where]
    if where == "activations" and NODE0 is None:
        pytest.skip("no NUMA node 0 to hold activations")
    engine = OffloadEngine(cfg, train, placement, "cpu", nvme_dir=str(tmp_path))
    try:
        times = [engine.step(*b) for b in batches]
        engine.verify()                        # every placed buffer is on its node
        got = engine.master_params()
    finally:
        engine.close()
    # Same model, data and AdamW; only the grouping of the update differs (chunks of
    # the flat vector vs per-parameter tensors), which moves results by fp32 rounding.
    torch.testing.assert_close(got, ref.master_params(), rtol=1e-5, atol=1e-6)
    assert [t.loss for t in times] == pytest.approx(ref_losses, rel=1e-5)
    assert all(t.step_s >= t.forward_s + t.backward_s for t in times)
    if where == "nvme":
        assert all(t.io.bytes_read > 0 for t in times)


def test_activation_checkpointing_recomputes_the_same_gradients():
    cfg = model_config("tiny")
    data = MarkovTokens(cfg.vocab_size).batches(2, 2, 32)
    results = []
    for ac in (False, True):
        engine = NoOffloadEngine(cfg, train_config("tiny", batch=2, seq_len=32,
                                                   activation_checkpointing=ac), "cpu")
        [engine.step(*b) for b in data]
        results.append(engine.master_params())
    torch.testing.assert_close(results[0], results[1], rtol=1e-5, atol=1e-7)


# ---- placement ------------------------------------------------------------------

def test_verification_catches_a_tensor_on_the_wrong_node():
    t = torch.zeros(4096)                      # 16 KiB: four pages
    on_node1_at_page_2 = lambda addr, length: [0, 0, 1, 0]  # noqa: E731
    with pytest.raises(PlacementError, match=r"asked node 0, found 1 on node 1"):
        verify(t, 0, "exp_avg", nodes_of=on_node1_at_page_2)
    never_touched = lambda addr, length: [0, -2, -2, 0]     # noqa: E731
    with pytest.raises(PlacementError, match="2 not present"):
        verify(t, 0, "exp_avg", nodes_of=never_touched)
    record = verify(t, 0, "exp_avg", nodes_of=lambda a, n: [0, 0, 0, 0])
    assert record["found"] == {"0": 4} and record["pages_checked"] == 4


def test_an_engine_refuses_to_measure_when_a_buffer_is_elsewhere():
    cfg = model_config("tiny")
    engine = OffloadEngine(cfg, train_config("tiny", batch=2, seq_len=16), Placement(0, 0, 0), "cpu")
    try:
        with pytest.raises(PlacementError, match="node 1"):
            engine.verify(nodes_of=lambda addr, length: [1] * 4)
    finally:
        engine.close()


@pytest.mark.skipif(NODE0 is None, reason="no NUMA node 0")
def test_arena_pages_really_are_on_the_node():
    with HostArena(1 << 20, NODE0, "probe") as arena:
        t = arena.take(1000, torch.float32)
        assert t.data_ptr() % HostArena.ALIGN == 0
        record = arena.verify()
        assert record["found"] == {str(NODE0): arena.length // 4096} and arena.length >= 1 << 20


def test_arena_slices_never_sit_a_multiple_of_64k_apart():
    """Power-of-two arenas on 2 MiB-aligned mappings lay AdamW's streams exactly 2^k
    apart: 2^26 parameters stepped at 610 M params/s there against 1,700 a page apart."""
    from itertools import combinations
    n = 1 << 18                                   # 1 MiB of fp32: every arena a power of two
    arenas = [HostArena(HostArena.bytes_for(n, torch.float32, 2), None, f"a{i}") for i in range(4)]
    try:
        starts = [a.take(n, torch.float32).data_ptr() for a in arenas for _ in range(2)]
        assert all(s % HostArena.ALIGN == 0 for s in starts)
        assert all(abs(a - b) % (64 << 10) for a, b in combinations(starts, 2))
    finally:
        for a in arenas:
            a.close()


def test_an_arena_sized_for_its_slices_holds_them_all_out_of_step():
    size = 3 * 65536                              # the NVMe optimizer's buffers: sized by hand
    with HostArena(4 * size, None, "buffers") as arena:
        starts = [arena.take(size // 4, torch.float32).data_ptr() for _ in range(4)]
    assert [b - a for a, b in zip(starts, starts[1:])] == [size + HostArena.ALIGN] * 3


def test_process_bytes_per_node_reads_numa_maps():
    text = ("7f00 default anon=3 dirty=3 N0=2 N1=1 kernelpagesize_kB=4\n"
            "7f80 bind:1 anon=1 N1=1 kernelpagesize_kB=2048\n")
    assert process_bytes_per_node(text) == {0: 8192, 1: 4096 + 2 * 2**20}


# ---- the step-time model --------------------------------------------------------

def test_with_checkpointing_the_gradients_hide_behind_three_quarters_of_the_compute():
    """The recomputed forward runs in the backward: 6 of a checkpointed step's 8 FLOPs
    per parameter and token are backward, where the gradients go down. A d2h of 0.7 of
    the compute is exposed by 0.7 − ⅔ without checkpointing and hides with it."""
    w = Workload(n_params=10**9, n_params_nonembed=10**9, n_layers=16, dim=2048, seq_len=2048,
                 tokens_per_step=8192, chunks=10**6)
    r = Rates(flops_per_s=1.0, compute_s=1.0, d2h_Bps=2e9 / 0.7, h2d_Bps=1e15, opt_params_per_s=1e15)
    plain = predict(w, r, "overlapped").step_s
    assert plain == pytest.approx(1.0 + (0.7 - 2 / 3), abs=1e-5)
    assert predict(replace(w, recompute=True), r, "overlapped").step_s == pytest.approx(1.0, abs=1e-5)


def test_step_model_arithmetic_on_known_inputs():
    w = Workload(n_params=10**9, n_params_nonembed=10**9, n_layers=16, dim=2048, seq_len=2048,
                 tokens_per_step=8192, grad_bytes=2, param_bytes=2, nvme_bytes=12, chunks=4)
    r = Rates(flops_per_s=4e14, d2h_Bps=5e10, h2d_Bps=5e10, opt_params_per_s=1.25e9,
              nvme_read_Bps=5e9, nvme_write_Bps=2.5e9)
    assert w.flops_per_token == 6 * 10**9 + 12 * 16 * 2048 * 2048 == 6_805_306_368
    p = predict(w, r, "serial")
    assert p.terms["compute"] == pytest.approx(6_805_306_368 * 8192 / 4e14)    # 0.13937 s
    assert p.terms["d2h"] == pytest.approx(0.04) and p.terms["h2d"] == pytest.approx(0.04)
    assert p.terms["optimizer"] == pytest.approx(0.8)
    assert p.terms["nvme"] == pytest.approx(12 / 5 + 12 / 2.5)                 # 7.2 s
    assert p.step_s == pytest.approx(p.terms["compute"] + 0.08 + 7.2)
    over = predict(w, r, "overlapped")        # d2h hides in backward; h2d behind the update
    assert over.step_s == pytest.approx(p.terms["compute"] + 7.2 + 0.04 / 4)
    assert predict(w, r, "none").step_s == pytest.approx(p.terms["compute"] + 0.8)
    assert tokens_to_hide_optimizer(4e14, 1.25e9) == pytest.approx(53_333.33, rel=1e-6)

    # the delayed update: the host chain (7.2 s of NVMe) outlasts the compute and sets the step alone
    assert predict(w, r, "dpu").step_s == pytest.approx(7.2 + 0.04 / 4)
    # ... and on shared CPU cores only the device's I/O hides; the cores' work adds up
    assert predict(w, r, "dpu-shared").step_s == pytest.approx(max(p.terms["compute"] + 0.08 + 0.8, 7.2 + 0.04))
    # with the update's CPU seconds known, they add to the compute and its I/O waits hide:
    # 3 s of CPU of a 9 s update (waits in) beside 0.14 s of compute: the update's 9 s and its
    # copy back into the compute copy (0.04 s) bind
    cpu = replace(r, opt_params_per_s=1e9 / 9, opt_cpu_params_per_s=1e9 / 3)
    shared = predict(w, cpu, "dpu-shared")
    assert shared.terms["optimizer_cpu"] == pytest.approx(3.0)
    assert shared.step_s == pytest.approx(9.04)
    # ... and where the compute is long, the CPU seconds add to it whole, the waits not at all
    long = predict(w, replace(cpu, compute_s=8.0), "dpu-shared")
    assert long.step_s == pytest.approx(8.0 + 0.08 + 3.0)
    assert "optimizer_cpu" not in predict(w, cpu, "dpu").terms     # a GPU's update has its own cores

    agree = compare(p, 1.1 * p.step_s, {"compute": p.terms["compute"], "nvme": 7.0})
    assert not agree.flagged and agree.summary == ""
    off = compare(p, 2 * p.step_s, {"compute": p.terms["compute"], "nvme": 14.0, "optimizer": 0.81})
    assert off.flagged
    assert [d.term for d in off.disagreements] == ["step", "nvme"]
    assert "nvme" in off.summary and "slower" in off.summary


def test_accumulated_micro_steps_move_gradients_each_time_and_update_once():
    """K micro-batches per optimizer step: compute and the gradients' way down (and their
    reduce-scatter) K times, each behind its own backward; the update, the parameters'
    way back and their gather once. Streamed parameters are fetched by every micro-step."""
    one = Workload(n_params=10**9, n_params_nonembed=10**9, n_layers=16, dim=2048, seq_len=2048,
                   tokens_per_step=8192, chunks=4, shards=2)
    four = replace(one, tokens_per_step=4 * 8192, micro_steps=4)
    r = Rates(flops_per_s=4e14, d2h_Bps=5e10, h2d_Bps=5e10, opt_params_per_s=1.25e9, collective_Bps=1e11)
    p1, p4 = predict(one, r, "serial"), predict(four, r, "serial")
    assert p4.terms["compute"] == pytest.approx(4 * p1.terms["compute"])
    assert p4.terms["d2h"] == pytest.approx(4 * p1.terms["d2h"])
    assert p4.terms["reduce_scatter"] == pytest.approx(4 * p1.terms["reduce_scatter"])
    for once in ("h2d", "optimizer", "all_gather"):
        assert p4.terms[once] == pytest.approx(p1.terms[once]), once
    # behind backward: 0.02 s of gradients a micro-step hide in 2/3 of its 0.14 s of compute
    over = predict(four, r, "overlapped")
    assert over.step_s == pytest.approx(p4.terms["compute"] + 0.4 + 0.02 / 4 + p4.terms["all_gather"])
    streamed = predict(four, r, "streamed")
    assert streamed.terms["h2d"] == pytest.approx(4 * p1.terms["h2d"])
    assert streamed.terms["all_gather"] == pytest.approx(4 * p1.terms["all_gather"])


# ---- the benchmark family -------------------------------------------------------

def _env(tmp_path, gpu: bool, cxl_free: int = 64 << 30):
    from cxlbench.benchmarks.base import Env
    from cxlbench.topology.model import Cpu, Environment, Gpu, Initiator, Machine, Node, Tier
    nodes = {0: Node(0, [0, 1], 64 << 30, 60 << 30, {0: 10, 1: 20}),
             1: Node(1, [], 64 << 30, cxl_free, {0: 20, 1: 10})}
    machine = Machine("fixture", Cpu("x", "GenuineIntel", 1, 2, 2, False, [], []), nodes,
                      Environment(None, None, None, None, None, None, None, False, None, None, "6.8"),
                      gpus=[Gpu(0, "NVIDIA H200", 141 << 30, numa_node=0)] if gpu else [])
    tiers = {"ddr0": Tier("ddr0", "ddr", node=0, free_bytes=60 << 30),
             "cxl1": Tier("cxl1", "cxl", node=1, free_bytes=cxl_free),
             "nvme0": Tier("nvme0", "nvme", path=str(tmp_path), free_bytes=1 << 40)}
    inits = {"cpu:node0": Initiator("cpu:node0", "cpu", 0, [0])}      # one thread: see one_torch_thread
    if gpu:
        tiers["hbm0"] = Tier("hbm0", "hbm", gpu=0, free_bytes=140 << 30)
        inits["gpu:0"] = Initiator("gpu:0", "gpu", node=0, gpu=0)
    return Env(machine, tiers, inits, {})


SPEC = {"name": "training", "mode": "train", "config": ["tiny"], "steps": 3, "warmup_steps": 1,
        "engine": ["offload", "none", "fsdp2_cpu_offload"],
        "optimizer_on": ["ddr", "cxl", "nvme", "hbm"]}


def _by(planned):
    return {(p.case.initiator, p.case.target, p.case.params["engine"]): p for p in planned}


def test_planning_without_a_gpu_skips_gpu_cases_and_runs_cpu_ones(tmp_path):
    from cxlbench.benchmarks import training
    planned = _by(plan(training, SPEC, _env(tmp_path, gpu=False)))
    gpu_cases = {k: p for k, p in planned.items() if k[0] == "gpu:0"}
    assert {(t, e) for _, t, e in gpu_cases} == {("ddr0", "offload"), ("cxl1", "offload"),
                                                  ("nvme0", "offload"), ("hbm0", "none"),
                                                  ("ddr0", "fsdp2_cpu_offload")}
    assert all(p.skip == "no GPU" for p in gpu_cases.values())      # even where a tier is missing too
    cpu_cases = {k: p for k, p in planned.items() if k[0] == "cpu:node0"}
    assert {(t, e) for _, t, e in cpu_cases} == {("ddr0", "offload"), ("cxl1", "offload"),
                                                  ("nvme0", "offload"), ("ddr0", "none")}
    assert all(p.skip is None for p in cpu_cases.values())
    nvme = planned[("cpu:node0", "nvme0", "offload")].case
    assert nvme.tier_kind == "nvme" and nvme.params["params_on"] == "nvme0"
    assert nvme.params["grads_on"] == "ddr0" and nvme.repetitions == 3 and nvme.warmup == 1


def test_planning_with_a_gpu_runs_gpu_cases_and_explains_what_cannot_fit(tmp_path):
    from cxlbench.benchmarks import training
    planned = _by(plan(training, SPEC, _env(tmp_path, gpu=True, cxl_free=1 << 20)))
    assert all(k[0] == "gpu:0" for k in planned)          # no CPU-compute cases by default
    assert planned[("gpu:0", "hbm0", "none")].skip is None
    assert planned[("gpu:0", "ddr0", "fsdp2_cpu_offload")].skip is None
    assert planned[("gpu:0", "nvme0", "offload")].skip is None
    assert "cxl1" in planned[("gpu:0", "cxl1", "offload")].skip     # 1 MiB free on the CXL node
    assert "GiB free" in planned[("gpu:0", "cxl1", "offload")].skip
    no_cxl = dict(SPEC, optimizer_on=["cxl"])
    env = _env(tmp_path, gpu=True)
    del env.tiers["cxl1"]
    (only,) = plan(training, dict(no_cxl, engine=["offload"]), env)
    assert "no CXL tier" in only.skip


def test_find_max_on_a_gpu_stops_before_70b_whose_bf16_params_and_grads_outgrow_the_gpu(tmp_path, monkeypatch):
    """Every config is searched, 70b included; with room to spare on the host, the
    GPU's memory is what stops it, at planning and before measuring builds a model."""
    from cxlbench.benchmarks import training
    env = _env(tmp_path, gpu=True)
    env.tiers["ddr0"].free_bytes = 1 << 50          # the host would hold anything
    env.machine.nodes[0].mem_free_bytes = 1 << 50
    monkeypatch.setattr(training, "_node_free_now", lambda node: 1 << 50)
    spec = {"name": "training", "mode": "find_max", "engine": ["offload"], "optimizer_on": ["ddr"],
            "case_timeout_s": 604_800}          # a week: the most a suite may give
    (planned,) = plan(training, spec, env)
    assert planned.case.params["config"].endswith(",8b,70b")      # every config, smallest first
    why = training._fits(planned.case, env, model_config("70b"), fresh=False)
    assert why and "hbm0 (bf16 params and grads)" in why and "140.0 GiB free" in why
    assert training._fits(planned.case, env, model_config("8b")) is None
    tried = []
    monkeypatch.setattr(training, "_run", lambda case, env, info, config: tried.append(config) or
                        type("R", (), {"tokens_per_step": 1, "n_params": model_config(config).num_params(),
                                       "median": lambda self, k: 1.0})())
    info: dict = {}
    (sample,) = training.measure(planned.case, env, info)
    assert "70b" not in tried and info["find_max"]["70b"].startswith("does not fit (estimated)")
    assert sample.params["max_config"] == "8b"


def test_measure_yields_registered_metrics_and_a_step_model_verdict(tmp_path):
    from cxlbench.benchmarks import training
    env = _env(tmp_path, gpu=False)
    env.tiers = {k: v for k, v in env.tiers.items() if k != "cxl1"}
    env.machine.nodes.pop(1)
    if NODE0 is None:
        pytest.skip("no NUMA node 0")
    planned = plan(training, dict(SPEC, engine=["offload"], optimizer_on=["nvme"]), env)
    (case,) = [p.case for p in planned if p.skip is None]
    info: dict = {}
    samples = training.measure(case, env, info)
    torch.set_num_threads(1)
    assert {s.metric for s in samples} <= set(training.METRICS)
    steps = [s for s in samples if s.metric == "tokens_per_s"]
    assert [s.params["iteration"] for s in steps] == [0, 1, 2] and all(s.value > 0 for s in steps)
    assert {s.repetition for s in steps} == {0}         # one process: steps are inner iterations
    assert any(s.metric == "nvme_read_s" for s in samples)
    (pred,) = [s for s in samples if s.metric == "predicted_step_s"]
    assert "model_flag" in pred.params and pred.value > 0
    probes = {s.params.get("probe"): s.value for s in samples if s.metric == "seconds"}
    passes = [s.value for s in samples if s.params.get("probe") == "compute_kernels"]
    settling = [s.value for s in samples if s.params.get("probe") == "compute_kernels_settling"]
    assert len(passes) == len(settling) == len(steps)        # two replays after each steady step, all kept
    assert len([s for s in samples if s.params.get("probe") == "framework_twin_step"]) == 9
    assert pred.params["model_compute_basis"] == "probe"     # measured, not FLOPs at a GEMM rate
    assert pred.params["model_compute_s"] == pytest.approx(np.median(passes) + probes["compute_framework"])
    assert info["placement_before"] and info["placement_after"] and info["o_direct"] in (True, False)
    assert len(info["loss_curve"]) == 4 and "CPU run" in info["what_was_measured"]


def test_find_max_reports_the_largest_config_and_why_the_next_does_not_fit(tmp_path, monkeypatch):
    from cxlbench.benchmarks import training
    if NODE0 is None:
        pytest.skip("no NUMA node 0")
    env = _env(tmp_path, gpu=False)
    monkeypatch.setattr(training, "_node_free_now", lambda node: 1 << 30)   # 1 GiB free now
    spec = {"name": "training", "mode": "find_max", "config": ["8b", "tiny"], "steps": 1,
            "warmup_steps": 1, "engine": ["offload"], "optimizer_on": ["ddr"]}
    (case,) = [p.case for p in plan(training, spec, env) if p.skip is None]
    assert case.params["config"] == "tiny,8b"            # smallest first
    info: dict = {}
    (sample,) = training.measure(case, env, info)
    assert sample.metric == "max_params" and sample.value == model_config("tiny").num_params()
    assert info["find_max"]["tiny"].startswith("fits")
    assert info["find_max"]["8b"].startswith("does not fit") and "GiB free" in info["find_max"]["8b"]


def test_find_max_does_not_try_a_config_whose_steps_would_outrun_the_case(tmp_path, monkeypatch):
    """With memory to spare, 8b on a CPU would still take hours: a finding, not a hang."""
    from cxlbench.benchmarks import training
    if NODE0 is None:
        pytest.skip("no NUMA node 0")
    env = _env(tmp_path, gpu=False)
    monkeypatch.setattr(training, "_fits", lambda *a, **k: None)           # everything fits
    spec = {"name": "training", "mode": "find_max", "config": ["8b", "tiny"], "steps": 1,
            "warmup_steps": 1, "engine": ["offload"], "optimizer_on": ["ddr"]}
    (planned,) = [p for p in plan(training, spec, env) if p.skip is None]
    assert planned.estimate_s < env.suite.get("case_timeout_s", 600)      # 8b not counted
    info: dict = {}
    (sample,) = training.measure(planned.case, env, info)
    assert sample.value == model_config("tiny").num_params()
    assert info["find_max"]["8b"].startswith("not tried: ~") and "case_timeout_s" in info["find_max"]["8b"]


def test_fsdp2_reference_code_path_runs_on_a_cpu_mesh():
    """The FSDP2 engine is a GPU reference; on a CPU mesh (gloo, world size 1) the same
    code runs with nothing to offload to, which checks its set-up, steps and teardown —
    and that it trains like plain training (same model, data and fused AdamW)."""
    from cxlbench.training.engine import Fsdp2Engine
    cfg, train, batches = _engine_pair()
    ref = NoOffloadEngine(cfg, train, "cpu")
    ref_losses = [ref.step(*b).loss for b in batches]
    engine = Fsdp2Engine(cfg, train, "cpu")
    try:
        losses = [engine.step(*b).loss for b in batches]
        assert engine.impl == "fused" and engine.host_state_tensors()
        got = engine.master_params()
    finally:
        engine.close()
    assert losses == pytest.approx(ref_losses, rel=1e-4)
    torch.testing.assert_close(got, ref.master_params(), rtol=1e-4, atol=1e-6)


FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


@pytest.mark.skipif(not os.path.isdir(os.path.join(FIXTURES, "gpu_node")), reason="no fixture trees")
def test_planning_the_suite_on_the_fixture_machines():
    from cxlbench.benchmarks import training
    from cxlbench.runner.run import build_env
    from cxlbench.runner.suite import families, load_suite
    specs = [spec for _, _, spec in families(load_suite("training"))]

    def plan_on(root):
        env = build_env(os.path.join(FIXTURES, root), [], {})
        return env, [p for spec in specs for p in training.plan(spec, env)]

    env, gpu_plan = plan_on("gpu_node")            # one GPU, one DDR node, no CXL, no NVMe
    run = {(p.case.target, p.case.params.get("engine")) for p in gpu_plan
           if p.skip is None and p.case.initiator == "gpu:0"}
    assert run == {("ddr0", "offload"), ("hbm0", "none"), ("ddr0", "fsdp2_cpu_offload")}
    reasons = {p.case.target: p.skip for p in gpu_plan if p.skip}
    assert "no CXL tier" in reasons["cxl"] and "no NVMe tier" in reasons["nvme"]
    assert not any(p.case.params["mode"] == "train" and p.case.initiator.startswith("cpu")
                   for p in gpu_plan)           # a GPU machine trains on its GPU

    env, cxl_plan = plan_on("two_socket_cxl")      # two sockets and a CXL node, no GPU
    assert all(p.skip == "no GPU" for p in cxl_plan if p.case.initiator.startswith("gpu"))
    cpu_train = {p.case.target: p for p in cxl_plan if p.case.params["mode"] == "train"
                 and p.case.initiator.startswith("cpu") and p.case.params["engine"] == "offload"}
    assert {"ddr0", "ddr1", "cxl2"} <= set(cpu_train)
    node2 = env.machine.nodes[2]
    nearest = min((n for n in env.machine.nodes.values() if n.cpus), key=lambda n: node2.distances[n.id])
    assert cpu_train["cxl2"].case.initiator == f"cpu:node{nearest.id}"
    assert cpu_train["cxl2"].case.params["grads_on"] == f"ddr{nearest.id}"   # local DDR


def test_auto_picks_the_fastest_available_cpu_adamw_and_says_so(tmp_path):
    from cxlbench.training.session import RunSpec, run
    spec = RunSpec("tiny", "offload", train_config("tiny", batch=2, seq_len=16, steps=2, warmup_steps=1),
                   Placement(NODE0, NODE0, NODE0), impl="auto", buffer_node=NODE0)
    result = run(spec)
    assert result.impl in ("fused", "foreach", "native", "deepspeed") and result.spec.impl == result.impl
    assert any(note.startswith("CPU AdamW chosen") for note in result.notes)


def test_a_native_adamw_is_used_only_if_it_computes_torchs_adamw(monkeypatch):
    from cxlbench.training import optimizer

    import ctypes

    def kernel(decay: bool):
        """The contract: adamw_step(p, g, m, v, n, step, lr, beta1, beta2, eps, weight_decay)
        on fp32 arrays at those addresses, step counted from 1 — here in torch."""
        def adamw_step(p, g, m, v, n, step, lr, beta1, beta2, eps, wd):
            pt, gt, mt, vt = (torch.frombuffer((ctypes.c_float * n).from_address(a), dtype=torch.float32)
                              for a in (p, g, m, v))
            _torch_adam_update(0, step, lr, beta1, beta2, eps, wd if decay else 0.0, True, pt, gt, mt, vt)
        return adamw_step

    def only_fp32(k):                        # a C core without the one-pass bf16 kernel
        return lambda name="adamw_step": k if name == "adamw_step" else None
    monkeypatch.setattr(optimizer, "_native_adamw", only_fp32(kernel(decay=True)))
    assert optimizer.unavailable("native") is None
    monkeypatch.setattr(optimizer, "_native_adamw", only_fp32(kernel(decay=False)))
    assert "disagrees" in optimizer.unavailable("native")
    monkeypatch.setattr(optimizer, "_native_adamw", only_fp32(lambda *a: 1 / 0))
    assert "did not run" in optimizer.unavailable("native")


def _fake_deepspeed(monkeypatch, adam_update):
    """deepspeed.ops.adam with a DeepSpeedCPUAdam whose kernel is adam_update."""
    import types

    from cxlbench.training import optimizer

    class DeepSpeedCPUAdam:
        def __init__(self, params, **hyper):
            self.opt_id, self.ds_opt_adam = 7, types.SimpleNamespace(adam_update=adam_update)

    adam = types.ModuleType("deepspeed.ops.adam")
    adam.DeepSpeedCPUAdam = DeepSpeedCPUAdam
    for name in ("deepspeed", "deepspeed.ops"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "deepspeed.ops.adam", adam)
    monkeypatch.setattr(optimizer, "_DS_OPTIMIZERS", {})


def _torch_adam_update(opt_id, step, lr, beta1, beta2, eps, wd, bias_correction, p, g, m, v):
    """AdamW written in torch, with DeepSpeed's adam_update signature: what the fake
    outside kernels (DeepSpeed's, the C core's) compute when they are right."""
    p.mul_(1 - lr * wd)
    m.mul_(beta1).add_(g, alpha=1 - beta1)
    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    p.addcdiv_(m, (v / (1 - beta2 ** step)).sqrt_().add_(eps), value=-lr / (1 - beta1 ** step))


def test_deepspeeds_kernel_steps_every_chunk_of_every_step(monkeypatch):
    from cxlbench.training import optimizer
    _fake_deepspeed(monkeypatch, _torch_adam_update)
    assert optimizer.unavailable("deepspeed") is None
    n, hyper = 3000, AdamWHyper()
    p0, g = torch.randn(n), torch.randn(n)
    finals = []
    for impl in ("forloop", "deepspeed"):
        p, m, v = p0.clone(), torch.zeros(n), torch.zeros(n)
        opt = HostAdamW(p, m, v, n, hyper, impl, chunk=1000)
        for _ in range(4):
            opt.step(g)
        finals.append(p)
    assert torch.allclose(finals[0], finals[1], rtol=1e-5, atol=1e-7)


def test_an_adamw_that_skips_work_after_the_first_step_is_refused(monkeypatch):
    """A kernel keyed on tensor objects that sees fresh views from step two on does
    nothing and would measure absurdly fast; the agreement check must catch it."""
    from cxlbench.training import optimizer
    seen = set()

    def first_time_only(opt_id, step, *args):
        p = args[-4]
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            _torch_adam_update(opt_id, step, *args)

    _fake_deepspeed(monkeypatch, first_time_only)
    assert "disagrees" in optimizer.unavailable("deepspeed")


def test_state_files_of_dead_workers_are_removed(tmp_path):
    from cxlbench.training.nvme_optimizer import PREFIX, remove_stale
    dead = tmp_path / f"{PREFIX}999999999-abcd.bin"          # no such pid
    alive = tmp_path / f"{PREFIX}{os.getpid()}-abcd.bin"
    other = tmp_path / "keep.bin"
    for f in (dead, alive, other):
        f.write_bytes(b"x")
    assert remove_stale(str(tmp_path)) == [dead.name]
    assert alive.exists() and other.exists()


@pytest.mark.parametrize("isa", ["best", "avx2", "scalar"])
@pytest.mark.parametrize("threads", [1, 3])
def test_the_c_cores_adamw_is_torchs_adamw_on_every_slice(threads, isa, monkeypatch):
    """OpenMP threads (torch's count) split the buffer (n above the per-thread
    minimum, not a multiple of the vector width): every element, each slice's edges
    and the tail included, gets torch's update."""
    from cxlbench import _native
    from cxlbench.training import optimizer
    torch.set_num_threads(threads)          # the one_torch_thread fixture restores it
    if isa != "best":                       # the narrower paths, on a CPU that has wider
        monkeypatch.setenv("CXLBENCH_ADAMW_ISA", isa)
    n = (1 << 18) + 13
    g = torch.Generator().manual_seed(3)
    p0 = torch.randn(n, generator=g)
    grads = [torch.randn(n, generator=g) for _ in range(4)]
    out = {}
    for impl in ("forloop", "native"):
        p, m, v = p0.clone(), torch.zeros(n), torch.zeros(n)
        steps = [torch.zeros((), dtype=torch.float32)]
        for grad in grads:
            optimizer.adamw_update([p], [grad], [m], [v], steps, optimizer.AdamWHyper(), impl)
        out[impl] = (p, m, v)
    for ref, got in zip(out["forloop"], out["native"]):
        assert torch.allclose(ref, got, rtol=1e-5, atol=1e-6)     # a few fp32 ulps
    assert not torch.equal(out["native"][0], p0)
    with pytest.raises(ValueError, match="step counts from 1"):
        _native.adamw_step(p0.data_ptr(), p0.data_ptr(), p0.data_ptr(), p0.data_ptr(), 8, 0,
                           1e-3, 0.9, 0.95, 1e-8, 0.1)
    with pytest.raises(ValueError, match="need addresses"):          # not a crash on a NULL gradient
        _native.adamw_step(p0.data_ptr(), 0, p0.data_ptr(), p0.data_ptr(), 8, 1, 1e-3, 0.9, 0.95, 1e-8, 0.1)


@pytest.mark.parametrize("stores", ["streaming", "plain", "misaligned"])
@pytest.mark.parametrize("isa", ["best", "avx2", "scalar"])
@pytest.mark.parametrize("threads", [1, 3])
def test_the_one_pass_bf16_update_is_the_widen_update_narrow_passes_to_the_bit(threads, isa, stores,
                                                                              monkeypatch):
    """bf16 gradients in and a bf16 copy out, in the kernel's own pass: p, m and v are
    bit for bit what widening first and updating in fp32 gives, and the copy is
    torch's own narrowing of p (nearest even, every slice edge and the tail), whether
    written with streaming stores, ordinary ones, or ordinary ones because the copy
    is not aligned for streaming."""
    from cxlbench.training.optimizer import AdamWHyper, HostAdamW
    torch.set_num_threads(threads)
    if isa != "best":
        monkeypatch.setenv("CXLBENCH_ADAMW_ISA", isa)
    if stores == "plain":
        monkeypatch.setenv("CXLBENCH_ADAMW_STORES", "plain")
    n = (1 << 18) + 13
    gen = torch.Generator().manual_seed(5)
    p0 = torch.randn(n, generator=gen)
    grads = [torch.randn(n, generator=gen).to(torch.bfloat16) for _ in range(3)]
    out = {}
    for name, g_of in (("unfused", lambda g: g.float()), ("fused", lambda g: g)):
        p, m, v = p0.clone(), torch.zeros(n), torch.zeros(n)
        copy = torch.zeros(n + 1, dtype=torch.bfloat16)[1:] if stores == "misaligned" else \
            torch.zeros(n, dtype=torch.bfloat16)
        opt = HostAdamW(p, m, v, n, AdamWHyper(), "native", chunk=1 << 17,
                        narrow_into=copy if name == "fused" else None)
        for g in grads:
            opt.step(g_of(g))
        out[name] = (p, m, v, copy)
    for ref, got in zip(out["unfused"][:3], out["fused"][:3]):
        assert torch.equal(ref, got)
    assert torch.equal(out["fused"][3], out["fused"][0].to(torch.bfloat16))


def test_the_one_pass_narrowing_rounds_ties_to_even_and_keeps_nan_inf_and_signs(monkeypatch):
    from cxlbench import _native
    bits = torch.tensor([0x3F808000, 0x3F818000, 0x3F80C000, 0x3F807FFF, 0x7F7FFFFF, 0x7F800000,
                         0xFF800000, 0x80000001, 0x00000000, 0x7FC00001], dtype=torch.int64)
    for isa, stores in [(i, st) for i in ("best", "avx2", "scalar") for st in ("streaming", "plain")]:
        if isa != "best":
            monkeypatch.setenv("CXLBENCH_ADAMW_ISA", isa)
        if stores == "plain":
            monkeypatch.setenv("CXLBENCH_ADAMW_STORES", "plain")
        else:
            monkeypatch.delenv("CXLBENCH_ADAMW_STORES", raising=False)
        n = 3 * 16 + 2                      # every path's vector loop and its scalar tail
        p = bits.to(torch.int32).view(torch.float32).repeat(6)[:n].clone()
        want = p.to(torch.bfloat16)
        # lr 0 and no decay: p passes through the update unchanged, and only the copy is new
        m, v, g = torch.zeros(n), torch.zeros(n), torch.zeros(n, dtype=torch.bfloat16)
        copy = torch.zeros(n, dtype=torch.bfloat16)
        _native.adamw_step_bf16(p.data_ptr(), g.data_ptr(), m.data_ptr(), v.data_ptr(), copy.data_ptr(),
                                n, 1, 0.0, 0.9, 0.95, 1e-8, 0.0)
        nan = torch.isnan(want)
        assert torch.equal(torch.isnan(copy), nan), (isa, stores)
        assert torch.equal(copy[~nan].view(torch.int16), want[~nan].view(torch.int16)), (isa, stores)
    with pytest.raises(ValueError, match="only copy may be 0"):      # not a crash on a NULL gradient
        _native.adamw_step_bf16(p.data_ptr(), 0, m.data_ptr(), v.data_ptr(), 0, n, 1, 1e-3, 0.9, 0.95, 1e-8, 0.0)


def test_a_probe_step_that_updates_nothing_records_no_rate(monkeypatch):
    from cxlbench.training import optimizer
    monkeypatch.setattr(optimizer, "_native_adamw", lambda: (lambda *args: None))
    with pytest.raises(optimizer.NoWorkDone, match="unchanged in a timed step"):
        optimizer.probe(1 << 16, "native", steps=2, warmup=1)
    assert len(optimizer.probe(1 << 16, "forloop", steps=2, warmup=1)) == 2


def test_a_replay_runs_the_recorded_operators_on_inputs_of_the_same_layout():
    from cxlbench.training import replay
    a, b = torch.randn(16, 8), torch.randn(8, 4)
    wide = torch.randn(4).expand(16, 4)                 # stride 0: the replay must still fill it
    trace = replay.record(lambda: (a @ b + wide).relu())
    names = [str(func) for func, _, _ in trace.calls]
    assert names == ["aten.mm.default", "aten.add.Tensor", "aten.relu.default"]
    _, (x, w), _ = trace.calls[0]
    assert (x.shape, w.shape) == ((16, 8), (8, 4))
    _, (product, expanded), _ = trace.calls[1]
    assert product == replay.Produced(0, 0) and expanded.stride == (0, 1)   # the dataflow is kept
    assert trace.calls[2][1] == (replay.Produced(1, 0),)
    assert trace.input_bytes == (16 * 8 + 8 * 4 + 4) * 4                    # outside inputs only
    r = replay.Replay(trace, torch.device("cpu"))
    r.once()
    held = [x for _, a, k, _, _, _ in r.program for x in torch.utils._pytree.tree_leaves((a, k))
            if isinstance(x, torch.Tensor)]
    assert held == []                       # a pass leaves no tensor in the program


def test_a_replay_computes_what_the_step_computed():
    from cxlbench.training import replay
    from cxlbench.training.engine import build_model
    from cxlbench.training.session import _twin
    cfg, train = model_config("tiny"), train_config("tiny")
    trace = replay.record(_twin("none", torch.device("cpu"), None)(cfg, train))
    r = replay.Replay(trace, torch.device("cpu"))
    outputs: dict = {}
    for i, (func, args, kwargs, ah, kh, _) in enumerate(r.program):    # a pass that keeps every output
        a = replay._fill(args, ah, r.externals, outputs) if ah else args
        k = replay._fill(kwargs, kh, r.externals, outputs) if kh else kwargs
        outputs[i] = replay._outputs(func(*a.values(), **k))
    loss_call = [str(f) for f, _, _ in trace.calls].index("aten.nll_loss_forward.default")
    x, y = next(iter(MarkovTokens(cfg.vocab_size, seed=train.seed).batches(1, train.batch, train.seq_len)))
    real = loss_fn(build_model(cfg, train)(x), y).detach()
    assert float(outputs[loss_call][0]) == pytest.approx(float(real), rel=1e-5)


def test_a_probe_that_fails_leaves_a_note_and_the_flops_model(monkeypatch):
    from cxlbench.training import replay
    from cxlbench.training.session import _twin
    cfg, train = model_config("tiny"), train_config("tiny")
    for error in (TypeError("bad"), NotImplementedError(), torch.OutOfMemoryError("oom")):
        def broken(fn, error=error):
            raise error
        monkeypatch.setattr(replay, "record", broken)
        notes: list[str] = []
        probe = replay.Probe(_twin("none", torch.device("cpu"), None), cfg, train, torch.device("cpu"), 4, notes)
        probe.after_step()
        assert probe.result() is None
        assert len(notes) == 1 and type(error).__name__ in notes[0] and "FLOPs" in notes[0]
    monkeypatch.undo()
    notes = []
    probe = replay.Probe(_twin("none", torch.device("cpu"), None), cfg, train, torch.device("cpu"), 4, notes)
    monkeypatch.setattr(probe.replay, "once", lambda: (_ for _ in ()).throw(RuntimeError("mid-run")))
    probe.after_step()
    assert probe.result() is None and "stopped after 0 steps" in notes[0]


def test_a_gpu_replays_inputs_in_what_the_steps_peak_leaves_free_a_cpu_up_to_2_gib(monkeypatch):
    from cxlbench.training import replay
    gib = 1 << 30

    def gpu(free, reserved, allocated, peak):
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free * gib, 141 * gib))
        monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: reserved * gib)
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: allocated * gib)
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: peak * gib)
        return replay.byte_limit(torch.device("cuda", 0)) / gib
    # the 3b on an H200's HBM: 48 GiB of state, steps peaking 40 GiB above it, the cache holding it
    assert gpu(free=36, reserved=90, allocated=48, peak=88) == pytest.approx(0.9 * (36 + 42) - 40)
    assert gpu(free=130, reserved=2, allocated=1, peak=1) == pytest.approx(0.9 * 131)   # state on the host
    assert gpu(free=4, reserved=60, allocated=20, peak=62) == 0          # the steps take all there is
    assert replay.byte_limit(torch.device("cpu")) == 2 * gib


def test_the_probe_takes_the_replays_limit_once_before_anything_is_copied(monkeypatch):
    from cxlbench.training import replay
    from cxlbench.training.session import _twin
    cfg, train = model_config("tiny"), train_config("tiny")
    taken = []

    def limit(device):
        taken.append(device)
        return 2 << 30
    monkeypatch.setattr(replay, "byte_limit", limit)
    notes: list[str] = []
    probe = replay.Probe(_twin("none", torch.device("cpu"), None), cfg, train, torch.device("cpu"), 4, notes)
    assert probe.replay is not None and len(taken) == 1, notes
    x = torch.ones(64)
    trace = replay.record(lambda: x * 2)
    assert trace.input_bytes == 256
    with pytest.raises(ValueError, match="to replay"):
        replay.Replay(trace, torch.device("cpu"), limit=trace.input_bytes - 1)


def test_a_run_learns_when_its_last_three_losses_sit_5_percent_below_its_first():
    from cxlbench.training.session import learned, loss_warning
    assert learned([5.55, 5.2, 4.9, 4.6, 4.3, 4.12])
    # the first H200 run's 1b: it fell, by 1.1%, in eleven steps: not yet "learns"
    assert not learned([12.159, 12.153, 12.145, 12.143, 12.109, 12.124, 12.119, 12.070, 12.069, 12.057, 12.030])
    assert not learned([5.0, 4.0, 3.0, 9.0, 9.0, 2.0])      # one low last step is not the median of three
    assert loss_warning([5.55, 5.2, 4.9, 4.6, 4.3, 4.12]) is None
    assert loss_warning([12.159, 12.1, 12.05, 12.04, 12.03]).startswith("loss fell less than 5% in 5 steps")
    assert loss_warning([5.0, 5.5, 6.0, 7.0, 9.0]).startswith("loss rose: 5.000 at the first step, 7.000")


def test_the_minimal_twin_runs_the_same_operators_as_the_model_at_trivial_shapes():
    from cxlbench.training import replay
    from cxlbench.training.session import _twin
    cfg, train = model_config("tiny"), train_config("tiny")
    small_cfg, small_train = replay.minimal(cfg, train)
    assert (small_cfg.n_layers, small_cfg.n_heads, small_cfg.n_kv_heads) == (cfg.n_layers, cfg.n_heads, cfg.n_kv_heads)
    # a GPU chooses its attention kernel by head size: the twin keeps it
    assert small_cfg.head_dim == cfg.head_dim
    model_flops = cfg.flops_per_token(train.seq_len) * train.batch * train.seq_len
    twin_flops = small_cfg.flops_per_token(small_train.seq_len) * small_train.batch * small_train.seq_len
    assert twin_flops < model_flops / 100
    twin = _twin("offload", torch.device("cpu"), torch.float32)
    ops = lambda c, t: [str(f) for f, _, _ in replay.record(twin(c, t)).calls]  # noqa: E731
    assert ops(cfg, train) == ops(small_cfg, small_train)


def test_the_compute_term_is_the_probes_when_the_run_has_one():
    w = Workload(n_params=1000, n_params_nonembed=900, n_layers=2, dim=8, seq_len=4, tokens_per_step=8)
    flops = predict(w, Rates(flops_per_s=1e9, opt_params_per_s=1e6), "none")
    probed = predict(w, Rates(flops_per_s=1e9, opt_params_per_s=1e6, compute_s=0.5), "none")
    assert flops.compute_basis == "flops" and probed.compute_basis == "probe"
    assert probed.terms["compute"] == 0.5 and probed.step_s == pytest.approx(0.5 + 1e-3)


def test_span_copies_count_the_bytes_of_every_span_and_the_optimizer_probe_evicts_first():
    from cxlbench.training import probes
    from cxlbench.training.optimizer import probe as adamw_probe
    src, dst = torch.randn(4096), torch.zeros(4096)
    assert probes.copy_spans_Bps(dst, src, [(0, 100), (1000, 500)], reps=1, min_s=0.001) > 0
    assert torch.equal(dst[1000:1500], src[1000:1500]) and not dst[100:1000].any()
    calls = []
    adamw_probe(1 << 12, "foreach", steps=3, warmup=1, before_each=lambda: calls.append(1))
    assert len(calls) == 4
    assert probes.evictor(0) is None


def test_the_implementation_is_chosen_stepping_as_the_run_will(monkeypatch):
    from cxlbench.training import session
    calls = []

    def probe(n, impl, **kw):
        calls.append((impl, kw["grad_dtype"], kw["narrow_into"]))
        return [2e9 if impl == "native" else 1e9]
    monkeypatch.setattr(session, "adamw_probe", probe)
    assert session.choose_impl(5000, gpu=True)[0] == "native"
    assert {(d, c.dtype, c.numel()) for _, d, c in calls} == {(torch.bfloat16, torch.bfloat16, 5000)}
    calls.clear()
    session.choose_impl(5000)                      # a CPU run: fp32 gradients, no copy
    assert {(d, c) for _, d, c in calls} == {(torch.float32, None)}


def test_the_implementation_is_chosen_on_the_median_of_rounds_taken_in_turn_not_on_one_fast_reading(monkeypatch):
    from cxlbench.training import session
    order, seen = [], {}

    def probe(n, impl, **kw):
        order.append(impl)
        seen[impl] = seen.get(impl, 0) + 1
        if impl == "fused":                       # one fast reading, as the H200 host gave once
            return [5e9 if seen[impl] == 1 else 1e9]
        return [2e9 if impl == "native" else 0.5e9]
    monkeypatch.setattr(session, "adamw_probe", probe)
    impl, rates = session.choose_impl(1 << 30, gpu=True, chunk=1 << 10, rounds=5)
    assert impl == "native" and rates["fused"] == 1e9
    first = order[:len(rates)]
    assert order == first * 5 and set(first) == set(rates)   # every round probes each, in turn


def test_the_implementation_is_chosen_in_the_runs_own_chunks(monkeypatch):
    from cxlbench.training import session
    calls = []
    monkeypatch.setattr(session, "adamw_probe", lambda n, impl, **kw: calls.append((n, kw["chunk"])) or [1e9])
    session.choose_impl(1 << 30, chunk=1 << 20)
    assert set(calls) == {(session.CHOICE_CHUNKS << 20, 1 << 20)}
    calls.clear()
    session.choose_impl(3000, chunk=1 << 20)          # a model smaller than a chunk: one chunk of it
    assert set(calls) == {(3000, 3000)}


def test_the_implementation_is_chosen_with_the_caches_evicted_as_the_run_evicts_them(monkeypatch):
    from cxlbench.training import session
    evictions = []

    def probe(n, impl, before_each=None, **kw):
        before_each()
        evictions.append(impl)
        return [1e9]
    monkeypatch.setattr(session, "adamw_probe", probe)
    session.choose_impl(5000, gpu=True, evict_bytes=1 << 20)
    assert evictions and "native" in evictions


def test_the_optimizer_probe_writes_the_bf16_copy_a_gpu_runs_update_writes():
    from types import SimpleNamespace

    from cxlbench.training.optimizer import probe as adamw_probe
    from cxlbench.training.session import _staging
    staging = torch.zeros(1 << 14, dtype=torch.bfloat16)
    copy = _staging(SimpleNamespace(cuda=True, staging=staging), 10_000)
    assert copy.numel() == 10_000 and copy.data_ptr() == staging.data_ptr()
    adamw_probe(10_000, "native", steps=2, warmup=1, chunk=4096, grad_dtype=torch.bfloat16,
                narrow_into=copy, before_each=copy.zero_)       # so what is there, the last step wrote
    assert staging[:10_000].float().abs().min() > 0 and not staging[10_000:].any()   # p ~ N(0, 0.02)
    assert _staging(SimpleNamespace(cuda=False, staging=None), 10_000) is None  # a CPU run times it apart


def test_the_report_puts_each_phase_beside_its_model_term():
    import pandas as pd

    from cxlbench.report import step_breakdown
    case = {"benchmark": "training", "mode": "train", "case_id": "c1", "target": "ddr0",
            "engine": "offload", "params_on": "ddr0"}
    rows = [dict(case, metric=m, value=v) for m, vs in
            {"step_time_s": [0.030, 0.034, 0.032], "forward_s": [0.01] * 3, "backward_s": [0.02] * 3,
             "transfer_s": [0.001] * 3, "optimizer_s": [0.001] * 3}.items() for v in vs]
    rows.append(dict(case, metric="predicted_step_s", value=0.044, model_compute_s=0.036, model_d2h_s=0.001,
                     model_h2d_s=0.0005, model_optimizer_s=0.002, model_compute_basis="probe"))
    (row,) = step_breakdown.rows(pd.DataFrame(rows)).itertuples()
    assert (row.step, row.step_model) == (0.032, 0.044)
    assert row.compute == pytest.approx(0.03) and row.transfer_model == pytest.approx(0.0015)
    (cells,) = step_breakdown.table(step_breakdown.rows(pd.DataFrame(rows)))["rows"]
    assert "0.73 (off)" in cells                       # 32 / 44 ms: more than 20% from the model


def test_the_report_tells_a_placement_with_the_delayed_update_from_the_same_one_without():
    import pandas as pd

    from cxlbench.report import build, step_breakdown
    rows = []
    for case, dpu, tps in (("off", None, 10539.0), ("on", True, 12566.0)):
        base = {"benchmark": "training", "mode": "train", "case_id": case, "target": "ddr0",
                "engine": "offload", "params_on": "ddr0", "dpu": dpu}
        rows += [dict(base, metric="tokens_per_s", value=tps),
                 dict(base, metric="predicted_step_s", value=8192 / tps, model_compute_s=0.1)]
    frame = pd.DataFrame(rows)
    assert list(step_breakdown.rows(frame)["engine"]) == ["offload", "offload + DPU"]
    # the flag is kept only where it is on: the family's other points are off, not unlabelled
    fam = build.flags_off(frame[frame["metric"] == "tokens_per_s"].assign(torch_pinned=[True, None]))
    assert list(fam["dpu"]) == [False, True] and build._varying(fam, ["dpu"]) == ["dpu"]
    assert fam["torch_pinned"].isna().sum() == 1            # True-or-missing, but not a flag axis
    assert build._varying(frame[frame["metric"] == "tokens_per_s"], ["dpu"]) == []   # what it was
    # a page is no flag: a train case's probe has none to show, a GPU latency case on HBM neither
    for fam in ({"benchmark": "training", "mode": "train"}, {"benchmark": "gpu_latency", "target": "hbm0"}):
        mixed = pd.DataFrame([dict(fam, page="thp"), dict(fam, page=None)])
        assert build.flags_off(mixed)["page"].isna().sum() == 1


def test_the_report_draws_each_placement_relative_to_the_runs_best():
    import pandas as pd

    from cxlbench.report import build, step_breakdown
    rows = []
    for case, tier, engine, tps in (("a", "ddr0", "none", 30000.0), ("b", "nvme0", "offload", 15000.0)):
        base = {"benchmark": "training", "mode": "train", "case_id": case, "target": tier, "engine": engine,
                "params_on": tier}
        rows += [dict(base, metric="tokens_per_s", value=tps), dict(base, metric="step_time_s", value=1024 / tps),
                 dict(base, metric="predicted_step_s", value=1024 / tps, model_compute_s=1024 / tps)]
    chart = step_breakdown.relative_chart(step_breakdown.rows(pd.DataFrame(rows)),
                                          build.ChartMaker("r", ["ddr0", "nvme0"]))
    assert "100% · 30,000 tokens/s" in chart["svg"] and "50% · 15,000 tokens/s" in chart["svg"]


def test_delayed_update_hides_the_shorter_chain_behind_the_longer():
    """With DPU the step is the longer of the GPU's chain (compute + exposed d2h) and
    the host's (update + copies back): whichever is shorter costs nothing."""
    w = Workload(n_params=10**9, n_params_nonembed=10**9, n_layers=16, dim=2048, seq_len=2048,
                 tokens_per_step=8192, chunks=4)
    slow_host = Rates(flops_per_s=4e14, d2h_Bps=5e10, h2d_Bps=5e10, opt_params_per_s=1e8)      # 10 s update
    fast_host = Rates(flops_per_s=4e14, d2h_Bps=5e10, h2d_Bps=5e10, opt_params_per_s=1e11)     # 10 ms update
    assert predict(w, slow_host, "dpu").step_s == pytest.approx(10 + 0.04 / 4)
    fast = predict(w, fast_host, "dpu")
    assert fast.step_s == pytest.approx(fast.terms["compute"])
    for r in (slow_host, fast_host):        # never slower than without it
        assert predict(w, r, "dpu").step_s <= predict(w, r, "overlapped").step_s
    with pytest.raises(ValueError, match="dpu-shared"):
        predict(w, fast_host, "concurrent")


def test_the_replay_refuses_when_the_model_and_its_twin_exceed_its_limit(monkeypatch):
    from cxlbench.training import replay
    from cxlbench.training.session import _twin
    cfg, train = model_config("tiny"), train_config("tiny")
    model_bytes = cfg.num_params() * 4
    monkeypatch.setattr(replay, "byte_limit", lambda device: model_bytes + 1)   # the model alone fits
    notes: list[str] = []
    probe = replay.Probe(_twin("offload", torch.device("cpu"), torch.float32), cfg, train,
                         torch.device("cpu"), 4, notes)
    assert probe.replay is None
    assert len(notes) == 1 and "the model's and its twin's" in notes[0]


def test_the_optimizer_mode_plans_thp_cases_beside_4k_and_never_for_nvme(tmp_path):
    from cxlbench.benchmarks import training
    env = _env(tmp_path, gpu=False)
    spec = {"name": "training", "mode": "optimizer", "tiers": ["ddr", "nvme"], "page": ["4k", "thp"],
            "threads": [1], "n_params": "1M"}
    cases = [p.case for p in plan(training, spec, env) if p.skip is None]
    pages = sorted((c.target, c.params.get("page", "")) for c in cases)
    assert pages == [("ddr0", ""), ("ddr0", "thp"), ("nvme0", "")]   # 4 KiB keeps its old case id


@pytest.mark.skipif(NODE0 is None, reason="no NUMA node 0")
def test_the_optimizer_modes_thp_state_is_on_huge_pages_or_the_case_is_skipped_saying_why(tmp_path, monkeypatch):
    from cxlbench.benchmarks import training
    from cxlbench.benchmarks.base import Skip
    from cxlbench.memory import sysinfo
    env = _env(tmp_path, gpu=False)
    spec = {"name": "training", "mode": "optimizer", "tiers": ["ddr"], "page": ["thp"], "threads": [1],
            "n_params": "2M", "impls": ["native"], "steps": 2}
    (case,) = [p.case for p in plan(training, spec, env) if p.skip is None]
    if sysinfo.thp_enabled("/") in (None, "never"):
        with pytest.raises(Skip, match="transparent huge pages"):
            training.measure(case, env, {})
        return
    info: dict = {}
    samples = training.measure(case, env, info)
    rates = [s for s in samples if s.metric == "params_per_s"]
    assert rates and all(s.params["page"] == "thp" and s.params["huge_coverage"] >= 0.9 for s in rates)
    monkeypatch.setattr(sysinfo, "thp_enabled", lambda root="/": "never")    # a kernel without them
    with pytest.raises(Skip, match="transparent huge pages are disabled"):
        training.measure(case, env, {})


def test_an_arena_asked_for_huge_pages_without_a_node_refuses():
    with pytest.raises(PlacementError, match="asked of a node"):
        HostArena(1 << 20, None, "x", page="thp")


def test_an_implementation_that_cannot_be_placed_keeps_what_the_others_measured(tmp_path, monkeypatch):
    from cxlbench.benchmarks import training
    from cxlbench.benchmarks.base import Skip
    from cxlbench.training import optimizer as adam
    env = _env(tmp_path, gpu=False)
    spec = {"name": "training", "mode": "optimizer", "tiers": ["ddr"], "page": ["thp"], "threads": [1],
            "n_params": "1M", "impls": ["native", "fused"], "steps": 2}
    (case,) = [p.case for p in plan(training, spec, env) if p.skip is None]
    monkeypatch.setattr(training, "_pin_to", lambda initiator, env, info, threads=None: info.update(threads=1))

    def probe(n, impl, found=None, **kw):
        if impl == "fused":
            raise PlacementError("too little free memory on node 0 for its THP")
        found.append({"page_bytes": 2 << 20, "huge_coverage": 1.0})
        return [1e9, 1e9]
    monkeypatch.setattr(adam, "probe", probe)
    info: dict = {}
    samples = training.measure(case, env, info)
    assert {s.params["impl"] for s in samples} == {"native"}
    assert "too little free" in info["skipped_impls"]["fused"]
    monkeypatch.setattr(adam, "probe", lambda n, impl, **kw: (_ for _ in ()).throw(PlacementError("no THP")))
    with pytest.raises(Skip, match="no THP"):          # nothing measured: the case is skipped, saying why
        training.measure(case, env, {})
