"""Test files on a storage tier: what the directory is, files that never outlive
their process, and a file used as memory with its pages evicted.

    info = inspect_directory("/mnt/scratch")        # device, filesystem, O_DIRECT?
    io = info.io_mode(allow_buffered=False)          # "direct", or StorageError
    with ScratchFile.create("/mnt/scratch", 1 << 30, direct=True) as f:
        ...                                          # f.fd: 1 GiB of real data

Everything that cannot be honoured raises StorageError (a PlacementError) with
one sentence saying what is wrong and what to do.
"""
from .directory import DirectoryInfo, check_usable, inspect_directory, mount_of, probe_direct
from .errors import StorageError
from .pagecache import FileMapping
from .scratch import PREFIX, ScratchFile, owner_pid, scratch_name, sweep_stale

__all__ = ["DirectoryInfo", "StorageError", "check_usable", "inspect_directory", "mount_of",
           "probe_direct", "FileMapping", "PREFIX", "ScratchFile", "owner_pid", "scratch_name",
           "sweep_stale"]
