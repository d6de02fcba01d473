"""Timing work on the device with events, the way nvbandwidth does.

A batch is: the spin kernel (one thread waiting on a host-mapped flag), the
warm-up operations, a start event, then `iterations` groups of `ops`
operations each followed by an event, and only then the flag is released. The
device therefore runs everything back to back after the host has queued it
all: what the events bracket is device time, never the host's enqueue cost.
Each group (an iteration) is one kept sample; `ops` is chosen so an iteration
lasts about `target_s` (milliseconds), within the queue the spin kernel can
safely hold (MAX_QUEUED operations: far below the depth at which a launch
would block the host, which the spin kernel's timeout guards anyway).

Operations that block the host while the device is busy (copies from pageable
memory) run with spin=False: their events then include what the host adds,
which is part of the cost of pageable memory.
"""
from __future__ import annotations

import ctypes
import math
import statistics
from dataclasses import dataclass, field
from typing import Callable

#: operations (kernels, copies, events) queued behind one spin kernel at most
MAX_QUEUED = 192
#: the spin kernel gives up after this long (a stuck host never hangs the device)
SPIN_TIMEOUT_S = 5.0
#: what one timed iteration should last
TARGET_S = 1e-3

Op = Callable[[int, object], None]     # op(k, stream) queues the k-th operation


class SpinFlag:
    """Two ints of page-locked, device-mapped host memory: [release, timed_out]."""

    def __init__(self, dev):
        self.dev = dev
        self.host = dev.host_alloc_mapped(4096)
        self.device = dev.mapped_pointer(self.host)
        self._words = (ctypes.c_int32 * 2).from_address(self.host)
        self.arm()

    def arm(self) -> None:
        self._words[0] = 0
        self._words[1] = 0

    def release(self) -> None:
        self._words[0] = 1

    @property
    def timed_out(self) -> bool:
        return bool(self._words[1])

    def close(self) -> None:
        if self.host:
            self.dev.free_host(self.host)
            self.host = 0


@dataclass
class Timed:
    """One batch: seconds of each timed iteration, each `ops` operations long."""
    seconds: list[float]
    ops: int
    spin: str                      # released / timed out / off
    warmup: int = 0

    @property
    def per_op(self) -> list[float]:
        return [s / self.ops for s in self.seconds]

    def best_per_op(self) -> float:
        return min(self.per_op)

    def median_per_op(self) -> float:
        return statistics.median(self.per_op)


