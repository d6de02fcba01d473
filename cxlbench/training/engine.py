"""Training engines: the offload engine, and the references users would run instead.

OffloadEngine (ZeRO-Offload's scheme, one device):
  - the device holds only a compute copy of the parameters (bf16 on a GPU), as
    views into one flat buffer so a chunk of parameters is one contiguous copy;
  - fp32 master parameters, Adam moments and the host gradient buffer live on the
    tiers the Placement names (HostArena: bound to a node, faulted in, pages
    verified), or the moments (and master) in an NVMe file (NvmeAdamW);
  - backward streams each gradient to the host buffer as soon as autograd has
    accumulated it (a post-accumulate-grad hook), on a side stream, and frees it;
  - the CPU steps AdamW chunk by chunk; each updated chunk is narrowed to bf16 in a
    pinned staging buffer (the native kernel widens the bf16 gradients and narrows
    the parameters in its own pass) and copied back on a second side stream while
    the next chunk is stepped; the next forward waits for that stream;
  - saved activations (with activation checkpointing: the block inputs only) can
    live on a host tier too, through saved_tensors_hooks (ActivationStash);
  - with train.dpu (ZeRO-Offload's delayed parameter update, Ren et al. 2021 §5.2),
    after dpu_warmup_steps ordinary steps step i's update (its NVMe I/O and the
    copies back included) runs on a host thread (DelayedUpdate) while step i+1's
    forward and backward run on parameters one update stale; step i+1 ends by
    waiting for it and making its parameters the compute copy, so step i+2 reads
    them (never two updates stale). Gradients and the compute copy are double
    buffered for it: step i+1's backward fills the other gradient buffer, and the
    update writes the compute copy the forward is not reading.

On a CPU-only machine the same engine runs with the CPU as the "device": the
compute copy is fp32 in ordinary memory and every "transfer" is a memcpy into or
out of the placed buffers. That run measures the optimizer step on the tier, the
NVMe path and the cost of the copies, not a GPU's offload; the results say so.

NoOffloadEngine is plain training with everything on the device (AdamW fused,
bf16 autocast on a GPU). Fsdp2Engine is FSDP2 `fully_shard` with CPUOffloadPolicy
at world size 1 (the same code path torchrun uses for more GPUs).

CUDA-only modules are imported inside the functions that need them.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

from cxlbench.training.configs import ModelConfig, TrainConfig
from cxlbench.training.delayed import DelayedUpdate, UpdateTimes, update_threads
from cxlbench.training.model import Transformer, loss_fn
from cxlbench.training.nvme_optimizer import ALIGN_ELEMS, IoTimes, NvmeAdamW
from cxlbench.training.optimizer import AdamWHyper, HostAdamW
from cxlbench.training.placement import HostArena, Placement, page_nodes, process_bytes_per_node


@dataclass
class StepTimes:
    """Seconds spent in one step, by phase. transfer: device<->host copies that were
    not hidden behind compute; nvme_*: time the update stood waiting for I/O."""
    step_s: float
    forward_s: float = 0.0
    backward_s: float = 0.0
    transfer_s: float = 0.0
    optimizer_s: float = 0.0
    nvme_read_s: float = 0.0
    nvme_write_s: float = 0.0
    loss: float = float("nan")
    io: IoTimes | None = None
    # the delayed update (DPU): seconds this step stood waiting for the previous step's
    # update at its end, and how many updates stale its parameters were (0 or 1). In a
    # DPU step optimizer_s, nvme_*_s and the copies back in transfer_s are that update's
    # own, timed in its thread beside this step's forward and backward: the phases may
    # add up to more than the step.
    update_wait_s: float = 0.0
    staleness: int = 0

    @property
    def idle_s(self) -> float:
        busy = (self.forward_s + self.backward_s + self.transfer_s + self.optimizer_s
                + self.nvme_read_s + self.nvme_write_s)
        return max(0.0, self.step_s - busy)


def build_model(cfg: ModelConfig, train: TrainConfig) -> Transformer:
    """The model, initialised from the run's seed on the CPU in fp32."""
    torch.manual_seed(train.seed)
    model = Transformer(cfg, max_seq_len=train.seq_len)
    model.activation_checkpointing = train.activation_checkpointing
    return model


