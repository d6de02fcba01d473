"""Llama-style training with its state on each tier: tokens/s and where the step goes.

Two kinds of case (params["mode"]):

train      one placement of the training state — fp32 master params, Adam moments,
           gradients, activation checkpoints — run by one engine (offload, none,
           fsdp2_cpu_offload) on one config. target/tier_kind name the optimizer
           state's tier; params_on, grads_on, activations_on are columns. Samples per
           steady step (repetition = step index): tokens_per_s, step_time_s, the
           breakdown (forward_s, backward_s, transfer_s, optimizer_s, nvme_read_s,
           nvme_write_s, idle_s), loss, and on a GPU tflops and mfu. Per case: the
           step-time model's predicted_step_s (flag and terms as columns), the rates
           it used (column `probe`), and memory_bytes per tier (column `memory`).
           With dpu (the offload engine's delayed parameter update; the case has
           dpu = True, absent otherwise) each step also has update_wait_s, and the
           case's info says the warm-up, the staleness and the update's threads.
optimizer  AdamW parameters/s on one tier, per implementation (fused, foreach,
           forloop, native, deepspeed), and for an NVMe tier the file-backed optimizer
           against the same step in memory. page = "thp" puts the state on
           transparent huge pages (the case has page = "thp", absent for 4 KiB, as
           the training engines' state has): the update's page-size effect.

Without a GPU, GPU cases are planned and recorded as skipped ("no GPU") and the
train cases run on the CPU: they measure the optimizer on the tier, the NVMe path,
the copies into and out of placed buffers, and that the loss falls — not a GPU's
offload (each case's info says so).
"""
from __future__ import annotations

import os
import shutil
import statistics
from dataclasses import dataclass
from typing import Annotated, Literal

from cxlbench.benchmarks.base import Env, Headline, Planned, Show, Skip, limit_short, metrics, node_cpus, sweep
from cxlbench.benchmarks.spec import Allowed, Count, Count0, Size, Spec as BaseSpec, Threads
from cxlbench.training.configs import MODELS
from cxlbench.results.schema import Case, Metric, Sample
from cxlbench.topology.model import Initiator, Tier
from cxlbench.training.stepmodel import ACTIVATION_BYTES, ADAMW_BYTES

NAME = "training"
#: A case's repetitions are the steady steps of one training run: never split
#: over processes (runner.processes), each would pay its own warm-up and compile.
ONE_PROCESS = True
ENGINES = ("offload", "none", "fsdp2_cpu_offload")
NO_GPU = "no GPU"

METRICS = metrics(
    Metric("tokens_per_s", "tokens/s", "higher"),
    Metric("step_time_s", "s", "lower"),
    Metric("loss", "nats", "lower"),
    Metric("tflops", "TFLOP/s", "higher"),
    Metric("mfu", "fraction", "higher"),
    # the step's breakdown: seconds of one step spent in each phase
    Metric("forward_s", "s", "lower"),
    Metric("backward_s", "s", "lower"),
    Metric("transfer_s", "s", "lower"),          # device<->host copies not hidden behind compute
    Metric("optimizer_s", "s", "lower"),
    Metric("nvme_read_s", "s", "lower"),         # time the update waited for NVMe reads
    Metric("nvme_write_s", "s", "lower"),
    Metric("idle_s", "s", "lower"),
    Metric("update_wait_s", "s", "lower"),       # DPU: the step's wait for the last step's update
    Metric("predicted_step_s", "s", "lower"),    # the step-time model's prediction
    Metric("memory_bytes", "B", "lower"),        # peak/placed bytes per tier (column `memory`)
    Metric("max_params", "params", "higher"),    # largest model that trains in a placement
    Metric("params_per_s", "params/s", "higher"),   # AdamW's rate
    Metric("bandwidth_GBps", "GB/s", "higher"),  # the rates the step-time model used
    Metric("seconds", "s", "lower"),
)
SHOW = Show(
    "Training", "Tokens per second with model state on each tier, and where the step time goes.",
    x="n_params", facets=("mode",),
    headlines=(
        Headline("training {config}, engine {engine} ({compute})", "tokens_per_s", column="tokens/s",
                 where={"mode": "train", "dpu": None}, pick="each", digits=0, spread="samples",
                 trend="loss"),
        Headline("training {config}, engine {engine}, delayed update ({compute})", "tokens_per_s",
                 column="tokens/s", where={"mode": "train", "dpu": True}, pick="each", digits=0,
                 spread="samples", trend="loss"),
        Headline("largest config that fits, {engine} ({compute}): {max_config}", "max_params",
                 column="largest config", where={"mode": "find_max"}, pick="each", count=True),
        # the state on the tier (for NVMe: in files, with the I/O), not the in-memory reference
        Headline("AdamW, state on this tier ({impl}, {threads} threads)", "params_per_s", column="AdamW",
                 where={"mode": "optimizer", "io": [None, "nvme"], "page": [None, "4k"]}, pick="best",
                 scale=1e-6, unit="M params/s", digits=0),
        Headline("AdamW, state on THP ({impl}, {threads} threads)", "params_per_s", column="AdamW (THP)",
                 where={"mode": "optimizer", "page": "thp"}, pick="best",
                 scale=1e-6, unit="M params/s", digits=0)))

