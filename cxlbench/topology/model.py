"""What a machine is made of, as plain records.

Readers in this package fill these from sysfs/procfs (under a configurable
root) and from NVML/torch; everything above the topology layer reads them.
Sizes are bytes, latencies ns, bandwidths GB/s (10^9 B/s) unless a field says
otherwise. Every record converts to JSON through dataclasses.asdict.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Cache:
    level: int                 # 1, 2, 3
    kind: str                  # "Data", "Instruction", "Unified"
    size_bytes: int
    line_bytes: int
    shared_cpus: list[int]     # CPUs sharing one instance


@dataclass
class Cpu:
    model: str
    vendor: str
    sockets: int
    cores: int                 # physical cores, all sockets
    threads: int               # logical CPUs online
    smt_active: bool
    flags: list[str]           # from /proc/cpuinfo (avx2, avx512f, ...)
    caches: list[Cache]        # one record per distinct (level, kind)


@dataclass
class HugePool:
    page_bytes: int
    total: int                 # pages reserved
    free: int


@dataclass
class HmatAccess:
    """What the firmware advertises for reaching this node (ACPI HMAT)."""
    access_class: int          # K of accessK: 0 = any initiator, 1 = CPU initiators
    initiators: list[int]      # nodes listed under accessK/initiators
    read_latency_ns: int | None
    write_latency_ns: int | None
    read_bandwidth_MBps: int | None   # the kernel publishes MB/s
    write_bandwidth_MBps: int | None


@dataclass
class Node:
    id: int
    cpus: list[int]            # empty for CPU-less nodes (CXL, HBM-only, ...)
    mem_total_bytes: int
    mem_free_bytes: int
    distances: dict[int, int]  # node -> SLIT distance
    hugepages: dict[int, HugePool] = field(default_factory=dict)   # page_bytes -> pool
    hmat: list[HmatAccess] = field(default_factory=list)
    memory_tier: int | None = None    # memory_tierN this node belongs to

    @property
    def has_cpu(self) -> bool:
        return bool(self.cpus)

    @property
    def has_memory(self) -> bool:
        return self.mem_total_bytes > 0


@dataclass
class CxlMemdev:
    name: str                  # mem0
    ram_bytes: int
    pmem_bytes: int
    serial: str | None
    numa_node: int | None      # the host bridge's node, not where the memory shows up
    firmware: str | None = None


@dataclass
class CxlRegion:
    name: str                  # region0
    size_bytes: int
    mode: str | None           # ram / pmem
    interleave_ways: int | None
    interleave_granularity: int | None
    targets: list[str]         # decoders/endpoints
    memdevs: list[str]         # mem0, ...
    numa_node: int | None      # the node this region's memory came online as
    # DAX devices carved from the region -> bound driver: "kmem" (onlined as
    # system RAM, i.e. a NUMA node), "device_dax" (/dev/daxZ.Y only), None.
    dax_devices: dict[str, str | None] = field(default_factory=dict)


@dataclass
class EdacController:
    name: str                  # mc0
    mode: str | None           # edac_mode of its DIMMs, e.g. "SECDED"
    ce_count: int | None       # None: the count could not be read
    ue_count: int | None
    dimms: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)  # dimm -> (ce, ue)


@dataclass
class Gpu:
    index: int
    name: str
    memory_bytes: int
    uuid: str | None = None
    ecc_enabled: bool | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    numa_node: int | None = None
    driver: str | None = None
    source: str = "nvml"       # nvml / torch / sysfs (PCI only: name and memory unknown)
    pci_bus_id: str | None = None      # 0000:17:00.0
    memory_free_bytes: int | None = None


@dataclass
class BlockDevice:
    name: str                  # nvme0n1, vda
    model: str | None
    size_bytes: int
    rotational: bool
    is_nvme: bool
    numa_node: int | None = None


@dataclass
class Environment:
    """Settings that move figures; recorded with every run, checked by `doctor`."""
    thp_enabled: str | None        # always / madvise / never (the bracketed choice)
    thp_defrag: str | None
    numa_balancing: int | None
    demotion_enabled: bool | None
    governor: str | None           # cpufreq governor of CPU 0, None when not exposed
    cpu_mhz: float | None
    smt_control: str | None
    prefetcher_readable: bool      # can the HW prefetcher state be read (MSR access)?
    hypervisor: str | None         # "KVM", ... None on bare metal
    dmi_product: str | None
    kernel: str
    dmi_vendor: str | None = None
    hypervisor_flag: bool = False  # cpuinfo's "hypervisor" flag, even when the vendor is unknown
    bios_version: str | None = None   # firmware strings: a history marks where they change
    bios_date: str | None = None
    microcode: str | None = None
    # The CPUs this process may run on, where that is fewer than the machine's (taskset,
    # a container's cpuset), as a list ("1,3-4"); None: all of them
    allowed_cpus: str | None = None
    # This process's memory cgroup (a pod's, a job's): its tightest limit and what that
    # left free when the machine was read; None: no limit
    memory_limit_bytes: int | None = None
    memory_limit_free_bytes: int | None = None


@dataclass
class Machine:
    hostname: str
    cpu: Cpu
    nodes: dict[int, Node]
    environment: Environment
    cxl_memdevs: list[CxlMemdev] = field(default_factory=list)
    cxl_regions: list[CxlRegion] = field(default_factory=list)
    memory_tiers: dict[int, list[int]] = field(default_factory=dict)   # tier id -> nodes
    edac: list[EdacController] = field(default_factory=list)
    gpus: list[Gpu] = field(default_factory=list)
    block_devices: list[BlockDevice] = field(default_factory=list)
    root: str = "/"                # where sysfs/procfs were read from
    hugepages: dict[int, HugePool] = field(default_factory=dict)   # system-wide pools by page size

    def llc_bytes(self) -> int:
        """The largest cache on the machine (per instance), 0 if none is exposed."""
        return max((c.size_bytes for c in self.cpu.caches), default=0)


@dataclass
class Tier:
    """Where bytes can live: what benchmarks target."""
    name: str                  # ddr0, cxl2, hbm0, nvme0
    kind: str                  # ddr / cxl / hbm / nvme
    node: int | None = None    # NUMA node for host tiers
    gpu: int | None = None     # GPU index for hbm
    path: str | None = None    # directory for nvme
    capacity_bytes: int = 0
    free_bytes: int = 0
    declared: str | None = None   # the user's declaration (e.g. "cxl=node:1"), None if discovered
    evidence: str = ""         # why it was classified so ("CXL region0 onlined as node 2")

    @property
    def is_host_memory(self) -> bool:
        return self.kind in ("ddr", "cxl")


@dataclass
class Initiator:
    """Who accesses a tier: the CPUs of a node, or a GPU."""
    name: str                  # cpu:node0, gpu:0
    kind: str                  # cpu / gpu
    node: int | None = None
    cpus: list[int] = field(default_factory=list)
    gpu: int | None = None
    # Why it cannot be measured from: none of its node's CPUs is allowed to this process
    # (its cpus are then the node's, so what a family plans from it is planned, and skipped)
    not_allowed: str = ""


@dataclass
class TierDeclaration:
    """A user's `--tier KIND=SPEC`, parsed: a node for host tiers, a directory for nvme."""
    text: str                  # as the user wrote it, recorded on the tier
    kind: str                  # ddr / cxl / nvme
    node: int | None = None
    path: str | None = None
