"""What a step's compute costs, from its own operators run without the framework.

FLOPs at a matrix rate miss most of a small model's step: on the 2-core VM the
tiny config's forward and backward take ~30 ms where 6·N·T FLOPs at the GEMM
rate say 5 ms — broadcast RoPE multiplies, attention, norms and the thread
pool's fork and join per operator are in no FLOPs count. So the compute term is
measured from two probes, neither of them the step it predicts:

kernels    the ATen operators of one forward and backward, recorded once
           (shapes, strides, dtypes, and which call's output each argument
           is) under a dispatch mode, then replayed in their order without
           autograd, hooks or Python modules: each call reads what the calls
           before it returned, parameters and batch are copies of the twin's
           (the run's initial values, its first batch),
           outputs are dropped after their last use. So the caches, the
           allocator and the values are what the step's operators saw (timed
           one by one on hot inputs they read 20-35% low on the VM; each on
           inputs of its own, up to 20% high).
framework  what the framework adds over the replay's own calls: the same
           architecture (layers, heads, the same operators) at minimal shapes,
           where the operators cost next to nothing, a real forward and backward
           minus the replay of its own operators. Per-call costs don't depend on
           shapes, so this carries over. It can be negative: the replay calls
           every operator from Python, where autograd's backward issues them
           from C++ (on the VM: -0.5 to -3 ms of a 25-40 ms step).

The run replays after each of its steady steps (twice: the first pass soaks
up what the step left behind), so the kernels' median and the steps' median
come from the same minutes (on the VM, a probe taken after the steps read
0.77-1.41x them, run to run).

compute = kernels + framework. On a GPU the replay's wall clock (synchronised)
covers both the launches and the device's work; the sum is right while the host's
issuing dominates, and overstates by the framework term (a few ms) when the device
does (untested until a GPU run). Where the operators can't be replayed — a model
whose parameters exceed byte_limit (2 GiB on a CPU; on a GPU what is left beside
the steps' own peak), a minimal twin that runs other operators (should the
framework choose its kernels by a shape the twin shrinks), any error — the run
says why in its notes and the model prices compute as FLOPs at the measured GEMM
rate.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from cxlbench.training.configs import ModelConfig, TrainConfig
from cxlbench.training.probes import seconds

#: The replay keeps a copy of the model's parameters (and the batch) beside the
#: run's own; on a CPU, above this many bytes of them it is not attempted.
REPLAY_MAX_BYTES = 2 << 30


def byte_limit(device: torch.device) -> int:
    """How many bytes of copied inputs a replay may keep, measured before any is
    copied. On a GPU: what the device has left (free, and what torch's allocator
    holds unused), less what the warm-up steps took above their resident state (the
    peak since they began over what is allocated now: a replay pass, the same
    operators, takes as much again, and the later steps need it beside the copies),
    a tenth kept back. Recording takes more for a moment (the recorded model's
    gradients): an out-of-memory error there stops the probe with a note. A fixed
    2 GiB kept the first H200 run's 1b (2.8 GiB in bf16) unprobed with over 100 GiB
    free; a quarter of the free memory then kept the 3b on HBM (13.4 GiB of fp32
    inputs) unprobed beside 36 GiB free and the allocator's cache, and its compute
    priced as FLOPs read 0.59x the step's."""
    if device.type != "cuda":
        return REPLAY_MAX_BYTES
    free, _total = torch.cuda.mem_get_info(device)
    allocated = torch.cuda.memory_allocated(device)
    cached = torch.cuda.memory_reserved(device) - allocated
    transient = torch.cuda.max_memory_allocated(device) - allocated
    return max(0, int(0.9 * (free + cached)) - transient)


@dataclass(frozen=True)
class TensorSpec:
    """A tensor argument's layout."""
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: str

    @property
    def storage_elems(self) -> int:
        return _span(self.shape, self.stride)


def _span(shape, stride) -> int:
    """Elements of storage a layout reaches, from its first to its last."""
    return 1 + sum((d - 1) * s for d, s in zip(shape, stride)) if all(shape) else 0


