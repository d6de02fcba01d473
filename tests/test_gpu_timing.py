"""nvbandwidth's timing on a fake device: the spin kernel first, the flag released only
after everything is queued, events bracketing device time only, a queue that could
block the host refused or caught by the spin kernel's timeout."""
import pytest

from cxlbench.gpu import timing
from cxlbench.gpu.timing import SHAPES, Shape, Timer, batch_shape, fastest_shape, queued

from fakes.gpu import DEVICE_OFFSET, FakeDeadlock, FakeDevice


class Recorder:
    """An op that copies `nbytes` host -> device on the fake and notes the order."""

    def __init__(self, dev, nbytes=1 << 20, pinned=True):
        from cxlbench.gpu.device import MEMCPY_H2D
        self.dev, self.nbytes, self.kind = dev, nbytes, MEMCPY_H2D
        self.dst = dev.malloc(nbytes)
        self.src = dev.host_alloc_mapped(nbytes) if pinned else _pageable(nbytes)
        self.calls = []

    def __call__(self, k, stream):
        self.calls.append((k, len(self.dev.queue)))
        self.dev.memcpy(self.dst, self.src, self.nbytes, self.kind, stream)


_keep = []


def _pageable(nbytes):
    import numpy as np
    a = np.zeros(nbytes, np.uint8)
    _keep.append(a)
    return a.ctypes.data


def test_the_spin_kernel_holds_the_queue_until_everything_is_queued():
    dev = FakeDevice()
    timer = Timer(dev)
    op = Recorder(dev)
    t = timer.run(op, iterations=3, ops=4, warmup=2)
    assert dev.launches[0][0] == "cb_spin"
    assert dev.launches[0][3]["flag"] == timer.flag.device != timer.flag.host   # the mapped address
    # nothing ran while the host queued: every op found the queue still growing
    assert [n for _, n in op.calls] == sorted(n for _, n in op.calls) and op.calls[-1][1] > 10
    assert t.spin == "released" and len(t.seconds) == 3 and t.ops == 4
    # device time only: 4 copies of 1 MiB at 50 GB/s each iteration, whatever the host did
    assert t.seconds == pytest.approx([4 * (1 << 20) / 50e9] * 3)
    assert [k for k, _ in op.calls] == list(range(2 + 12))


def test_the_flag_is_released_even_when_queuing_fails():
    dev = FakeDevice()
    timer = Timer(dev)

    def broken(k, stream):
        raise RuntimeError("launch failed")
    with pytest.raises(RuntimeError):
        timer.run(broken, iterations=1, ops=1)
    import ctypes
    assert ctypes.c_int32.from_address(timer.flag.host).value == 1


def test_measure_sizes_iterations_to_the_target_within_the_queue():
    dev = FakeDevice()
    timer = Timer(dev)
    t = timer.measure(Recorder(dev, 1 << 20), iterations=5, warmup=4)
    # 1 MiB at 50 GB/s = 21 us: 48 copies make 1 ms, but 5 iterations of them would not
    # fit behind the spin kernel: as many as fit
    assert t.ops == batch_shape((1 << 20) / 50e9, 5, 4, True) == min(48, (timing.MAX_QUEUED - 11) // 5)
    assert t.spin == "released"
    assert queued(5, t.ops, 4, True) <= timing.MAX_QUEUED
    small = timer.measure(Recorder(dev, 4096), iterations=10, warmup=4)
    assert queued(10, small.ops, 4, True) <= timing.MAX_QUEUED
    assert small.ops < batch_shape(4096 / 50e9, 10, 4, False)        # capped by the queue, not the target


def test_batch_shape_arithmetic():
    assert batch_shape(0.25e-3, 10, 4, False) == 4
    assert batch_shape(5e-3, 10, 4, True) == 1
    assert batch_shape(1e-7, 10, 4, True) == (timing.MAX_QUEUED - 2 - 4 - 10) // 10
    assert batch_shape(1e-7, 10, 4, True, weight=3) == (timing.MAX_QUEUED - 2 - 12 - 10) // 30
    assert queued(10, 5, 4, True) == 1 + 4 + 1 + 10 * 6
    assert queued(2, 1, 0, False, weight=3) == 1 + 2 * 4


def test_too_much_behind_the_spin_kernel_is_refused():
    dev = FakeDevice()
    with pytest.raises(ValueError, match="behind the spin kernel"):
        Timer(dev).run(Recorder(dev), iterations=10, ops=50, warmup=4)


def test_a_queue_deeper_than_the_device_takes_is_caught_by_the_timeout():
    dev = FakeDevice(queue_depth=8)
    timer = Timer(dev)
    t = timer.run(Recorder(dev), iterations=2, ops=8, warmup=1)
    assert t.spin == "timed out"
    again = timer.run(Recorder(dev), iterations=1, ops=2, warmup=0)
    assert again.spin == "off"                 # no second wait on a spin kernel that timed out


def test_pageable_copies_never_queue_behind_the_spin_kernel():
    dev = FakeDevice()
    timer = Timer(dev)
    op = Recorder(dev, pinned=False)
    with pytest.raises(FakeDeadlock):
        timer.run(op, iterations=1, ops=1)
    dev.queue.clear()
    t = Timer(dev).run(op, iterations=2, ops=2, warmup=1, spin=False)
    assert t.spin == "off" and t.seconds == pytest.approx([2 * (1 << 20) / 10e9] * 2)


def test_the_fastest_launch_shape_is_found():
    dev = FakeDevice(best_shape=(1024, 2))
    buf = dev.malloc(1 << 20)
    timer = Timer(dev)

    def make(shape):
        return lambda k, s: dev.launch("cb_store_w16", shape.grid(dev.sm_count), shape.block,
                                       (buf, (1 << 20) // 16, 16, 1), s)
    best, times = fastest_shape(timer, make)
    assert best == Shape(1024, 2) and set(times) == set(SHAPES)
    assert times[best] == pytest.approx((1 << 20) / 2e12)
    assert all(times[s] > times[best] for s in SHAPES if s != best)


def test_the_fake_refuses_host_addresses_where_device_ones_belong():
    from fakes.gpu import FakeFault
    dev = FakeDevice()
    host = dev.host_alloc_mapped(4096)
    with pytest.raises(FakeFault, match="illegal address"):
        dev.view(host, 8, "uint64")
    assert dev.view(dev.mapped_pointer(host), 8, "uint64") is not None
    assert dev.mapped_pointer(host) == host + DEVICE_OFFSET
    with pytest.raises(FakeFault):
        dev.launch("cb_chase", 2, 32, (0, 0, 0, 0), dev.stream())


def test_kernels_are_loaded_before_anything_waits_behind_a_spin_kernel():
    dev = FakeDevice()
    assert not getattr(dev, "preloaded", False)
    Timer(dev)
    assert dev.preloaded
    unloaded = FakeDevice()
    unloaded.preload = lambda: None               # a device whose kernels would load lazily
    buf = unloaded.malloc(1 << 20)
    with pytest.raises(FakeDeadlock, match="lazy module loading"):
        Timer(unloaded).run(lambda k, s: unloaded.launch("cb_store_w16", 4, 256, (buf, 1024, 16, 1), s),
                            iterations=1, ops=1)
