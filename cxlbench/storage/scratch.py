"""Test files: created full of real data, never left behind.

A test file is named cxlbench-io-<pid>-<random>.<kind> so that anything can
recognise it and tell whether its owner still runs. Four things keep a
directory clean, from the strongest:

1. A measurement's file loses its name as soon as it is open (`keep_name=False`,
   the default): the kernel frees an unlinked file when its last descriptor
   closes, which happens even when the worker is SIGKILLed (the runner's
   timeout and Ctrl-C kill workers that way).
2. Files that keep their name (for a reference tool to open the same file) are
   registered: an atexit hook and SIGTERM / SIGHUP / SIGINT handlers remove
   them before the process goes (SIGINT only where it is not ignored: the
   runner's workers ignore it and leave Ctrl-C to the runner).
3. close() removes it; `with` does that on any exception.
4. sweep_stale(directory) removes files whose owning process is gone: run at
   the start of every plan and measurement, it catches what a SIGKILL left in
   the instant between create and unlink, or a named file's owner killed.

Prefilling writes every byte (O_DIRECT, 1 MiB blocks, 8 in flight), each 4 KiB
unit carrying a pattern made from its offset and a seed: reads of holes or
of unwritten extents would be answered without touching the device, and the
pattern lets a read be checked against the offset it came from.
"""
from __future__ import annotations

import atexit
import errno
import os
import re
import secrets
import signal
import threading
from dataclasses import dataclass, field

from cxlbench.closing import ClosedWhenCollected
from cxlbench.storage.errors import StorageError

PREFIX = "cxlbench-io-"
_NAME = re.compile(rf"^{re.escape(PREFIX)}(\d+)-[0-9a-f]+\.\w+$")
FILL_BLOCK = 1 << 20
FILL_QD = 8
#: Free space a test file must leave on its filesystem.
RESERVE_FRACTION = 0.05
RESERVE_MIN = 1 << 30


def scratch_name(kind: str = "dat") -> str:
    """A fresh name this process owns: cxlbench-io-<pid>-<random>.<kind>."""
    return f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}.{kind}"


def owner_pid(name: str) -> int | None:
    m = _NAME.match(name)
    return int(m.group(1)) if m else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:            # exists, belongs to someone else
        return True
    return True


def sweep_stale(directory: str) -> list[str]:
    """Remove the test files in `directory` whose owning process no longer exists;
    the names removed. Files of live processes (a concurrent run) are left alone."""
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        pid = owner_pid(name)
        if pid is None or _alive(pid):
            continue
        try:
            os.unlink(os.path.join(directory, name))
            removed.append(name)
        except FileNotFoundError:
            pass
        except OSError:
            pass                      # read-only now, or not ours to remove: left for later
    return removed


# ---- removal on exit and on signals ------------------------------------------------

_live: set[str] = set()
_lock = threading.RLock()        # re-entrant: a signal handler may run while it is held
_installed: dict[int, object] = {}
_setup = False
_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def _remove_live() -> None:
    with _lock:
        paths = list(_live)
        _live.clear()
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass


def _on_signal(signum, frame) -> None:
    _remove_live()
    previous = _installed.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)               # Python's SIGINT handler raises KeyboardInterrupt
        return
    signal.signal(signum, signal.SIG_DFL)     # die of the signal, as without us
    os.kill(os.getpid(), signum)


def _install_handlers() -> None:
    """Once per process: the atexit hook, and the signal handlers where that is possible
    (only the main thread may set them)."""
    global _setup
    if _setup:
        return
    _setup = True
    atexit.register(_remove_live)
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in _SIGNALS:
        previous = signal.getsignal(sig)
        if previous is signal.SIG_IGN or previous is None:
            continue                          # someone decided this signal is not for us
        _installed[sig] = previous
        signal.signal(sig, _on_signal)


def _register(path: str) -> None:
    _install_handlers()
    with _lock:
        _live.add(path)


def _unregister(path: str) -> None:
    with _lock:
        _live.discard(path)


# ---- the file ---------------------------------------------------------------------

