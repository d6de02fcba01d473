"""The GPU side of cxlbench: device code, timing, buffers, checks and telemetry.

Nothing here imports cupy, torch or pynvml until a device is opened (in a
benchmark worker): the package, its planning and its tests work on machines
without a GPU, where every GPU case is recorded as skipped with "no GPU".

    dev = cxlbench.gpu.open(env, "gpu:0")    # Unavailable when it cannot be used
    timer = Timer(dev)                       # spin-kernel + events batches
    ...

Modules: kernels (CUDA source), device (the cupy backend), timing, buffers,
chase (pointer-chase chains), check (poison, reference comparisons),
telemetry (NVML clocks, power, ECC), torchref (torch's own copies, the
reference the targets compare with). The device check's run and table is a
command, cxlbench.cli.devicecheck; the tests' numpy device is tests/fakes/gpu.py.
"""
from __future__ import annotations

from cxlbench.gpu.errors import NO_GPU, Unavailable, WrongResult

__all__ = ["NO_GPU", "Unavailable", "WrongResult", "open"]


def open(env, initiator_name: str):                       # noqa: A001 - gpu.open(...)
    """The device behind a GPU initiator, with its telemetry attached."""
    from cxlbench.gpu import device
    from cxlbench.gpu.telemetry import Telemetry
    dev = device.open_device(env, initiator_name)
    if getattr(dev, "telemetry", None) is None:
        initiator = env.initiators.get(initiator_name) if env is not None else None
        index = initiator.gpu if initiator is not None else None
        dev.telemetry = Telemetry.open(dev.bus_id, index)
    return dev
