"""Small, forgiving readers for sysfs/procfs files under a root directory.

Every reader in this package goes through these so that tests can point the
whole topology layer at a fixture tree. Missing or unreadable files answer
None (or an empty list): a kernel that lacks a feature is a fact to record,
not an error. The few files every kernel writes go through read_required.
"""
from __future__ import annotations

import os
import re


def under(root: str, path: str) -> str:
    """`path` (absolute, as on a live system) relocated under `root`."""
    return os.path.join(root, path.lstrip("/"))


def read_text(root: str, path: str) -> str | None:
    """The stripped contents of a file, None if it is absent or unreadable."""
    try:
        with open(under(root, path), encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def read_required(root: str, path: str) -> str:
    """The stripped contents of a file the kernel always writes (a node's meminfo, cpulist).

    Absent or unreadable, it is not a feature this kernel lacks but a view of the
    machine that cannot be trusted: read as empty, it would move what is measured.
    """
    try:
        with open(under(root, path), encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError as e:
        raise SysfsFormatError(f"{path} cannot be read: {e.strerror or e}") from None


def read_int(root: str, path: str) -> int | None:
    """A file holding one integer (decimal or 0x-prefixed hex)."""
    text = read_text(root, path)
    if text is None:
        return None
    try:
        return int(text, 0)
    except ValueError:
        return None


def list_dir(root: str, path: str) -> list[str]:
    """Entry names of a directory, empty if it does not exist."""
    try:
        return sorted(os.listdir(under(root, path)))
    except OSError:
        return []


def numbered(root: str, path: str, prefix: str) -> list[int]:
    """The N of every entry `prefixN` in a directory, ascending (node0, mc1, ...)."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)$")
    found = (pattern.match(name) for name in list_dir(root, path))
    return sorted(int(m.group(1)) for m in found if m)


def exists(root: str, path: str) -> bool:
    return os.path.exists(under(root, path))


def link_name(root: str, path: str) -> str | None:
    """Basename of the target of a symlink (sysfs links name devices), None if not a link."""
    try:
        return os.path.basename(os.readlink(under(root, path)))
    except (OSError, ValueError):           # ValueError: a name read from a file held a NUL
        return None


def resolve(root: str, path: str) -> str:
    """The real path of a sysfs entry; sysfs links are relative, so this stays under root."""
    try:
        return os.path.realpath(under(root, path))
    except ValueError:                      # a name read from a file held a NUL: no such entry
        return under(root, path.replace("\0", ""))


class SysfsFormatError(ValueError):
    """The tree is not what the kernel writes: a file in another format, or one the
    kernel always writes absent or unreadable (a hand-made fixture tree, a masked /sys)."""


#: Linux's largest CONFIG_NR_CPUS (x86_64 MAXSMP): no CPU or node number reaches it
LINUX_MOST_CPUS = 8192


def parse_cpulist(text: str | None, where: str = "") -> list[int]:
    """Kernel list format "0-3,8,10-11" -> [0, 1, 2, 3, 8, 10, 11]; `where`, the file it
    was read from, named when it is not one (a machine reads a dozen such files)."""
    cpus: list[int] = []
    try:
        for part in (text or "").replace("\n", ",").split(","):
            part = part.strip()
            if not part:
                continue
            lo, _, hi = part.partition("-")
            lo, hi = int(lo), int(hi or lo)
            if not 0 <= lo <= hi < LINUX_MOST_CPUS:
                raise ValueError
            cpus.extend(range(lo, hi + 1))
    except ValueError:
        raise SysfsFormatError(f"{where + ' holds ' if where else ''}{text.strip()!r}, not a kernel CPU or node "
                               f"list (e.g. 0-3,8; numbers below {LINUX_MOST_CPUS})") from None
    return cpus


def read_cpulist(root: str, path: str) -> list[int]:
    """A kernel list file ("0-3,8") read and parsed, naming the file if it is not one;
    [] where it is absent or empty."""
    return parse_cpulist(read_text(root, path), path)


_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str | None) -> int | None:
    """Cache-style sizes "32K", "1024K", "36M" (binary units, as sysfs means them)."""
    if not text:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)i?B?\s*", text, re.IGNORECASE)
    if not m:
        return None
    return int(m.group(1)) * _SIZE_UNITS[m.group(2).upper()]


def selected(text: str | None) -> str | None:
    """The bracketed choice of a sysfs selector: "always [madvise] never" -> "madvise"."""
    if not text:
        return None
    m = re.search(r"\[([^\]]+)\]", text)
    return m.group(1) if m else text.strip()


def meminfo_bytes(text: str | None, key: str) -> int | None:
    """A "<key>: N kB" line of /proc/meminfo or a node's meminfo ("Node 0 MemFree: ...")."""
    m = re.search(rf"\b{re.escape(key)}:\s*(\d+)\s*kB", text or "")
    return int(m.group(1)) * 1024 if m else None
