"""A test file mapped as memory, and getting its pages out of the page cache.

The "NVMe as memory" chase needs every page it will touch to be on the device
only, so that each dependent load is a major fault that reads one page. evict()
writes the mapping back (msync, fsync), unmaps its pages from this process
(MADV_DONTNEED: a page that is mapped is never dropped from the cache), asks
the kernel to drop the file's cached pages (POSIX_FADV_DONTNEED) and then
counts what is still cached with mincore — the count is returned, never
assumed to be zero.
"""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field

from cxlbench.storage.errors import StorageError
from cxlbench.storage.scratch import ScratchFile

PAGE = mmap.PAGESIZE


@dataclass(eq=False)
class FileMapping:
    """A MAP_SHARED read/write mapping of a whole ScratchFile."""
    file: ScratchFile
    addr: int = 0
    length: int = 0
    _mapped: bool = field(default=False, repr=False)

    @classmethod
    def of(cls, file: ScratchFile) -> "FileMapping":
        from cxlbench import _native
        try:
            addr = _native.map_file(file.fd, file.size, writable=True)
        except OSError as e:
            raise StorageError(f"cannot map the test file in {file.directory}: {e.strerror}; "
                               f"the filesystem may not allow shared mappings.") from None
        return cls(file, addr, file.size, True)

    @property
    def pages(self) -> int:
        return self.length // PAGE

    def advise(self, advice: int) -> None:
        from cxlbench import _native
        _native.madvise(self.addr, self.length, advice)

    def populate(self) -> None:
        """Fault every page in for writing (page cache pages, no device reads for a sparse file)."""
        from cxlbench import _native
        try:
            _native.madvise(self.addr, self.length, _native.MADV_POPULATE_WRITE)
        except OSError:
            _native.fault_in(self.addr, self.length, PAGE)

    def resident(self) -> int:
        """Pages of the file in the page cache now."""
        from cxlbench import _native
        return _native.mincore(self.addr, self.length)

    def evict(self) -> int:
        """Write everything back and drop it from the cache; the pages still cached after."""
        from cxlbench import _native
        _native.msync(self.addr, self.length)
        os.fsync(self.file.fd)
        _native.madvise(self.addr, self.length, _native.MADV_DONTNEED)
        os.posix_fadvise(self.file.fd, 0, self.length, os.POSIX_FADV_DONTNEED)
        return self.resident()

    def close(self) -> None:
        if self._mapped:
            from cxlbench import _native
            self._mapped = False
            _native.unmap(self.addr, self.length)

    def __enter__(self) -> "FileMapping":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
