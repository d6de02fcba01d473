"""The step-time model: what a training step should cost, from microbenchmark rates.

Terms (../shared/REFERENCES.md, "Training offload"):

    compute   measured by probe where the run has one (training/replay.py: the
              step's operators replayed + the framework's overhead from a
              minimal twin), else (6·N_ne + 12·L·d·S) · T / F_eff
              (a GPU described by its datasheet, the advisor's case)
    d2h, h2d  grad_bytes·N / B_d2h, param_bytes·N / B_h2d   (2N / B_pcie in bf16)
    optimizer N / R_opt
    nvme      file_bytes / B_read + file_bytes / B_write     (12N each way with params in the file)
    reduce_scatter, all_gather   between the G GPUs of a data-parallel job (ZeRO's partitions):
              grad_bytes·N·(G−1)/G / B_coll and param_bytes·N·(G−1)/G / B_coll, the ring's
              volume per GPU over the group's bus bandwidth (Cluster.collective_Bps)

N is every parameter (all are transferred and stepped), N_ne leaves out the token
embedding (torchtitan's FLOPs count), T the tokens per step, S the sequence length.

How the terms add up depends on what the engine overlaps:
  - "serial": nothing overlaps (the CPU run: every copy is a memcpy on the same cores)
      step = compute + d2h + h2d + max(optimizer, nvme) + reduce_scatter + all_gather
  - "overlapped": the offload engine on a GPU — gradients are reduced between the GPUs
      and stream to host bucket by bucket during backward (about 2/3 of compute, 3/4 with
      activation checkpointing, whose recomputed forward runs in the backward; the two
      links pipeline, so the slower sets the pace), parameters stream back chunk by chunk
      while the next chunk is stepped, NVMe I/O is double-buffered with the update, and
      the updated partitions are then gathered on every GPU:
      step = compute + max(0, max(d2h, reduce_scatter) - 2/3·compute)
             + max(optimizer, nvme, h2d) + h2d/chunks + all_gather
  - "none": no offload, state on the device (ZeRO-2 or DDP: the same volume between GPUs):
      step = compute + max(0, reduce_scatter - 2/3·compute) + optimizer + all_gather
  - "dpu": the offload engine on a GPU with the delayed parameter update (ZeRO-Offload's
      DPU, Ren et al. 2021 §5.2): after warm-up, step i's host update, its parameter
      copies and gather run while step i+1's forward and backward run on the GPU with
      parameters one step stale, so the two chains overlap and the longer one sets the step:
      step = max(compute + max(0, max(d2h, reduce_scatter) - 2/3·compute),
                 max(optimizer, nvme, h2d) + h2d/chunks + all_gather)
  - "dpu-shared": the same on a CPU run: the update runs in a thread of its own, but on
      the cores the forward and backward use. Its CPU time (optimizer_cpu: every
      thread's CPU seconds of the update as its own thread runs it, I/O waits not) adds
      to the compute whole, not spread over the cores: the forward and backward's
      OpenMP team moves at its slowest thread's pace, and the thread the update
      preempts holds the others at the next barrier. Its waits on the device can hide;
      the update's whole time (optimizer, measured on its thread, waits in, then its copy of
      the parameters back into the compute copy) must fit:
      step = max(compute + d2h + h2d + optimizer_cpu + reduce_scatter + all_gather,
                 max(optimizer, nvme) + h2d)
  - with the parameters sharded too (Workload.params_sharded: ZeRO-3 with the optimizer
      offloaded, what a model whose bf16 copy does not fit one GPU needs), "none",
      "overlapped" and "dpu" are priced as above but the parameters are gathered from
      the peers layer by layer for every forward and backward (and the recompute's
      forward), prefetched behind the compute, and not after the update: each GPU's
      updated partition goes back to it alone (Rajbhandari et al. 2020, ZeRO §7.2.2:
      two all-gathers and a reduce-scatter, 1.5× ZeRO-2's volume). The forward's gather
      hides behind the forward (⅓ of the compute), the backward's gathers share the
      GPUs' links with the reduce-scatter behind the backward (⅔):
      exposed = max(0, all_gather₁ − ⅓·compute) + max(0, max(d2h, reduce_scatter +
                all_gather_b) − ⅔·compute), per micro-step, and no all_gather term after
  - "streamed": the parameters themselves live on the host (ZeRO-3/ZeRO-Infinity's
      parameter offload): each forward and backward fetches them (param_bytes counts
      every fetch: 6 = bf16 three times with recomputation) and sends the gradients
      down, prefetched behind the compute, each GPU its partition over PCIe and the rest
      gathered from its peers; the update then runs alone, as ZeRO-Infinity §4 says it
      must (it cannot overlap compute):
      step = max(compute, d2h + h2d, reduce_scatter + all_gather) + max(optimizer, nvme)

Gradient accumulation (Workload.micro_steps = K): the optimizer steps once for K
forwards and backwards, and T counts all K micro-batches. ZeRO-Offload moves each
micro-step's gradient partition to the host and adds it there (DeepSpeed's
copy_grads_in_partition -> async_accumulate_grad_in_cpu_via_gpu: from the second
micro-step on, the running sum comes up, is added on the GPU and goes back down), and
ZeRO-2 reduce-scatters after every backward (as the all-HBM reference "none" is priced
too; DDP under no_sync, or ZeRO-1, would reduce once per step, a reference that much
faster while the micro-steps' exchange does not hide): d2h and reduce_scatter are the sums of
K micro-steps', each hidden behind its own backward (2/3 of its compute), so what the
formulas above write max(0, max(d2h, reduce_scatter) − 2/3·compute) is summed micro-step
by micro-step (the same at K = 1). The sum's way up is the other direction of a
full-duplex link, priced at its own rate and assumed not to slow the way down (some
hosts lose half of h2d in bidirectional copies: not modelled), but the host tier serves
both ways from one bandwidth: each micro-step after the first costs the longest of the
link's two times and twice the gradients over the GPU's share of the tier
(Rates.host_Bps), so the first may hide where the later ones do not. DeepSpeed sends the
boundary micro-step's gradients in fp32 (2 B a parameter more, once a step): not counted.
The host's update, the copy of the parameters back and ZeRO-2's all-gather happen once per
step. Sharded parameters are gathered by every micro-step (Workload.gathers times), and
streamed ones fetched (and gathered from the peers), so there h2d and all_gather are K
times too.

Where one memory holds the optimizer state and the copies' buffers (Rates.state_Bps:
the what-if's DDR or CXL tier; DDR for state on NVMe, which is stepped in DDR buffers),
the step lasts at least as long as that memory takes to move everything the step asks
of it, whatever overlaps: AdamW's 28 B a parameter, the gradients down (and,
accumulating, their running sum back up), the parameters back, and with the state on
NVMe its swap in and out of the buffers (nvme_bytes each way) (the term state_memory).
The delayed update overlaps these in time; it cannot make the memory faster. AdamW
itself streams its 28 B a parameter through that memory, so no core count steps it
faster than the memory moves them: optimizer = max(N / R_opt, 28·N / state_Bps).

Many GPUs (Cluster, per_gpu): the workload is one GPU's (its tokens; the optimizer
state partitioned over `shards` GPUs, so every host term prices N / shards) and the
rates are its share of its node's: the node's CPU AdamW rate and NVMe bandwidth
split over its GPUs, each GPU's PCIe link bounded by the host tier's bandwidth over
the node's GPUs. Between the GPUs, the ring's volume at the group's bus bandwidth:
each GPU's link to its peers (NVLink) within a node, the lower of that and the node's
network across nodes (a ring crosses each node boundary once per channel, and a node's
channels share its NICs). Left out: the collectives' latency terms and algorithm
efficiency (NCCL reaches 70-90% of the link's rate at these sizes: the link's rate makes
the term a lower bound), and activations offloaded to the host.

A measured step more than `tolerance` (20%) away from the model is flagged, with
the terms that disagree; faster than the model is suspicious (wrong tier, lazy
allocation, a missing sync) until explained.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

#: AdamW's traffic per parameter per step: fp32 p, m, v read and written (24) and an
#: fp32 gradient read (4) (REFERENCES.md, "Training offload"): what a bandwidth-bound
#: AdamW moves.
ADAMW_BYTES = 28
#: Activation bytes per token, per layer and per model dimension kept for backward in
#: bf16 without recomputation (Korthikanti et al. 2022, the s·b·h·34 term; the
#: attention-score term is left out, as flash attention does not store the scores).
ACTIVATION_BYTES = 34
#: With activation checkpointing only each layer's input stays (bf16, 2 bytes per token and
#: model dimension), and one layer's full activations live at a time during its recompute.
CHECKPOINT_BYTES = 2


def activation_bytes(tokens: int, dim: int, layers: int, recompute: bool = False) -> int:
    """What the activations kept for backward take on the device."""
    if recompute:
        return CHECKPOINT_BYTES * tokens * dim * layers + ACTIVATION_BYTES * tokens * dim
    return ACTIVATION_BYTES * tokens * dim * layers


@dataclass(frozen=True)
class Rates:
    """Figures measured on the same machine, in the same run."""
    flops_per_s: float              # F_eff: matrix rate at the model's shapes, compute dtype
    d2h_Bps: float | None = None    # B_copy device -> host (PCIe), or host memcpy on a CPU run
    h2d_Bps: float | None = None    # B_copy host -> device
    opt_params_per_s: float | None = None   # R_opt on the optimizer's tier
    nvme_read_Bps: float | None = None
    nvme_write_Bps: float | None = None
    compute_s: float | None = None  # forward + backward from the compute probe (replay.py)
    opt_cpu_params_per_s: float | None = None   # R_opt per CPU second (every thread's, waits not)
    collective_Bps: float | None = None  # B_coll: the data-parallel group's bus bandwidth (Cluster)
    host_Bps: float | None = None   # the GPU's share of the host tier, both directions together
    state_Bps: float | None = None  # the GPU's share of the memory holding the optimizer state,
                                    # where the copies' buffers live in it too (the what-if's DDR
                                    # or CXL; DDR's buffers for NVMe): a floor on the step,
                                    # whatever overlaps


@dataclass(frozen=True)
class Workload:
    n_params: int                   # N, all parameters
    n_params_nonembed: int          # N without the token embedding
    n_layers: int
    dim: int
    seq_len: int
    tokens_per_step: int
    grad_bytes: int = 2             # per parameter, device -> host (bf16)
    param_bytes: int = 2            # per parameter, host -> device (bf16)
    nvme_bytes: int = 0             # per parameter, in the optimizer file (8: m, v; 12: + p)
    offload: bool = True            # grads and params cross to the host
    chunks: int = 1                 # optimizer chunks (for the pipelined H2D tail)
    shards: int = 1                 # GPUs the optimizer state is partitioned over (ZeRO):
                                    # each steps, copies and stores N / shards of it
    recompute: bool = False         # activation checkpointing: each layer's forward runs again
    micro_steps: int | float = 1    # gradient accumulation: forwards and backwards per optimizer
                                    # step (tokens_per_step counts them all); a mean where a
                                    # global batch does not divide evenly
    params_sharded: bool = False    # ZeRO-3: each GPU holds 1/shards of the parameters too and
                                    # gathers each layer's for every forward and backward

    @property
    def flops_per_token(self) -> int:
        """6·N_ne + 12·L·d·S (torchtitan, PaLM); with activation checkpointing the
        forward runs a second time before backward: 8·N_ne + 16·L·d·S (Megatron-LM's
        4/3, Narayanan et al. 2021)."""
        per = 8 if self.recompute else 6
        return per * self.n_params_nonembed + 2 * per * self.n_layers * self.dim * self.seq_len

    def accumulating(self, micro_steps: float) -> "Workload":
        """This one-micro-batch step run `micro_steps` times per optimizer step
        (gradient accumulation): its tokens counted over all of them."""
        return replace(self, tokens_per_step=round(self.tokens_per_step * micro_steps), micro_steps=micro_steps)

    @property
    def backward_share(self) -> float:
        """The backward's part of a micro-step's compute, what the gradients' way down can
        hide behind: 4 of 6 FLOPs per parameter and token, or with checkpointing the
        recomputed forward and the backward, 6 of 8."""
        return 0.75 if self.recompute else 2 / 3

    @property
    def gathers(self) -> int:
        """All-gathers of the parameters each micro-step where they are sharded: the
        forward's and the backward's, and the recompute's forward with checkpointing, as
        ZeRO-Infinity §4 counts them. DeepSpeed keeps a module gathered from its
        recompute to its backward when that is within stage3_max_reuse_distance (1e9
        elements by default), which makes it two: the count is then an upper bound."""
        return 3 if self.recompute else 2

    @property
    def shard_params(self) -> float:
        """The parameters one GPU's optimizer partition holds."""
        return self.n_params / self.shards