def batch_shape(op_seconds: float, iterations: int, warmup: int, spin: bool,
                target_s: float = TARGET_S, max_queued: int = MAX_QUEUED, weight: int = 1) -> int:
    """Operations per timed iteration: enough to last target_s, within what the spin
    kernel can hold queued (then iterations are shorter than the target). `weight`:
    stream entries one operation makes (a bidirectional copy's events and waits)."""
    ops = max(1, math.ceil(target_s / max(op_seconds, 1e-9)))
    if spin:
        room = max_queued - 2 - warmup * weight - iterations     # spin, events, warm-ups
        ops = max(1, min(ops, room // max(iterations * weight, 1)))
    return ops


def queued(iterations: int, ops: int, warmup: int, spin: bool, weight: int = 1) -> int:
    """Entries a batch puts in the stream before the flag is released."""
    return (1 if spin else 0) + warmup * weight + 1 + iterations * (ops * weight + 1)


@dataclass
class Timer:
    """Runs batches of operations on one stream of a device."""
    dev: object
    stream: object = None
    flag: SpinFlag | None = None
    _events: list[int] = field(default_factory=list)
    spin_failed: bool = False      # a spin kernel timed out: later batches run without one

    def __post_init__(self):
        preload = getattr(self.dev, "preload", None)
        if preload is not None:      # no lazy kernel loading behind a spinning kernel
            preload()
        if self.stream is None:
            self.stream = self.dev.stream()
        if self.flag is None:
            self.flag = SpinFlag(self.dev)

    def _event_list(self, n: int) -> list[int]:
        while len(self._events) < n:
            self._events.append(self.dev.event())
        return self._events[:n]

    def run(self, op: Op, iterations: int, ops: int, warmup: int = 1, spin: bool = True,
            first: int = 0) -> Timed:
        """Queue (spin,) warm-ups, start event, iterations × (ops, event); release; wait.
        `first` numbers the operations (op(k, stream), k = first, first + 1, ...)."""
        weight = getattr(op, "weight", 1)
        spin = spin and not self.spin_failed
        if spin and queued(iterations, ops, warmup, spin, weight) > MAX_QUEUED:
            raise ValueError(f"{queued(iterations, ops, warmup, spin, weight)} entries would sit "
                             f"behind the spin kernel, more than {MAX_QUEUED}")
        dev, s = self.dev, self.stream
        events = self._event_list(iterations + 1)
        if spin:
            self.flag.arm()
            dev.launch("cb_spin", 1, 1, (self.flag.device, int(SPIN_TIMEOUT_S * 1e9)), s)
        k = first
        try:
            for _ in range(warmup):
                op(k, s)
                k += 1
            dev.record(events[0], s)
            for it in range(iterations):
                for _ in range(ops):
                    op(k, s)
                    k += 1
                dev.record(events[it + 1], s)
        finally:
            if spin:
                self.flag.release()     # whatever happened, never leave the device spinning
        dev.sync_stream(s)
        seconds = [dev.elapsed_ms(events[i], events[i + 1]) / 1e3 for i in range(iterations)]
        state = "off" if not spin else ("timed out" if self.flag.timed_out else "released")
        if state == "timed out":
            self.spin_failed = True  # the device never saw the flag: don't wait 5 s a batch again
        return Timed(seconds, ops, state, warmup)

    def measure(self, op: Op, iterations: int, warmup: int = 1, spin: bool = True,
                target_s: float = TARGET_S) -> Timed:
        """Run the operation once on its own (whatever it initialises on first use —
        another library's runtime, a lazily loaded kernel — must not happen behind a
        spinning kernel), probe its time, size the iterations to target_s, run them."""
        self.run(op, iterations=1, ops=1, warmup=0, spin=False)
        probe = self.run(op, iterations=2, ops=1, warmup=warmup, spin=spin, first=1)
        ops = batch_shape(probe.best_per_op(), iterations, warmup, spin, target_s,
                          weight=getattr(op, "weight", 1))
        return self.run(op, iterations, ops, warmup, spin, first=warmup + 3)

    def close(self) -> None:
        for ev in self._events:
            try:
                self.dev.destroy_event(ev)
            except Exception:       # noqa: BLE001 - closing after an error
                pass
        self._events = []
        if self.flag is not None:
            self.flag.close()


@dataclass(frozen=True)
class Shape:
    """A launch shape: threads per block and blocks per SM (grid = blocks × SMs)."""
    block: int
    per_sm: int

    def grid(self, sm_count: int) -> int:
        return self.per_sm * sm_count


#: shapes tried for streaming kernels (all reach full occupancy or half of it)
SHAPES = (Shape(256, 4), Shape(256, 8), Shape(512, 2), Shape(512, 4), Shape(1024, 1), Shape(1024, 2))


def fastest_shape(timer: Timer, make_op: Callable[[Shape], Op], shapes=SHAPES,
                  warmup: int = 1) -> tuple[Shape, dict[Shape, float]]:
    """The launch shape whose operation runs fastest (median of 3 short iterations each);
    also every shape's seconds per operation. `shapes` may hold any configuration
    make_op takes (the copy passes (shape, loads in flight) pairs)."""
    times = {}
    for shape in shapes:
        op = make_op(shape)
        probe = timer.run(op, iterations=1, ops=1, warmup=warmup)
        ops = batch_shape(probe.best_per_op(), 3, warmup, True, TARGET_S / 4)
        times[shape] = timer.run(op, iterations=3, ops=ops, warmup=warmup).median_per_op()
    best = min(times, key=times.get)
    return best, times
