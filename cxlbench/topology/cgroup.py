"""The memory limit of this process's control group: a container's, a Kubernetes
pod's, a Slurm job's, a systemd slice's. A node may have 20 GiB free while the pod
may use 4; a case sized from the node's free memory is then killed by the cgroup's
OOM killer mid-measurement instead of being skipped with the reason before it runs.

cgroup v2 (`0::/path` in /proc/self/cgroup): memory.max, memory.current and
memory.stat's inactive_file in /sys/fs/cgroup/path and in every folder above it,
the tightest one counting. cgroup v1 (`N:memory:/path`): memory.limit_in_bytes,
memory.usage_in_bytes and total_inactive_file under /sys/fs/cgroup/memory/path and
above it. The page cache's inactive file pages are reclaimed before the OOM killer
runs, so they count as free.
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass

from .sysfs import read_text

#: a v1 limit at or above this is "no limit" (the kernel writes PAGE_COUNTER_MAX × page size)
UNLIMITED = 1 << 62


@dataclass(frozen=True)
class MemoryLimit:
    limit_bytes: int       # the tightest limit over this process's cgroup and those above it
    free_bytes: int        # what it leaves: the limit less the usage, the inactive page cache not counted
    where: str             # the cgroup folder that sets it


def memory_limit(root: str = "/") -> MemoryLimit | None:
    """The tightest memory limit over this process's cgroups, None where there is none."""
    found = [limit for path, files in _folders(root) if (limit := _read(root, path, files)) is not None]
    return min(found, key=lambda m: m.free_bytes, default=None)


def _folders(root: str):
    """(folder, its file names) for this process's memory cgroup and each one above it."""
    for line in (read_text(root, "/proc/self/cgroup") or "").splitlines():
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and controllers == "":
            base, files = "/sys/fs/cgroup", ("memory.max", "memory.current", "inactive_file")
        elif "memory" in controllers.split(","):
            base, files = "/sys/fs/cgroup/memory", ("memory.limit_in_bytes", "memory.usage_in_bytes",
                                                    "total_inactive_file")
        else:
            continue
        path = posixpath.normpath("/" + path.strip("/"))
        while True:
            yield posixpath.join(base, path.lstrip("/")).rstrip("/"), files
            if path == "/":
                break
            path = posixpath.dirname(path)


def _read(root: str, folder: str, files: tuple[str, str, str]) -> MemoryLimit | None:
    limit_name, usage_name, inactive_name = files
    limit = read_text(root, f"{folder}/{limit_name}")
    if not limit or not limit.isdigit() or int(limit) >= UNLIMITED:      # "max", absent, or v1's no-limit
        return None
    usage = read_text(root, f"{folder}/{usage_name}")
    stat = dict(line.split(None, 1) for line in (read_text(root, f"{folder}/memory.stat") or "").splitlines()
                if " " in line)
    used = int(usage) if usage and usage.isdigit() else 0
    inactive = int(stat.get(inactive_name, "0")) if stat.get(inactive_name, "0").isdigit() else 0
    return MemoryLimit(int(limit), max(int(limit) - max(used - inactive, 0), 0), folder)