def hyper_of(train: TrainConfig) -> AdamWHyper:
    return AdamWHyper(lr=train.lr, betas=train.betas, eps=train.eps, weight_decay=train.weight_decay)


class _Timer:
    """Intervals on the device's own clock: CUDA events on a GPU, perf_counter on a CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self, stream=None):
        if not self.cuda:
            return time.perf_counter()
        ev = torch.cuda.Event(enable_timing=True)
        ev.record(stream) if stream is not None else ev.record()
        return ev

    def seconds(self, a, b) -> float:
        """Call after a synchronisation that covers both marks."""
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a


class ActivationStash:
    """Saved tensors kept in a host arena on `node` instead of device memory.

    The first step only measures how many bytes the saved tensors need (they stay
    where they are); `allocate` then reserves an arena that size on the node, and
    every later step packs into it from the start. Parameters and buffers are never
    packed (autograd saves weights for the input gradients; they are resident anyway).
    """

    SLACK = 1.1

    def __init__(self, node: int, device: torch.device, resident: set[int]):
        self.node, self.device, self.resident = node, device, resident
        self.arena: HostArena | None = None
        self.measured = 0

    def _resident(self, t: torch.Tensor) -> bool:
        return t.untyped_storage().data_ptr() in self.resident

    def pack(self, t: torch.Tensor):
        if self._resident(t):
            return ("keep", t)
        if self.arena is None:
            self.measured += HostArena.bytes_for(t.numel(), t.dtype)
            return ("keep", t)
        slot = self.arena.take(t.numel(), t.dtype).view(t.shape)
        slot.copy_(t, non_blocking=True)
        return ("host", slot)

    def unpack(self, packed):
        kind, t = packed
        if kind == "keep":
            return t
        return t.to(self.device, non_blocking=True)

    def allocate(self, pin: bool) -> HostArena:
        self.arena = HostArena(int(self.measured * self.SLACK) + HostArena.ALIGN, self.node,
                               f"activations@node{self.node}")
        if pin:
            self.arena.pin()
        return self.arena

    def hooks(self):
        if self.arena is not None:
            self.arena.reset()
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)


class _EngineBase:
    kind = "base"

    def __init__(self, cfg: ModelConfig, train: TrainConfig, device: str):
        self.cfg, self.train = cfg, train
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.timer = _Timer(self.device)
        self.arenas: dict[str, HostArena] = {}
        self.stash: ActivationStash | None = None
        self.steps_done = 0
        self.notes: list[str] = []
        self.impl = "fused"

    def _arena(self, name: str, nbytes: int, node: int | None) -> HostArena:
        arena = HostArena(nbytes, node, name)
        self.arenas[name] = arena
        return arena

    def prepare(self, batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch where the compute wants it (done before timing)."""
        return tuple(t.to(self.device) for t in batch)

    def _forward_backward(self, model, inputs, labels, autocast: bool = False):
        """Forward and backward with marks around each; returns (loss, marks)."""
        ctx = self.stash.hooks() if self.stash is not None else _nullcontext()
        m0 = self.timer.mark()
        with ctx:
            if autocast:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    logits = model(inputs)
            else:
                logits = model(inputs)
            loss = loss_fn(logits, labels)
        m1 = self.timer.mark()
        loss.backward()
        m2 = self.timer.mark()
        return loss, (m0, m1, m2)

    def _maybe_allocate_stash(self) -> None:
        if self.stash is not None and self.stash.arena is None and self.steps_done == 1:
            self.arenas["activations"] = self.stash.allocate(pin=self.cuda)

    def verify(self, nodes_of=page_nodes) -> list[dict]:
        """Where every placed buffer's pages are; raises PlacementError on any mismatch."""
        return [a.verify(nodes_of) for a in self.arenas.values()]

    def memory(self) -> dict[str, int]:
        """Bytes per tier: placed arenas, pinned, the process per node, HBM peaks."""
        out: dict[str, int] = {}
        for name, a in self.arenas.items():
            out[f"placed_{name}"] = a.length
        out["pinned"] = sum(a.length for a in self.arenas.values() if a.pinned)
        for node, b in process_bytes_per_node().items():
            out[f"host_node{node}"] = b
        if self.cuda:
            out["hbm_allocated_peak"] = torch.cuda.max_memory_allocated(self.device)
            out["hbm_reserved_peak"] = torch.cuda.max_memory_reserved(self.device)
        return out

    def reset_peaks(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)

    def close(self) -> None:
        for a in self.arenas.values():
            a.close()
        self.arenas.clear()


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class OffloadEngine(_EngineBase):
    kind = "offload"

    def __init__(self, cfg: ModelConfig, train: TrainConfig, placement: Placement,
                 device: str = "cpu", nvme_dir: str | None = None, impl: str = "fused",
                 buffer_node: int | None = None, n_buffers: int = 2,
                 dpu_threads: int | None = None, events: list | None = None):
        """placement: host nodes (ints) for params/optimizer/grads/activations, 'nvme' for
        params or optimizer (then nvme_dir is the directory), 'device' for activations.
        buffer_node: the node of the NVMe I/O buffers and bf16 staging when the params
        themselves are on NVMe (default: the grads' node). With train.dpu: dpu_threads
        sizes the update thread's OpenMP team (default: update_threads), and events,
        when given, collects (what, step) in order (the tests read the interleaving)."""
        super().__init__(cfg, train, device)
        if not isinstance(placement.grads, int):
            raise ValueError("the offload engine steps on the host: grads_on must be a host tier")
        if not (isinstance(placement.params, int) or placement.params == "nvme"):
            raise ValueError("the offload engine keeps master params on a host tier or NVMe")
        if placement.params == "nvme" and placement.optimizer != "nvme":
            raise ValueError("params on NVMe need the optimizer state on NVMe too")
        self.placement, self.impl = placement, impl
        self.compute_dtype = torch.bfloat16 if self.cuda else torch.float32
        buffer_node = placement.grads if buffer_node is None else buffer_node

        self.model = build_model(cfg, train)
        params = list(self.model.parameters())
        self.numel = sum(p.numel() for p in params)
        chunk = max(ALIGN_ELEMS, train.chunk_params // ALIGN_ELEMS * ALIGN_ELEMS)
        self.chunk = min(chunk, -(-self.numel // ALIGN_ELEMS) * ALIGN_ELEMS)
        initial = torch.cat([p.detach().reshape(-1) for p in params])

        # -- host state on its tiers
        hyper = hyper_of(train)
        self.grads = self._take("grads", placement.grads, self.compute_dtype)
        self._grad_bufs = [self.grads]
        if train.dpu:                              # step i+1's backward fills the other one
            self._grad_bufs.append(self._take("grads_next", placement.grads, self.compute_dtype))
        self.master = None
        if isinstance(placement.params, int):
            self.master = self._take("params", placement.params, torch.float32)
            self.master.copy_(initial)
        scratch = None
        if self.compute_dtype != torch.float32:    # bf16 grads are widened chunk by chunk
            scratch = self._arena("scratch", self.chunk * 4, buffer_node).take(self.chunk, torch.float32)
        self.nvme: NvmeAdamW | None = None
        if placement.optimizer == "nvme":
            if not nvme_dir:
                raise ValueError("optimizer on NVMe needs nvme_dir")
            self.nvme = NvmeAdamW(nvme_dir, self.numel, hyper, impl, self.chunk, buffer_node,
                                  master=self.master, n_buffers=n_buffers, scratch=scratch)
            self.nvme.initialize(None if self.master is not None else initial)
            self.arenas["nvme_buffers"] = self.nvme.arena
        else:
            state = self._arena("optimizer", HostArena.bytes_for(self.numel, torch.float32, 2),
                                placement.optimizer)
            m, v = state.take(self.numel, torch.float32), state.take(self.numel, torch.float32)
            self.host_opt = HostAdamW(self.master, m, v, self.numel, hyper, impl, self.chunk, scratch)
        self.staging = None
        if self.cuda:                              # bf16 copy of updated params, pinned
            node = placement.params if isinstance(placement.params, int) else buffer_node
            self.staging = self._take("staging", node, self.compute_dtype)
            for name in ("grads", "grads_next", "staging"):
                if name in self.arenas:
                    self.arenas[name].pin()
            if self.nvme is None:                  # the update writes it in its own pass
                self.host_opt.narrow_into = self.staging

        # -- compute copy: views into one flat buffer on the device (buffers move as they are)
        for module in self.model.modules():
            for name, buf in module._buffers.items():
                if buf is not None:
                    module._buffers[name] = buf.to(self.device)
        self.flat = torch.empty(self.numel, dtype=self.compute_dtype, device=self.device)
        self.spans = []
        offset = 0
        for p in params:
            n = p.numel()
            self.flat[offset:offset + n].copy_(initial[offset:offset + n])
            p.data = self.flat[offset:offset + n].view(p.shape)
            self.spans.append((p, offset, n))
            offset += n
        del initial
        # the delayed update writes the compute copy the next forward is not reading
        self._back = torch.empty_like(self.flat) if train.dpu else None

        # -- streams and the gradient hooks
        if self.cuda:
            self.d2h_stream = torch.cuda.Stream(self.device)
            self.h2d_stream = torch.cuda.Stream(self.device)
        self._copy_s = 0.0                         # CPU: time inside the hooks' memcpys
        for p, offset, n in self.spans:
            p.register_post_accumulate_grad_hook(self._grad_hook(offset, n))

        self.dpu: DelayedUpdate | None = None
        self._ready: int | None = None             # a step whose gradients wait for their update
        if train.dpu:
            self.dpu = DelayedUpdate(dpu_threads or update_threads(self.cuda), events)

        if placement.activations != "device":
            resident = {t.untyped_storage().data_ptr() for t in (self.flat, self._back) if t is not None}
            resident |= {b.untyped_storage().data_ptr() for b in self.model.buffers()}
            self.stash = ActivationStash(placement.activations, self.device, resident)
            self.model.reentrant_checkpoint = True   # checkpoint inputs pass through the hooks

    def _take(self, name: str, node: int, dtype: torch.dtype) -> torch.Tensor:
        """A flat tensor of every parameter, in its own arena on `node`."""
        return self._arena(name, HostArena.bytes_for(self.numel, dtype), node).take(self.numel, dtype)

    def _grad_hook(self, offset: int, n: int):
        def hook(p: torch.Tensor) -> None:
            g = p.grad
            dst = self.grads[offset:offset + n]       # this step's buffer (two with DPU)
            if self.cuda:
                compute = torch.cuda.current_stream(self.device)
                self.d2h_stream.wait_stream(compute)          # the gradient is complete
                with torch.cuda.stream(self.d2h_stream):
                    dst.copy_(g.reshape(-1), non_blocking=True)
                g.record_stream(self.d2h_stream)              # keep its memory until copied
            else:
                t0 = time.perf_counter()
                dst.copy_(g.reshape(-1))
                self._copy_s += time.perf_counter() - t0
            p.grad = None
        return hook

    def _shipper(self, target: torch.Tensor, spent: list[float]):
        """on_chunk for the optimizer: each updated chunk of fp32 params goes to `target`
        (a compute copy): on a GPU narrowed into pinned staging (by the host optimizer
        itself, in its pass; the NVMe path's here), then H2D on its own stream; on a
        CPU a memcpy, whose seconds add up in spent[0]."""
        def ship(start: int, end: int, p32: torch.Tensor) -> None:
            if self.cuda:
                if self.nvme is not None:
                    self.staging[start:end].copy_(p32)
                with torch.cuda.stream(self.h2d_stream):
                    target[start:end].copy_(self.staging[start:end], non_blocking=True)
            else:
                t0 = time.perf_counter()
                target[start:end].copy_(p32)
                spent[0] += time.perf_counter() - t0
        return ship

    def step(self, inputs: torch.Tensor, labels: torch.Tensor) -> StepTimes:
        self.grads = self._grad_bufs[self.steps_done % len(self._grad_bufs)]
        if self.dpu is not None and self.steps_done >= self.train.dpu_warmup_steps:
            return self._step_delayed(inputs, labels)
        return self._step_now(inputs, labels)

    def _step_now(self, inputs: torch.Tensor, labels: torch.Tensor) -> StepTimes:
        """The ordinary step: forward, backward, then the update, before the next step."""
        t0 = time.perf_counter()
        self._copy_s = 0.0
        if self.cuda:
            torch.cuda.current_stream(self.device).wait_stream(self.h2d_stream)
        loss, (m0, m1, m2) = self._forward_backward(self.model, inputs, labels)
        if self.cuda:
            m_d2h = self.timer.mark(self.d2h_stream)
            m_d2h.synchronize()                     # the host buffer holds every gradient
            self.h2d_stream.wait_stream(torch.cuda.current_stream(self.device))
        backward_copy_s = self._copy_s
        t_opt = time.perf_counter()
        shipped = [0.0]
        io = self._optimizer().step(self.grads, self._shipper(self.flat, shipped))
        t_opt_end = time.perf_counter()
        if self.cuda:
            self.h2d_stream.synchronize()
        t_end = time.perf_counter()
        loss_value = float(loss.detach())
        self.steps_done += 1
        self._maybe_allocate_stash()

        times = StepTimes(step_s=t_end - t0, loss=loss_value, io=io)
        times.forward_s = self.timer.seconds(m0, m1)
        nvme_wait = (io.read_wait_s + io.write_wait_s) if io else 0.0
        if io:
            times.nvme_read_s, times.nvme_write_s = io.read_wait_s, io.write_wait_s
        if self.cuda:
            times.backward_s = self.timer.seconds(m1, m2)
            d2h_exposed = max(0.0, self.timer.seconds(m2, m_d2h))
            times.transfer_s = d2h_exposed + (t_end - t_opt_end)
            times.optimizer_s = t_opt_end - t_opt - nvme_wait
        else:
            times.backward_s = self.timer.seconds(m1, m2) - backward_copy_s
            times.transfer_s = backward_copy_s + shipped[0]
            times.optimizer_s = t_opt_end - t_opt - nvme_wait - shipped[0]
        return times

    def _optimizer(self):
        return self.nvme if self.nvme is not None else self.host_opt

    # ---- the delayed parameter update --------------------------------------------------

    def _update(self, step: int, grads: torch.Tensor, target: torch.Tensor) -> UpdateTimes:
        """Step `step`'s update, in the update thread: the optimizer over its gradients,
        each chunk shipped into `target` (the compute copy no forward is reading), and
        on a GPU the wait for the last copies, so that a join means all of it is done."""
        device = torch.cuda.device(self.device) if self.cuda else _nullcontext()
        with device:
            t0 = time.perf_counter()
            shipped = [0.0]
            try:
                io = self._optimizer().step(grads, self._shipper(target, shipped))
                t1 = time.perf_counter()
            finally:            # a failed update must not leave copies reading the staging it frees
                if self.cuda:
                    self.h2d_stream.synchronize()
            t2 = time.perf_counter()
        return UpdateTimes(step, t2 - t0, shipped[0], t2 - t1, io)

    def _launch(self, step: int) -> None:
        """Start step `step`'s update beside the forward and backward about to run."""
        if self.cuda:       # the compute copy it writes was the last step's: its readers are done
            self.h2d_stream.wait_stream(torch.cuda.current_stream(self.device))
        self.dpu.launch(self._update, step, self._grad_bufs[step % len(self._grad_bufs)], self._back)

    def _apply(self) -> UpdateTimes | None:
        """Wait for the update in flight, then make the compute copy it wrote the one
        the model reads (the parameters' views move to it)."""
        done = self.dpu.join()
        if done is None:
            return None
        if self.cuda:
            torch.cuda.current_stream(self.device).wait_stream(self.h2d_stream)
        self.flat, self._back = self._back, self.flat
        for p, offset, n in self.spans:
            p.data = self.flat[offset:offset + n].view(p.shape)
        self.dpu.event("applied", done.step)
        return done

    def _step_delayed(self, inputs: torch.Tensor, labels: torch.Tensor) -> StepTimes:
        """Step i with the delayed update: step i-1's update runs on the update thread
        while this forward and backward run on the parameters before it (one update
        stale); this step ends once it is applied, and leaves its own gradients for
        the next step to launch (launched there, not here, so that it overlaps that
        step's forward and backward, not whatever the caller does between steps)."""
        t0 = time.perf_counter()
        self._copy_s = 0.0
        staleness = 0
        if self._ready is not None:
            self._launch(self._ready)
            self._ready, staleness = None, 1
        step = self.steps_done
        self.dpu.event("forward_start", step)
        loss, (m0, m1, m2) = self._forward_backward(self.model, inputs, labels)
        self.dpu.event("backward_end", step)
        if self.cuda:
            m_d2h = self.timer.mark(self.d2h_stream)
            m_d2h.synchronize()                     # this step's gradients are all on the host
        t_join = time.perf_counter()
        done = self._apply()
        t_applied = time.perf_counter()
        self._ready = step
        loss_value = float(loss.detach())
        t_end = time.perf_counter()
        self.steps_done += 1
        self._maybe_allocate_stash()

        times = StepTimes(step_s=t_end - t0, loss=loss_value, update_wait_s=t_applied - t_join,
                          staleness=staleness)
        times.forward_s = self.timer.seconds(m0, m1)
        times.backward_s = self.timer.seconds(m1, m2) - (0.0 if self.cuda else self._copy_s)
        io = done.io if done else None
        nvme_wait = (io.read_wait_s + io.write_wait_s) if io else 0.0
        if io:
            times.io, times.nvme_read_s, times.nvme_write_s = io, io.read_wait_s, io.write_wait_s
        if done:
            times.optimizer_s = done.seconds - done.h2d_tail_s - nvme_wait - done.ship_s
        if self.cuda:
            times.transfer_s = max(0.0, self.timer.seconds(m2, m_d2h)) + (done.h2d_tail_s if done else 0.0)
        else:
            times.transfer_s = self._copy_s + (done.ship_s if done else 0.0)
        return times

    def flush(self) -> None:
        """Run and apply the update a delayed step left waiting (after the last step:
        the master parameters, the probes and the NVMe file then hold every step)."""
        if self.dpu is None:
            return
        self._apply()
        if self._ready is not None:
            self._launch(self._ready)
            self._ready = None
            self._apply()

    def master_params(self) -> torch.Tensor:
        self.flush()
        if self.master is not None:
            return self.master.clone()
        return self.nvme.read_params()

    def close(self) -> None:
        if self.dpu is not None:              # joins the update thread
            self.dpu.close()
        if self.nvme is not None:
            self.arenas.pop("nvme_buffers", None)
            self.nvme.close()
        super().close()


class NoOffloadEngine(_EngineBase):
    """Everything on the device: fp32 params, torch AdamW (fused), bf16 autocast on a GPU."""
    kind = "none"

    def __init__(self, cfg: ModelConfig, train: TrainConfig, device: str = "cpu",
                 activations_node: int | None = None, impl: str = "fused"):
        super().__init__(cfg, train, device)
        self.model = build_model(cfg, train).to(self.device)
        self.numel = sum(p.numel() for p in self.model.parameters())
        h = hyper_of(train)
        self.impl = impl
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=h.lr, betas=h.betas, eps=h.eps,
                                     weight_decay=h.weight_decay, fused=impl == "fused",
                                     foreach=impl == "foreach")
        if activations_node is not None:
            resident = {p.untyped_storage().data_ptr() for p in self.model.parameters()}
            resident |= {b.untyped_storage().data_ptr() for b in self.model.buffers()}
            self.stash = ActivationStash(activations_node, self.device, resident)
            self.model.reentrant_checkpoint = True

    def step(self, inputs: torch.Tensor, labels: torch.Tensor) -> StepTimes:
        t0 = time.perf_counter()
        loss, (m0, m1, m2) = self._forward_backward(self.model, inputs, labels, autocast=self.cuda)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        m3 = self.timer.mark()
        loss_value = float(loss.detach())          # synchronises
        t_end = time.perf_counter()
        self.steps_done += 1
        self._maybe_allocate_stash()
        return StepTimes(step_s=t_end - t0, forward_s=self.timer.seconds(m0, m1),
                         backward_s=self.timer.seconds(m1, m2),
                         optimizer_s=self.timer.seconds(m2, m3), loss=loss_value)

    def state_tensors(self) -> list[torch.Tensor]:
        """Parameters and Adam moments (created by the first step)."""
        out = list(self.model.parameters())
        for s in self.opt.state.values():
            out += [v for v in s.values() if isinstance(v, torch.Tensor) and v.dim() > 0]
        return out

    def master_params(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1).float().cpu() for p in self.model.parameters()])


