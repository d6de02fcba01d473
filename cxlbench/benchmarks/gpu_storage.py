"""NVMe -> GPU: a file on the NVMe tier read into HBM.

  bounce   O_DIRECT reads into two page-locked bounce buffers on the GPU's own
           node (placement layer + cudaHostRegister), each copied to HBM with
           cudaMemcpyAsync while the next chunk is read: the path any program
           without GPUDirect Storage takes
  kvikio   kvikio.CuFile.read straight into device memory: GPUDirect Storage
           when the system has it, else kvikio's POSIX compatibility mode; the
           column `gds` says which ("gds" or "compat"), so the two are never
           mistaken for one another

bandwidth_GBps counts the file's bytes once, over the wall time from the first
read to the last byte in HBM (a host-driven pipeline: events alone would miss
the reads). The file (word i = i ^ seed, written with O_DIRECT once per case)
is read again every repetition; O_DIRECT keeps the page cache out, and the
data in HBM is checked against the pattern every time.
"""
from __future__ import annotations

import importlib.util
import os
import secrets
import time
from contextlib import ExitStack

from dataclasses import dataclass
from typing import Literal

from cxlbench.benchmarks.base import Env, Planned, Show, metrics
from cxlbench.benchmarks.gpu_common import (
    GpuSpec, first_skip, gpu_initiators, gpu_memory_skip, local_host_tier, open_session, planned)
from cxlbench.benchmarks.spec import Size
from cxlbench.results.schema import Case, Metric, Sample
from cxlbench.topology.model import Tier

NAME = "gpu_storage"
PATHS = ("bounce", "kvikio")
#: the storage layer's test-file naming, so its stale-file sweep also removes ours
PREFIX = "cxlbench-io-"

METRICS = metrics(Metric("bandwidth_GBps", "GB/s", "higher"))
SHOW = Show("GPU storage", "Reading a file on the NVMe tier into GPU memory: through a pinned bounce "
            "buffer, or GPUDirect Storage (kvikio).", x="chunk_bytes", facets=("path",))


@dataclass(kw_only=True)
class Spec(GpuSpec):
    tiers: tuple[str, ...] = ("nvme",)
    path: tuple[Literal[PATHS], ...] = PATHS
    file: Size = 1 << 30
    chunk: tuple[Size, ...] = (4 << 20,)     # the bounce path's


def plan(spec: Spec, env: Env) -> list[Planned]:
    gpus, why = gpu_initiators(env)
    tiers = sorted((t for t in env.tiers.values() if t.kind == "nvme"), key=lambda t: t.name)
    no_tier = None if tiers else "no NVMe tier declared (declare one: nvme=/path/to/scratch)"
    file_bytes = spec.file
    out: list[Planned] = []
    for gpu in gpus:
        for tier in tiers or [Tier("nvme0", "nvme")]:
            for path in spec.path:
                chunks = spec.chunk if path == "bounce" else [None]
                for chunk in chunks:
                    params = {"path": path, "file_bytes": file_bytes, "iterations": 1,
                              "bytes_counted": "once", "io": "direct"}
                    if chunk is not None:
                        params["chunk_bytes"] = chunk
                    skip = first_skip(why, no_tier, _cannot(params, gpu, env))
                    out.append(planned(NAME, gpu, tier, params, spec, skip,
                                       spec.repetitions * (file_bytes / 2e9 + 0.1) + file_bytes / 1e9))
    return out


def _cannot(params: dict, gpu, env: Env) -> str | None:
    chunk = params.get("chunk_bytes", 1 << 20)
    if chunk % 4096 or params["file_bytes"] % chunk:
        return "the file size must be a multiple of the chunk, and the chunk of 4 KiB"
    if params["path"] == "kvikio" and env.root == "/" and importlib.util.find_spec("kvikio") is None:
        return "kvikio is not installed (GPUDirect Storage through kvikio not measured)"
    return gpu_memory_skip(env, gpu, params["file_bytes"])