Compute = Literal["auto", "gpu", "cpu"]
#: A model config by name (training.configs.MODELS).
ModelName = Annotated[str, Allowed("one of " + ", ".join(MODELS), lambda v: v in MODELS)]


@dataclass(kw_only=True)
class Spec(BaseSpec):
    mode: Literal["train", "optimizer", "find_max"] = "train"
    tiers: tuple[str, ...] = ("ddr", "cxl", "nvme")      # optimizer mode: the state's tiers
    # train and find_max
    config: tuple[ModelName, ...] | None = None   # train: ("tiny",); find_max: every config
    engine: tuple[Literal["offload", "none", "fsdp2_cpu_offload"], ...] = ENGINES
    compute: tuple[Compute, ...] = ("auto",)  # auto: the GPU, and the CPU where there is none
    steps: Count | None = None                  # train: 20 steady steps; find_max: 2; optimizer: repetitions
    warmup_steps: Count0 | None = None           # train: 3; find_max: 1
    batch: Count | None = None
    seq: Count | None = None
    impl: str = "fused"                       # the offload engine's CPU AdamW
    optimizer_on: tuple[str, ...] = ("ddr", "cxl", "nvme", "hbm")
    params_on: tuple[str, ...] = ("optimizer",)
    grads_on: tuple[str, ...] = ("local",)
    activations_on: tuple[str, ...] = ("device",)
    activation_checkpointing: tuple[bool, ...] = (False,)
    # the offload engine's delayed parameter update (train mode; the other engines run
    # without): each offload placement once per value
    dpu: tuple[bool, ...] = (False,)
    dpu_warmup_steps: Count0 | None = None    # ordinary steps first; default warmup_steps - 1
    # optimizer mode
    n_params: Size = 16 << 20
    nvme_params: Size = 4 << 20
    impls: tuple[str, ...] = ("fused", "foreach", "forloop", "native", "deepspeed")
    threads: tuple[Threads | Literal["all"], ...] = ("all",)   # all: every CPU of the initiator
    page: tuple[Literal["4k", "thp"], ...] = ("4k",)          # optimizer mode: the state's pages (not NVMe's)


# ---- planning ---------------------------------------------------------------------

def plan(spec: Spec, env: Env) -> list[Planned]:
    mode = spec.mode
    if mode == "optimizer":
        return _plan_optimizer(spec, env)
    if mode == "find_max":
        return _plan_train(spec, env, find_max=True)
    return _plan_train(spec, env)


def _gpu_initiator(env: Env) -> Initiator | None:
    return next((i for i in env.initiators.values() if i.kind == "gpu"), None)


def _cpu_initiator_for(tier: Tier | None, env: Env) -> Initiator | None:
    """The CPUs local to a host tier, or those nearest to it, or node 0's."""
    cpus = [i for i in env.initiators.values() if i.kind == "cpu"]
    if not cpus:
        return None
    if tier is not None and tier.node is not None:
        local = [i for i in cpus if i.node == tier.node]
        if local:
            return local[0]
        node = env.machine.nodes.get(tier.node)
        if node is not None:
            return min(cpus, key=lambda i: node.distances.get(i.node, 1 << 30))
    return cpus[0]


def _select(selector: str, env: Env) -> list[Tier] | str:
    """Tiers a selector names: a kind (ddr, cxl, nvme, hbm) or a tier name; or why none."""
    if selector in env.tiers:
        return [env.tiers[selector]]
    found = sorted((t for t in env.tiers.values() if t.kind == selector), key=lambda t: t.name)
    if found:
        return found
    return {
        "hbm": NO_GPU,
        "cxl": "no CXL tier on this machine (declare one: cxl=node:N)",
        "nvme": "no NVMe tier declared (declare one: nvme=/path/to/scratch)",
        "ddr": "no DDR tier on this machine",
    }.get(selector, f"no tier {selector!r} on this machine")


def _ddr_of(initiator: Initiator | None, env: Env) -> Tier | None:
    """The DDR tier local to an initiator (a GPU's NUMA node), else the first DDR tier."""
    ddr = sorted((t for t in env.tiers.values() if t.kind == "ddr"), key=lambda t: t.name)
    node = initiator.node if initiator is not None else None
    return next((t for t in ddr if t.node == node), ddr[0] if ddr else None)


