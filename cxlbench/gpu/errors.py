"""What the GPU layer raises: the device cannot be used here, or a kernel was wrong."""
from __future__ import annotations

NO_GPU = "no GPU"


class Unavailable(Exception):
    """No usable GPU for this case (no cupy, no driver, no device, not enough device
    memory); the message says why and the case is recorded as skipped with it."""


class WrongResult(Exception):
    """A kernel or copy produced something other than the reference: no figure is
    kept from it (a fast wrong kernel must never become a bandwidth)."""
