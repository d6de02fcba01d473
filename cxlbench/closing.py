"""The close-once protocol of everything that holds a resource (a mapping, a file,
device memory): `with` closes it; so does garbage collection where that is safe."""
from __future__ import annotations


class Closeable:
    """`with x:` calls x.close() on the way out; close() must be safe to call twice."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ClosedWhenCollected(Closeable):
    """Also closed when collected, so a buffer or file left by an exception is not
    leaked for the rest of a worker's life. Not for device memory, whose context
    may be gone by then."""

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