def _plan_train(spec: Spec, env: Env, find_max: bool = False) -> list[Planned]:
    """train: one case per config × placement. find_max: one case per placement that
    tries the configs smallest first (2 steps each) and reports the largest that fits."""
    from cxlbench.training.configs import MODELS, model_config, train_config

    gpu = _gpu_initiator(env)
    compute = list(spec.compute)
    devices = ["gpu"] + (["cpu"] if gpu is None else []) if compute == ["auto"] else compute
    steps, warmup = _or(spec.steps, 20), _or(spec.warmup_steps, 3)
    configs = list(spec.config or ("tiny",))
    if find_max:
        configs = sorted(spec.config or MODELS, key=lambda c: model_config(c).num_params())
        steps, warmup = _or(spec.steps, 2), _or(spec.warmup_steps, 1)
    planned: list[Planned] = []
    for point in sweep(device=devices, config=[",".join(configs)] if find_max else configs,
                       ac=spec.activation_checkpointing, act=spec.activations_on, engine=spec.engine,
                       threads=spec.threads, dpu=[False] if find_max else spec.dpu):
        config, device = point["config"], point["device"]
        if point["dpu"] and point["engine"] != "offload":
            continue                          # the delayed update is the offload engine's
        base = train_config(config.split(",")[0], batch=spec.batch, seq_len=spec.seq)
        common = {"mode": "find_max" if find_max else "train", "config": config,
                  "engine": point["engine"], "activation_checkpointing": bool(point["ac"]),
                  "batch": spec.batch if find_max else base.batch,
                  "seq": spec.seq if find_max else base.seq_len,
                  "impl": spec.impl, "compute": device}
        if point["threads"] != "all":         # default: every CPU of the initiator
            common["threads"] = point["threads"]
        if point["dpu"]:                      # absent when off: the ordinary cases keep their ids
            common["dpu"] = True
            common["dpu_warmup_steps"] = _or(spec.dpu_warmup_steps, max(0, warmup - 1))
        for case, skip in _placements(spec, env, device, gpu, point["engine"], point["act"],
                                      common, steps, warmup):
            if point["dpu"] and not skip and common["dpu_warmup_steps"] >= warmup:
                skip = (f"dpu: dpu_warmup_steps ({common['dpu_warmup_steps']}) must be below warmup_steps "
                        f"({warmup}), or the first delayed step, with no update beside it, is timed")
            if find_max:                      # time for the configs it will try
                estimate = 1.0
                for c in configs:
                    if _fits(case, env, model_config(c)) or _too_slow(case, c, spec.case_timeout_s):
                        break
                    estimate += _estimate(case, model_config(c), c)
            else:
                skip = skip or _fits(case, env, model_config(config))
                estimate = _estimate(case, model_config(config))
            planned.append(Planned(case, skip, estimate))
    return planned


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def _placements(spec: Spec, env, device, gpu, engine, act, common, steps, warmup):
    """(case, skip reason) for each placement an engine takes on a device."""
    no_gpu = NO_GPU if device == "gpu" and gpu is None else None
    gpu_name = gpu.name if gpu else "gpu:0"
    act_tier = act if act == "device" else _select(act, env)
    act_skip = act_tier if isinstance(act_tier, str) and act != "device" else None
    act_name = act if act == "device" else (act_tier[0].name if not act_skip else act)

    if engine == "none":
        if device == "gpu":
            hbm = [t for t in env.tiers.values() if t.kind == "hbm"]
            target = hbm[0].name if hbm else "hbm0"
            yield (_case(gpu_name, target, "hbm", {**common, "params_on": target, "grads_on": target,
                                                   "activations_on": act_name}, steps, warmup),
                   no_gpu or act_skip)
        else:
            ddr = _ddr_of(_cpu_initiator_for(None, env), env)
            ini = _cpu_initiator_for(ddr, env)
            target = ddr.name if ddr else "ddr0"
            yield (_case(ini.name if ini else "cpu:node0", target, "ddr",
                         {**common, "params_on": target, "grads_on": target, "activations_on": act_name},
                         steps, warmup), act_skip)
        return
    if engine == "fsdp2_cpu_offload":
        if device != "gpu":
            return                              # FSDP2's CPU offload is a GPU's; no CPU analogue
        ddr = _ddr_of(gpu, env)
        target = ddr.name if ddr else "ddr0"
        yield (_case(gpu_name, target, "ddr", {**common, "params_on": target, "grads_on": target,
                                               "activations_on": "device"}, steps, warmup),
               no_gpu or (None if act == "device" else "FSDP2 reference keeps activations on the device"))
        return
    # the offload engine: one case per optimizer tier × params_on × grads_on
    for selector in spec.optimizer_on:
        if selector == "hbm" or (selector in env.tiers and env.tiers[selector].kind == "hbm"):
            continue                            # optimizer on the device is engine "none"
        tiers = _select(selector, env)
        if isinstance(tiers, str):
            ini = gpu_name if device == "gpu" else "cpu:node0"
            yield (_case(ini, selector, selector, {**common, "params_on": selector, "grads_on": "local",
                                                   "activations_on": act_name}, steps, warmup),
                   no_gpu or tiers)
            continue
        for tier in tiers:
            cpu_ini = _cpu_initiator_for(tier if tier.kind != "nvme" else None, env)
            initiator = gpu if device == "gpu" else cpu_ini
            local = _ddr_of(initiator, env)
            ini_name = initiator.name if initiator else (gpu_name if device == "gpu" else "cpu:node0")
            for params_sel in spec.params_on:
                params_on, why = _resolve(params_sel, tier, local, env)
                for grads_sel in spec.grads_on:
                    grads_on, why_g = _resolve(grads_sel, tier, local, env, host_only=True)
                    skip = no_gpu or act_skip or why or why_g
                    if not skip and env.tiers.get(params_on, tier).kind == "nvme" and tier.kind != "nvme":
                        skip = "params on NVMe need the optimizer state on NVMe too"
                    yield (_case(ini_name, tier.name, tier.kind,
                                 {**common, "params_on": params_on, "grads_on": grads_on,
                                  "activations_on": act_name}, steps, warmup), skip)


