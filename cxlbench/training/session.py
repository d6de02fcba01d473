"""One training measurement from start to end: build the engine for a placement,
verify where its pages are, run warm-up and steady steps, measure the rates the
step-time model needs on the same buffers, and compare.

The benchmark family (cxlbench.benchmarks.training) turns a RunResult into
samples; tests call `run` directly on small configs.
"""
from __future__ import annotations

import functools
import statistics
from collections import Counter
from dataclasses import dataclass, field, replace

import torch

from cxlbench.training import probes, replay
from cxlbench.training.configs import ModelConfig, TrainConfig, model_config
from cxlbench.training.data import MarkovTokens
from cxlbench.training.engine import (Fsdp2Engine, NoOffloadEngine, OffloadEngine, StepTimes,
                                      build_model, hyper_of)
from cxlbench.training.model import loss_fn
from cxlbench.training.optimizer import probe as adamw_probe
from cxlbench.training.placement import Placement, page_nodes, verify
from cxlbench.training.stepmodel import Prediction, Rates, Verdict, compare, predict, step_workload

#: a run "learns" when its last steps' loss is this fraction below its first step's
LOSS_FALL = 0.05
PROBE_MAX_PARAMS = 1 << 26      # rate probes work on at most this many parameters (1 GiB fp32)
CHOICE_CHUNKS = 4               # choose_impl steps this many of the run's chunks: their seams are in it
CHOICE_ROUNDS = 5               # ... once per round, the implementations in turn
ENGINES = ("offload", "none", "fsdp2_cpu_offload")


@dataclass
class RunSpec:
    config: str
    engine: str                       # offload / none / fsdp2_cpu_offload
    train: TrainConfig
    placement: Placement
    device: str = "cpu"               # cpu, cuda:0
    nvme_dir: str | None = None
    impl: str = "fused"               # CPU AdamW implementation; "auto": the fastest here
    buffer_node: int | None = None    # NVMe I/O buffers and staging when params are on NVMe
    local_node: int | None = None     # where the no-offload engine's state should land (CPU run)
    evict_bytes: int = 0              # the optimizer probe evicts this much before each step (2x LLC)


@dataclass
class RunResult:
    spec: RunSpec
    n_params: int
    tokens_per_step: int
    flops_per_token: int
    warmup: list[StepTimes]
    steps: list[StepTimes]
    rates: Rates
    peak_flops: float
    prediction: Prediction
    verdict: Verdict
    placement_before: list[dict]
    placement_after: list[dict]
    memory: dict[str, int]
    impl: str
    compute_probe: replay.ComputeProbe | None = None
    o_direct: bool | None = None
    notes: list[str] = field(default_factory=list)
    dpu: dict | None = None           # the delayed update: warm-up, staleness, update threads

    @property
    def losses(self) -> list[float]:
        return [s.loss for s in self.warmup + self.steps]

    @property
    def loss_fell(self) -> bool:
        return learned(self.losses)

    def median(self, attr: str) -> float:
        return statistics.median(getattr(s, attr) for s in self.steps)


def loss_tail(losses: list[float]) -> float:
    """The median loss of the last three steps (one step's loss is noisy)."""
    return statistics.median(losses[-3:])


def learned(losses: list[float]) -> bool:
    """The last steps' loss is clearly (LOSS_FALL) below the first step's."""
    return loss_tail(losses) < losses[0] - LOSS_FALL * abs(losses[0])


def loss_warning(losses: list[float]) -> str | None:
    """What the run says when it did not clearly learn: a rise is not a slow fall."""
    first, tail = losses[0], loss_tail(losses)
    if tail >= first:
        return f"loss rose: {first:.3f} at the first step, {tail:.3f} over the last three"
    if not learned(losses):
        return (f"loss fell less than {LOSS_FALL:.0%} in {len(losses)} steps: {first:.3f} at the first, "
                f"{tail:.3f} over the last three (a large model needs more steps to show it learns)")
    return None