@dataclass(frozen=True)
class Cluster:
    """Data parallelism over `gpus_per_node` GPUs on each of `nodes` hosts, the
    optimizer state partitioned over all of them (ZeRO-Offload's layout): each GPU's
    partition is stepped by its share of its host's cores and crosses its own PCIe
    link, and the GPUs of a node share what the node has once (ZeRO-Infinity's
    bandwidth-centric rule: the host side is the min of the links and the tier)."""
    gpus_per_node: int = 1
    nodes: int = 1
    gpu_link_Bps: float | None = None     # each GPU to its peers, per direction (NVLink)
    node_link_Bps: float | None = None    # a node to the others, per direction, all its NICs

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def collective_Bps(self) -> float | None:
        """The bus bandwidth of a ring over every GPU: a GPU's link within a node; across
        nodes also each node's network, which the node's rings cross once each and share
        (None where a link the group uses is unknown, or for one GPU)."""
        used = [*([self.gpu_link_Bps] if self.gpus_per_node > 1 else []),
                *([self.node_link_Bps] if self.nodes > 1 else [])]
        return None if not used or None in used else min(used)


def per_gpu(node: "Rates", cluster: Cluster, host_Bps: float | None = None) -> "Rates":
    """One GPU's rates from a node's: `node` holds one GPU's link (d2h, h2d), the
    node's CPU AdamW rate over all its cores and its NVMe bandwidth; `host_Bps` is
    what the tier the copies read and write gives all the node's GPUs at once (None:
    the links are the bound). The GPUs of a node split the cores, the tier and the
    drives evenly."""
    g = cluster.gpus_per_node

    def link(rate: float | None) -> float | None:
        if rate is None:
            return None
        return min(rate, host_Bps / g) if host_Bps else rate

    def split(rate: float | None) -> float | None:
        return None if rate is None else rate / g

    return Rates(flops_per_s=node.flops_per_s, d2h_Bps=link(node.d2h_Bps), h2d_Bps=link(node.h2d_Bps),
                 opt_params_per_s=split(node.opt_params_per_s), nvme_read_Bps=split(node.nvme_read_Bps),
                 nvme_write_Bps=split(node.nvme_write_Bps), compute_s=node.compute_s,
                 collective_Bps=cluster.collective_Bps, host_Bps=host_Bps / g if host_Bps else None)


