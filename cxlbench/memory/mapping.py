"""What every buffer this layer maps shares: it is unmapped exactly once,
whether closed, left by a `with` block, or garbage-collected."""
from __future__ import annotations

from cxlbench.closing import ClosedWhenCollected


class Mapped(ClosedWhenCollected):
    """Mixin for a record whose `_region` is the (start, size) of its whole mapping,
    guard pages included; (0, 0) once unmapped."""
    _region: tuple[int, int]

    @property
    def closed(self) -> bool:
        return self._region[1] == 0

    def close(self) -> None:
        """Unmap (and so unlock) the buffer; later calls do nothing."""
        if not self.closed:
            from cxlbench import _native
            start, size = self._region
            self._region = (0, 0)
            _native.unmap(start, size)
