"""AdamW whose state lives in a file on an NVMe tier (ZeRO-Infinity's scheme).

The file is a sequence of chunk records; record i holds chunk i's Adam moments
(exp_avg, exp_avg_sq) and, when the master parameters live on NVMe too, the
fp32 parameters first:

    [ p_i | m_i | v_i ]  (params on NVMe)      [ m_i | v_i ]  (params in host memory)

each `chunk` fp32 elements, so a step reads and writes the file sequentially in
large aligned requests. Records go through `n_buffers` page-aligned host
buffers on a chosen node: while chunk i is updated in one buffer, a reader
thread fills the next buffer with chunk i+1 and a writer thread writes chunk
i-1 back (double buffering with the default two). I/O uses O_DIRECT when the
file system accepts it, so the figures are the device's, not the page cache's;
when it does not, `o_direct` is False and the figures say so.

The update itself is optimizer.adamw_update on each chunk — the same kernel as
the in-memory path — so the parameters match the in-memory optimizer's.
"""
from __future__ import annotations

import ctypes
import os
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from cxlbench.training.optimizer import AdamWHyper, OnChunk, adamw_update, widen
from cxlbench.training.placement import HostArena

ALIGN_ELEMS = 1024           # chunk multiple: 4 KiB of fp32, the O_DIRECT alignment
PREFIX = "cxlbench-adamw-"   # state files: PREFIX<pid>-<random>.bin


def remove_stale(directory: str) -> list[str]:
    """Delete state files left by processes that no longer exist (a killed worker
    leaves its file behind; at 12 bytes a parameter they fill a disk fast)."""
    removed = []
    for name in os.listdir(directory):
        if not (name.startswith(PREFIX) and name.endswith(".bin")):
            continue
        pid = name[len(PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            try:
                os.unlink(os.path.join(directory, name))
                removed.append(name)
            except OSError:
                pass
    return removed


@dataclass
class IoTimes:
    """One step's I/O. *_wait: time the update loop stood waiting (exposed);
    *_busy: time the I/O threads spent in the calls (the device's share)."""
    read_wait_s: float = 0.0
    write_wait_s: float = 0.0
    read_busy_s: float = 0.0
    write_busy_s: float = 0.0
    compute_s: float = 0.0
    bytes_read: int = 0
    bytes_written: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, name: str, value: float) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + value)


