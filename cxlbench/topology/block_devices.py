"""Block devices (/sys/block) and which one a directory sits on."""
from __future__ import annotations

import os

from .model import BlockDevice
from .sysfs import exists, list_dir, read_int, read_text, resolve

BLOCK_DIR = "/sys/block"
SECTOR = 512            # /sys/block/X/size counts 512-byte sectors whatever the device's block size


def device_numa_node(root: str, name: str) -> int | None:
    """The NUMA node of the controller behind a disk: the nearest numa_node up its device path."""
    path = resolve(root, f"{BLOCK_DIR}/{name}/device")
    for _ in range(4):
        try:
            with open(os.path.join(path, "numa_node")) as f:
                node = int(f.read().strip())
            return node if node >= 0 else None
        except (OSError, ValueError):
            path = os.path.dirname(path)
    return None


def read_block_device(root: str, name: str) -> BlockDevice:
    d = f"{BLOCK_DIR}/{name}"
    return BlockDevice(
        name=name,
        model=read_text(root, f"{d}/device/model") or None,
        size_bytes=(read_int(root, f"{d}/size") or 0) * SECTOR,
        rotational=read_int(root, f"{d}/queue/rotational") == 1,
        is_nvme=name.startswith("nvme"),
        numa_node=device_numa_node(root, name),
    )


def read_block_devices(root: str = "/") -> list[BlockDevice]:
    """Disks backed by hardware (or a hypervisor's disk): those with a `device` link.

    loop, zram, ram and device-mapper devices have none; they are views of
    other storage and would only repeat it.
    """
    return [read_block_device(root, n) for n in list_dir(root, BLOCK_DIR)
            if exists(root, f"{BLOCK_DIR}/{n}/device")]


def disk_for_devnum(major: int, minor: int, root: str = "/") -> str | None:
    """The whole disk holding block device MAJ:MIN: a partition's parent, else itself."""
    link = f"/sys/dev/block/{major}:{minor}"
    if not exists(root, link):
        return None
    path = resolve(root, link)
    if os.path.exists(os.path.join(path, "partition")):
        path = os.path.dirname(path)
    return os.path.basename(path)


def block_device_for(path: str, root: str = "/") -> BlockDevice | None:
    """The disk a file or directory lives on; None for filesystems without one (tmpfs, overlay, NFS)."""
    st = os.stat(path)
    name = disk_for_devnum(os.major(st.st_dev), os.minor(st.st_dev), root)
    return read_block_device(root, name) if name else None