def choose_impl(n_params: int, nodes_of_state: dict | None = None, gpu: bool = False,
                evict_bytes: int = 0, chunk: int | None = None,
                rounds: int = CHOICE_ROUNDS) -> tuple[str, dict]:
    """The fastest available CPU AdamW on the run's own tiers (params/s of each, the
    median of `rounds` probe steps taken in turn, on up to CHOICE_CHUNKS of the run's
    chunks placed like its state), stepping as the run will: in its chunks; for a GPU,
    bf16 gradients in and a bf16 copy out; after evicting the caches as the run's
    forward and backward do. Without the eviction, 4M parameters (112 MB of state)
    stepped hot in the H200 host's 300 MiB L3: native 9.4 G params/s against torch's
    fused 4.6, where the run's state, from DRAM, stepped at 3.6-3.8. In turn, because
    three steps of each, one implementation after the other, read torch's fused at
    3.58 G params/s on that host in one run and 2.23 in the next: the 3.58 chose fused
    over native (3.44), and the 1b step's update then took 594 ms where native's took
    422-466."""
    from cxlbench.training.optimizer import IMPLS, NoWorkDone, unavailable
    chunk = chunk or (1 << 22)
    n = min(n_params, CHOICE_CHUNKS * chunk)
    grad_dtype = torch.bfloat16 if gpu else torch.float32
    copy = torch.empty(n, dtype=torch.bfloat16) if gpu else None
    evict = probes.evictor(evict_bytes)
    samples = {impl: [] for impl in IMPLS if impl != "forloop" and not unavailable(impl)}
    for _ in range(rounds):
        for impl in list(samples):
            try:
                samples[impl] += adamw_probe(n, impl, steps=1, nodes=nodes_of_state, grad_dtype=grad_dtype,
                                             chunk=min(chunk, n), narrow_into=copy, before_each=evict)
            except NoWorkDone:                # never chosen; the probe said why
                del samples[impl]
    rates = {impl: statistics.median(v) for impl, v in samples.items()}
    if not rates:
        raise RuntimeError("no CPU AdamW implementation updated the parameters in its probe here")
    return max(rates, key=rates.get), rates


def _state_nodes(spec: RunSpec) -> dict:
    """Where a run keeps params, moments and grads in host memory (NVMe's in-memory
    share, its I/O buffers, on the buffer node)."""
    p = spec.placement
    buffer = spec.buffer_node if spec.buffer_node is not None else p.grads
    host = lambda v: v if isinstance(v, int) else (buffer if isinstance(buffer, int) else None)  # noqa: E731
    return {"params": host(p.params), "optimizer": host(p.optimizer), "grads": host(p.grads)}


def build_engine(spec: RunSpec):
    model = model_config(spec.config)
    if spec.engine == "offload":
        return OffloadEngine(model, spec.train, spec.placement, spec.device, spec.nvme_dir,
                             spec.impl, spec.buffer_node)
    if spec.engine == "none":
        act = spec.placement.activations
        return NoOffloadEngine(model, spec.train, spec.device,
                               act if isinstance(act, int) else None, spec.impl)
    if spec.engine == "fsdp2_cpu_offload":
        return Fsdp2Engine(model, spec.train, spec.device)
    raise ValueError(f"unknown engine {spec.engine!r} (known: {', '.join(ENGINES)})")