def _resolve(selector: str, opt_tier: Tier, local: Tier | None, env: Env,
             host_only: bool = False) -> tuple[str, str | None]:
    """A params_on / grads_on selector as a tier name: 'optimizer' (the optimizer's
    tier; for grads, or when that is NVMe and host memory is required, the local DDR),
    'local' (the initiator's DDR), or a tier kind or name."""
    if selector == "optimizer":
        if opt_tier.kind == "nvme" and host_only:
            selector = "local"
        else:
            return opt_tier.name, None
    if selector == "local":
        return (local.name, None) if local else ("local", "no DDR tier for the host buffers")
    tiers = _select(selector, env)
    if isinstance(tiers, str):
        return selector, tiers
    tier = tiers[0]
    if host_only and not tier.is_host_memory:
        return tier.name, f"gradients are stepped on the host: grads_on must be DDR or CXL, not {tier.name}"
    if tier.kind == "hbm":
        return tier.name, "master params on HBM is the no-offload engine"
    return tier.name, None


def _case(initiator: str, target: str, kind: str, params: dict, steps: int, warmup: int) -> Case:
    return Case(NAME, initiator, target, kind, params, repetitions=steps, warmup=warmup)


def _shape(case: Case, config: str) -> tuple[int, int]:
    from cxlbench.training.configs import train_config
    base = train_config(config, batch=case.params.get("batch"), seq_len=case.params.get("seq"))
    return base.batch, base.seq_len


def _host_needs(case: Case, cfg) -> dict[str, int]:
    """Bytes each named tier must hold for a train case (an estimate). The grads' tier
    also holds what is not placed: the fp32 model while it is built (twice, briefly)
    and, on a CPU run, the compute copy."""
    n = cfg.num_params()
    p = case.params
    batch, seq = _shape(case, cfg.name)
    gpu = p["compute"] == "gpu"
    grad_bytes = 2 if gpu else 4
    needs: dict[str, int] = {}

    def add(tier: str, b: int) -> None:
        needs[tier] = needs.get(tier, 0) + b

    if p["engine"] == "offload":
        # the delayed update doubles the gradient buffer and, on a CPU, the compute copy
        copies = 2 if p.get("dpu") else 1
        add(p["params_on"], 4 * n + (2 * n if gpu else 0))
        add(case.target, 8 * n)
        add(p["grads_on"], copies * grad_bytes * n + 8 * n + (0 if gpu else copies * 4 * n))
    elif p["engine"] == "fsdp2_cpu_offload":
        add(case.target, 16 * n)
    else:
        add(case.target, 16 * n)
    if p["activations_on"] != "device":
        per_layer = batch * seq * cfg.dim * (2 if p["activation_checkpointing"] else ACTIVATION_BYTES)
        add(p["activations_on"], per_layer * cfg.n_layers)
    return needs


def _fits(case: Case, env: Env, cfg, fresh: bool = False) -> str | None:
    """Why a case's state would not fit its tiers (80% of their free memory), or None.
    fresh: read the nodes' free memory now rather than the planning snapshot."""
    needs = _host_needs(case, cfg)
    host = sum(need for name, need in needs.items() if name in env.tiers and env.tiers[name].kind != "nvme")
    short = limit_short(env, host)        # a pod's, a job's limit: all the tiers' state is this process's
    if short:
        return short
    for name, need in needs.items():
        tier = env.tiers.get(name)
        if tier is None:
            continue
        if tier.kind == "nvme":
            free = shutil.disk_usage(tier.path).free if tier.path and os.path.isdir(tier.path) else tier.free_bytes
        else:
            node = env.machine.nodes.get(tier.node) if tier.node is not None else None
            free = node.mem_free_bytes if node is not None else tier.free_bytes
            if fresh and tier.node is not None:
                free = _node_free_now(tier.node) or free
        if free and need > 0.8 * free:
            return f"needs ~{need / 2**30:.1f} GiB on {name}, which has {free / 2**30:.1f} GiB free"
    return _fits_device(case, env, cfg)


