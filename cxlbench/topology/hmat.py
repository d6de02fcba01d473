"""What the firmware advertises for reaching each node (ACPI HMAT via sysfs).

The kernel publishes, per target node and access class K, the best-performing
initiator nodes (symlinks nodeM under accessK/initiators/) and the figures for
reaching the target from them: latency in ns, bandwidth in MB/s. Access class
0 is any initiator (CPUs or generic initiators such as GPUs), class 1 CPUs only.
See Documentation/admin-guide/mm/numaperf.rst.
"""
from __future__ import annotations

from .model import HmatAccess
from .sysfs import list_dir, numbered, read_int

NODE_DIR = "/sys/devices/system/node"


def read_access(root: str, node: int, access_class: int) -> HmatAccess:
    d = f"{NODE_DIR}/node{node}/access{access_class}/initiators"
    initiators = sorted(int(n[4:]) for n in list_dir(root, d)
                        if n.startswith("node") and n[4:].isdigit())
    return HmatAccess(
        access_class=access_class,
        initiators=initiators,
        read_latency_ns=read_int(root, f"{d}/read_latency"),
        write_latency_ns=read_int(root, f"{d}/write_latency"),
        read_bandwidth_MBps=read_int(root, f"{d}/read_bandwidth"),
        write_bandwidth_MBps=read_int(root, f"{d}/write_bandwidth"),
    )


def read_hmat(root: str, node: int) -> list[HmatAccess]:
    """Every access class published for `node`; empty without HMAT (most VMs)."""
    classes = numbered(root, f"{NODE_DIR}/node{node}", "access")
    return [read_access(root, node, k) for k in classes]
