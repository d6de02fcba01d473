"""AdamW on flat host buffers, in chunks, with a choice of implementation.

The offload engine keeps fp32 master parameters, Adam moments and gradients as
flat tensors on host tiers; `HostAdamW` steps them one chunk at a time so that
each updated chunk can be sent back to the GPU (or written to NVMe) while the
next one is computed. Every implementation is torch's own functional AdamW
(`torch.optim.adamw.adamw`) — the same arithmetic as torch.optim.AdamW:

  fused     one ATen kernel per chunk (torch's fused CPU AdamW, vectorised, OpenMP)
  foreach   torch's multi-tensor path (a few whole-chunk elementwise ops)
  forloop   torch's single-tensor path (the unfused reference)
  native    the C core's AdamW, when cxlbench._native provides one
  deepspeed DeepSpeedCPUAdam, when deepspeed is installed

`probe` measures parameters per second of one implementation on buffers
placed on given nodes — the figure the step-time model calls R_opt.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch.optim.adamw import adamw as _torch_adamw

IMPLS = ("fused", "foreach", "forloop", "native", "deepspeed")
# AdamW moves ~28 bytes per parameter per step (REFERENCES): fp32 p, m, v read and
# written (24) + a bf16 gradient read (2) + a bf16 parameter copy written (2).
BYTES_PER_PARAM = 28


@dataclass(frozen=True)
class AdamWHyper:
    lr: float = 3e-3
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1


def unavailable(impl: str) -> str | None:
    """Why an implementation cannot run here, or None."""
    if impl not in IMPLS:
        return f"unknown AdamW implementation {impl!r} (known: {', '.join(IMPLS)})"
    if impl == "fused":
        try:
            p = torch.zeros(4)
            adamw_update([p], [torch.ones(4)], [torch.zeros(4)], [torch.zeros(4)],
                         [torch.zeros((), dtype=torch.float32)], AdamWHyper(), "fused")
        except (RuntimeError, NotImplementedError) as e:
            return f"torch {torch.__version__} has no fused CPU AdamW ({e})"
    if impl == "native":
        if _native_adamw() is None:
            return "the C core (cxlbench._native) has no AdamW kernel"
        return _disagrees(impl)
    if impl == "deepspeed":
        try:
            _deepspeed_optimizer(AdamWHyper())
        except ImportError as e:
            return f"deepspeed is not installed ({e})"
        except Exception as e:                        # its C++ op is built on first use
            return f"deepspeed's CPU Adam op did not load: {e}"
        return _disagrees(impl)
    return None


def _native_adamw(name: str = "adamw_step"):
    try:
        from cxlbench import _native
    except ImportError:
        return None
    return getattr(_native, name, None)


_THREADED = 1 << 16                  # adamw.c's MIN_SLICE: slices per thread at least this


def _disagrees(impl: str) -> str | None:
    """An outside kernel is used only if it computes what torch's AdamW computes,
    called as the engine calls it: in chunks, each a fresh view, over several steps
    (a kernel that keeps state per tensor object would skip work from step two)."""
    n = 3 * _THREADED + 13                  # a first chunk the C kernel splits over threads
    g = torch.Generator().manual_seed(0)
    p0, grad = torch.randn(n, generator=g), torch.randn(n, generator=g)
    # as a CPU run calls it (fp32 gradients), and as a GPU's offload step does (bf16
    # gradients in, a bf16 copy of the parameters out)
    for dtype in (torch.float32, torch.bfloat16):
        results = []
        for name in ("forloop", impl):
            p, m, v = p0.clone(), torch.zeros(n), torch.zeros(n)
            copy = torch.empty(n, dtype=torch.bfloat16) if dtype == torch.bfloat16 else None
            opt = HostAdamW(p, m, v, n, AdamWHyper(), name, chunk=2 * _THREADED, narrow_into=copy)
            try:
                for _ in range(3):
                    opt.step(grad.to(dtype))
            except Exception as e:                        # a kernel with another signature
                return f"{impl} AdamW did not run: {e}"
            if copy is not None and not torch.equal(copy, p.to(torch.bfloat16)):
                return f"{name} AdamW's bf16 copy is not torch's narrowing of its parameters"
            results.append((p, m, v))
        if not all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(*results)):
            return f"{impl} AdamW disagrees with torch's AdamW after 3 chunked steps ({dtype} gradients)"
    return None


def adamw_update(params: list[torch.Tensor], grads: list[torch.Tensor],
                 exp_avgs: list[torch.Tensor], exp_avg_sqs: list[torch.Tensor],
                 steps: list[torch.Tensor], hyper: AdamWHyper, impl: str) -> None:
    """One AdamW step over matching lists of tensors, in place. Each `steps` entry is
    a 0-d fp32 tensor that the update increments (torch's convention)."""
    if impl in ("fused", "foreach", "forloop"):
        _torch_adamw(
            params, grads, exp_avgs, exp_avg_sqs, [], steps,
            foreach=impl == "foreach", fused=impl == "fused",
            amsgrad=False, beta1=hyper.betas[0], beta2=hyper.betas[1], lr=hyper.lr,
            weight_decay=hyper.weight_decay, eps=hyper.eps, maximize=False)
    elif impl == "native":
        for p, g, m, v, s in zip(params, grads, exp_avgs, exp_avg_sqs, steps):
            _native_step(_native_adamw(), p, g, m, v, s, hyper)
    elif impl == "deepspeed":
        _deepspeed_update(params, grads, exp_avgs, exp_avg_sqs, steps, hyper)
    else:
        raise ValueError(unavailable(impl))


def _native_step(kernel, p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor,
                 step: torch.Tensor, hyper: AdamWHyper, *copy: int) -> None:
    """One call of a C core AdamW kernel (adamw_step, or adamw_step_bf16 with the copy's
    address after v) on contiguous tensors; step is incremented first, torch's way."""
    step += 1
    kernel(p.data_ptr(), g.data_ptr(), m.data_ptr(), v.data_ptr(), *copy, p.numel(), int(step.item()),
           hyper.lr, hyper.betas[0], hyper.betas[1], hyper.eps, hyper.weight_decay)


_DS_OPTIMIZERS: dict[AdamWHyper, object] = {}


def _deepspeed_update(params, grads, exp_avgs, exp_avg_sqs, steps, hyper):
    """DeepSpeedCPUAdam's own kernel (ds_opt_adam.adam_update) on our tensors.

    Its step() looks tensors up in a per-Parameter state dict, and the engine hands
    it fresh chunk views each step: from step two it would find no gradient on its
    stored view and silently do nothing. So one instance per hyper-parameter set
    supplies the kernel and its opt_id (kept alive: its __del__ destroys the id),
    and the tensors go straight in."""
    opt = _deepspeed_optimizer(hyper)
    for p, g, m, v, s in zip(params, grads, exp_avgs, exp_avg_sqs, steps):
        s += 1
        opt.ds_opt_adam.adam_update(opt.opt_id, int(s.item()), hyper.lr, hyper.betas[0],
                                    hyper.betas[1], hyper.eps, hyper.weight_decay, True,
                                    p, g, m, v)


def _deepspeed_optimizer(hyper: AdamWHyper):
    opt = _DS_OPTIMIZERS.get(hyper)
    if opt is None:
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        opt = DeepSpeedCPUAdam([torch.nn.Parameter(torch.zeros(1))], lr=hyper.lr,
                               betas=hyper.betas, eps=hyper.eps,
                               weight_decay=hyper.weight_decay, adamw_mode=True)
        _DS_OPTIMIZERS[hyper] = opt
    return opt


OnChunk = Callable[[int, int, torch.Tensor], None]


class HostAdamW:
    """AdamW over flat fp32 buffers (params, exp_avg, exp_avg_sq), chunk by chunk.

    grads may be fp32 or bf16 (as they arrive from a GPU); bf16 chunks are widened
    into a small fp32 scratch buffer first. narrow_into, a bf16 buffer, also gets
    each updated chunk (the GPU's compute copy, staged). The native kernel does both
    in its own pass over memory; the others widen before and narrow after. After
    each chunk, on_chunk(start, end, updated_params) lets the caller ship it on.
    """

    def __init__(self, params: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
                 numel: int, hyper: AdamWHyper, impl: str = "fused", chunk: int = 1 << 22,
                 scratch: torch.Tensor | None = None, narrow_into: torch.Tensor | None = None):
        self.p, self.m, self.v = params, exp_avg, exp_avg_sq
        self.numel, self.hyper, self.impl, self.chunk = numel, hyper, impl, chunk
        self.bounds = [(s, min(s + chunk, numel)) for s in range(0, numel, chunk)]
        self.steps = [torch.zeros((), dtype=torch.float32) for _ in self.bounds]
        self.scratch = scratch
        self.narrow_into = narrow_into

    def step(self, grads: torch.Tensor, on_chunk: OnChunk | None = None) -> None:
        fused = _fused_kernel(self.impl, grads, self.narrow_into)
        for i, (s, e) in enumerate(self.bounds):
            copy = self.narrow_into[s:e] if self.narrow_into is not None else None
            if fused is not None:
                _native_step(fused, self.p[s:e], grads[s:e], self.m[s:e], self.v[s:e], self.steps[i],
                             self.hyper, copy.data_ptr() if copy is not None else 0)
            else:
                g = widen(grads[s:e], self.scratch)
                adamw_update([self.p[s:e]], [g], [self.m[s:e]], [self.v[s:e]], [self.steps[i]],
                             self.hyper, self.impl)
                if copy is not None:
                    copy.copy_(self.p[s:e])
            if on_chunk is not None:
                on_chunk(s, e, self.p[s:e])


def _fused_kernel(impl: str, grads: torch.Tensor, narrow_into: torch.Tensor | None):
    """The C core's one-pass kernel where it applies: native AdamW, bf16 gradients,
    and a bf16 copy (or none) to write."""
    if impl != "native" or grads.dtype != torch.bfloat16:
        return None
    if narrow_into is not None and narrow_into.dtype != torch.bfloat16:
        return None
    return _native_adamw("adamw_step_bf16")


def widen(g: torch.Tensor, scratch: torch.Tensor | None) -> torch.Tensor:
    """g as fp32: itself when it already is, else copied into scratch (or a new tensor)."""
    if g.dtype == torch.float32:
        return g
    if scratch is None or scratch.numel() < g.numel():
        return g.float()
    out = scratch[:g.numel()]
    out.copy_(g)
    return out


class NoWorkDone(RuntimeError):
    """A timed AdamW step left parameters unchanged: no rate can be recorded for it."""


_SPOT = 4099          # a prime stride: spot checks fall on every chunk and vector lane


def _check_updated(impl: str, before: torch.Tensor, after: torch.Tensor) -> None:
    """A timed step must have updated every parameter: one that did no work would
    time as a fantastic rate. Spot checks cost nothing beside the step."""
    stale = int((before == after).sum())
    if stale:
        raise NoWorkDone(f"{impl} AdamW left {stale} of {before.numel()} spot-checked "
                         f"parameters unchanged in a timed step: no rate recorded")


def probe(n_params: int, impl: str, steps: int = 5, warmup: int = 1,
          nodes: dict[str, int | None] | None = None, hyper: AdamWHyper = AdamWHyper(),
          grad_dtype: torch.dtype = torch.float32, chunk: int | None = None,
          before_each: Callable[[], object] | None = None,
          cpu: list[float] | None = None, narrow_into: torch.Tensor | None = None,
          page: str = "4k", found: list[dict] | None = None) -> list[float]:
    """Parameters per second of one AdamW step over n_params, one figure per step.
    nodes places p (params), m/v (optimizer) and g (grads) like the training run;
    chunk steps them in chunks as the engine does (default: one chunk); before_each
    runs untimed before every step (the run evicts the caches, as its forward and
    backward do: state that fits the LLC would otherwise step hot and read fast).
    narrow_into (a bf16 buffer of n_params) gets the updated parameters as a GPU
    run's update writes them to its staging: inside the timed step, as there.
    cpu, when given, gets each timed step's process CPU seconds (every thread's).
    page ("4k" or "thp") is the arenas' page size, asked of their nodes; found, when
    given, gets what the kernel gave each placed arena (page size, huge coverage)."""
    from cxlbench.training.placement import HostArena

    nodes = nodes or {}
    arenas = []

    def on(key, numel, dtype):
        arena = HostArena(HostArena.bytes_for(numel, dtype), nodes.get(key), f"probe-{key}", page)
        arenas.append(arena)
        given = arena.pages_found()
        if found is not None and given is not None:
            found.append(given)
        return arena.take(numel, dtype)

    try:
        p = on("params", n_params, torch.float32)
        m, v = on("optimizer", n_params, torch.float32), on("optimizer", n_params, torch.float32)
        g = on("grads", n_params, grad_dtype)
        p.normal_(0, 0.02)
        g.normal_(0, 1e-3)
        scratch = None if grad_dtype == torch.float32 else on("grads", chunk or n_params, torch.float32)
        opt = HostAdamW(p, m, v, n_params, hyper, impl, chunk=chunk or n_params, scratch=scratch,
                        narrow_into=narrow_into)
        rates = []
        for i in range(warmup + steps):
            before = p[::_SPOT].clone()
            if before_each is not None:
                before_each()
            c0, t0 = time.process_time(), time.perf_counter()
            opt.step(g)
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            _check_updated(impl, before, p[::_SPOT])
            if i >= warmup:
                rates.append(n_params / dt)
                if cpu is not None:
                    cpu.append(dc)
        return rates
    finally:
        for a in arenas:
            a.close()