def _fits_device(case: Case, env: Env, cfg) -> str | None:
    """The offload engine keeps the bf16 params and grads on the GPU (4 bytes per
    parameter; 6 with the delayed update's second compute copy): why they would not fit
    its memory (80% of it free), or None. find_max stops here before building a model
    no GPU holds (70b: ~263 GiB)."""
    p = case.params
    if p["compute"] != "gpu" or p["engine"] != "offload":
        return None
    gpu = env.initiators.get(case.initiator)
    hbm = next((t for t in env.tiers.values() if t.kind == "hbm"
                and (gpu is None or gpu.gpu is None or t.gpu == gpu.gpu)), None)
    need = (6 if p.get("dpu") else 4) * cfg.num_params()
    if hbm is None or not hbm.free_bytes or need <= 0.8 * hbm.free_bytes:
        return None
    return (f"needs ~{need / 2**30:.1f} GiB on {hbm.name} (bf16 params and grads), which has "
            f"{hbm.free_bytes / 2**30:.1f} GiB free")


def _node_free_now(node: int) -> int | None:
    try:
        with open(f"/sys/devices/system/node/node{node}/meminfo") as f:
            for line in f:
                if "MemFree:" in line:
                    return int(line.split()[-2]) * 1024
    except OSError:
        return None
    return None


def _too_slow(case: Case, config: str, limit: float) -> str | None:
    """Why find_max does not try a config: its steps would run past the case's time
    limit on this compute (8b on a 2-core CPU: hours), or None."""
    from cxlbench.training.configs import model_config
    need = _estimate(case, model_config(config), config)
    if need <= limit:
        return None
    return (f"not tried: ~{need:.0f} s for {case.warmup + case.repetitions} steps on the "
            f"{case.params['compute'].upper()}, past the case's limit of {limit:g} s (case_timeout_s)")


def _estimate(case: Case, cfg, config: str | None = None) -> float:
    p = case.params
    batch, seq = _shape(case, config or cfg.name)
    flops = cfg.flops_per_token(seq) * batch * seq
    rate = 3e14 if p["compute"] == "gpu" else 2e10
    compute = flops / rate
    per_step = compute + cfg.num_params() / (1e9 if p["compute"] == "gpu" else 2e8)
    # + the compute probe's two replay passes after each steady step (training/replay.py)
    probe = 2 * case.repetitions * compute
    return 8.0 + (case.repetitions + case.warmup) * per_step * (2 if p["engine"] != "none" else 1) + probe


def _plan_optimizer(spec: Spec, env: Env) -> list[Planned]:
    n, n_nvme = spec.n_params, spec.nvme_params
    impls = ",".join(spec.impls)
    reps = _or(spec.steps, spec.repetitions)
    planned = []
    for selector in spec.tiers:
        tiers = _select(selector, env)
        if isinstance(tiers, str):
            case = Case(NAME, "cpu:node0", selector, selector,
                        {"mode": "optimizer", "n_params": n, "impls": impls}, reps, 1)
            planned.append(Planned(case, tiers, 0.1))
            continue
        for tier in tiers:
            if tier.kind == "hbm":
                continue
            ini = _cpu_initiator_for(tier if tier.kind != "nvme" else None, env)
            count = n_nvme if tier.kind == "nvme" else n
            pages = ("4k",) if tier.kind == "nvme" else spec.page     # NVMe's state is in a file
            for point in sweep(page=pages, threads=spec.threads):     # threads all: the initiator's CPUs
                params = {"mode": "optimizer", "n_params": count, "impls": impls}
                if point["threads"] != "all":
                    params["threads"] = point["threads"]
                if point["page"] != "4k":
                    params["page"] = point["page"]
                case = Case(NAME, ini.name if ini else "cpu:node0", tier.name, tier.kind, params, reps, 1)
                planned.append(Planned(case, None, _optimizer_estimate(count, spec.impls, reps, tier.kind)))
    return planned


#: params/s to budget an optimizer-mode step at, by implementation (the slow end
#: of what the VM measured: forloop ~50 M, foreach ~250 M, the others 1-2 G)
_BUDGET_RATES = {"forloop": 4e7, "foreach": 2e8}


def _optimizer_estimate(count: int, impls: tuple[str, ...], reps: int, kind: str) -> float:
    """Seconds: each implementation's steps, and its state placed and touched first
    (16 bytes a parameter at ~2 GB/s); the NVMe path's file I/O instead."""
    if kind == "nvme":
        return 3.0 + (reps + 1) * count * (12 * 2 / 2e8) * 3
    per_impl = [count * 8e-9 + (reps + 1) * count / _BUDGET_RATES.get(i, 5e8) for i in impls]
    return 3.0 + sum(per_impl)


# ---- measuring --------------------------------------------------------------------

def measure(case: Case, env: Env, info: dict) -> list[Sample]:
    mode = case.params.get("mode")
    if mode == "optimizer":
        return _measure_optimizer(case, env, info)
    if mode == "find_max":
        return _measure_find_max(case, env, info)
    return _measure_train(case, env, info)


