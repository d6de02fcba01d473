"""A numpy stand-in for CudaDevice, so that every GPU family's measuring code runs in
tests on machines without a GPU. It never measures anything: durations come from
the rates it is given, so a test can check the arithmetic exactly.

It is strict where a real GPU is: device addresses differ from host addresses
(an unmapped host address handed to a kernel, or a freed buffer, is a
FakeFault, as it would be an illegal address), kernels get exactly their
declared arguments (cxlbench.gpu.kernels.SIGNATURES), and a stream holds its
work until it is synchronised — behind a spin kernel, until the flag is set:
a pageable copy queued behind an unreleased spin kernel (which would block the
host forever on a GPU) is a FakeDeadlock, and a queue longer than the
device's depth runs the spin kernel unreleased, which then reports a timeout.

`wrong` names kernels (or "memcpy") that then produce a wrong result, to
prove a family refuses it.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import numpy as np

from cxlbench.gpu.buffers import host_array
from cxlbench.gpu.kernels import SIGNATURES, SINGLE_THREAD, WORD_BYTES, convert, named

DEVICE_OFFSET = 1 << 44
MEMCPY_H2D, MEMCPY_D2H, MEMCPY_D2D = 1, 2, 3


class FakeFault(Exception):
    """What would be an illegal memory access (or API misuse) on a real GPU."""


class FakeDeadlock(Exception):
    """Work queued so that a real GPU and its host would wait on each other."""


@dataclass
class Range:
    host: int
    device: int
    nbytes: int
    kind: str                    # device / managed / mapped / pinned
    owner: object = None
    resident: str = "host"       # managed memory: where its pages are


@dataclass
class FakeStream:
    ptr: int
    clock: float = 0.0
    spin_pending: bool = False
    behind_spin: int = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@dataclass
class FakeDevice:
    sm_count: int = 4
    l2_bytes: int = 256 << 10
    total_bytes: int = 1 << 30
    rates: dict = field(default_factory=lambda: {
        "h2d": 50e9, "d2h": 40e9, "pageable": 10e9, "hbm": 2e12, "mapped": 20e9,
        "fault": 5e9, "prefetch": 45e9})
    chase_ns: float = 500.0          # per load, device memory
    host_chase_ns: float = 1500.0    # per load, mapped host memory
    clock_mhz: float = 1500.0
    queue_depth: int = 1024
    best_shape: tuple = (512, 4)     # (block, blocks per SM) that runs at the full rate
    wrong: set = field(default_factory=set)
    slow: set = field(default_factory=set)    # copy kernels that run at 0.8 of the rate at any shape

    kind = "fake"

    def __post_init__(self):
        self.xp = np
        self.ordinal = 0
        self.name = "Fake GPU"
        self.bus_id = "0000:17:00.0"
        self.clock_khz = int(self.clock_mhz * 1000)
        self.max_threads_per_sm = 2048
        self.compute_capability = (9, 0)
        self.ecc_enabled = True
        self.async_engines = 2
        self.concurrent_managed = True   # Linux, Pascal or later: managed pages move on fault
        self.ranges: list[Range] = []
        self.queue: list[tuple[FakeStream, object]] = []
        self.events: dict[int, float | None] = {}
        self.launches: list[tuple[str, int, int, dict]] = []
        self.copies: list[tuple[int, int]] = []        # (kind, bytes)
        self._streams = 0
        self._event_ids = 0
        self._patterns: dict = {}
        from cxlbench.gpu.telemetry import Telemetry
        self.telemetry = Telemetry(FakeTelemetry())

    # ---- description ---------------------------------------------------------------

    def describe(self) -> dict:
        return {"name": self.name, "cuda_device": 0, "bus_id": self.bus_id, "sm_count": self.sm_count,
                "l2_bytes": self.l2_bytes, "compute_capability": "9.0", "memory_bytes": self.total_bytes,
                "fake": True}

    def mem_info(self) -> tuple[int, int]:
        used = sum(r.nbytes for r in self.ranges if r.kind in ("device", "managed"))
        return self.total_bytes - used, self.total_bytes

    # ---- memory ----------------------------------------------------------------------

    def _new(self, nbytes: int, kind: str, device_offset: int | None) -> Range:
        arr = np.empty(nbytes + 4096, np.uint8)
        host = (arr.ctypes.data + 4095) // 4096 * 4096
        dev = host + device_offset if device_offset is not None else host
        r = Range(host, dev, nbytes, kind, arr)
        self.ranges.append(r)
        return r

    def malloc(self, nbytes: int) -> int:
        if nbytes > self.mem_info()[0]:
            raise FakeFault("cudaErrorMemoryAllocation")
        return self._new(nbytes, "device", DEVICE_OFFSET).device

    def malloc_managed(self, nbytes: int) -> int:
        return self._new(nbytes, "managed", None).device

    def free(self, ptr: int) -> None:
        r = next((r for r in self.ranges if r.device == ptr and r.kind in ("device", "managed")), None)
        if r is None:
            raise FakeFault(f"cudaFree of {ptr:#x}, which is not an allocation")
        self.ranges.remove(r)

    def host_alloc_mapped(self, nbytes: int) -> int:
        return self._new(nbytes, "mapped", DEVICE_OFFSET).host

    def free_host(self, ptr: int) -> None:
        r = next((r for r in self.ranges if r.host == ptr and r.owner is not None and r.kind == "mapped"), None)
        if r is None:
            raise FakeFault(f"cudaFreeHost of {ptr:#x}")
        self.ranges.remove(r)

    def host_register(self, addr: int, nbytes: int, mapped: bool = True) -> None:
        for r in self.ranges:
            if r.kind in ("mapped", "pinned") and r.host < addr + nbytes and addr < r.host + r.nbytes:
                raise FakeFault("cudaErrorHostMemoryAlreadyRegistered")
        self.ranges.append(Range(addr, addr + DEVICE_OFFSET if mapped else 0, nbytes,
                                 "mapped" if mapped else "pinned"))

    def host_unregister(self, addr: int) -> None:
        r = next((r for r in self.ranges if r.host == addr and r.owner is None
                  and r.kind in ("mapped", "pinned")), None)
        if r is None:
            raise FakeFault(f"cudaHostUnregister of {addr:#x}, which is not registered")
        self.ranges.remove(r)

    def mapped_pointer(self, host_addr: int) -> int:
        for r in self.ranges:
            if r.kind == "mapped" and r.host <= host_addr < r.host + r.nbytes:
                return r.device + (host_addr - r.host)
        raise FakeFault(f"{host_addr:#x} is not mapped host memory")

    def _device_range(self, addr: int, nbytes: int) -> Range:
        for r in self.ranges:
            if r.kind in ("device", "managed", "mapped") and r.device <= addr \
                    and addr + nbytes <= r.device + r.nbytes:
                return r
        raise FakeFault(f"illegal address: [{addr:#x}, +{nbytes}) is not device-accessible memory")

    def translate(self, addr: int, nbytes: int) -> int:
        r = self._device_range(addr, nbytes)
        return r.host + (addr - r.device)

    def _host_side(self, addr: int, nbytes: int) -> bool:
        """Whether a host range is page-locked (registered or host-allocated)."""
        for r in self.ranges:
            if r.kind in ("mapped", "pinned") and r.host <= addr and addr + nbytes <= r.host + r.nbytes:
                return True
        return False

    def view(self, ptr: int, nbytes: int, dtype, owner=None):
        return host_array(self.translate(ptr, nbytes), nbytes, dtype, owner)

    def prefetch(self, ptr: int, nbytes: int, to_device: bool, stream) -> None:
        r = self._device_range(ptr, nbytes)
        if r.kind != "managed":
            raise FakeFault("cudaMemPrefetchAsync of memory that is not managed")

        def run():
            moved = r.resident != ("device" if to_device else "host")
            r.resident = "device" if to_device else "host"
            return nbytes / self.rates["prefetch"] if moved else 2e-6
        self._enqueue(stream, run)

    # ---- streams and events --------------------------------------------------------------

    def stream(self) -> FakeStream:
        self._streams += 1
        return FakeStream(0x5000 + self._streams)

    def event(self) -> int:
        self._event_ids += 1
        self.events[self._event_ids] = None
        return self._event_ids

    def destroy_event(self, ev: int) -> None:
        self.events.pop(ev, None)

    def record(self, ev: int, stream) -> None:
        def run():
            self.events[ev] = stream.clock
        self._enqueue(stream, run, timed=False)

    def wait_event(self, stream, ev: int) -> None:
        def run():
            t = self.events.get(ev)
            if t is None:
                raise FakeFault("a stream waits on an event that was never recorded")
            stream.clock = max(stream.clock, t)
        self._enqueue(stream, run, timed=False)

    def sync_event(self, ev: int) -> None:
        self._drain()

    def elapsed_ms(self, start: int, end: int) -> float:
        a, b = self.events.get(start), self.events.get(end)
        if a is None or b is None:
            raise FakeFault("cudaErrorInvalidResourceHandle: an event was not recorded")
        return (b - a) * 1e3

    def sync_stream(self, stream) -> None:
        self._drain()

    def synchronize(self) -> None:
        self._drain()

    def _enqueue(self, stream, fn, timed: bool = True) -> None:
        self.queue.append((stream, fn, timed))
        if stream.spin_pending:
            stream.behind_spin += 1
            if stream.behind_spin > self.queue_depth:
                self._drain()             # the host would block; the spin kernel times out

    def _drain(self) -> None:
        while self.queue:
            stream, fn, timed = self.queue.pop(0)
            took = fn()
            if timed:
                stream.clock += float(took or 0.0)

    # ---- copies ------------------------------------------------------------------------

    def memcpy(self, dst: int, src: int, nbytes: int, kind: int, stream) -> None:
        if kind == MEMCPY_H2D:
            pinned = self._host_side(src, nbytes)
            d, s, rate = self.translate(dst, nbytes), src, self.rates["h2d" if pinned else "pageable"]
        elif kind == MEMCPY_D2H:
            pinned = self._host_side(dst, nbytes)
            d, s, rate = dst, self.translate(src, nbytes), self.rates["d2h" if pinned else "pageable"]
        elif kind == MEMCPY_D2D:
            pinned = True
            d, s, rate = self.translate(dst, nbytes), self.translate(src, nbytes), self.rates["hbm"] / 2
        else:
            raise FakeFault(f"memcpy kind {kind}")
        if not pinned and stream.spin_pending:
            raise FakeDeadlock("a pageable cudaMemcpyAsync queued behind a spinning kernel: the "
                               "host would wait for the device and the device for the host")
        self.copies.append((kind, nbytes))
        wrong = "memcpy" in self.wrong

        def run():
            ctypes.memmove(d, s, nbytes - (8 if wrong else 0))
            return nbytes / rate
        self._enqueue(stream, run)

    def memcpy_peer(self, *args, **kwargs) -> None:
        raise FakeFault("the fake has one device")

    def memset(self, ptr: int, value: int, nbytes: int, stream) -> None:
        d = self.translate(ptr, nbytes)
        self._enqueue(stream, lambda: (ctypes.memset(d, value, nbytes), 0.0)[1])

    def enable_peer(self, peer: int) -> bool:
        return False

    def device_count(self) -> int:
        return 1

    # ---- kernels -------------------------------------------------------------------------

    def preload(self) -> None:
        self.preloaded = True

    def launch(self, name: str, grid: int, block: int, args, stream) -> None:
        if name not in SIGNATURES:
            raise FakeFault(f"no kernel {name}")
        a = named(name, [int(v) if not isinstance(v, float) else v for v in convert(name, args)])
        if name in SINGLE_THREAD:
            if (grid, block) != (1, 1):
                raise FakeFault(f"{name} must run as one thread, not {grid} x {block}")
        elif block % 32 or not 0 < block <= 1024 or grid < 1:
            raise FakeFault(f"bad launch shape {grid} x {block}: block_sum needs whole warps")
        self.launches.append((name, grid, block, a))
        if any(st.spin_pending for st, *_ in self.queue) and not getattr(self, "preloaded", False):
            raise FakeDeadlock(f"{name} launched for the first time behind a spinning kernel: "
                               f"lazy module loading would wait for it")
        if name == "cb_spin":
            flag = host_array(self.translate(a["flag"], 8), 8, np.int32)
            stream.spin_pending = True
            stream.behind_spin = 0

            def spin():
                stream.spin_pending = False
                if flag[0] == 0:
                    flag[1] = 1
                    return a["timeout_ns"] / 1e9
                return 1e-6
            self.queue.append((stream, spin, True))
            return
        kind = {"cb_chase": "chase", "cb_chase_cv": "chase", "cb_fill_words": "fill",
                "cb_fill_doubles": "fill", "cb_copy": "copy", "cb_copy8": "copy", "cb_triad": "triad"}.get(name)
        emulate = getattr(self, "_k_" + (kind or name.removeprefix("cb_").split("_w")[0]))
        self._enqueue(stream, lambda: emulate(name, grid, block, a))

    def _rate(self, addr: int, nbytes: int, grid: int, block: int) -> float:
        """Bytes per second a kernel reaches on this memory with this shape (managed
        memory still on the host is faulted over first)."""
        r = self._device_range(addr, nbytes)
        rate = self.rates["mapped"] if r.kind == "mapped" else self.rates["hbm"]
        best = (block, grid // self.sm_count) == self.best_shape
        return rate if best else rate * 0.8

    def _fault(self, addr: int, nbytes: int) -> float:
        r = self._device_range(addr, nbytes)
        if r.kind == "managed" and r.resident == "host":
            r.resident = "device"
            return nbytes / self.rates["fault"]
        return 0.0

    def _k_chase(self, name, grid, block, a):
        start = a["start"]
        r = self._device_range(start, 8)
        words = host_array(r.host, r.nbytes, np.uint64)
        p = start
        total = a["warm"] + a["steps"] - (1 if name in self.wrong else 0)
        for _ in range(total):
            p = int(words[(p - r.device) // 8])
        ns = (self.host_chase_ns if r.kind == "mapped" else self.chase_ns)
        out = self.view(a["out"], 24, np.uint64)
        out[0] = int(a["steps"] * ns * self.clock_mhz / 1e3)
        out[1] = int(a["steps"] * ns)
        out[2] = p
        return (a["warm"] + a["steps"]) * ns / 1e9 + 5e-6

    def _k_fill(self, name, grid, block, a):
        if name == "cb_fill_words":
            v = self.view(a["base"], a["words"] * 8, np.uint64)
            v[:] = np.arange(a["words"], dtype=np.uint64) ^ np.uint64(a["seed"])
            return a["words"] * 8 / self.rates["hbm"]
        v = self.view(a["base"], a["count"] * 8, np.float64)
        v[:] = ((np.arange(a["count"], dtype=np.uint64) * np.uint64(a["mul"])) % np.uint64(a["mod"]))
        return a["count"] * 8 / self.rates["hbm"]

    def _k_load(self, name, grid, block, a):
        from cxlbench.gpu import correctness as check
        width = int(name.rsplit("_w", 1)[1])
        count, stride = a["count"], a["stride"]
        span = count * stride
        data = self.view(a["base"], span, np.uint8)
        total = check.strided_sum(np, data, count, stride, width, WORD_BYTES[width])
        if name in self.wrong:
            total += 1
        out = self.view(a["out"], grid * 8, np.uint64)
        out[:] = 0
        out[0] = np.uint64(total & ((1 << 64) - 1))
        fault = self._fault(a["base"], span)
        return fault + count * width / self._rate(a["base"], span, grid, block)

    def _k_store(self, name, grid, block, a):
        width = int(name.rsplit("_w", 1)[1])
        word = WORD_BYTES[width]
        count, stride = a["count"], a["stride"]
        span = count * stride
        data = self.view(a["base"], span, np.uint8).reshape(count, stride)
        key = (count, width, a["seed"])
        if key not in self._patterns:             # the same stores are emulated many times
            k = width // word
            dt = np.uint32 if word == 4 else np.uint64
            values = np.arange(count * k, dtype=np.uint64).astype(dt) ^ dt(a["seed"] & ((1 << 8 * word) - 1))
            self._patterns = {key: values.view(np.uint8).reshape(count, width)}
        n = count - (1 if name in self.wrong else 0)
        if width == stride:
            data.reshape(-1)[:n * width] = self._patterns[key].reshape(-1)[:n * width]
        else:
            data[:n, :width] = self._patterns[key][:n]
        fault = self._fault(a["base"], span)
        # a partial sector costs a whole sector read and written back; others what they store
        moved = 2 * 32 * count if width < 32 and stride >= 32 else width * count
        return fault + moved / self._rate(a["base"], span, grid, block)

    def _k_copy(self, name, grid, block, a):
        n = a["n"] * 16
        dst, src = self.view(a["dst"], n, np.uint8), self.view(a["src"], n, np.uint8)
        dst[: n - (16 if name in self.wrong else 0)] = src[: n - (16 if name in self.wrong else 0)]
        return 2 * n / (self._rate(a["dst"], n, grid, block) * (0.8 if name in self.slow else 1.0))

    def _k_triad(self, name, grid, block, a):
        n = a["n"] * 2
        av, bv, cv = (self.view(a[x], n * 8, np.float64) for x in "abc")
        av[:] = bv + a["s"] * cv
        if name in self.wrong:
            av[-1] += 1.0
        return 3 * n * 8 / self._rate(a["a"], n * 8, grid, block)


class FakeTelemetry:
    """Readings a test can set."""
    source = "fake"

    def __init__(self):
        self.static_values = {"power_limit_w": 700.0, "ecc_mode": "on", "ecc_pending": "on",
                              "sm_clock_max_mhz": 1980.0, "mem_clock_max_mhz": 2619.0}
        self.counts = {"ecc_corrected_volatile": 0, "ecc_uncorrected_volatile": 0,
                       "ecc_corrected_aggregate": 0, "ecc_uncorrected_aggregate": 0}
        self.reading = {"sm_clock_mhz": 1500.0, "mem_clock_mhz": 2619.0, "power_w": 300.0,
                        "temperature_c": 40.0, "reasons": 0}

    def static(self) -> dict:
        return dict(self.static_values)

    def ecc_counts(self) -> dict:
        return dict(self.counts)

    def sample(self) -> dict:
        return dict(self.reading)