def measure(case: Case, env: Env, info: dict) -> list[Sample]:
    from cxlbench.gpu import correctness as check
    from cxlbench.gpu.buffers import DeviceBuffer
    from cxlbench.gpu.errors import Unavailable
    from cxlbench.memory.pinned import PinnedHost

    p = case.params
    size = p["file_bytes"]
    directory = env.tier(case.target).path
    samples: list[Sample] = []
    with open_session(case, env, info) as s:
        dev, xp = s.dev, s.xp
        local = local_host_tier(env, env.initiator(case.initiator))
        node = local.node if local is not None else 0
        chunk = p.get("chunk_bytes", 4 << 20)
        seed = 0x5EED0000 + secrets.randbelow(1 << 16)
        with ExitStack() as st:
            bounce = [st.enter_context(PinnedHost(dev, chunk, node, "4k", mapped=False)) for _ in range(2)]
            path, fd = _write_file(directory, size, chunk, bounce[0], seed)
            st.callback(_remove, path, fd)
            dst = st.enter_context(DeviceBuffer(dev, size))
            gds = None
            for rep in range(case.repetitions):
                check.poison(xp, dst.view("uint64"))
                dev.synchronize()
                if p["path"] == "bounce":
                    seconds = _bounce(dev, s.timer.stream, fd, dst, size, chunk, bounce)
                else:
                    seconds, gds = _kvikio(dev, path, dst, size)
                check.expect_pattern(xp, dst.view("uint64"), seed, f"{p['path']} read of the file")
                found = {"gds": gds} if p["path"] == "kvikio" else {}
                samples.append(Sample("bandwidth_GBps", size / seconds / 1e9, rep,
                                      {**s.params(), **found, "iteration": 0,
                                       "bounce_node": node if p["path"] == "bounce" else None}))
    if not samples:
        raise Unavailable("nothing was read")
    return samples


def _write_file(directory: str, size: int, chunk: int, buf, seed: int) -> tuple[str, int]:
    """A new file of `size` bytes, word i = i ^ seed, written with O_DIRECT and synced."""
    import numpy as np

    from cxlbench.gpu.errors import Unavailable
    path = os.path.join(directory, f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}.gpu")
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_DIRECT, 0o600)
    except OSError as e:
        raise Unavailable(f"cannot open a test file with O_DIRECT in {directory}: {e.strerror}") from None
    try:
        words = chunk // 8
        view = buf.array("uint64", 0, chunk)
        mv = memoryview(buf.array("uint8", 0, chunk))
        for off in range(0, size, chunk):
            first = off // 8
            view[:] = np.arange(first, first + words, dtype=np.uint64) ^ np.uint64(seed)
            if os.pwritev(fd, [mv], off) != chunk:
                raise Unavailable(f"short O_DIRECT write in {directory}")
        os.fsync(fd)
    except OSError as e:
        _remove(path, fd)
        raise Unavailable(f"writing the test file in {directory} failed: {e.strerror}") from None
    except BaseException:
        _remove(path, fd)
        raise
    return path, fd


def _remove(path: str, fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
    try:
        os.unlink(path)
    except OSError:
        pass


def _bounce(dev, stream, fd: int, dst, size: int, chunk: int, bounce) -> float:
    """O_DIRECT read of chunk i into bounce[i % 2] while chunk i - 1 is copied to HBM."""
    from cxlbench.gpu.device import MEMCPY_H2D
    from cxlbench.gpu.errors import Unavailable
    done = [dev.event(), dev.event()]
    views = [memoryview(b.array("uint8", 0, chunk)) for b in bounce]
    t0 = time.perf_counter()
    for i, off in enumerate(range(0, size, chunk)):
        b = i % 2
        if i >= 2:
            dev.sync_event(done[b])          # the copy out of this bounce buffer has finished
        if os.preadv(fd, [views[b]], off) != chunk:
            raise Unavailable("short O_DIRECT read of the test file")
        dev.memcpy(dst.ptr + off, bounce[b].addr, chunk, MEMCPY_H2D, stream)
        dev.record(done[b], stream)
    dev.sync_stream(stream)
    seconds = time.perf_counter() - t0
    for ev in done:
        dev.destroy_event(ev)
    return seconds


def _kvikio(dev, path: str, dst, size: int) -> tuple[float, str]:
    import kvikio
    mode = _kvikio_mode(kvikio)
    array = dst.view("uint8")
    with kvikio.CuFile(path, "r") as f:
        dev.synchronize()
        t0 = time.perf_counter()
        n = f.read(array)
        dev.synchronize()
        seconds = time.perf_counter() - t0
    if n != size:
        from cxlbench.gpu.errors import Unavailable
        raise Unavailable(f"kvikio read {n} of {size} bytes")
    return seconds, mode


def _kvikio_mode(kvikio) -> str:
    """"gds" when kvikio goes through GPUDirect Storage, "compat" in its POSIX
    compatibility mode, "auto" when kvikio decides per file (it says no more)."""
    d = getattr(kvikio, "defaults", None)
    for name in ("compat_mode", "is_compat_mode_preferred"):
        fn = getattr(d, name, None)
        if not callable(fn):
            continue
        try:
            value = fn()
        except Exception:            # noqa: BLE001
            continue
        if hasattr(value, "name"):   # CompatMode.ON / OFF / AUTO (kvikio >= 24.12)
            return {"ON": "compat", "OFF": "gds"}.get(value.name, "auto")
        return "compat" if value else "gds"
    return "compat"