class NvmeAdamW:
    def __init__(self, directory: str, numel: int, hyper: AdamWHyper, impl: str = "fused",
                 chunk: int = 1 << 22, buffer_node: int | None = None,
                 master: torch.Tensor | None = None, n_buffers: int = 2,
                 o_direct: bool = True, scratch: torch.Tensor | None = None):
        """master: the host fp32 parameters when they stay in memory; None puts them in
        the file (initialise with `initialize`)."""
        if chunk % ALIGN_ELEMS:
            raise ValueError(f"chunk must be a multiple of {ALIGN_ELEMS} elements")
        if n_buffers < 2:
            raise ValueError("n_buffers must be at least 2 (double buffering)")
        self.numel, self.hyper, self.impl, self.chunk = numel, hyper, impl, chunk
        self.master = master
        self.fields = 2 if master is not None else 3          # m, v (+ p)
        self.bounds = [(s, min(s + chunk, numel)) for s in range(0, numel, chunk)]
        self.steps = [torch.zeros((), dtype=torch.float32) for _ in self.bounds]
        self.record_bytes = self.fields * chunk * 4
        self.file_bytes = self.record_bytes * len(self.bounds)
        remove_stale(directory)
        self.path = os.path.join(directory, f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}.bin")
        self.fd, self.o_direct = _open(self.path, o_direct)
        try:
            os.posix_fallocate(self.fd, 0, self.file_bytes)
        except OSError:
            os.ftruncate(self.fd, self.file_bytes)
        self.arena = HostArena(n_buffers * self.record_bytes, buffer_node, "nvme-buffers")
        self.buffers = [self.arena.take(self.fields * chunk, torch.float32) for _ in range(n_buffers)]
        self.scratch = scratch
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="nvme-read")
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="nvme-write")

    # ---- the record layout -------------------------------------------------------

    def _views(self, buf: torch.Tensor, length: int) -> tuple[torch.Tensor, ...]:
        """(p, m, v) views of a buffer holding one record, `length` valid elements;
        p is the in-memory master slice's stand-in when the params are not in the file."""
        parts = [buf[k * self.chunk: k * self.chunk + length] for k in range(self.fields)]
        return tuple(parts) if self.fields == 3 else (None, *parts)

    def _offset(self, i: int) -> int:
        return i * self.record_bytes

    # ---- I/O ------------------------------------------------------------------------

    def _io(self, fn, buf: torch.Tensor, offset: int, times: IoTimes, busy: str, count: str):
        view = _memoryview(buf, self.record_bytes)
        t0 = time.perf_counter()
        done = 0
        while done < self.record_bytes:
            n = fn(self.fd, view[done:], offset + done)
            if n <= 0:
                raise OSError(f"{fn.__name__} returned {n} at offset {offset + done} of {self.path}")
            done += n
        times.add(busy, time.perf_counter() - t0)
        times.add(count, done)

    def _read(self, i, buf, times, after: Future | None):
        if after is not None:
            after.result()                 # the buffer's previous record is written out
        self._io(_preadv, buf, self._offset(i), times, "read_busy_s", "bytes_read")

    def _write(self, i, buf, times):
        self._io(_pwritev, buf, self._offset(i), times, "write_busy_s", "bytes_written")

    # ---- state ----------------------------------------------------------------------

    def initialize(self, params: torch.Tensor | None = None) -> None:
        """Write the initial state: moments zero, and the fp32 params (when in the file)."""
        if self.fields == 3 and params is None:
            raise ValueError("the params live in the file: initialise them")
        times = IoTimes()
        buf = self.buffers[0]
        for i, (s, e) in enumerate(self.bounds):
            buf.zero_()
            if self.fields == 3:
                buf[: e - s].copy_(params[s:e])
            self._write(i, buf, times)
        os.fsync(self.fd)

    def read_params(self) -> torch.Tensor:
        """All fp32 parameters (from the file, or the in-memory master)."""
        if self.master is not None:
            return self.master[: self.numel].clone()
        out = torch.empty(self.numel, dtype=torch.float32)
        times = IoTimes()
        for i, (s, e) in enumerate(self.bounds):
            self._read(i, self.buffers[0], times, None)
            out[s:e].copy_(self.buffers[0][: e - s])
        return out

    def step(self, grads: torch.Tensor, on_chunk: OnChunk | None = None) -> IoTimes:
        """One AdamW step over all chunks; grads is the flat gradient (fp32 or bf16)."""
        times = IoTimes()
        nb, n = len(self.buffers), len(self.bounds)
        reads: dict[int, Future] = {}
        writes: dict[int, Future] = {}

        def submit_read(j: int) -> None:
            prev = writes.get(j - nb)                      # last user of buffer j % nb
            reads[j] = self._reader.submit(self._read, j, self.buffers[j % nb], times, prev)

        for j in range(min(nb - 1, n)):
            submit_read(j)
        for i, (s, e) in enumerate(self.bounds):
            if i + nb - 1 < n:
                submit_read(i + nb - 1)
            t0 = time.perf_counter()
            reads.pop(i).result()
            t1 = time.perf_counter()
            times.read_wait_s += t1 - t0
            p, m, v = self._views(self.buffers[i % nb], e - s)
            if p is None:
                p = self.master[s:e]
            g = widen(grads[s:e], self.scratch)
            adamw_update([p], [g], [m], [v], [self.steps[i]], self.hyper, self.impl)
            if on_chunk is not None:
                on_chunk(s, e, p)
            times.compute_s += time.perf_counter() - t1
            writes[i] = self._writer.submit(self._write, i, self.buffers[i % nb], times)
        t0 = time.perf_counter()
        for f in writes.values():
            f.result()
        times.write_wait_s += time.perf_counter() - t0
        return times

    def verify_buffers(self, nodes_of=None) -> dict:
        return self.arena.verify(nodes_of) if nodes_of else self.arena.verify()

    def close(self) -> None:
        self._reader.shutdown(wait=True)
        self._writer.shutdown(wait=True)
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.arena.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _open(path: str, o_direct: bool) -> tuple[int, bool]:
    flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC
    if o_direct and hasattr(os, "O_DIRECT"):
        try:
            return os.open(path, flags | os.O_DIRECT, 0o600), True
        except OSError:
            pass                           # tmpfs and some others refuse O_DIRECT
    return os.open(path, flags, 0o600), False


def _memoryview(buf: torch.Tensor, nbytes: int) -> memoryview:
    raw = (ctypes.c_char * nbytes).from_address(buf.data_ptr())
    return memoryview(raw).cast("B")


def _preadv(fd: int, view: memoryview, offset: int) -> int:
    return os.preadv(fd, [view], offset)


def _pwritev(fd: int, view: memoryview, offset: int) -> int:
    return os.pwritev(fd, [view], offset)


def file_bandwidth(opt: NvmeAdamW) -> dict[str, float]:
    """Sequential read and write GB/s over the optimizer's own file, through its own
    buffers and record size: the B_read and B_write of the step-time model. The write
    pass writes back what it has just read (the state stays intact) and counts only
    the writes and the closing fsync."""
    reads, writes = IoTimes(), IoTimes()
    for i in range(len(opt.bounds)):
        opt._read(i, opt.buffers[0], reads, None)
    for i in range(len(opt.bounds)):
        opt._read(i, opt.buffers[0], IoTimes(), None)
        opt._write(i, opt.buffers[0], writes)
    t0 = time.perf_counter()
    os.fsync(opt.fd)
    write_s = writes.write_busy_s + time.perf_counter() - t0
    return {"read_GBps": reads.bytes_read / max(reads.read_busy_s, 1e-12) / 1e9,
            "write_GBps": writes.bytes_written / max(write_s, 1e-12) / 1e9}


def step_rate(opt: NvmeAdamW, grads: torch.Tensor, steps: int = 3,
              before_each=None, cpu: list[float] | None = None) -> list[float]:
    """Parameters/s of whole file-backed steps, I/O and its orchestration included:
    R_opt for state on NVMe. With small chunks the step costs its per-chunk hand-offs
    between threads more than its bytes, which the file's bandwidth alone misses.
    The state advances by `steps` steps (call it after the run's own steps). cpu, when
    given, gets each step's process CPU seconds: the update's, its reader's and writer's."""
    rates = []
    for _ in range(steps):
        if before_each is not None:
            before_each()
        c0, t0 = time.process_time(), time.perf_counter()
        opt.step(grads)
        rates.append(opt.numel / (time.perf_counter() - t0))
        if cpu is not None:
            cpu.append(time.process_time() - c0)
    return rates
