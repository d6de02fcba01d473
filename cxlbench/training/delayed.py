"""The delayed parameter update's thread (ZeRO-Offload's DPU, Ren et al. 2021 §5.2).

The offload engine (engine.py) hands a step's host update — the optimizer over its
gradients, its NVMe I/O, the copies of the updated parameters back — to one
thread of its own, and joins it at the end of the next step, after that step's
forward and backward ran beside it. This module is that thread: what it times,
how its error reaches the main thread, and how many OpenMP threads it runs.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch

from cxlbench.training.nvme_optimizer import IoTimes


@dataclass
class UpdateTimes:
    """One delayed update, timed in the thread that ran it."""
    step: int                  # the training step whose gradients it applied
    seconds: float             # the whole update: optimizer, its I/O waits, the copies back
    ship_s: float = 0.0        # CPU: the copies into the compute copy
    h2d_tail_s: float = 0.0    # GPU: waiting for the last copies after the last chunk
    io: IoTimes | None = None


class DelayedUpdateError(RuntimeError):
    """The update thread failed: the main thread raises this at its next join."""


def _size_threads(n: int) -> None:
    """The update thread's OpenMP team: n threads. torch sizes a thread's team once, on
    its first parallel operator, from the last set_num_threads of any thread, so read it
    first (that initialisation) and only then set this thread's own."""
    torch.get_num_threads()
    torch.set_num_threads(n)


class DelayedUpdate:
    """One host thread that runs a step's update while the next step computes.

    At most one update is in flight: `launch` refuses a second before `join`, which
    waits for it and returns its times, or raises DelayedUpdateError with the thread's
    error (a failed update fails the step, never hangs it).

    Threads: torch's operators and the C core's AdamW are OpenMP regions, and each
    thread that opens one gets its own team. The update thread's team is `threads`
    wide (OffloadEngine chooses it) and the main thread keeps its own: the main's
    setting is restored after the update thread sized its team (set_num_threads also
    sets torch's default for new threads)."""

    def __init__(self, threads: int, events: list | None = None):
        self.threads = threads
        self.events = events
        self._lock = threading.Lock()
        self._pending: Future | None = None
        main = torch.get_num_threads()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="dpu-update", initializer=_size_threads,
                                        initargs=(threads,))
        self._pool.submit(lambda: None).result()      # the thread exists and has sized its team
        torch.set_num_threads(main)

    def event(self, name: str, step: int) -> None:
        """Record (name, step) in order, when a test asked for events."""
        if self.events is not None:
            with self._lock:
                self.events.append((name, step))

    @property
    def busy(self) -> bool:
        return self._pending is not None

    def launch(self, fn, step: int, *args) -> None:
        if self._pending is not None:
            raise RuntimeError("a delayed update is still in flight: join it first")

        def run():
            self.event("update_start", step)
            out = fn(step, *args)
            self.event("update_end", step)
            return out
        self.event("update_launched", step)
        self._pending = self._pool.submit(run)

    def alone(self, fn, *args):
        """fn(*args) on the update thread with nothing beside it, its result: a probe of
        the update as this thread runs it (its team, its CPU)."""
        if self._pending is not None:
            raise RuntimeError("a delayed update is still in flight: join it first")
        return self._pool.submit(fn, *args).result()

    def join(self) -> UpdateTimes | None:
        future, self._pending = self._pending, None
        if future is None:
            return None
        try:
            return future.result()
        except Exception as e:
            raise DelayedUpdateError(f"the delayed parameter update failed: {type(e).__name__}: {e}") from e

    def close(self) -> None:
        """Wait for an update in flight (its error is dropped: the step that would have
        joined it is not coming) and end the thread."""
        future, self._pending = self._pending, None
        if future is not None:
            try:
                future.result()
            except Exception:     # noqa: BLE001 - closing after a failure must not fail again
                pass
        self._pool.shutdown(wait=True)


def update_threads(cuda: bool) -> int:
    """The update thread's OpenMP team. A CPU run: one thread, since forward and backward
    already run a team on every core of the initiator; a second full team would add as
    many OpenMP threads again, whose idle ones spin (libgomp waits actively before it
    sleeps) on the cores the other team needs. A GPU run: every core but one, which
    the main thread keeps for launching the GPU's kernels (the host is otherwise idle
    while the GPU computes)."""
    if not cuda:
        return 1
    return max(1, len(os.sched_getaffinity(0)) - 1)
