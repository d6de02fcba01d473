"""One CUDA device through cupy: the narrow surface every GPU family uses.

Everything is a raw address or handle (ints), as the CUDA runtime has it:
device allocations, page-locked host ranges and their device mappings, managed
allocations, streams, events, copies and kernel launches. Arrays appear only
where results are checked (`view`), as cupy arrays over device memory.

cupy is imported here, when a device is opened in a worker, never when the
package is imported or a suite is planned. `open_device` turns "no cupy", "no
driver" and "no device" into Unavailable with the reason (a family records the
case as skipped with it); tests put a numpy-backed
fake (tests/fakes/gpu.py) in its place.
"""
from __future__ import annotations

import ctypes
import importlib.util
from typing import Any

from cxlbench.gpu.errors import NO_GPU, Unavailable

# CUDA runtime constants (stable ABI values from the CUDA headers)
HOST_REGISTER_PORTABLE = 0x01
HOST_REGISTER_MAPPED = 0x02
HOST_ALLOC_PORTABLE = 0x01
HOST_ALLOC_MAPPED = 0x02
MEMCPY_H2D, MEMCPY_D2H, MEMCPY_D2D = 1, 2, 3
STREAM_NON_BLOCKING = 0x01
MEM_ATTACH_GLOBAL = 0x01
CPU_DEVICE_ID = -1


def runtime_missing() -> str | None:
    """Why GPU cases cannot run in this Python (None when cupy is importable)."""
    if importlib.util.find_spec("cupy") is None:
        return "cupy is not installed (pip install cupy-cuda12x)"
    return None


def cuda_ordinal(rt, bus_id: str | None, index: int) -> int:
    """The CUDA device number of a GPU known by its PCI address (topology's order is
    NVML's, by bus; CUDA's default order is fastest first, and CUDA_VISIBLE_DEVICES
    renumbers): by bus id when known, else the index."""
    if bus_id:
        try:
            return int(rt.deviceGetByPCIBusId(bus_id))
        except Exception:            # noqa: BLE001 - not visible to CUDA: fall back to the index
            pass
    return index


def open_device(env, initiator_name: str) -> "CudaDevice":
    """The CUDA device behind a GPU initiator (gpu:N), or Unavailable saying why not."""
    missing = runtime_missing()
    if missing:
        raise Unavailable(missing)
    import cupy
    rt = cupy.cuda.runtime
    try:
        count = rt.getDeviceCount()
    except Exception as e:           # noqa: BLE001 - no driver, no device: CUDARuntimeError
        raise Unavailable(f"{NO_GPU}: CUDA reports {e}") from None
    if count == 0:
        raise Unavailable(NO_GPU)
    initiator = env.initiators.get(initiator_name) if env is not None else None
    index = initiator.gpu if initiator is not None and initiator.gpu is not None else 0
    gpu = next((g for g in env.machine.gpus if g.index == index), None) if env is not None else None
    ordinal = cuda_ordinal(rt, gpu.pci_bus_id if gpu else None, index)
    if ordinal >= count:
        raise Unavailable(f"{NO_GPU}: CUDA sees {count} device(s), not device {ordinal} for {initiator_name}")
    return CudaDevice(ordinal)


