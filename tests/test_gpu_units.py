"""The GPU layer's pure parts, on numpy: chase chains, result checks, kernel
signatures, the CUDA source compiled by NVRTC for sm_90 and sm_100 with ptxas's
register and spill figures checked (NVRTC is a test dependency on x86-64 Linux),
telemetry readings and their summary."""
import ctypes
import ctypes.util
import dataclasses
import functools
import glob
import os
import platform
import re
import sys

import numpy as np
import pytest

from cxlbench.gpu import chase, kernels, telemetry
from cxlbench.gpu import correctness as check
from cxlbench.gpu.errors import WrongResult
from cxlbench.gpu.timing import SHAPES


# ---- chase chains ---------------------------------------------------------------------

@pytest.mark.parametrize("pattern", ["random", "sequential"])
@pytest.mark.parametrize("stride", [64, 4096, 2 << 20])
def test_a_chain_is_one_cycle_through_every_node(pattern, stride):
    n = 257 if stride < 4096 else 9
    words = np.zeros(n * stride // 8, np.uint64)
    base = 0x7F0000000000
    visit = chase.order(n, pattern, seed=3, xp=np)
    start = chase.link(words, base, visit, stride, np)
    assert start == base + int(visit[0]) * stride
    seen, p = set(), start
    for _ in range(n):
        seen.add(p)
        assert (p - base) % stride == 0 and base <= p < base + n * stride
        p = int(words[(p - base) // 8])
    assert p == start and len(seen) == n                  # back to the start after exactly n loads
    for steps in (0, 1, n - 1, n, 3 * n + 5):
        assert chase.walk(words, base, start, steps) == chase.expected(base, visit, stride, steps)


def test_random_chains_differ_by_seed_and_sequential_ones_have_a_fixed_stride():
    a, b = chase.order(1000, "random", 1, np), chase.order(1000, "random", 2, np)
    assert sorted(a) == list(range(1000)) and not np.array_equal(a, b)
    seq = chase.order(10, "sequential", 1, np)
    words = np.zeros(10 * 512, np.uint64)
    chase.link(words, 0, seq, 4096, np)
    assert [int(words[i * 512]) for i in range(10)] == [4096 * ((i + 1) % 10) for i in range(10)]


def test_chains_refuse_what_cannot_be_chased():
    with pytest.raises(ValueError):
        chase.nodes(1 << 20, 12)
    with pytest.raises(ValueError):
        chase.nodes(64, 64)
    with pytest.raises(ValueError):
        chase.order(4, "zigzag", 1, np)
    assert chase.nodes(1 << 30, 2 << 20) == 512


# ---- result checks ----------------------------------------------------------------------

def test_a_pattern_that_differs_in_one_word_is_refused():
    words = check.pattern(np, 100, 1000, seed=0xABC)
    check.expect_pattern(np, words, 0xABC, "ok", first=100)
    words[517] ^= 1
    with pytest.raises(WrongResult, match="1 of 1000 words"):
        check.expect_pattern(np, words, 0xABC, "copy", first=100)
    with pytest.raises(WrongResult):
        check.expect_pattern(np, check.pattern(np, 0, 1000, 0xABC), 0xABC, "shifted", first=1)


@pytest.mark.parametrize("width,stride", [(4, 32), (8, 32), (16, 32), (16, 16), (32, 128)])
def test_strided_stores_are_checked_where_written_and_between(width, stride):
    count = 64
    data = np.full(count * stride + 64, check.POISON, np.uint8)
    word = kernels.WORD_BYTES[width]
    k = width // word
    dt = np.uint32 if word == 4 else np.uint64
    values = (np.arange(count * k, dtype=np.uint64).astype(dt) ^ dt(0x1234)).view(np.uint8)
    rows = data[:count * stride].reshape(count, stride)
    rows[:, :width] = values.reshape(count, width)
    check.expect_strided_stores(np, data, count, stride, width, word, 0x1234, "ok")
    if width < stride:
        bad = data.copy()
        bad[stride + width] = 0                            # a byte between two stores written
        with pytest.raises(WrongResult, match="between the stores"):
            check.expect_strided_stores(np, bad, count, stride, width, word, 0x1234, "spill")
    bad = data.copy()
    bad[:count * stride].reshape(count, stride)[-1, :width] = check.POISON   # the last store missing
    with pytest.raises(WrongResult, match="differ from the pattern"):
        check.expect_strided_stores(np, bad, count, stride, width, word, 0x1234, "skipped")
    bad = data.copy()
    bad[-1] = 7                                            # past the last element
    with pytest.raises(WrongResult, match="past the last"):
        check.expect_strided_stores(np, bad, count, stride, width, word, 0x1234, "overrun")


def test_strided_sums_read_only_what_the_loads_read():
    data = np.arange(64, dtype=np.uint64)                  # 512 bytes
    raw = data.view(np.uint8)
    assert check.strided_sum(np, raw, 4, 128, 32, 8) == sum(sum(range(16 * i, 16 * i + 4)) for i in range(4))
    assert check.strided_sum(np, raw, 32, 16, 16, 8) == sum(range(64))
    low = raw.view(np.uint32)[::8]                          # the first 4 bytes of every 32
    assert check.strided_sum(np, raw, 16, 32, 4, 4) == int(low.astype(np.uint64).sum())


def test_sums_compare_modulo_two_to_the_64():
    check.expect_sum((1 << 64) + 5, 5, "wraps")
    with pytest.raises(WrongResult, match="differs from the reference"):
        check.expect_sum(6, 5, "read")
    parts = np.array([2**63, 2**63, 7], np.uint64)
    assert check.partial_sum(np, parts) == 7


def test_poison_and_untouched_bytes():
    a = np.zeros(100, np.uint64)
    check.poison(np, a)
    assert (a.view(np.uint8) == 0xFF).all()
    check.expect_all(np, a.view(np.uint8), 0xFF, "untouched")
    a[3] = 0
    with pytest.raises(WrongResult):
        check.expect_all(np, a.view(np.uint8), 0xFF, "touched")


# ---- kernels ------------------------------------------------------------------------------

def test_every_kernel_in_the_source_has_a_signature_and_back():
    names = set(re.findall(r'extern "C" __global__ void (\w+)\(', kernels.SOURCE)) - {"NAME"}
    names |= {f"cb_load_w{w}" for w in kernels.WIDTHS}      # made by the LOAD_KERNEL macro
    assert names == set(kernels.SIGNATURES)
    for name, sig in kernels.SIGNATURES.items():
        if name.startswith("cb_load"):
            continue
        params = re.search(rf'void {name}\(([^)]*)\)', kernels.SOURCE).group(1)
        assert len([p for p in params.split(",") if p.strip()]) == len(sig), name


def test_kernel_arguments_are_converted_to_exact_types_and_counted():
    args = kernels.convert("cb_triad", (1, 2, 3, 3, 10))
    assert [type(a) for a in args] == [np.uint64, np.uint64, np.uint64, np.float64, np.uint64]
    with pytest.raises(TypeError, match="takes 5 arguments"):
        kernels.convert("cb_triad", (1, 2, 3))
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        kernels.convert("cb_copy", (-1, 0, 1))
    assert kernels.named("cb_copy", (1, 2, 3)) == {"dst": 1, "src": 2, "n": 3}


# ---- the kernels compiled as a GPU would compile them (NVRTC) -------------------------------

#: where the test extra installs NVRTC (pyproject.toml): there a missing library is a
#: broken install and fails; elsewhere the compile tests skip with the reason.
NVRTC_INSTALLED_BY_TEST_EXTRA = sys.platform == "linux" and platform.machine() == "x86_64"
#: the real architectures every kernel is compiled for: H100/H200 and B200/GB200
ARCHES = ("sm_90", "sm_100")
#: registers one block may use on sm_90 and sm_100 (64K 32-bit registers)
BLOCK_REGISTERS = 65536


def _nvrtc_in_wheels() -> list[str]:
    """libnvrtc from the pip wheels (nvidia/cu13/lib for 13, nvidia/cuda_nvrtc/lib for 12),
    the newest major first."""
    try:
        import nvidia
    except ImportError:
        return []
    found = []
    for root in list(nvidia.__path__):
        for path in glob.glob(os.path.join(root, "*", "lib", "libnvrtc.so.*")):
            m = re.search(r"libnvrtc\.so\.(\d+)$", path)
            if m:
                found.append((int(m.group(1)), path))
    return [path for _, path in sorted(found, reverse=True)]


def _load_nvrtc():
    """libnvrtc: the wheel's (what the test extra installs) before the system's. It opens
    its builtins library by name when it compiles, and the wheel sets no rpath that
    would find the copy beside it: loaded first, that copy is the one the name finds."""
    for path in _nvrtc_in_wheels():
        try:
            for builtins in glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so.*")):
                ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
            return ctypes.CDLL(path)
        except OSError:
            pass
    for name in ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", ctypes.util.find_library("nvrtc")):
        if name:
            try:
                return ctypes.CDLL(name)
            except OSError:
                pass
    return None


@pytest.fixture(scope="module")
def nvrtc():
    lib = _load_nvrtc()
    if lib is None:
        if NVRTC_INSTALLED_BY_TEST_EXTRA:
            pytest.fail("NVRTC not found, though the test extra installs it on x86-64 Linux: "
                        "pip install -e '.[test]' (nvidia-cuda-nvrtc)")
        pytest.skip(f"NVRTC not found, and the test extra installs it only on x86-64 Linux "
                    f"(this is {sys.platform} {platform.machine()})")
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return _Nvrtc(lib, f"{major.value}.{minor.value}")


@dataclasses.dataclass(eq=False)            # hashed by identity: _figures_for caches on it
class _Nvrtc:
    lib: ctypes.CDLL
    version: str


def _compile(nvrtc, *options: str) -> tuple[int, str, bytes, bytes]:
    """kernels.SOURCE through NVRTC: (its result code, its log, the PTX, the cubin; a
    cubin only for a real architecture, sm_NN)."""
    lib, prog = nvrtc.lib, ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), kernels.SOURCE.encode(), b"cb.cu", 0, None, None)
    assert rc == 0, f"nvrtcCreateProgram: {rc}"
    try:
        rc = lib.nvrtcCompileProgram(prog, len(options),
                                     (ctypes.c_char_p * len(options))(*(o.encode() for o in options)))
        log = _read(lib.nvrtcGetProgramLogSize, lib.nvrtcGetProgramLog, prog).rstrip(b"\0").decode()
        ptx = _read(lib.nvrtcGetPTXSize, lib.nvrtcGetPTX, prog) if rc == 0 else b""
        cubin = _read(lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN, prog) if rc == 0 else b""
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return rc, log, ptx, cubin


def _read(get_size, get, prog) -> bytes:
    size = ctypes.c_size_t(0)
    if get_size(prog, ctypes.byref(size)) != 0 or size.value == 0:
        return b""
    buf = ctypes.create_string_buffer(size.value)
    assert get(prog, buf) == 0
    return buf.raw


_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")
_FIGURES = {"registers": r"Used (\d+) registers", "stack_bytes": r"(\d+) bytes stack frame",
            "spill_store_bytes": r"(\d+) bytes spill stores", "spill_load_bytes": r"(\d+) bytes spill loads",
            "lmem_bytes": r"(\d+) bytes lmem"}


def _ptxas_figures(log: str) -> dict[tuple[str, str], dict[str, int | None]]:
    """ptxas's verbose report (--ptxas-options=-v) per (kernel, arch): registers, stack
    frame, spill stores and loads, local memory (printed by older ptxas only: 0 when
    absent). Any other figure ptxas did not print is None, which no check accepts."""
    out = {}
    for block in re.split(r"(?=ptxas info\s*: Compiling entry function)", log):
        entry = _ENTRY.search(block)
        if entry is None:
            continue
        figures = {}
        for key, pattern in _FIGURES.items():
            m = re.search(pattern, block)
            figures[key] = int(m.group(1)) if m else (0 if key == "lmem_bytes" else None)
        out[entry.groups()] = figures
    return out


def _table(figures: dict) -> str:
    return "\n".join(f"  {name}: {f['registers']} registers, {f['spill_store_bytes']} B spill stores, "
                     f"{f['spill_load_bytes']} B spill loads, {f['stack_bytes']} B stack frame, "
                     f"{f['lmem_bytes']} B lmem" for name, f in sorted(figures.items()))


@functools.cache
def _figures_for(nvrtc, arch: str) -> dict[str, dict[str, int]]:
    """Every kernel compiled to a cubin for `arch` (once a session), and ptxas's figures
    for each; fails on a compile error and on a kernel missing from the cubin or report."""
    rc, log, _, cubin = _compile(nvrtc, f"--gpu-architecture={arch}", "--ptxas-options=-v")
    assert rc == 0, f"NVRTC {nvrtc.version} could not compile the kernels for {arch} (result {rc}):\n{log}"
    assert cubin[:4] == b"\x7fELF", f"NVRTC {nvrtc.version} made no cubin for {arch}"
    figures = {name: f for (name, a), f in _ptxas_figures(log).items() if a == arch}
    for name in kernels.SIGNATURES:
        assert f".text.{name}\0".encode() in cubin, f"{name} has no code in the {arch} cubin"
        assert name in figures and None not in figures[name].values(), \
            f"ptxas reported no full figures for {name} on {arch}:\n{log}"
    return figures


@pytest.mark.parametrize("arch", ARCHES)
def test_every_kernel_compiles_for_sm90_and_sm100_without_spills(nvrtc, arch):
    figures = _figures_for(nvrtc, arch)
    local = [name for name, f in sorted(figures.items())
             if f["spill_store_bytes"] or f["spill_load_bytes"] or f["stack_bytes"] or f["lmem_bytes"]]
    assert not local, (f"{arch} (NVRTC {nvrtc.version}): kernels that spill to or use local memory: "
                       f"{', '.join(local)}\n{_table(figures)}")


@pytest.mark.parametrize("arch", ARCHES)
def test_every_kernel_has_the_registers_for_its_largest_launch_block(nvrtc, arch):
    """A block whose threads need more than the SM's 64K registers does not launch at all
    (too many resources requested): the streaming kernels are launched with up to the
    largest block of timing.SHAPES, the single-thread ones with one thread."""
    figures = _figures_for(nvrtc, arch)
    largest = max(shape.block for shape in SHAPES)
    over = [name for name, f in sorted(figures.items())
            if f["registers"] * (1 if name in kernels.SINGLE_THREAD else largest) > BLOCK_REGISTERS]
    assert not over, (f"{arch} (NVRTC {nvrtc.version}): kernels that need more than {BLOCK_REGISTERS} "
                      f"registers for a block of {largest} threads: {', '.join(over)}\n{_table(figures)}")


def test_the_ptx_holds_every_kernel_with_its_uncached_loads_and_timers(nvrtc):
    rc, log, ptx, _ = _compile(nvrtc, "--gpu-architecture=compute_90")
    assert rc == 0, log
    text = ptx.rstrip(b"\0").decode()
    for name in kernels.SIGNATURES:
        assert f".entry {name}(" in text
    assert "ld.global.cv.u64" in text and "%globaltimer" in text and "%clock64" in text
    assert "ld.volatile.global" in text                   # the spin kernel rereads the flag


# ---- telemetry ----------------------------------------------------------------------------

def test_readings_summarise_to_clocks_power_and_reasons():
    readings = [{"sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "power_w": 300, "temperature_c": 40, "reasons": 1},
                {"sm_clock_mhz": 1755, "mem_clock_mhz": 2619, "power_w": 690, "temperature_c": 55, "reasons": 4},
                {"sm_clock_mhz": 1980, "mem_clock_mhz": None, "power_w": None, "temperature_c": None,
                 "reasons": None}]
    s = telemetry.summarise(readings)
    assert s["sm_clock_mhz"] == 1980 and s["sm_clock_min_mhz"] == 1755 and s["mem_clock_mhz"] == 2619
    assert s["power_w_max"] == 690 and s["temperature_c_max"] == 55
    assert s["clock_reasons"] == "sw_power_cap"            # idle is not a limit
    assert telemetry.summarise([{}])["sm_clock_mhz"] is None
    assert telemetry.reason_names(0) == "none" and telemetry.reason_names(0x48) == "hw_slowdown,hw_thermal"


def test_nvidia_smi_answers_are_parsed_and_gaps_are_none():
    calls = []

    class Done:
        def __init__(self, out, rc=0):
            self.stdout, self.returncode = out, rc

    def run(cmd, **kw):
        calls.append(cmd)
        fields = cmd[1].split("=", 1)[1]
        if "power.limit" in fields:
            return Done("700.00, Enabled, Enabled, 1980, 2619\n")
        if "ecc.errors" in fields:
            return Done("0, 0, [N/A], 3\n")
        return Done("1755, 2619, 512.3, [Not Supported]\n")
    b = telemetry.SmiBackend("00000000:17:00.0", 0, run=run)
    assert b.static() == {"power_limit_w": 700.0, "ecc_mode": "on", "ecc_pending": "on",
                          "sm_clock_max_mhz": 1980.0, "mem_clock_max_mhz": 2619.0}
    assert b.ecc_counts() == {"ecc_corrected_volatile": 0, "ecc_uncorrected_volatile": 0,
                              "ecc_corrected_aggregate": None, "ecc_uncorrected_aggregate": 3}
    assert b.sample()["sm_clock_mhz"] == 1755.0 and b.sample()["temperature_c"] is None
    assert calls[0][-2:] == ["-i", "0000:17:00.0"]
    failing = telemetry.SmiBackend(None, 1, run=lambda *a, **k: Done("", 9))
    assert failing.static()["power_limit_w"] is None and failing.target == "1"


def test_ecc_changes_name_what_moved_and_a_broken_backend_reads_as_nothing():
    assert telemetry.ecc_changes({"ecc_corrected_volatile": 1, "x": None},
                                 {"ecc_corrected_volatile": 3, "x": 5}) == ["ecc corrected volatile: 1 -> 3"]

    class Broken:
        source = "broken"

        def static(self):
            raise RuntimeError("NVML went away")
        ecc_counts = sample = static
    t = telemetry.Telemetry(Broken())
    assert t.static() == {} and t.ecc_counts() == {} and t.sample() == {}
    with t.sampler(0.001) as s:
        pass
    assert s.summary()["sm_clock_mhz"] is None


def test_bus_ids_are_normalised():
    assert telemetry.normal_bus_id("00000000:17:00.0") == "0000:17:00.0"
    assert telemetry.normal_bus_id(b"0000:AB:00.0") == "0000:ab:00.0"
    assert telemetry.normal_bus_id(None) is None
