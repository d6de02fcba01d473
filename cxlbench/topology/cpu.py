"""The CPU: model and flags from /proc/cpuinfo, topology and caches from sysfs."""
from __future__ import annotations

from .model import Cache, Cpu
from .sysfs import numbered, parse_size, read_cpulist, read_int, read_text

CPU_DIR = "/sys/devices/system/cpu"


def cpuinfo_fields(root: str) -> dict[str, str]:
    """The first processor block of /proc/cpuinfo as key -> value.

    The first block is enough: model, vendor and flags are the same on every
    CPU of the machines we measure (hybrid cores aside, which we don't split).
    """
    text = read_text(root, "/proc/cpuinfo") or ""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def online_cpus(root: str) -> list[int]:
    """Online logical CPUs; falls back to the cpuN directories when `online` is absent."""
    return read_cpulist(root, f"{CPU_DIR}/online") or numbered(root, CPU_DIR, "cpu")


def core_of(root: str, cpu: int) -> tuple[int, str]:
    """A key naming the physical core of `cpu`: its package and its sibling set.

    core_id alone repeats across packages and dies; the set of hardware
    threads that share the core is unique on every kernel that exports it.
    """
    topo = f"{CPU_DIR}/cpu{cpu}/topology"
    package = read_int(root, f"{topo}/physical_package_id") or 0
    siblings = (read_text(root, f"{topo}/core_cpus_list")
                or read_text(root, f"{topo}/thread_siblings_list"))
    if siblings is None:
        core_id = read_int(root, f"{topo}/core_id")
        siblings = f"core{core_id}" if core_id is not None else f"cpu{cpu}"
    return package, siblings


def read_caches(root: str, cpu: int = 0) -> list[Cache]:
    """One record per cache level and kind seen from `cpu` (cpu0 by default)."""
    base = f"{CPU_DIR}/cpu{cpu}/cache"
    caches: dict[tuple[int, str], Cache] = {}
    for index in numbered(root, base, "index"):
        d = f"{base}/index{index}"
        level = read_int(root, f"{d}/level")
        size = parse_size(read_text(root, f"{d}/size"))
        if level is None or not size:
            continue
        kind = read_text(root, f"{d}/type") or "Unified"
        caches.setdefault((level, kind), Cache(
            level=level, kind=kind, size_bytes=size,
            line_bytes=read_int(root, f"{d}/coherency_line_size") or 64,
            shared_cpus=read_cpulist(root, f"{d}/shared_cpu_list"),
        ))
    return [caches[k] for k in sorted(caches)]


def smt_active(root: str, threads: int, cores: int) -> bool:
    """Whether sibling threads are running: the kernel says so when it can."""
    active = read_int(root, f"{CPU_DIR}/smt/active")
    return bool(active) if active is not None else threads > cores


def read_cpu(root: str = "/") -> Cpu:
    info = cpuinfo_fields(root)
    cpus = online_cpus(root)
    cores = {core_of(root, c) for c in cpus}
    packages = {package for package, _ in cores}
    n_cores = len(cores) or len(cpus)
    return Cpu(
        # x86 says "model name"; arm64 has no model string, only part numbers.
        model=info.get("model name") or info.get("Model") or cpu_part(info),
        vendor=info.get("vendor_id") or implementer(info),
        sockets=len(packages) or 1,
        cores=n_cores,
        threads=len(cpus),
        smt_active=smt_active(root, len(cpus), n_cores),
        flags=(info.get("flags") or info.get("Features") or "").split(),
        caches=read_caches(root, cpus[0] if cpus else 0),
    )


def cpu_part(info: dict[str, str]) -> str:
    part = info.get("CPU part")
    return f"unknown (CPU part {part})" if part else "unknown"


def implementer(info: dict[str, str]) -> str:
    code = info.get("CPU implementer")
    return f"implementer {code}" if code else "unknown"