def _copy(t: torch.Tensor) -> torch.Tensor:
    """t's values in the same layout (stride-0 and other overlapping views too)."""
    n = _span(t.shape, t.stride())
    if n == 0:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    return t.detach().as_strided((n,), (1,)).clone().as_strided(t.shape, t.stride())


@dataclass(frozen=True)
class Produced:
    """An argument that an earlier call returned: the replay passes that call's
    output, as the step did — its values, its place in the caches."""
    call: int
    index: int            # position in the call's flattened outputs


def _key(t: torch.Tensor) -> tuple:
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)


@dataclass
class Trace:
    """The operators of one forward and backward, in order, with their dataflow:
    each tensor argument is either an earlier call's output or an input from
    outside (parameters, the batch), copied once as the twin had it and shared by
    all its uses. Synthetic values would not do: normal(0, 1) weights overflow a
    few layers in, and the replay then ran 20-30% slower than the step on the VM."""
    calls: list[tuple[Any, tuple, dict]] = field(default_factory=list)
    values: dict[int, torch.Tensor] = field(default_factory=dict)   # External.ident -> copy

    @property
    def input_bytes(self) -> int:
        """Bytes of the tensors from outside the traced calls."""
        seen = {leaf for _, args, kwargs in self.calls
                for leaf in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(leaf, TensorSpec)}
        return sum(leaf.storage_elems * leaf.dtype.itemsize for leaf in seen)


@dataclass(frozen=True)
class External(TensorSpec):
    """A tensor from outside the traced calls; `ident` tells two of them apart."""
    ident: int = 0


