"""read_machine: everything the topology layer knows about a machine, in one record."""
from __future__ import annotations

import socket

from .cpu import read_cpu
from .cxl import read_memdevs, read_regions
from .edac import read_edac
from .environment import read_environment
from .gpu import read_gpus
from .hugepages import system_pools
from .model import Machine
from .nodes import read_memory_tiers, read_nodes
from .block_devices import read_block_devices
from .sysfs import SysfsFormatError, read_text


def hostname(root: str) -> str:
    name = read_text(root, "/proc/sys/kernel/hostname")
    if name:
        return name
    return socket.gethostname() if root == "/" else "unknown"


class MachineReadError(ValueError):
    """The tree under the root is not what the kernel writes (a malformed file, a
    node's file absent or unreadable, no NUMA nodes at all: a hand-made fixture
    tree, a container masking /sys): one line naming the root, not a traceback.
    Only that: a library's error while probing GPUs stays what it is."""


def read_machine(root: str = "/", probe_gpus: bool = True) -> Machine:
    """Read the machine from sysfs/procfs under `root` ("/" for this one, a fixture tree in tests).

    probe_gpus=False skips NVML/torch (they are slow to start and describe only
    the live machine); GPUs are then the ones PCI sysfs shows.
    """
    try:
        return _read_machine(root, probe_gpus)
    except SysfsFormatError as e:
        raise MachineReadError(f"reading the machine under {root}: {e}") from None


def _read_machine(root: str, probe_gpus: bool) -> Machine:
    return Machine(
        hostname=hostname(root),
        cpu=read_cpu(root),
        nodes=read_nodes(root),
        environment=read_environment(root),
        cxl_memdevs=read_memdevs(root),
        cxl_regions=read_regions(root),
        memory_tiers=read_memory_tiers(root),
        edac=read_edac(root),
        gpus=read_gpus(root, probe=probe_gpus),
        block_devices=read_block_devices(root),
        root=root,
        hugepages=system_pools(root),
    )