def room_for(directory: str) -> int | None:
    """Bytes a test file may take in `directory`: what is free less a reserve (5 % of the
    filesystem, at least 1 GiB) that other users of the disk keep; None if unreadable."""
    import shutil
    try:
        usage = shutil.disk_usage(directory)
    except OSError:
        return None
    return max(usage.free - max(int(usage.total * RESERVE_FRACTION), RESERVE_MIN), 0)


def check_space(directory: str, size: int) -> None:
    room = room_for(directory)
    if room is not None and size > room:
        raise StorageError(
            f"a {size >> 20} MiB test file does not fit in {directory}: {room >> 20} MiB may "
            f"be used there (the rest of its free space is kept free); ask for a smaller "
            f"file_size or free space there.")


@dataclass(eq=False)
class ScratchFile(ClosedWhenCollected):
    """An open test file of `size` bytes. direct: opened O_DIRECT. path: its name while it
    has one (None once unlinked). Close it, or use it as a context manager."""
    fd: int
    size: int
    direct: bool
    directory: str
    name: str
    seed: int
    path: str | None = None
    fill_seconds: float = 0.0
    _closed: bool = field(default=False, repr=False)

    @classmethod
    def create(cls, directory: str, size: int, direct: bool = True, seed: int = 1,
               keep_name: bool = False, prefill: bool = True, buffer_node: int = 0,
               kind: str = "dat") -> "ScratchFile":
        """A new file of `size` bytes (a multiple of 1 MiB) in `directory`, every byte written
        with the offset pattern (prefill=False: a sparse file, for callers that write it
        themselves). keep_name: keep the name until close() (else unlinked at once)."""
        if size <= 0 or size % FILL_BLOCK:
            raise ValueError(f"test file size must be a positive multiple of 1 MiB, not {size}")
        sweep_stale(directory)
        check_space(directory, size)
        name = scratch_name(kind)
        path = os.path.join(directory, name)
        _register(path)                          # before it exists: no window without a handler
        flags = os.O_CREAT | os.O_EXCL | os.O_RDWR | (os.O_DIRECT if direct else 0)
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as e:
            _unregister(path)
            raise StorageError(f"cannot create a test file in {directory}: {e.strerror}.") from None
        f = cls(fd, size, direct, directory, name, seed, path)
        try:
            if not keep_name:
                f._unlink()
            if prefill:
                f.fill(buffer_node)
            else:
                os.ftruncate(fd, size)
        except BaseException:
            f.close()
            raise
        return f

    def fill(self, buffer_node: int = 0) -> None:
        """Write the whole file with the offset pattern, then make it durable."""
        from cxlbench import _native
        from cxlbench.memory import allocate
        import numpy as np

        start = _native.now_ns()
        # Allocate the blocks first: direct writes past the end of a file are
        # synchronous on ext4 (each extends it), 4x slower than writes into
        # allocated space. The fill below writes every allocated block, so
        # nothing stays an unwritten extent (whose reads never reach the device).
        try:
            os.posix_fallocate(self.fd, 0, self.size)
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise StorageError(f"{self.directory} has no room for the {self.size >> 20} "
                                   f"MiB test file.") from None
            os.ftruncate(self.fd, self.size)        # no fallocate here (EOPNOTSUPP)
        offsets = np.arange(0, self.size, FILL_BLOCK, dtype=np.uint64)
        with allocate(FILL_QD * FILL_BLOCK, buffer_node) as buf:
            try:
                done, _, _ = _native.io_run(self.fd, True, "libaio", buf.addr, FILL_BLOCK, FILL_QD,
                                            offsets, len(offsets), stamp=True, seed=self.seed)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise                           # the device failed: the case fails
                raise StorageError(f"{self.directory} ran out of space writing the "
                                   f"{self.size >> 20} MiB test file.") from None
        if done != len(offsets):
            raise StorageError(f"the test file in {self.directory} took {done} of "
                               f"{len(offsets)} MiB")
        os.fsync(self.fd)
        self.fill_seconds = (_native.now_ns() - start) / 1e9

    def drop_cache(self) -> None:
        """Write back and drop the file's cached pages (for buffered I/O and mappings)."""
        os.fsync(self.fd)
        os.posix_fadvise(self.fd, 0, self.size, os.POSIX_FADV_DONTNEED)

    def _unlink(self) -> None:
        if self.path:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            _unregister(self.path)
            self.path = None

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._unlink()
        os.close(self.fd)