def run(spec: RunSpec, nodes_of=page_nodes) -> RunResult:
    cfg, train = model_config(spec.config), spec.train
    impl_rates = None
    if spec.impl == "auto" and spec.engine == "offload":
        impl, impl_rates = choose_impl(cfg.num_params(), _state_nodes(spec), spec.device.startswith("cuda"),
                                       spec.evict_bytes, train.chunk_params)
        spec = replace(spec, impl=impl)
    elif spec.impl == "auto":
        spec = replace(spec, impl="fused")
    if spec.placement.activations != "device" and train.warmup_steps < 1:
        raise ValueError("offloaded activations need a warm-up step (it sizes their arena)")
    if train.dpu and spec.engine != "offload":
        raise ValueError(f"the delayed parameter update is the offload engine's, not {spec.engine}'s")
    if train.dpu and train.dpu_warmup_steps >= train.warmup_steps:
        # the first delayed step has no update of its own to overlap: untimed
        raise ValueError(f"dpu_warmup_steps ({train.dpu_warmup_steps}) must be below warmup_steps "
                         f"({train.warmup_steps}): the first delayed step, which has no update beside "
                         f"it, must not be timed")
    data = MarkovTokens(cfg.vocab_size, seed=train.seed)
    engine = build_engine(spec)
    try:
        batches = [engine.prepare(b) for b in
                   data.batches(train.warmup_steps + train.steps, train.batch, train.seq_len)]
        before = engine.verify(nodes_of)
        engine.reset_peaks()          # the replay's room is what these steps leave: not an earlier run's
        warmup = [engine.step(*b) for b in batches[:train.warmup_steps]]
        probe = _compute_probe(engine, spec, cfg, train)
        engine.reset_peaks()
        steps = []
        for b in batches[train.warmup_steps:]:
            steps.append(engine.step(*b))
            probe.after_step()                     # interleaved with the steps it models
        if train.dpu:                              # the last step's update, before any probe
            engine.flush()
        compute = probe.result()
        after = engine.verify(nodes_of) + _verify_device_state(engine, spec, nodes_of)
        memory = engine.memory()
        if probe.resident_bytes:                   # inside the GPU peaks above: say how much
            memory["compute_probe_resident"] = probe.resident_bytes
        rates, peak = _rates(engine, spec)
        notes = list(engine.notes)
        o_direct = engine.nvme.o_direct if getattr(engine, "nvme", None) else None
        if o_direct is False:
            notes.append("the NVMe directory refused O_DIRECT: reads may come from the page cache")
        if not engine.cuda:
            notes.append("CPU run: the model computes on the CPU; 'transfer' is memcpy into and out "
                         "of the placed buffers, not PCIe")
        numel, impl = engine.numel, engine.impl
        dpu = _dpu_record(engine, steps) if train.dpu else None
        if impl_rates:
            notes.append("CPU AdamW chosen as the fastest here: " + ", ".join(
                f"{k} {v / 1e6:.0f}M params/s" for k, v in sorted(impl_rates.items(), key=lambda kv: -kv[1])))
    finally:
        engine.close()
    if compute is not None:
        rates = replace(rates, compute_s=compute.compute_s)

    workload = step_workload(numel, cfg, train, spec.engine, engine.cuda,
                             optimizer_nvme=spec.placement.optimizer == "nvme",
                             params_nvme=spec.placement.params == "nvme")
    overlap = overlap_of(spec.engine, engine.cuda, train.dpu)
    prediction = predict(workload, rates, overlap)
    measured = {"compute": statistics.median(s.forward_s + s.backward_s for s in steps),
                "optimizer": statistics.median(s.optimizer_s + s.nvme_read_s + s.nvme_write_s for s in steps)}
    if spec.engine == "offload":
        measured["transfer"] = statistics.median(s.transfer_s for s in steps)
    if any(s.io for s in steps) and spec.placement.optimizer == "nvme":
        measured["nvme"] = statistics.median(s.io.read_busy_s + s.io.write_busy_s for s in steps)
    verdict = compare(prediction, statistics.median(s.step_s for s in steps), measured)
    return RunResult(spec, numel, workload.tokens_per_step, workload.flops_per_token,
                     warmup, steps, rates, peak, prediction, verdict, before, after, memory,
                     impl, compute, o_direct, notes, dpu)


def overlap_of(engine: str, cuda: bool, dpu: bool) -> str:
    """The step model's composition for how an engine runs its step (stepmodel.py): the
    delayed update overlaps the host chain with the GPU's ("dpu"), or on a CPU run with
    nothing but NVMe I/O, the cores being the same ("dpu-shared")."""
    if engine == "none":
        return "none"
    if engine == "fsdp2_cpu_offload":
        return "serial"
    if dpu:
        return "dpu" if cuda else "dpu-shared"
    return "overlapped" if cuda else "serial"