@dataclass
class Prediction:
    terms: dict[str, float]         # seconds per term
    step_s: float
    overlap: str
    compute_basis: str = "flops"    # "probe": measured by replay; "flops": FLOPs at F_eff

    def as_dict(self) -> dict:
        return {"step_s": self.step_s, "overlap": self.overlap, "compute_basis": self.compute_basis,
                **{f"{k}_s": v for k, v in self.terms.items()}}


def step_workload(numel: int, cfg: "ModelConfig", train: "TrainConfig", engine: str, cuda: bool,
                  optimizer_nvme: bool = False, params_nvme: bool = False) -> Workload:
    """What one step of an engine moves, as the step model reads it."""
    # bf16 crosses PCIe in our engine; FSDP2 moves fp32 shards (reduce_dtype fp32, then
    # casts on the GPU); a CPU run copies fp32
    copied = 2 if cuda and engine == "offload" else 4
    return Workload(
        n_params=numel, n_params_nonembed=numel - cfg.vocab_size * cfg.dim,
        n_layers=cfg.n_layers, dim=cfg.dim, seq_len=train.seq_len,
        tokens_per_step=train.batch * train.seq_len, grad_bytes=copied, param_bytes=copied,
        nvme_bytes=(12 if params_nvme else 8) if optimizer_nvme else 0,
        offload=engine != "none", chunks=max(1, -(-numel // max(1, train.chunk_params))))


#: Every composition predict() knows, as the engines run them (see the module docstring)
OVERLAPS = ("serial", "overlapped", "none", "dpu", "dpu-shared", "streamed")


def _host_chain(w: Workload, opt: float, nvme: float, h2d: float) -> float:
    """The host's side of an overlapped update: the optimizer, its NVMe I/O and the
    parameters' copy back pipelined chunk by chunk, so the longest of them lasts the
    whole update and only the last chunk's copy trails it."""
    return max(opt, nvme, h2d) + h2d / max(1, w.chunks)


def _gathers_per_step(w: Workload, overlap: str) -> float:
    """The parameters' all-gathers per optimizer step: ZeRO-2's one after the update;
    sharded parameters' every micro-step's; streamed parameters' once a micro-step
    (their param_bytes counts the fetches)."""
    if overlap == "streamed":
        return w.micro_steps
    return w.micro_steps * w.gathers if w.params_sharded else 1


def _exposed(w: Workload, c: float, down: float, again: float, rs: float, ag: float) -> float:
    """What the micro-steps' compute cannot hide of their exchanges, micro-step by
    micro-step: the backward (⅔ of one's compute, ¾ with checkpointing:
    Workload.backward_share) hides its gradients' way down (the
    first's may be the cheaper, with no running sum yet) and, over the GPUs' links, the
    reduce-scatter and the backward's gathers of sharded parameters; the forward (⅓)
    hides its own gather."""
    k = w.micro_steps
    bwd = w.backward_share * c / k
    fwd, rs1 = c / k - bwd, rs / k
    gather = ag / k / w.gathers if w.params_sharded else 0.0       # one layer-by-layer gather
    links = rs1 + (w.gathers - 1) * gather if w.params_sharded else rs1
    ahead = k * max(0.0, gather - fwd)
    return (ahead + max(0.0, max(down, links) - bwd) + (k - 1) * max(0.0, max(again, links) - bwd))


def predict(w: Workload, r: Rates, overlap: str = "serial") -> Prediction:
    """Seconds per step and per term. Terms whose rate is unknown are left out."""
    basis = "probe" if r.compute_s is not None else "flops"
    terms = {"compute": r.compute_s if r.compute_s is not None
             else w.flops_per_token * w.tokens_per_step / r.flops_per_s}
    n = w.shard_params
    k = w.micro_steps
    down = again = 0.0          # one micro-step's gradients down: the first, and each after it
    if w.offload and r.d2h_Bps and r.h2d_Bps:
        down = w.grad_bytes * n / r.d2h_Bps
        up = w.grad_bytes * n / r.h2d_Bps       # the running sum's way up, the link's other direction
        again = max(down, up, 2 * w.grad_bytes * n / r.host_Bps) if r.host_Bps else max(down, up)
        terms["d2h"] = down + (k - 1) * again
        terms["h2d"] = (k if overlap == "streamed" else 1) * w.param_bytes * n / r.h2d_Bps
    if r.opt_params_per_s:
        terms["optimizer"] = n / r.opt_params_per_s
        if r.state_Bps and w.offload:
            terms["optimizer"] = max(terms["optimizer"], ADAMW_BYTES * n / r.state_Bps)
    if r.opt_cpu_params_per_s and overlap == "dpu-shared":
        terms["optimizer_cpu"] = n / r.opt_cpu_params_per_s
    if w.nvme_bytes and r.nvme_read_Bps and r.nvme_write_Bps:
        terms["nvme"] = w.nvme_bytes * n / r.nvme_read_Bps + w.nvme_bytes * n / r.nvme_write_Bps
    if w.params_sharded and overlap not in ("none", "overlapped", "dpu"):
        raise ValueError(f"sharded parameters are priced for none, overlapped and dpu, not {overlap!r}")
    if w.shards > 1 and r.collective_Bps:
        ring = w.n_params * (w.shards - 1) / w.shards / r.collective_Bps
        terms["reduce_scatter"] = k * w.grad_bytes * ring
        terms["all_gather"] = _gathers_per_step(w, overlap) * w.param_bytes * ring
    c, d2h, h2d = terms["compute"], terms.get("d2h", 0.0), terms.get("h2d", 0.0)
    opt, nvme = terms.get("optimizer", 0.0), terms.get("nvme", 0.0)
    rs, ag = terms.get("reduce_scatter", 0.0), terms.get("all_gather", 0.0)
    exposed = _exposed(w, c, down, again, rs, ag)
    after = 0.0 if w.params_sharded else ag          # ZeRO-2 gathers the updated parameters
    if overlap == "none":
        step = c + exposed + opt + after
    elif overlap == "serial":
        step = c + d2h + h2d + max(opt, nvme) + rs + ag
    elif overlap == "overlapped":
        step = c + exposed + _host_chain(w, opt, nvme, h2d) + after
    elif overlap == "dpu":
        step = max(c + exposed, _host_chain(w, opt, nvme, h2d) + after)
    elif overlap == "dpu-shared":
        step = max(c + d2h + h2d + terms.get("optimizer_cpu", opt) + rs + ag, max(opt, nvme) + h2d)
    elif overlap == "streamed":
        step = max(c, d2h + h2d, rs + ag) + max(opt, nvme)
    else:
        raise ValueError(f"unknown overlap {overlap!r} ({', '.join(OVERLAPS)})")
    if r.state_Bps and w.offload:
        # One memory holds the state and the copies' buffers: whatever overlaps, the
        # step lasts at least as long as that memory takes to move AdamW's bytes, the
        # gradients (and their running sum back up), the parameters going back and
        # the state's swap to and from NVMe through the buffers.
        moved = (ADAMW_BYTES + w.grad_bytes * (2 * k - 1) + w.param_bytes + 2 * w.nvme_bytes) * n
        terms["state_memory"] = moved / r.state_Bps
        step = max(step, terms["state_memory"])
    return Prediction(terms, step, overlap, basis)


def tokens_to_hide_optimizer(flops_per_s: float, opt_params_per_s: float) -> float:
    """T* ≈ F_eff / (6·R_opt): tokens per step at which the compute (6N·T/F) lasts
    as long as the CPU optimizer step (N/R), whatever N is."""
    return flops_per_s / (6 * opt_params_per_s)


@dataclass
class Disagreement:
    term: str
    measured_s: float
    predicted_s: float

    @property
    def ratio(self) -> float:
        return self.measured_s / self.predicted_s

    def __str__(self) -> str:
        side = "slower" if self.ratio > 1 else "faster"
        return (f"{self.term}: measured {self.measured_s * 1e3:.3g} ms, model {self.predicted_s * 1e3:.3g} ms "
                f"({abs(self.ratio - 1) * 100:.0f}% {side})")


@dataclass
class Verdict:
    prediction: Prediction
    measured_step_s: float
    disagreements: list[Disagreement] = field(default_factory=list)
    tolerance: float = 0.2

    @property
    def flagged(self) -> bool:
        return any(d.term == "step" for d in self.disagreements)

    @property
    def summary(self) -> str:
        """'' when the step agrees; else the step's disagreement and the terms that disagree."""
        return "; ".join(str(d) for d in self.disagreements) if self.flagged else ""


def compare(pred: Prediction, measured_step_s: float, measured_terms: dict[str, float],
            tolerance: float = 0.2) -> Verdict:
    """Flag the step and each term whose measurement is more than `tolerance` away
    from the model (relative to the model). measured_terms uses the model's term
    names (compute, d2h, h2d, optimizer, nvme, or 'transfer' for d2h + h2d)."""
    verdict = Verdict(pred, measured_step_s, tolerance=tolerance)
    predicted = dict(pred.terms)
    if "d2h" in predicted:
        predicted["transfer"] = predicted["d2h"] + predicted["h2d"]

    def check(term: str, measured: float, model: float) -> None:
        if model > 0 and abs(measured / model - 1) > tolerance:
            verdict.disagreements.append(Disagreement(term, measured, model))

    check("step", measured_step_s, pred.step_s)
    for term, value in measured_terms.items():
        if term in predicted:
            check(term, value, predicted[term])
    return verdict