def _all_ranks_done(store, rank: int, world: int, prefix: str = "cxlbench/closed") -> None:
    """Every rank marks itself done in the rendezvous store and waits until all have
    (the store's own timeout, 30 min by default, bounds the wait)."""
    if world == 1:
        return
    store.set(f"{prefix}/{rank}", "1")
    store.wait([f"{prefix}/{r}" for r in range(world)])


class Fsdp2Engine(_EngineBase):
    """FSDP2 with CPUOffloadPolicy: the reference users would run. World size 1 unless
    started by torchrun (then the usual env:// rendezvous, one GPU per rank).

    Sharded fp32 parameters, gradients and Adam state live in (pinned) host memory;
    FSDP copies parameters H2D before each block's all-gather and gradients D2H after
    its reduce-scatter; the optimizer steps on the CPU. The compute is bf16
    (MixedPrecisionPolicy), reductions fp32. The optimizer is torch AdamW, fused when
    torch supports it on CPU DTensors, else foreach (recorded in `impl`).
    """
    kind = "fsdp2_cpu_offload"

    def __init__(self, cfg: ModelConfig, train: TrainConfig, device: str = "cuda:0"):
        """On a CPU device (gloo, a CPU mesh, fp32, nothing pinned) the same code runs
        with nothing to offload to: only the tests use that, to exercise this path."""
        super().__init__(cfg, train, device)
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

        backend = "nccl" if self.cuda else "gloo"
        if self.cuda:
            torch.cuda.set_device(self.device)
        self._store = None      # set only when this engine made the group: it tears it down
        if not dist.is_initialized():
            device_id = {"device_id": self.device} if self.cuda else {}
            if "RANK" in os.environ and "WORLD_SIZE" in os.environ:      # torchrun
                # torch's own env:// rendezvous, done here to keep its store for close(); the
                # store keeps the rendezvous timeout (30 min), not the group's
                store, rank, world = next(dist.rendezvous("env://"))
            else:
                store, rank, world = dist.HashStore(), 0, 1
            dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                                    **device_id)
            self._store = store
        mesh = init_device_mesh(self.device.type, (dist.get_world_size(),))
        model = build_model(cfg, train)
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if self.cuda else None,
                                  reduce_dtype=torch.float32)
        offload = CPUOffloadPolicy(pin_memory=self.cuda)
        for layer in model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=mp, offload_policy=offload)
        fully_shard(model, mesh=mesh, mp_policy=mp, offload_policy=offload)
        self.model = model
        self.numel = sum(p.numel() for p in model.parameters())
        self._hyper = hyper_of(train)
        self.impl = "fused"
        self.opt = self._optimizer(fused=True)

    def _optimizer(self, fused: bool):
        h = self._hyper
        return torch.optim.AdamW(self.model.parameters(), lr=h.lr, betas=h.betas, eps=h.eps,
                                 weight_decay=h.weight_decay, fused=fused, foreach=not fused)

    def step(self, inputs: torch.Tensor, labels: torch.Tensor) -> StepTimes:
        t0 = time.perf_counter()
        loss, (m0, m1, m2) = self._forward_backward(self.model, inputs, labels)
        if self.cuda:
            torch.cuda.current_stream(self.device).synchronize()
        t_opt = time.perf_counter()
        try:
            self.opt.step()
        except (RuntimeError, NotImplementedError) as e:
            if self.impl != "fused" or self.steps_done:
                raise
            self.notes.append(f"fused AdamW refused FSDP2's CPU DTensors ({e}); foreach used")
            self.impl = "foreach"
            self.opt = self._optimizer(fused=False)
            self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        t_opt_end = time.perf_counter()
        loss_value = float(loss.detach())
        if self.cuda:
            torch.cuda.synchronize(self.device)
        t_end = time.perf_counter()
        self.steps_done += 1
        return StepTimes(step_s=t_end - t0, forward_s=self.timer.seconds(m0, m1),
                         backward_s=self.timer.seconds(m1, m2),
                         optimizer_s=t_opt_end - t_opt, loss=loss_value)

    def master_params(self) -> torch.Tensor:
        return torch.cat([p.full_tensor().detach().reshape(-1).float().cpu()
                          for p in self.model.parameters()])

    def host_state_tensors(self) -> list[torch.Tensor]:
        """The local shards FSDP2 keeps on the host: params, grads, Adam moments."""
        out = []
        for p in self.model.parameters():
            out.append(p.to_local())
            if p.grad is not None:
                out.append(p.grad.to_local())
        for state in self.opt.state.values():
            out += [v.to_local() if hasattr(v, "to_local") else v for v in state.values()
                    if isinstance(v, torch.Tensor) and v.dim() > 0]
        return [t for t in out if t.device.type == "cpu"]

    def memory(self) -> dict[str, int]:
        out = super().memory()
        out["pinned"] = sum(p.to_local().numel() * p.to_local().element_size()
                            for p in self.model.parameters() if p.to_local().is_pinned())
        return out

    def close(self) -> None:
        """Tear the group down once every rank is past its last collective. A barrier
        does not ensure it: the first rank out can close its connections while the
        barrier's last message to another is in flight, and gloo aborts that rank
        (pytorch/gloo#155; seen once here, "terminate called without an active
        exception" in a two-rank run after the results were stored). So each rank
        says it is done in the rendezvous store, out of band, and waits for all.
        The model and optimizer go first: FSDP2's modules hold the device mesh and
        through it the group."""
        import gc

        import torch.distributed as dist
        super().close()
        self.model = self.opt = None
        gc.collect()
        if self._store is not None and dist.is_initialized():
            _all_ranks_done(self._store, dist.get_rank(), dist.get_world_size())
            dist.destroy_process_group()
        self._store = None