class _Recorder(TorchDispatchMode):
    def __init__(self, trace: Trace):
        super().__init__()
        self.trace = trace
        self.producers: dict[tuple, Produced] = {}
        self.externals: dict[tuple, External] = {}

    def _arg(self, x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        key = _key(x)
        if key in self.producers:
            return self.producers[key]
        if key not in self.externals:
            ident = len(self.externals)
            self.externals[key] = External(tuple(x.shape), tuple(x.stride()), x.dtype, str(x.device),
                                           ident=ident)
            self.trace.values[ident] = _copy(x)
        return self.externals[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        call = len(self.trace.calls)
        self.trace.calls.append((func, tree_map(self._arg, args), tree_map(self._arg, kwargs)))
        out = func(*args, **kwargs)
        for i, leaf in enumerate(_outputs(out)):
            if isinstance(leaf, torch.Tensor):       # the newest producer of an address wins
                self.producers[_key(leaf)] = Produced(call, i)
        return out


def _outputs(out: Any) -> list:
    """A call's outputs as one flat list (a tensor, or a tuple or list of them)."""
    if isinstance(out, (tuple, list)):
        return [x for item in out for x in (item if isinstance(item, (tuple, list)) else (item,))]
    return [out]


def record(fn: Callable[[], Any]) -> Trace:
    """The ATen operators fn runs (autograd's backward included: on a CPU and for
    the issuing thread on a GPU it runs under the same mode)."""
    trace = Trace()
    with _Recorder(trace):
        fn()
    return trace


def _last_uses(trace: Trace) -> dict[int, list[int]]:
    """For each call, the earlier calls whose outputs it is the last to read: the
    replay drops them there, so it holds about what the step held."""
    last: dict[int, int] = {}
    for i, (_, args, kwargs) in enumerate(trace.calls):
        for leaf in torch.utils._pytree.tree_leaves((args, kwargs)):
            if isinstance(leaf, Produced):
                last[leaf.call] = i
    drop: dict[int, list[int]] = {}
    for producer, i in last.items():
        drop.setdefault(i, []).append(producer)
    for i in range(len(trace.calls)):       # read by no later call (the gradients): dropped at once
        if i not in last:
            drop.setdefault(i, []).append(i)
    return drop


_Ref = (External, Produced)


def _holes(values: dict) -> list[tuple[Any, int | None, Any]]:
    """Where a call's arguments (by position or keyword, one list deep) take a
    tensor at replay time: (slot, index in a list or None, reference)."""
    out = []
    for slot, v in values.items():
        if isinstance(v, _Ref):
            out.append((slot, None, v))
        elif isinstance(v, (list, tuple)):
            out += [(slot, j, x) for j, x in enumerate(v) if isinstance(x, _Ref)]
    return out


def _compile(trace: Trace) -> list[tuple[Any, dict, dict, list, list, list[int]]]:
    """Each call as templates and holes, so a pass does no tree walking: on a
    small model the replay's own Python would otherwise cost more than the step."""
    drop = _last_uses(trace)
    program = []
    for i, (func, args, kwargs) in enumerate(trace.calls):
        a = dict(enumerate(args))
        program.append((func, a, dict(kwargs), _holes(a), _holes(kwargs), drop.get(i, [])))
    return program


def _fill(template: dict, holes: list, externals: dict, outputs: dict) -> dict:
    """The call's arguments for this pass; a list argument is copied before it is
    filled, so the program keeps no tensor of a pass."""
    values, copied = dict(template), set()
    for slot, j, ref in holes:
        t = externals[ref.ident] if isinstance(ref, External) else outputs[ref.call][ref.index]
        if j is None:
            values[slot] = t
        else:
            if slot not in copied:
                values[slot] = list(values[slot])
                copied.add(slot)
            values[slot][j] = t
    return values


def _one_pass(program: list, externals: dict[int, torch.Tensor]) -> None:
    outputs: dict[int, list] = {}
    for i, (func, args, kwargs, arg_holes, kw_holes, drop) in enumerate(program):
        a = _fill(args, arg_holes, externals, outputs) if arg_holes else args
        k = _fill(kwargs, kw_holes, externals, outputs) if kw_holes else kwargs
        outputs[i] = _outputs(func(*a.values(), **k))
        for producer in drop:
            outputs.pop(producer, None)


class Replay:
    """A trace ready to run: its program over the trace's copies of its outside
    inputs. Built with one untimed pass (allocator, thread pool, lazy initialisation)."""

    def __init__(self, trace: Trace, device: torch.device, limit: int | None = None):
        # limit: byte_limit as it was before record() copied the inputs (measured after,
        # the copies would be charged against the room they already take)
        limit = byte_limit(device) if limit is None else limit
        if trace.input_bytes > limit:
            raise ValueError(f"the step's operators need {trace.input_bytes / 2**30:.1f} GiB of inputs "
                             f"to replay (limit {limit / 2**30:.0f} GiB)")
        self.device, self.operators = device, len(trace.calls)
        self.externals = trace.values           # the trace's copies; in-place calls would move them
        self.program = _compile(trace)
        self.once()

    def once(self) -> float:
        """Seconds of one pass over the operators, each reading what the calls before
        it returned."""
        return seconds(lambda: _one_pass(self.program, self.externals), self.device)


def minimal(cfg: ModelConfig, train: TrainConfig) -> tuple[ModelConfig, TrainConfig]:
    """The same architecture — layers, heads, kv heads, head size, the same
    operators — at shapes where each operator costs next to nothing. The head size
    stays: a GPU picks its attention kernel by it (on the H200 a head of 2 was padded
    to 8 and ran flash attention where the model's 64 ran cuDNN's), so a narrower
    twin runs other operators and the probe could not run."""
    return (replace(cfg, name=f"{cfg.name}-minimal", ffn_hidden=2, vocab_size=8),
            replace(train, batch=1, seq_len=2))


@dataclass
class ComputeProbe:
    """The compute term's inputs, as the run records them: every timing kept."""
    passes: list[float]            # the replay pass the model takes, one per steady step
    settling: list[float]          # the pass before it, right after the step
    framework_steps: list[float]   # the minimal twin's forward and backward
    framework_replays: list[float] # its operators replayed, interleaved with those
    operators: int                 # calls per forward and backward

    @property
    def kernels_s(self) -> float:
        return statistics.median(self.passes)

    @property
    def framework_s(self) -> float:
        """Signed: the framework's cost over the replay loop's own."""
        return statistics.median(self.framework_steps) - statistics.median(self.framework_replays)

    @property
    def compute_s(self) -> float:
        return self.kernels_s + self.framework_s


ForwardBackward = Callable[[ModelConfig, TrainConfig], Callable[[], Any]]


def _names(trace: Trace) -> list[str]:
    return [str(func) for func, _, _ in trace.calls]


class Probe:
    """The compute probe through one run: prepared after the warm-up steps, two
    replay passes after each steady step (the first soaks up what the step left
    behind; on the VM after an NVMe step it read up to 8x the second, while the
    next forward was not slowed), the result at the end. Any failure stops it with
    a note in `notes` and leaves the model to FLOPs at the GEMM rate.

    forward_backward(cfg, train) builds a model computing as the run's does (dtype,
    autocast, checkpointing) on the device and returns one forward-and-backward on
    a batch; the model is dropped once its calls are recorded."""

    def __init__(self, forward_backward: ForwardBackward, cfg: ModelConfig, train: TrainConfig,
                 device: torch.device, param_bytes: int, notes: list[str], reps: int = 9):
        self.device, self.notes = device, notes
        self.replay: Replay | None = None
        self.passes: list[float] = []
        self.settling: list[float] = []
        self.framework: tuple[list[float], list[float]] = ([], [])
        self.resident_bytes = 0
        try:
            limit = byte_limit(device)
            small_cfg, small_train = minimal(cfg, train)
            # the twin keeps the model's width: at 3b 0.7 G parameters beside the model's 3.6 G
            copied = (cfg.num_params() + small_cfg.num_params()) * param_bytes
            if copied > limit:
                raise ValueError(f"{copied / 2**30:.1f} GiB of parameters to copy (the model's and its "
                                 f"twin's), over the replay's {limit / 2**30:.0f} GiB")
            before = _allocated(device)
            trace = record(forward_backward(cfg, train))
            small = forward_backward(small_cfg, small_train)
            small_trace = record(small)
            if _names(small_trace) != _names(trace):
                raise ValueError("the minimal twin runs other operators than the model")
            self.framework = _interleaved(small, Replay(small_trace, device, limit), device, reps)
            del small, small_trace
            self.replay = Replay(trace, device, limit)
            self.resident_bytes = _allocated(device) - before
        except Exception as e:                      # the probe's failure is not the run's
            self._stop(e, "not run")

    def after_step(self) -> None:
        if self.replay is None:
            return
        try:
            settling, taken = self.replay.once(), self.replay.once()
        except Exception as e:
            self._stop(e, f"stopped after {len(self.passes)} steps")
            return
        self.settling.append(settling)
        self.passes.append(taken)

    def result(self) -> ComputeProbe | None:
        if self.replay is None or not self.passes:
            return None
        operators, self.replay = self.replay.operators, None
        return ComputeProbe(self.passes, self.settling, *self.framework, operators)

    def _stop(self, e: Exception, what: str) -> None:
        self.replay, self.passes, self.settling = None, [], []
        first = (str(e).splitlines() or [""])[0]
        self.notes.append(f"compute probe {what} ({type(e).__name__}: {first}): the model's compute is "
                          f"FLOPs at the measured GEMM rate")
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def _allocated(device: torch.device) -> int:
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else 0


def _interleaved(small: Callable[[], Any], replayed: Replay, device: torch.device,
                 reps: int) -> tuple[list[float], list[float]]:
    """The minimal twin's steps and replays, taken in turn so the VM's drift falls on
    both alike: what the framework adds per forward and backward is the difference
    of their medians."""
    small()
    steps, replays = [], []
    for _ in range(reps):
        steps.append(seconds(small, device))
        replays.append(replayed.once())
    return steps, replays
