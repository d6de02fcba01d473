"""CXL memory devices and regions, and the NUMA node each region came online as.

Layout (Documentation/ABI/testing/sysfs-bus-cxl, ndctl's libcxl/libdaxctl):
/sys/bus/cxl/devices/ holds links to memX (an expander: ram/size, pmem/size,
serial, numa_node, firmware_version), regionZ (size, mode, interleave_ways,
interleave_granularity, targetN naming endpoint decoders decoderP.Q), and
endpointP ports whose `uport` link names the memdev behind decoderP.Q.
A volatile region's capacity reaches the page allocator through a DAX device
under the region, regionZ/dax_regionZ/daxZ.Y, whose `target_node` is the
node it onlines as (when bound to the kmem driver); /sys/bus/dax/devices
links to the same devices.
"""
from __future__ import annotations

import os
import re

from .model import CxlMemdev, CxlRegion
from .sysfs import link_name, list_dir, read_int, read_text, resolve

CXL_DEVICES = "/sys/bus/cxl/devices"
DAX_DEVICES = "/sys/bus/dax/devices"


def devices_named(root: str, pattern: str) -> list[str]:
    """Entries of /sys/bus/cxl/devices whose whole name matches `pattern`, in numeric order."""
    names = [n for n in list_dir(root, CXL_DEVICES) if re.fullmatch(pattern, n)]
    return sorted(names, key=lambda n: [int(x) for x in re.findall(r"\d+", n)])


def node_or_none(value: int | None) -> int | None:
    """sysfs says -1 for "no NUMA affinity"."""
    return value if value is not None and value >= 0 else None


def read_memdev(root: str, name: str) -> CxlMemdev:
    d = f"{CXL_DEVICES}/{name}"
    return CxlMemdev(
        name=name,
        ram_bytes=read_int(root, f"{d}/ram/size") or 0,
        pmem_bytes=read_int(root, f"{d}/pmem/size") or 0,
        serial=read_text(root, f"{d}/serial"),
        numa_node=node_or_none(read_int(root, f"{d}/numa_node")),
        firmware=read_text(root, f"{d}/firmware_version"),
    )


def read_memdevs(root: str = "/") -> list[CxlMemdev]:
    return [read_memdev(root, n) for n in devices_named(root, r"mem\d+")]


def region_targets(root: str, region: str) -> list[str]:
    """Endpoint decoders in interleave order; unset positions read as empty and are skipped."""
    d = f"{CXL_DEVICES}/{region}"
    positions = sorted(int(n[6:]) for n in list_dir(root, d) if re.fullmatch(r"target\d+", n))
    names = (read_text(root, f"{d}/target{i}") for i in positions)
    return [n for n in names if n]


def memdev_of_decoder(root: str, decoder: str) -> str | None:
    """The memX behind an endpoint decoder decoderP.Q: the `uport` of port endpointP."""
    port = decoder.removeprefix("decoder").split(".")[0]
    uport = link_name(root, f"{CXL_DEVICES}/endpoint{port}/uport")
    if uport and uport.startswith("mem"):
        return uport
    # Older layouts nest the endpoint under the memdev: find memX in the decoder's real path.
    parts = resolve(root, f"{CXL_DEVICES}/{decoder}").split(os.sep)
    return next((p for p in reversed(parts) if re.fullmatch(r"mem\d+", p)), None)


def region_dax_devices(root: str, region: str) -> list[str]:
    """Real paths of the DAX devices carved from a region."""
    region_id = region.removeprefix("region")
    d = f"{CXL_DEVICES}/{region}/dax_region{region_id}"
    found = [resolve(root, f"{d}/{n}") for n in list_dir(root, d) if re.fullmatch(r"dax\d+\.\d+", n)]
    if found:
        return found
    # Some kernels/fixtures only show them on the dax bus: keep those whose real path
    # runs through this region's directory.
    region_path = resolve(root, f"{CXL_DEVICES}/{region}") + os.sep
    on_bus = (resolve(root, f"{DAX_DEVICES}/{n}") for n in list_dir(root, DAX_DEVICES))
    return [p for p in on_bus if p.startswith(region_path)]


def dax_node(path: str) -> int | None:
    """target_node of a DAX device given by its real path."""
    try:
        with open(os.path.join(path, "target_node")) as f:
            return node_or_none(int(f.read().strip()))
    except (OSError, ValueError):
        return None


def dax_driver(path: str) -> str | None:
    """"kmem" when the device is onlined as system RAM, "device_dax" when it is a /dev/daxX.Y."""
    try:
        return os.path.basename(os.readlink(os.path.join(path, "driver")))
    except OSError:
        return None


def read_region(root: str, name: str) -> CxlRegion:
    d = f"{CXL_DEVICES}/{name}"
    targets = region_targets(root, name)
    memdevs = [m for m in (memdev_of_decoder(root, t) for t in targets) if m]
    dax = region_dax_devices(root, name)
    # Only a device bound to kmem puts the capacity in the page allocator; one left as
    # /dev/daxZ.Y (device_dax) names a target_node but adds no memory to it.
    nodes = [n for n in (dax_node(p) for p in dax if dax_driver(p) == "kmem") if n is not None]
    return CxlRegion(
        name=name,
        size_bytes=read_int(root, f"{d}/size") or 0,
        mode=read_text(root, f"{d}/mode"),
        interleave_ways=read_int(root, f"{d}/interleave_ways"),
        interleave_granularity=read_int(root, f"{d}/interleave_granularity"),
        targets=targets,
        memdevs=sorted(set(memdevs), key=memdevs.index),
        numa_node=nodes[0] if nodes else None,
        dax_devices={os.path.basename(p): dax_driver(p) for p in dax},
    )


def read_regions(root: str = "/") -> list[CxlRegion]:
    return [read_region(root, n) for n in devices_named(root, r"region\d+")]