def _dpu_record(engine, steps: list[StepTimes]) -> dict:
    """What a DPU run says of itself: after how many ordinary steps the update was
    delayed, how stale the timed steps' parameters were, the update thread's team."""
    return {"on": True, "warmup_steps": engine.train.dpu_warmup_steps,
            "staleness": max((s.staleness for s in steps), default=0),
            "update_threads": engine.dpu.threads,
            "update_wait_s_median": statistics.median(s.update_wait_s for s in steps) if steps else None}


def _twin(kind: str, device: torch.device, param_dtype: torch.dtype | None):
    """forward_backward(cfg, train) for replay.Probe: a fresh model computing as the
    engine's does, without its hooks: the offload engine's compute copy in its dtype
    (buffers such as the rotary tables stay fp32), FSDP2's parameters in bf16 by its
    policy, the no-offload engine's fp32 parameters under autocast on a GPU."""
    autocast = device.type == "cuda" and kind == "none"

    def forward_backward(cfg: ModelConfig, train: TrainConfig):
        with torch.random.fork_rng(devices=[]):     # building a model seeds torch: not the run's stream
            model = build_model(cfg, train).to(device)
        if param_dtype is not None:
            for p in model.parameters():
                p.data = p.data.to(param_dtype)
        x, y = (t.to(device) for t in next(iter(MarkovTokens(cfg.vocab_size, seed=train.seed)
                                                 .batches(1, train.batch, train.seq_len))))

        def step() -> None:
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                logits = model(x)
            loss_fn(logits, y).backward()
            for p in model.parameters():
                p.grad = None
        return step
    return forward_backward


def _compute_probe(engine, spec: RunSpec, cfg: ModelConfig, train: TrainConfig) -> replay.Probe:
    param_dtype = {"offload": getattr(engine, "compute_dtype", None),
                   "fsdp2_cpu_offload": torch.bfloat16 if engine.cuda else None}.get(spec.engine)
    if spec.placement.activations != "device":
        engine.notes.append("compute probe: its twin keeps activations on the device; the stash's "
                            "copies to the host tier are in the measured step, in no model term")
    return replay.Probe(_twin(spec.engine, engine.device, param_dtype), cfg, train, engine.device,
                        (param_dtype or torch.float32).itemsize, engine.notes)


def _verify_device_state(engine, spec: RunSpec, nodes_of) -> list[dict]:
    """State the engine allocates itself, not through HostArena.

    The no-offload engine on a CPU keeps params and moments in ordinary memory:
    they must be on the initiator's node (first touch from its CPUs). FSDP2 puts
    its sharded params, grads and Adam state in torch's pinned memory, which we do
    not place: where it landed is recorded (pages per node), not enforced."""
    if spec.engine == "none" and not engine.cuda and spec.local_node is not None:
        return [verify(t, spec.local_node, f"state[{i}]", nodes_of)
                for i, t in enumerate(engine.state_tensors()) if t.numel() * t.element_size() >= 4096]
    if spec.engine == "fsdp2_cpu_offload":
        found: Counter[int] = Counter()
        for t in engine.host_state_tensors():
            if t.numel() * t.element_size() >= 4096:
                found.update(nodes_of(t.data_ptr(), t.numel() * t.element_size()))
        return [{"what": "fsdp2 host state (params, grads, Adam moments)", "asked_node": None,
                 "pages_checked": sum(found.values()),
                 "found": {str(k): v for k, v in sorted(found.items())}}]
    return []