class CudaDevice:
    """A CUDA device and the runtime calls the families make on it."""

    kind = "cuda"

    def __init__(self, ordinal: int):
        import cupy
        self.cp = cupy
        self.rt = cupy.cuda.runtime
        self.xp = cupy
        self.ordinal = ordinal
        cupy.cuda.Device(ordinal).use()
        p = self.rt.getDeviceProperties(ordinal)
        name = p.get("name", b"?")
        self.name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
        self.sm_count = int(p["multiProcessorCount"])
        self.l2_bytes = int(p.get("l2CacheSize", 0))
        self.clock_khz = int(p.get("clockRate", 0))          # nominal maximum, 0 on CUDA >= 13
        self.memory_clock_khz = int(p.get("memoryClockRate", 0))
        self.memory_bus_bits = int(p.get("memoryBusWidth", 0))
        self.max_threads_per_sm = int(p.get("maxThreadsPerMultiProcessor", 2048))
        self.compute_capability = (int(p.get("major", 0)), int(p.get("minor", 0)))
        self.ecc_enabled = bool(p.get("ECCEnabled", 0))
        self.concurrent_managed = bool(p.get("concurrentManagedAccess", 0))
        self.can_map_host = bool(p.get("canMapHostMemory", 1))
        self.host_pointer_for_registered = bool(p.get("canUseHostPointerForRegisteredMem", 0))
        self.async_engines = int(p.get("asyncEngineCount", 0))
        self.total_bytes = int(p.get("totalGlobalMem", 0))
        try:
            self.bus_id = self.rt.deviceGetPCIBusId(ordinal)
        except Exception:            # noqa: BLE001
            self.bus_id = None
        self._module = None
        self._kernels: dict[str, Any] = {}
        self._streams: dict[int, Any] = {}
        self.telemetry = None        # set by cxlbench.gpu.open()

    # ---- description -------------------------------------------------------------

    def describe(self) -> dict:
        return {"name": self.name, "cuda_device": self.ordinal, "bus_id": self.bus_id,
                "sm_count": self.sm_count, "l2_bytes": self.l2_bytes,
                "compute_capability": "%d.%d" % self.compute_capability,
                "memory_bytes": self.total_bytes, "ecc_enabled": self.ecc_enabled,
                "copy_engines": self.async_engines, "cupy": self.cp.__version__,
                "cuda_runtime": self.rt.runtimeGetVersion(),
                "cuda_driver": self.rt.driverGetVersion()}

    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes of device memory now."""
        free, total = self.rt.memGetInfo()
        return int(free), int(total)

    # ---- memory ------------------------------------------------------------------

    def malloc(self, nbytes: int) -> int:
        return int(self.rt.malloc(nbytes))

    def free(self, ptr: int) -> None:
        self.rt.free(ptr)

    def malloc_managed(self, nbytes: int) -> int:
        return int(self.rt.mallocManaged(nbytes, MEM_ATTACH_GLOBAL))

    def host_alloc_mapped(self, nbytes: int) -> int:
        """Page-locked host memory the device can read and write in place."""
        return int(self.rt.hostAlloc(nbytes, HOST_ALLOC_MAPPED | HOST_ALLOC_PORTABLE))

    def free_host(self, ptr: int) -> None:
        self.rt.freeHost(ptr)

    def host_register(self, addr: int, nbytes: int, mapped: bool = True) -> None:
        flags = HOST_REGISTER_PORTABLE | (HOST_REGISTER_MAPPED if mapped else 0)
        self.rt.hostRegister(addr, nbytes, flags)

    def host_unregister(self, addr: int) -> None:
        self.rt.hostUnregister(addr)

    def mapped_pointer(self, host_addr: int) -> int:
        """The device address of page-locked host memory (cudaHostGetDevicePointer):
        cupy has no wrapper for it, but cudaPointerGetAttributes returns the same
        devicePointer; the driver's cuMemHostGetDevicePointer is the fallback."""
        try:
            ptr = int(self.rt.pointerGetAttributes(host_addr).devicePointer)
            if ptr:
                return ptr
        except Exception:            # noqa: BLE001
            pass
        return _driver_host_device_pointer(host_addr)

    def view(self, ptr: int, nbytes: int, dtype, owner=None):
        """A cupy array over device-accessible memory (device, managed or mapped)."""
        cp = self.cp
        mem = cp.cuda.UnownedMemory(ptr, nbytes, owner, self.ordinal)
        itemsize = cp.dtype(dtype).itemsize
        return cp.ndarray((nbytes // itemsize,), dtype, cp.cuda.MemoryPointer(mem, 0))

    def prefetch(self, ptr: int, nbytes: int, to_device: bool, stream) -> None:
        """cudaMemPrefetchAsync of managed memory to this device or to the CPU. CUDA 13
        replaced the call taking a device number by one taking a location; when cupy's
        wrapper fails, the driver's cuMemPrefetchAsync_v2 (CUDA >= 12.2) is called."""
        try:
            self.rt.memPrefetchAsync(ptr, nbytes, self.ordinal if to_device else CPU_DEVICE_ID,
                                     stream.ptr)
            return
        except Exception as e:       # noqa: BLE001
            first = e
        try:
            _driver_prefetch(ptr, nbytes, self.ordinal if to_device else None, stream.ptr)
        except Exception as e:       # noqa: BLE001
            raise Unavailable(f"managed memory cannot be prefetched here: cudaMemPrefetchAsync "
                              f"failed ({first}) and so did the driver's ({e})") from None

    # ---- streams, events, copies -------------------------------------------------

    def stream(self):
        return self.cp.cuda.Stream(non_blocking=True)

    def event(self) -> int:
        return int(self.rt.eventCreate())

    def destroy_event(self, ev: int) -> None:
        self.rt.eventDestroy(ev)

    def record(self, ev: int, stream) -> None:
        self.rt.eventRecord(ev, stream.ptr)

    def wait_event(self, stream, ev: int) -> None:
        self.rt.streamWaitEvent(stream.ptr, ev, 0)

    def sync_event(self, ev: int) -> None:
        self.rt.eventSynchronize(ev)

    def elapsed_ms(self, start: int, end: int) -> float:
        return float(self.rt.eventElapsedTime(start, end))

    def sync_stream(self, stream) -> None:
        self.rt.streamSynchronize(stream.ptr)

    def synchronize(self) -> None:
        self.rt.deviceSynchronize()

    def memcpy(self, dst: int, src: int, nbytes: int, kind: int, stream) -> None:
        self.rt.memcpyAsync(dst, src, nbytes, kind, stream.ptr)

    def memcpy_peer(self, dst: int, dst_device: int, src: int, src_device: int, nbytes: int,
                    stream) -> None:
        self.rt.memcpyPeerAsync(dst, dst_device, src, src_device, nbytes, stream.ptr)

    def memset(self, ptr: int, value: int, nbytes: int, stream) -> None:
        self.rt.memsetAsync(ptr, value, nbytes, stream.ptr)

    def enable_peer(self, peer: int) -> bool:
        """Peer access from this device to `peer`; False when the pair cannot."""
        if not self.rt.deviceCanAccessPeer(self.ordinal, peer):
            return False
        try:
            self.rt.deviceEnablePeerAccess(peer)
        except self.rt.CUDARuntimeError as e:
            if "AlreadyEnabled" not in str(e):
                raise
        return True

    def device_count(self) -> int:
        return int(self.rt.getDeviceCount())

    # ---- kernels -------------------------------------------------------------------

    def kernel(self, name: str):
        if name not in self._kernels:
            from cxlbench.gpu.kernels import SOURCE
            if self._module is None:
                self._module = self.cp.RawModule(code=SOURCE)
            try:
                self._kernels[name] = self._module.get_function(name)
            except Exception as e:   # noqa: BLE001 - NVRTC's log says what failed
                raise RuntimeError(f"the CUDA kernels did not compile or load ({name}): {e}") from e
        return self._kernels[name]

    def preload(self) -> None:
        """Compile the module and load every kernel now. Since CUDA 12.2 modules load
        lazily, at first use, and loading may synchronise the context: a kernel loaded
        for the first time while the spin kernel waits on the host would wait for it,
        and the host for the launch. Everything is loaded before any batch is queued."""
        from cxlbench.gpu.kernels import SIGNATURES
        for name in SIGNATURES:
            self.kernel(name)

    def launch(self, name: str, grid: int, block: int, args, stream) -> None:
        from cxlbench.gpu.kernels import convert
        fn = self.kernel(name)
        with stream:
            fn((int(grid),), (int(block),), convert(name, args))


def _driver_host_device_pointer(host_addr: int) -> int:
    """cuMemHostGetDevicePointer from the driver library (always there with a GPU)."""
    lib = ctypes.CDLL("libcuda.so.1")
    fn = lib.cuMemHostGetDevicePointer_v2
    fn.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    out = ctypes.c_uint64(0)
    status = fn(ctypes.byref(out), ctypes.c_void_p(host_addr), 0)
    if status != 0:
        raise RuntimeError(f"cuMemHostGetDevicePointer failed with CUresult {status}: the range "
                           f"is not page-locked with the mapped flag")
    return int(out.value)


class _MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


MEM_LOCATION_DEVICE, MEM_LOCATION_HOST = 1, 2


def _driver_prefetch(ptr: int, nbytes: int, device: int | None, stream: int) -> None:
    """cuMemPrefetchAsync_v2(ptr, n, {DEVICE, ordinal} or {HOST, 0}, 0, stream)."""
    lib = ctypes.CDLL("libcuda.so.1")
    fn = lib.cuMemPrefetchAsync_v2
    fn.argtypes = [ctypes.c_uint64, ctypes.c_size_t, _MemLocation, ctypes.c_uint, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    where = _MemLocation(MEM_LOCATION_DEVICE, device) if device is not None else \
        _MemLocation(MEM_LOCATION_HOST, 0)
    status = fn(ptr, nbytes, where, 0, ctypes.c_void_p(stream))
    if status != 0:
        raise RuntimeError(f"cuMemPrefetchAsync_v2 returned CUresult {status}")