def _pin_to(initiator: Initiator | None, env: Env, info: dict, threads: int | None = None) -> None:
    """Run on the initiator's CPUs (a GPU's: its NUMA node's), with as many torch threads,
    or on its first `threads` CPUs."""
    import torch
    cpus = list(initiator.cpus) if initiator and initiator.cpus else []
    if not cpus and initiator is not None and initiator.node is not None:
        cpus = node_cpus(env, initiator.node)          # the ones this process may run on
    if threads:
        if cpus and threads > len(cpus):
            raise Skip(f"{threads} threads asked, the initiator has {len(cpus)} CPUs")
        cpus = cpus[:threads] if cpus else []
        torch.set_num_threads(threads)
    if cpus:
        try:
            os.sched_setaffinity(0, cpus)
        except OSError:
            cpus = sorted(os.sched_getaffinity(0))
        torch.set_num_threads(len(cpus))
    info["threads"] = torch.get_num_threads()
    try:
        load = info["load_average"] = os.getloadavg()[0]
    except OSError:
        return
    if load > 1.5 * os.cpu_count():
        info.setdefault("warnings", []).append(
            f"the machine was busy (load average {load:.1f} on {os.cpu_count()} CPUs): other "
            f"processes share the cores, so steps are slow and noisy (OpenMP threads wait on each other)")


def _placement_of(case: Case, env: Env):
    """Placement (nodes / 'nvme' / 'device') and the NVMe directory, from tier names."""
    from cxlbench.training.placement import Placement
    nvme_dir = None

    def where(name: str):
        nonlocal nvme_dir
        if name == "device" or name not in env.tiers:
            return "device"
        tier = env.tiers[name]
        if tier.kind == "nvme":
            nvme_dir = tier.path
            return "nvme"
        if tier.kind == "hbm":
            return "device"
        return tier.node

    p = case.params
    placement = Placement(params=where(p["params_on"]), optimizer=where(case.target),
                          grads=where(p["grads_on"]), activations=where(p["activations_on"]))
    return placement, nvme_dir


def _measure_train(case: Case, env: Env, info: dict) -> list[Sample]:
    import torch

    from cxlbench.training.placement import PlacementError

    try:
        result = _run(case, env, info, case.params["config"])
    except torch.OutOfMemoryError as e:
        raise Skip(f"does not fit: GPU out of memory ({str(e).splitlines()[0]})") from None
    except MemoryError as e:
        raise Skip(f"does not fit: host out of memory ({e})") from None
    except PlacementError as e:      # not placeable, or found elsewhere: never measured there
        raise Skip(str(e)) from None
    return _train_samples(result, info)


def _run(case: Case, env: Env, info: dict, config: str):
    import torch

    from cxlbench.training.configs import train_config
    from cxlbench.training.session import RunSpec, run

    p = case.params
    device = "cpu"
    initiator = env.initiators.get(case.initiator)
    if p["compute"] == "gpu":
        if not torch.cuda.is_available():
            raise Skip(NO_GPU)
        device = f"cuda:{initiator.gpu if initiator and initiator.gpu is not None else 0}"
    _pin_to(initiator, env, info, p.get("threads"))
    placement, nvme_dir = _placement_of(case, env)
    local = initiator.node if initiator is not None else None
    buffer_node = placement.grads if isinstance(placement.grads, int) else local
    train = train_config(config, batch=p["batch"], seq_len=p["seq"], steps=case.repetitions,
                         warmup_steps=case.warmup, activation_checkpointing=p["activation_checkpointing"],
                         dpu=bool(p.get("dpu")), dpu_warmup_steps=p.get("dpu_warmup_steps"))
    spec = RunSpec(config, p["engine"], train, placement, device, nvme_dir, p.get("impl", "fused"),
                   buffer_node, local if device == "cpu" else None,
                   evict_bytes=2 * env.machine.llc_bytes())
    return run(spec)


def _measure_find_max(case: Case, env: Env, info: dict) -> list[Sample]:
    """Configs smallest first, a few steps each; the first that does not fit ends the
    search. Not fitting (host or pinned memory refused, GPU OOM, or an estimate past
    the free memory) is a finding, recorded with its reason, not a failure."""
    import gc

    import torch

    from cxlbench.training.configs import model_config
    from cxlbench.training.placement import PlacementError

    findings: dict[str, str] = {}
    largest, samples = None, []
    for config in case.params["config"].split(","):
        cfg = model_config(config)
        too_big = _fits(case, env, cfg, fresh=True)
        if too_big:
            findings[config] = f"does not fit (estimated): {too_big}"
            break
        too_slow = _too_slow(case, config, env.spec.case_timeout_s)
        if too_slow:
            findings[config] = too_slow
            break
        try:
            r = _run(case, env, {}, config)
        except torch.OutOfMemoryError as e:
            findings[config] = f"GPU out of memory: {str(e).splitlines()[0]}"
            break
        except (PlacementError, MemoryError) as e:
            findings[config] = f"host memory refused: {e}"
            break
        finally:
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        findings[config] = f"fits: {r.tokens_per_step / r.median('step_s'):.4g} tokens/s"
        largest = (config, r.n_params)
    info["find_max"] = findings
    if largest is None:
        raise Skip(f"not even {case.params['config'].split(',')[0]} fits: "
                   f"{next(iter(findings.values()), '')}")
    samples.append(Sample("max_params", largest[1], 0, {"max_config": largest[0]}))
    return samples


