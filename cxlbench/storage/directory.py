"""What a declared storage directory really is, and whether I/O there can bypass the page cache.

inspect_directory(path) answers, before anything is measured: does the directory
exist and take new files, which filesystem and block device hold it (and is that
device NVMe), and does O_DIRECT really reach the device there. The O_DIRECT
answer is behavioural, not a list of filesystem names: a probe file is written
and read back with O_DIRECT, then its pages are looked for in the page cache.
A filesystem that refuses O_DIRECT fails the open or the aligned write; one
that accepts the flag but serves it from memory (tmpfs since Linux 6.6) leaves
the pages cached, which a real direct write never does.
"""
from __future__ import annotations

import errno
import mmap
import os
import shutil
from dataclasses import asdict, dataclass, field

from cxlbench.storage.errors import StorageError
from cxlbench.storage.scratch import scratch_name

PROBE_BYTES = 64 << 10          # 16 pages: any device's logical block divides it
MEMORY_FILESYSTEMS = ("tmpfs", "ramfs", "hugetlbfs", "devtmpfs")


@dataclass
class DirectoryInfo:
    path: str
    fs_type: str | None              # ext4, xfs, tmpfs, overlay ... (from /proc/self/mountinfo)
    mount_point: str | None
    device: str | None               # the whole disk (nvme0n1, vda), None without one
    model: str | None
    is_nvme: bool
    rotational: bool | None
    numa_node: int | None            # of the disk's controller, when sysfs says
    free_bytes: int
    direct: bool                     # O_DIRECT reaches the device here
    direct_reason: str = ""          # why not, when it does not
    warnings: list[str] = field(default_factory=list)

    def io_mode(self, allow_buffered: bool) -> str:
        """"direct", or "buffered" when direct I/O is impossible and buffered is allowed;
        raises StorageError when it is neither."""
        if self.direct:
            return "direct"
        if allow_buffered:
            return "buffered"
        raise StorageError(f"{self.direct_reason}; declare a directory on a disk that supports "
                           f"O_DIRECT, or set allow_buffered = true in the suite to measure it "
                           f"through the page cache (every figure is then labelled io=buffered).")

    def as_dict(self) -> dict:
        return asdict(self)


def check_usable(path: str) -> None:
    """StorageError unless `path` is an existing directory that takes new files."""
    if not os.path.exists(path):
        raise StorageError(f"storage directory {path} does not exist; create it or declare "
                           f"another with --tier nvme=/path/to/dir.")
    if not os.path.isdir(path):
        raise StorageError(f"storage path {path} is not a directory; declare a directory "
                           f"(test files are created inside it).")
    # Creating a file is the honest test: access(W_OK) says yes to root on a
    # directory whose permission bits say no, and a read-only mount says no only
    # to writes. The probe name is one the stale-file sweep recognises.
    probe = os.path.join(path, scratch_name("probe"))
    try:
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError as e:
        if e.errno == errno.EROFS:
            raise StorageError(f"storage directory {path} is on a read-only filesystem; "
                               f"declare a writable directory.") from None
        if e.errno in (errno.EACCES, errno.EPERM):
            raise StorageError(f"storage directory {path} is not writable by this user "
                               f"({e.strerror}); declare a directory you can write to.") from None
        raise StorageError(f"cannot create a file in {path}: {e.strerror}.") from None
    os.close(fd)
    os.unlink(probe)


def mount_of(path: str, mountinfo: str = "/proc/self/mountinfo") -> tuple[str | None, str | None]:
    """(mount point, filesystem type) of the mount holding `path`: the longest mount point
    that is a prefix of its real path."""
    real = os.path.realpath(path)
    best: tuple[str | None, str | None] = (None, None)
    try:
        with open(mountinfo, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return best
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5:
            continue
        point = fields[4].replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and (best[0] is None or len(point) >= len(best[0])):
            best = (point, right.split()[0])
    return best


def probe_direct(path: str) -> tuple[bool, str]:
    """(True, "") when O_DIRECT reads and writes in `path` reach the device; else (False, why)."""
    from cxlbench import _native

    where = f"{path} ({mount_of(path)[1] or 'unknown filesystem'})"
    probe = os.path.join(path, scratch_name("probe"))
    try:
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_DIRECT, 0o600)
    except OSError as e:
        if e.errno == errno.EINVAL:
            return False, f"the filesystem of {where} does not support O_DIRECT"
        raise StorageError(f"cannot create a probe file in {path}: {e.strerror}.") from None
    try:
        os.unlink(probe)                  # the open descriptor keeps it until closed
        buf = mmap.mmap(-1, PROBE_BYTES)  # page-aligned, as O_DIRECT wants
        buf.write(os.urandom(PROBE_BYTES))
        try:
            if os.pwrite(fd, buf, 0) != PROBE_BYTES:
                return False, f"an aligned O_DIRECT write in {where} was cut short"
            os.fsync(fd)
            if os.preadv(fd, [buf], 0) != PROBE_BYTES:
                return False, f"an aligned O_DIRECT read in {where} was cut short"
        except OSError as e:
            if e.errno == errno.EINVAL:
                return False, f"the filesystem of {where} refuses aligned O_DIRECT I/O"
            raise StorageError(f"O_DIRECT probe I/O in {path} failed: {e.strerror}.") from None
        addr = _native.map_file(fd, PROBE_BYTES, writable=False)
        try:
            cached = _native.mincore(addr, PROBE_BYTES)
        finally:
            _native.unmap(addr, PROBE_BYTES)
        if cached:
            return False, (f"{where} keeps file data in memory: after O_DIRECT writes and reads "
                           f"{cached} of {PROBE_BYTES // mmap.PAGESIZE} pages were in the page "
                           f"cache, so no I/O there reaches a device")
        return True, ""
    finally:
        os.close(fd)


def inspect_directory(path: str) -> DirectoryInfo:
    """Everything the storage family records about a directory; StorageError when it
    cannot hold test files at all. Whether O_DIRECT works is an answer, not an error."""
    from cxlbench.topology import block_device_for

    path = os.path.abspath(path)
    check_usable(path)
    mount_point, fs_type = mount_of(path)
    try:
        disk = block_device_for(path)
    except OSError:
        disk = None
    direct, why = probe_direct(path)
    info = DirectoryInfo(
        path=path, fs_type=fs_type, mount_point=mount_point,
        device=disk.name if disk else None, model=disk.model if disk else None,
        is_nvme=bool(disk and disk.is_nvme), rotational=disk.rotational if disk else None,
        numa_node=disk.numa_node if disk else None,
        free_bytes=shutil.disk_usage(path).free, direct=direct, direct_reason=why)
    if disk is None:
        info.warnings.append(f"{path} is on {fs_type or 'a filesystem'} without a block device: "
                             f"its figures are not an NVMe device's")
    elif not disk.is_nvme:
        model = f" ({disk.model})" if disk.model else ""
        info.warnings.append(f"{path} is on {disk.name}{model}, which is not an NVMe device: "
                             f"its figures are that device's")
    if fs_type in MEMORY_FILESYSTEMS:
        info.warnings.append(f"{path} is on {fs_type}: file data lives in memory")
    return info