def _rates(engine, spec: RunSpec) -> tuple[Rates, float]:
    """F_eff at the model's largest GEMM, the peak matrix rate, copy rates over the
    engine's own buffers, R_opt on the same tiers, NVMe bandwidth on the same file."""
    cfg, train = model_config(spec.config), spec.train
    dtype = torch.bfloat16 if engine.cuda else torch.float32
    tokens = train.batch * train.seq_len
    f_eff = probes.matmul_flops(engine.device, dtype, tokens, cfg.dim, cfg.ffn_hidden)
    peak = probes.peak_matmul_flops(engine.device, dtype)
    n = min(engine.numel, PROBE_MAX_PARAMS)
    d2h = h2d = opt = opt_cpu = nvme_r = nvme_w = None
    if spec.engine == "offload":
        # the engine's own copies: one per parameter tensor down, one per chunk back
        d2h = probes.copy_spans_Bps(engine.grads, engine.flat, _capped([(o, k) for _, o, k in engine.spans], n))
        src = engine.staging if engine.cuda else (engine.master if engine.master is not None else engine.grads)
        chunks = [(s, e - s) for s, e in (engine.nvme or engine.host_opt).bounds]
        back = functools.partial(probes.copy_spans_Bps, engine.flat, src, _capped(chunks, n))
        # on a CPU run with DPU the update's own thread (a one-thread team) copies the
        # parameters back: probe the copy there too, not on the main thread's all-core team
        h2d = engine.dpu.alone(back) if engine.dpu is not None and not engine.cuda else back()
        evict = probes.evictor(spec.evict_bytes)
        cpu: list[float] = []         # each probe step's process CPU seconds
        stepped = n
        if engine.nvme is None:
            probe = functools.partial(adamw_probe, n, spec.impl, steps=5, nodes=_state_nodes(spec),
                                      hyper=hyper_of(train), grad_dtype=dtype, chunk=engine.chunk,
                                      before_each=evict, cpu=cpu, narrow_into=_staging(engine, n))
        else:
            from cxlbench.training.nvme_optimizer import step_rate
            # the state is in the file: R_opt is the file-backed step's own rate, its
            # waits for I/O included (with small chunks they cost more than the bytes);
            # taken before the bandwidth probe, whose closing fsync slowed it 2-3x
            stepped = engine.nvme.numel
            probe = functools.partial(step_rate, engine.nvme, engine.grads, steps=5, before_each=evict, cpu=cpu)
        # with DPU the update runs on a thread of its own, with its own team: probe it there
        opt = statistics.median(engine.dpu.alone(probe) if engine.dpu is not None else probe())
        opt_cpu = stepped / statistics.median(cpu) if cpu and min(cpu) > 0 else None
        if engine.nvme is not None:
            from cxlbench.training.nvme_optimizer import file_bandwidth
            bw = file_bandwidth(engine.nvme)
            nvme_r, nvme_w = bw["read_GBps"] * 1e9, bw["write_GBps"] * 1e9
    elif spec.engine == "none":          # the engine's own optimizer on its own tensors
        opt = probes.optimizer_params_per_s(engine.opt, before_each=probes.evictor(spec.evict_bytes))
    else:                    # FSDP2: fp32 shards cross PCIe from pinned memory; host AdamW
        host = torch.empty(n, dtype=torch.float32, pin_memory=True)
        dev = torch.empty(n, dtype=torch.float32, device=engine.device)
        d2h, h2d = probes.copy_Bps(host, dev), probes.copy_Bps(dev, host)
        del host, dev
        opt = statistics.median(adamw_probe(n, "foreach" if engine.impl == "foreach" else "fused", steps=3))
    return Rates(f_eff, d2h, h2d, opt, nvme_r, nvme_w, opt_cpu_params_per_s=opt_cpu), peak


def _staging(engine, n: int) -> torch.Tensor | None:
    """On a GPU run the update also writes each updated chunk, narrowed to bf16, into
    the pinned staging the H2D copies read, inside its optimizer seconds: the probe
    writes there too, or R_opt leaves it out (the first H200 run, whose probe did:
    the update took 1.48x the probe's time). A CPU run's copies back are timed
    apart, as transfer: nothing to add there."""
    if not engine.cuda:
        return None
    return engine.staging[:n]         # idle now: every step, and any delayed update, is done


def _capped(spans: list[tuple[int, int]], limit: int) -> list[tuple[int, int]]:
    """The spans that start within the first `limit` elements (the probes' cap)."""
    return [(s, min(k, limit - s)) for s, k in spans if s < limit]