def _train_samples(r, info: dict) -> list[Sample]:
    gpu = r.spec.device.startswith("cuda")
    samples: list[Sample] = []
    for i, s in enumerate(r.steps):
        tps = r.tokens_per_step / s.step_s
        values = {"tokens_per_s": tps, "step_time_s": s.step_s, "forward_s": s.forward_s,
                  "backward_s": s.backward_s, "transfer_s": s.transfer_s,
                  "optimizer_s": s.optimizer_s, "idle_s": s.idle_s, "loss": s.loss}
        if r.spec.placement.optimizer == "nvme":
            values["nvme_read_s"], values["nvme_write_s"] = s.nvme_read_s, s.nvme_write_s
        if r.dpu:
            values["update_wait_s"] = s.update_wait_s
        achieved = tps * r.flops_per_token
        values["tflops"] = achieved / 1e12
        values["mfu"] = achieved / r.peak_flops
        # Steps of one process are not independent trials: the step index is an
        # inner iteration, so comparisons summarise per process, not per step.
        samples += [Sample(k, v, 0, {"iteration": i}) for k, v in values.items()]

    v = r.verdict
    pred = {f"model_{k}": val for k, val in r.prediction.as_dict().items() if k != "step_s"}
    samples.append(Sample("predicted_step_s", r.prediction.step_s, 0,
                          {"model_flag": v.summary, **pred}))
    rates = r.rates
    samples.append(Sample("tflops", rates.flops_per_s / 1e12, 0, {"probe": "matmul_model_shape"}))
    samples.append(Sample("tflops", r.peak_flops / 1e12, 0, {"probe": "matmul_peak"}))
    for name, value in (("d2h", rates.d2h_Bps), ("h2d", rates.h2d_Bps),
                        ("nvme_read", rates.nvme_read_Bps), ("nvme_write", rates.nvme_write_Bps)):
        if value:
            samples.append(Sample("bandwidth_GBps", value / 1e9, 0, {"probe": name}))
    if r.compute_probe is not None:     # the compute term's own probes (training/replay.py), every timing
        c = r.compute_probe
        for probe, values in (("compute_kernels", c.passes), ("compute_kernels_settling", c.settling),
                              ("framework_twin_step", c.framework_steps),
                              ("framework_twin_replay", c.framework_replays)):
            samples += [Sample("seconds", v, 0, {"probe": probe, "operators": c.operators, "iteration": i})
                        for i, v in enumerate(values)]
        samples.append(Sample("seconds", c.framework_s, 0, {"probe": "compute_framework"}))
    if rates.opt_params_per_s:
        samples.append(Sample("params_per_s", rates.opt_params_per_s, 0,
                              {"probe": "adamw", "impl": r.impl}))
    for key, value in r.memory.items():
        samples.append(Sample("memory_bytes", value, 0, {"memory": key}))

    info.update({
        "what_was_measured": ("GPU offload: bf16 compute on the GPU, fp32 state on the host tiers"
                              if gpu else
                              "CPU run: compute on the CPU; optimizer step on the tier, NVMe I/O, "
                              "memcpy into/out of placed buffers; not a GPU's offload"),
        "placement_before": r.placement_before, "placement_after": r.placement_after,
        "n_params": r.n_params, "tokens_per_step": r.tokens_per_step,
        "flops_per_token": r.flops_per_token, "impl": r.impl,
        "loss_curve": [round(x, 5) for x in r.losses], "loss_fell": r.loss_fell,
        "step_model": {"prediction": r.prediction.as_dict(), "flagged": v.flagged,
                       "disagreements": [str(d) for d in v.disagreements]},
        "notes": r.notes,
    })
    if r.o_direct is not None:
        info["o_direct"] = r.o_direct
    if r.dpu:
        info["dpu"] = {**r.dpu, "what": (
            "delayed parameter update: step i's host update ran beside step i+1's forward and "
            "backward, on parameters one update stale" + ("" if gpu else
            "; on a CPU run both sides share the cores, so only NVMe I/O can hide"))}
    from cxlbench.training.session import loss_warning
    if (said := loss_warning(r.losses)) is not None:
        info.setdefault("warnings", []).append(said)
    if v.flagged:
        info.setdefault("warnings", []).append(f"step-time model disagrees by > 20%: {v.summary}")
    return samples


