"""The settings that move figures: THP, NUMA balancing, demotion, clocks, SMT,
prefetcher visibility, virtualisation, kernel. Recorded with every run and
judged by `doctor`."""
from __future__ import annotations

import os
import platform

from .cgroup import memory_limit
from .cpu import cpuinfo_fields
from .hugepages import thp_defrag, thp_enabled
from .model import Environment
from .sysfs import read_int, read_text, under

CPUFREQ = "/sys/devices/system/cpu/cpu0/cpufreq"

# DMI strings that name a hypervisor. Checked as substrings of "vendor product".
_HYPERVISORS = (
    ("QEMU", "KVM"), ("KVM", "KVM"), ("VMware", "VMware"), ("VirtualBox", "VirtualBox"),
    ("innotek", "VirtualBox"), ("Xen", "Xen"), ("Microsoft Corporation Virtual Machine", "Hyper-V"),
    ("Amazon EC2", "KVM (AWS Nitro)"), ("Google Compute Engine", "KVM (GCE)"),
    ("OpenStack", "KVM (OpenStack)"), ("Parallels", "Parallels"), ("BHYVE", "bhyve"),
)


def identify_hypervisor(flag: bool, xen_type: str | None,
                        dmi_vendor: str | None, dmi_product: str | None) -> str | None:
    """A hypervisor's name, "unknown" when only the CPU flag betrays one, None on bare metal.

    Bare-metal Amazon instances carry the EC2 DMI strings but no hypervisor
    flag, so DMI alone never makes a machine a VM.
    """
    if xen_type:                       # /sys/hypervisor/type: only Xen fills it
        return "Xen" if xen_type == "xen" else xen_type
    if not flag:
        return None
    dmi = f"{dmi_vendor or ''} {dmi_product or ''}"
    return next((name for key, name in _HYPERVISORS if key.lower() in dmi.lower()), "unknown")


def cpu_mhz(root: str, cpuinfo: dict[str, str]) -> float | None:
    """CPU 0's current clock: cpufreq when exposed (kHz), else /proc/cpuinfo's snapshot."""
    khz = read_int(root, f"{CPUFREQ}/scaling_cur_freq")
    if khz:
        return khz / 1000.0
    try:
        return float(cpuinfo["cpu MHz"])
    except (KeyError, ValueError):
        return None


def msr_readable(root: str) -> bool:
    """Whether the prefetcher control MSRs could be read: the msr device exists and we may open it.

    os.access answers for the real uid, which is what opening it would check.
    """
    path = under(root, "/dev/cpu/0/msr")
    return os.path.exists(path) and os.access(path, os.R_OK)


def kernel_release(root: str) -> str:
    release = read_text(root, "/proc/sys/kernel/osrelease")
    if release:
        return release
    return platform.release() if root == "/" else "unknown"


def demotion(root: str) -> bool | None:
    text = read_text(root, "/sys/kernel/mm/numa/demotion_enabled")
    return None if text is None else text.lower() in ("true", "1", "y", "yes")


def read_environment(root: str = "/") -> Environment:
    cpuinfo = cpuinfo_fields(root)
    flag = "hypervisor" in (cpuinfo.get("flags") or "").split()
    dmi_vendor = read_text(root, "/sys/class/dmi/id/sys_vendor")
    dmi_product = read_text(root, "/sys/class/dmi/id/product_name")
    return Environment(
        thp_enabled=thp_enabled(root),
        thp_defrag=thp_defrag(root),
        numa_balancing=read_int(root, "/proc/sys/kernel/numa_balancing"),
        demotion_enabled=demotion(root),
        governor=read_text(root, f"{CPUFREQ}/scaling_governor"),
        cpu_mhz=cpu_mhz(root, cpuinfo),
        smt_control=read_text(root, "/sys/devices/system/cpu/smt/control"),
        prefetcher_readable=msr_readable(root),
        hypervisor=identify_hypervisor(flag, read_text(root, "/sys/hypervisor/type"),
                                       dmi_vendor, dmi_product),
        dmi_product=dmi_product,
        kernel=kernel_release(root),
        dmi_vendor=dmi_vendor,
        hypervisor_flag=flag,
        bios_version=read_text(root, "/sys/class/dmi/id/bios_version"),
        bios_date=read_text(root, "/sys/class/dmi/id/bios_date"),
        microcode=cpuinfo.get("microcode"),
        **_memory_limit(root),
    )


def _memory_limit(root: str) -> dict:
    limit = memory_limit(root)
    return {"memory_limit_bytes": limit.limit_bytes, "memory_limit_free_bytes": limit.free_bytes} if limit else {}
