"""The C core: chase permutations, streaming kernels, mappings, policy, placement.

Behaviour only: no assertion depends on how fast anything ran.
"""
import array
import ctypes
import errno
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cxlbench import _native

PAGE = 4096
CPUS = sorted(os.sched_getaffinity(0))


@pytest.fixture
def mapping():
    """map(length) -> addr of a fresh anonymous mapping, unmapped afterwards."""
    maps = []

    def make(length):
        addr = _native.map_anonymous(length)
        maps.append((addr, length))
        return addr

    yield make
    for addr, length in maps:
        _native.unmap(addr, length)


def doubles(addr, n):
    return np.ctypeslib.as_array((ctypes.c_double * n).from_address(addr))


# ---- pointer chase ------------------------------------------------------------------

def chains_of(addr, length, line, heads):
    """Each chain's visiting order, as offsets, walked with chase_order."""
    return [_native.chase_order(addr, h, length // line + 1, length) for h in heads]


@pytest.mark.parametrize("length,line,window,chains", [
    (1 << 20, 64, 0, 1),              # whole set, one chain
    (1 << 20, 64, 16 * PAGE, 1),      # windowed
    (1 << 20, 64, 0, 3),              # several chains, lines not divisible by 3
    (1 << 20, 64, 2 * PAGE, 4),       # windowed, chains own whole windows
    (1 << 20, 64, 512 << 10, 4),      # fewer windows (2) than chains (4)
    (300 * PAGE + 640, 64, 7 * PAGE, 2),  # partial last window, ragged length
    (1 << 20, 128, 4 * PAGE, 1),      # other line size
    (64, 64, 0, 1),                   # one line: points to itself
])
def test_chase_is_single_cycle_over_every_line(mapping, length, line, window, chains):
    addr = mapping(length)
    heads = _native.chase_init(addr, length, line, window, chains, 42)
    assert len(heads) == chains
    orders = chains_of(addr, length, line, heads)
    lines = length // line
    seen = set()
    for head, order in zip(heads, orders):
        assert order[0] == head - addr
        assert len(order) <= lines, "a chain did not come back to its head"
        assert len(set(order)) == len(order), "a line visited twice in one lap"
        # closing the cycle: the last line points back to the head
        assert ctypes.c_size_t.from_address(addr + order[-1]).value == head
        assert not seen & set(order), "two chains share a line"
        seen |= set(order)
    assert seen == {i * line for i in range(lines)}
    if chains > 1:
        sizes = [len(o) for o in orders]
        assert max(sizes) - min(sizes) <= max(window // line, 1)


def test_windowed_chase_stays_in_each_window_then_moves_on(mapping):
    length, window = 2 << 20, 64 * PAGE
    addr = mapping(length)
    (head,) = _native.chase_init(addr, length, 64, window, 1, 7)
    order = _native.chase_order(addr, head, length // 64 + 1)
    windows = [off // window for off in order]
    runs = [w for i, w in enumerate(windows) if i == 0 or w != windows[i - 1]]
    assert sorted(runs) == list(range(length // window)), "each window is one contiguous run"
    assert runs != sorted(runs), "windows are visited in random order"
    first = order[: window // 64]
    assert first != sorted(first), "lines are random within a window"


def test_whole_set_chase_is_random_and_seeded(mapping):
    length = 1 << 20
    addr = mapping(length)
    (h1,) = _native.chase_init(addr, length, 64, 0, 1, 1)
    o1 = _native.chase_order(addr, h1, length)
    (h1b,) = _native.chase_init(addr, length, 64, 0, 1, 1)
    assert _native.chase_order(addr, h1b, length) == o1, "same seed, same order"
    (h2,) = _native.chase_init(addr, length, 64, 0, 1, 2)
    assert _native.chase_order(addr, h2, length) != o1, "another seed, another order"
    sequential = sum(1 for a, b in zip(o1, o1[1:]) if b - a == 64)
    assert sequential < len(o1) // 100, "a prefetcher-friendly order"
    same_page = sum(1 for a, b in zip(o1, o1[1:]) if a // PAGE == b // PAGE)
    assert same_page < len(o1) // 20, "whole-set order should change page almost every step"


@pytest.mark.parametrize("chains", [1, 2, 3, 4, 8])
def test_chase_run_follows_all_chains(mapping, chains):
    length = 256 << 10
    addr = mapping(length)
    heads = _native.chase_init(addr, length, 64, 0, chains, 3)
    elapsed = _native.chase_run(heads, 10_000)
    assert isinstance(elapsed, int) and elapsed > 0
    # the run reads only: the cycles are intact afterwards
    seen = set()
    for order in chains_of(addr, length, 64, heads):
        seen |= set(order)
    assert len(seen) == length // 64


def test_chase_rejects_bad_arguments(mapping):
    addr = mapping(PAGE)
    with pytest.raises(ValueError, match="line_bytes"):
        _native.chase_init(addr, PAGE, 12)
    with pytest.raises(ValueError, match="window_bytes"):
        _native.chase_init(addr, PAGE, 64, 100)
    with pytest.raises(ValueError, match="chains"):
        _native.chase_init(addr, PAGE, 64, 0, PAGE // 64 + 1)
    with pytest.raises(ValueError):
        _native.chase_run([], 10)


def test_chase_order_catches_a_pointer_leaving_the_buffer(mapping):
    addr = mapping(PAGE)
    (head,) = _native.chase_init(addr, PAGE, 64)
    order = _native.chase_order(addr, head, 64, PAGE)
    ctypes.c_size_t.from_address(addr + order[5]).value = addr + 10 * PAGE
    with pytest.raises(ValueError, match="outside"):
        _native.chase_order(addr, head, 64, PAGE)


# ---- streaming -------------------------------------------------------------------

N = 100_003          # not a multiple of any vector width or thread share
SCALAR = 3.0
THREADS = [[CPUS[0]]] + ([CPUS[:2]] if len(CPUS) > 1 else [])


def fill(a, b, c):
    i = np.arange(N, dtype=np.float64)
    a[:] = i
    b[:] = 2 * i + 1
    c[:] = 0.5 * i - 3
    return a.copy(), b.copy(), c.copy()


EXPECTED = {
    "write": lambda a, b, c: ("a", np.full(N, SCALAR)),
    "copy": lambda a, b, c: ("c", a),
    "scale": lambda a, b, c: ("b", SCALAR * c),
    "add": lambda a, b, c: ("c", a + b),
    "triad": lambda a, b, c: ("a", b + SCALAR * c),
}


@pytest.mark.parametrize("offset", [0, 8], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("nt", [False, True], ids=["regular", "nt"])
@pytest.mark.parametrize("cpus", THREADS, ids=lambda c: f"{len(c)}thr")
@pytest.mark.parametrize("kernel", ["read", "write", "copy", "scale", "add", "triad"])
def test_stream_kernels_compute_the_right_values(mapping, kernel, cpus, nt, offset):
    size = N * 8 + 64
    ptr = {k: mapping(size) + offset for k in "abc"}
    arrays = {k: doubles(p, N) for k, p in ptr.items()}
    a0, b0, c0 = fill(arrays["a"], arrays["b"], arrays["c"])
    result = _native.stream_check(kernel, ptr["a"], ptr["b"], ptr["c"], N * 8, cpus,
                                  nt=nt, scalar=SCALAR)
    if kernel == "read":
        assert result == pytest.approx(a0.sum(), rel=1e-12)
        written = None
    else:
        assert result == 0.0
        written, want = EXPECTED[kernel](a0, b0, c0)
        np.testing.assert_array_equal(arrays[written], want)
    for name, before in zip("abc", (a0, b0, c0)):
        if name != written:
            np.testing.assert_array_equal(arrays[name], before, err_msg=f"{name} changed")
    # nothing written past the end
    assert ctypes.c_double.from_address(ptr["a"] + N * 8).value == 0.0


def test_stream_times_every_iteration_and_keeps_values(mapping):
    ptr = {k: mapping(N * 8) for k in "abc"}
    a, b, c = (doubles(ptr[k], N) for k in "abc")
    a0, b0, c0 = fill(a, b, c)
    seconds = _native.stream("triad", ptr["a"], ptr["b"], ptr["c"], N * 8, CPUS[:2],
                             iterations=7, scalar=SCALAR)
    assert len(seconds) == 7 and all(isinstance(s, float) and s > 0 for s in seconds)
    np.testing.assert_array_equal(a, b0 + SCALAR * c0)


def test_stream_held_is_each_iterations_least_share_of_cpu(mapping):
    n = 1 << 20
    ptr = {k: mapping(n * 8) for k in "abc"}
    seconds, held = _native.stream("triad", ptr["a"], ptr["b"], ptr["c"], n * 8, CPUS[:2],
                                   iterations=5, held=True)
    assert len(seconds) == len(held) == 5
    assert all(isinstance(h, float) and 0 < h <= 1 for h in held)   # barrier waits are not "lost"
    plain = _native.stream("read", ptr["a"], 0, 0, n * 8, CPUS[:2], iterations=2)
    assert isinstance(plain, list) and len(plain) == 2              # without held: as before


def test_stream_held_sees_another_process_on_its_cpu(mapping):
    """A busy loop pinned to the stream thread's CPU: the two take turns on it, so
    the passes it interrupts held their CPU for well under their wall time."""
    cpu = CPUS[0]
    n = 16 << 20                    # 128 MiB: passes of several ms, some sharing the CPU
    addr = mapping(n * 8)
    _native.fault_in(addr, n * 8, PAGE)
    busy = subprocess.Popen(
        [sys.executable, "-c", "import os, time\n"
         f"os.sched_setaffinity(0, {{{cpu}}}); print('ready', flush=True)\n"
         "end = time.monotonic() + 30\n"
         "while time.monotonic() < end: pass"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert busy.stdout.readline().strip() == "ready"
        _, held = _native.stream("read", addr, 0, 0, n * 8, [cpu], iterations=10, held=True)
    finally:
        busy.kill()
        busy.wait()
    assert all(0 < h <= 1 for h in held)
    assert min(held) < 0.8, held


def test_stream_kernel_table_counts_bytes_like_stream():
    assert _native.STREAM_KERNELS == {"read": (1, 0), "write": (0, 1), "copy": (1, 1),
                                      "scale": (1, 1), "add": (2, 1), "triad": (2, 1)}
    assert _native.STREAM_ISA in ("avx2", "sse2", "generic")


def test_stream_rejects_bad_arguments(mapping):
    addr = mapping(PAGE)
    with pytest.raises(ValueError, match="unknown stream kernel"):
        _native.stream("fma", addr, addr, addr, PAGE, CPUS[:1])
    with pytest.raises(ValueError, match="needs arrays"):
        _native.stream("copy", addr, 0, 0, PAGE, CPUS[:1])
    with pytest.raises(ValueError, match="at least one CPU"):
        _native.stream("read", addr, 0, 0, PAGE, [])
    with pytest.raises(OSError):
        _native.stream("read", addr, 0, 0, PAGE, [max(CPUS) + 1000])



# Each call that starts pinned threads, as source for a child process: `cpu` is the CPU it pins to.
THREAD_STARTERS = {
    "stream": "_native.stream('read', a, 0, 0, PAGE, [cpu])",
    "lines": "_native.lines(a, PAGE, [cpu], reads=1)",
    "loaded_latency": "_native.loaded_latency(_native.chase_init(a, PAGE, 64), cpu, 0, 0, [], "
                      "warmup_ns=1000, duration_ns=1000)",
}


@pytest.mark.parametrize("call", THREAD_STARTERS)
def test_a_thread_pinned_to_a_cpu_not_allowed_says_so(mapping, call):
    a, cpu = mapping(PAGE), max(CPUS) + 1000
    with pytest.raises(OSError, match=r"a CPU not allowed to this process\?") as e:
        eval(THREAD_STARTERS[call], {"_native": _native, "a": a, "cpu": cpu, "PAGE": PAGE})
    assert e.value.errno == errno.EINVAL


# Calls every starter under a process limit of 0, as nobody when run as root (root is
# not held to RLIMIT_NPROC); prints {name: [errno, message] or null}, or null for no nobody.
UNDER_NO_THREADS = """
import json, os, resource, sys
from cxlbench import _native
PAGE, cpu, starters = json.loads(sys.argv[1])
a = _native.map_anonymous(PAGE)
if os.getuid() == 0:
    try:
        os.setgid(65534)
        os.setuid(65534)
    except PermissionError:
        print("null")
        raise SystemExit
resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
found = {}
for name, src in starters.items():
    try:
        eval(src)
        found[name] = None
    except OSError as e:
        found[name] = [e.errno, str(e)]
print(json.dumps(found))
"""


def test_a_thread_the_process_limit_refuses_is_named_as_that_not_as_a_cpu():
    """At ulimit -u (EAGAIN) the message sent the reader to the CPU list instead."""
    out = subprocess.run([sys.executable, "-c", UNDER_NO_THREADS, json.dumps([PAGE, CPUS[0], THREAD_STARTERS])],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    if found is None:
        pytest.skip("running as root without the right to become another user")
    for name, (err, message) in found.items():
        assert err == errno.EAGAIN, (name, message)
        assert "thread could not be created" in message and "ulimit -u" in message, (name, message)
        assert "CPU not allowed" not in message, (name, message)

# ---- mappings, policy, placement ------------------------------------------------------

def test_page_nodes_reports_absent_then_node(mapping):
    length = 16 * PAGE
    addr = mapping(length)
    raw = array.array("i")
    raw.frombytes(_native.page_nodes(addr, length))
    assert list(raw) == [-errno.ENOENT] * 16
    _native.fault_in(addr, length, PAGE)
    raw = array.array("i")
    raw.frombytes(_native.page_nodes(addr, length))
    assert len(raw) == 16 and all(n >= 0 for n in raw)
    assert set(raw) <= set(int(d[4:]) for d in os.listdir("/sys/devices/system/node")
                            if d[4:].isdigit())


def test_fault_in_keeps_contents(mapping):
    addr = mapping(4 * PAGE)
    data = doubles(addr, 4 * PAGE // 8)
    data[:] = np.arange(data.size)
    _native.fault_in(addr, 4 * PAGE, PAGE)
    np.testing.assert_array_equal(data, np.arange(data.size))


def test_mbind_bind_then_pages_land_on_the_node(mapping):
    length = 64 * PAGE
    addr = mapping(length)
    _native.mbind(addr, length, [0], "bind", strict=True)
    _native.fault_in(addr, length, PAGE)
    raw = array.array("i")
    raw.frombytes(_native.page_nodes(addr, length))
    assert set(raw) == {0}
    _native.mbind(addr, length, [0], "interleave", strict=False)
    _native.mbind(addr, length, [0], "preferred", strict=False)
    _native.mbind(addr, length, [], "default", strict=False)


def test_mbind_weighted_interleave_is_supported_or_clearly_refused(mapping):
    addr = mapping(PAGE)
    try:
        _native.mbind(addr, PAGE, [0], "weighted_interleave", strict=False)
    except OSError as e:
        assert e.errno == errno.EINVAL and "6.9" in str(e)


def test_mbind_errors(mapping):
    addr = mapping(PAGE)
    with pytest.raises(ValueError, match="unknown memory policy"):
        _native.mbind(addr, PAGE, [0], "spread")
    with pytest.raises(ValueError, match="at least one node"):
        _native.mbind(addr, PAGE, [], "bind")
    with pytest.raises(OSError) as e:
        _native.mbind(addr, PAGE, [999], "bind")
    assert e.value.errno == errno.EINVAL


def test_hugetlb_mapping_needs_whole_pages_and_reports_errno():
    with pytest.raises(ValueError, match="multiple"):
        _native.map_anonymous(PAGE, 2 << 20)
    free = int(open("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages").read())
    if free:
        pytest.skip("2 MiB hugetlb pages are reserved here; the ENOMEM path is not reachable")
    with pytest.raises(OSError) as e:
        _native.map_anonymous(2 << 20, 2 << 20)
    assert e.value.errno == errno.ENOMEM


def test_madvise_mlock_and_errors(mapping):
    addr = mapping(4 * PAGE)
    _native.madvise(addr, 4 * PAGE, _native.MADV_NOHUGEPAGE)
    with pytest.raises(OSError) as e:
        _native.madvise(addr, 4 * PAGE, 12345)
    assert e.value.errno == errno.EINVAL
    _native.mlock(addr, PAGE)
    _native.munlock(addr, PAGE)
    with pytest.raises(OverflowError):
        _native.unmap(-1, PAGE)


def test_reserve_and_fixed_mapping():
    region = _native.reserve(4 * PAGE)
    try:
        addr = _native.map_anonymous(2 * PAGE, 0, region + PAGE)
        assert addr == region + PAGE
        doubles(addr, 2 * PAGE // 8)[:] = 1.0
    finally:
        _native.unmap(region, 4 * PAGE)


def test_pin_self_restricts_the_calling_thread():
    before = os.sched_getaffinity(0)
    try:
        _native.pin_self([CPUS[-1]])
        assert os.sched_getaffinity(0) == {CPUS[-1]}
        with pytest.raises(OSError):
            _native.pin_self([])
    finally:
        os.sched_setaffinity(0, before)


def test_clock_is_monotonic():
    t0 = _native.now_ns()
    assert _native.now_ns() >= t0