def _measure_optimizer(case: Case, env: Env, info: dict) -> list[Sample]:
    from cxlbench.training import optimizer as adam
    from cxlbench.training.placement import PlacementError

    tier = env.tier(case.target)
    initiator = env.initiators.get(case.initiator)
    _pin_to(initiator, env, info, case.params.get("threads"))
    n = int(case.params["n_params"])
    impls = case.params["impls"].split(",")
    samples: list[Sample] = []
    skipped = {}
    if tier.kind == "nvme":                   # each sample says the threads it ran on
        return [Sample(x.metric, x.value, x.repetition, {**x.params, "threads": info["threads"]})
                for x in _measure_nvme_optimizer(case, tier, initiator, n, info)]
    nodes = {"params": tier.node, "optimizer": tier.node, "grads": tier.node}
    page = case.params.get("page", "4k")
    medians = {}
    for impl in impls:
        why = adam.unavailable(impl)
        if why:
            skipped[impl] = why
            continue
        found: list[dict] = []
        try:
            rates = adam.probe(n, impl, steps=case.repetitions, warmup=case.warmup, nodes=nodes,
                               page=page, found=found)
        except adam.NoWorkDone as e:              # refused; the others go on
            skipped[impl] = str(e)
            info.setdefault("warnings", []).append(str(e))
            continue
        except PlacementError as e:               # no such pages, or room, here: never measured on others
            if not medians:
                raise Skip(str(e)) from None
            skipped[impl] = str(e)                # what the others measured is kept
            continue
        medians[impl] = statistics.median(rates)
        # the threads it ran on, also where the case asked for "all": a table row must
        # say 2, not leave a blank beside the 1-thread row
        # the page in every sample (4 KiB's case leaves it out of its params, keeping its id),
        # so that a chart tells the two apart; for huge pages, what the kernel gave
        extra = {"impl": impl, "threads": info["threads"], "page": page}
        if page != "4k":
            extra["huge_coverage"] = round(min(f["huge_coverage"] for f in found), 4)
        for i, rate in enumerate(rates):
            samples.append(Sample("params_per_s", rate, i, extra))
            samples.append(Sample("bandwidth_GBps", rate * ADAMW_BYTES / 1e9, i,
                                  {**extra, "bytes_per_param": ADAMW_BYTES}))
    info["skipped_impls"] = skipped
    info["median_params_per_s"] = medians
    if medians:
        best = max(medians, key=medians.get)
        info["best_impl"] = best
        info["per_thread_params_per_s"] = {k: v / max(1, info.get("threads", 1)) for k, v in medians.items()}
    return samples


def _measure_nvme_optimizer(case: Case, tier: Tier, initiator, n: int, info: dict) -> list[Sample]:
    import time

    import torch

    from cxlbench.training.nvme_optimizer import ALIGN_ELEMS, NvmeAdamW, file_bandwidth
    from cxlbench.training.optimizer import AdamWHyper, HostAdamW, unavailable

    impl = "fused" if unavailable("fused") is None else "foreach"
    node = initiator.node if initiator is not None else None
    chunk = min(1 << 20, -(-n // ALIGN_ELEMS) * ALIGN_ELEMS)
    g = torch.randn(n) * 1e-3
    p0 = torch.randn(n) * 0.02
    samples: list[Sample] = []
    with NvmeAdamW(tier.path, n, AdamWHyper(), impl, chunk, node) as opt:
        opt.initialize(p0)
        for i in range(case.warmup + case.repetitions):
            t0 = time.perf_counter()
            io = opt.step(g)
            dt = time.perf_counter() - t0
            if i < case.warmup:
                continue
            r = i - case.warmup
            samples += [Sample("params_per_s", n / dt, r, {"impl": impl, "io": "nvme"}),
                        Sample("step_time_s", dt, r, {"io": "nvme"}),
                        Sample("nvme_read_s", io.read_wait_s, r, {"io": "nvme"}),
                        Sample("nvme_write_s", io.write_wait_s, r, {"io": "nvme"}),
                        Sample("optimizer_s", io.compute_s, r, {"io": "nvme"})]
        bw = file_bandwidth(opt)
        samples += [Sample("bandwidth_GBps", bw["read_GBps"], 0, {"probe": "nvme_read"}),
                    Sample("bandwidth_GBps", bw["write_GBps"], 0, {"probe": "nvme_write"})]
        info.update({"o_direct": opt.o_direct, "file_bytes": opt.file_bytes,
                     "buffers": opt.arena.verify(), "chunk_params": chunk})
    # the same step in memory, on the buffers' node, for comparison
    from cxlbench.training.placement import HostArena
    with HostArena(HostArena.bytes_for(n, torch.float32, 3), node, "in-memory") as arena:
        p, m, v = (arena.take(n, torch.float32) for _ in range(3))
        p.copy_(p0)
        mem = HostAdamW(p, m, v, n, AdamWHyper(), impl, chunk)
        for i in range(case.warmup + case.repetitions):
            t0 = time.perf_counter()
            mem.step(g)
            dt = time.perf_counter() - t0
            if i >= case.warmup:
                r = i - case.warmup
                samples += [Sample("params_per_s", n / dt, r, {"impl": impl, "io": "memory"}),
                            Sample("step_time_s", dt, r, {"io": "memory"})]
    if not info["o_direct"]:
        info.setdefault("warnings", []).append("O_DIRECT refused: NVMe reads may come from the page cache")
    return samples
