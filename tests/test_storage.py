"""The storage family: bad directories refused with one reason, the I/O loop reads back what
was written at the right offsets, test files never outlive their process, and planning.

Behaviour only: no assertion depends on how fast anything ran. Directories come from
pytest's tmp_path (the root filesystem here, where O_DIRECT works); tmpfs stands in for a
filesystem without O_DIRECT, a read-only tmpfs mount for a read-only directory.
"""
import ctypes
import errno
import mmap
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from tests.signals import default_dispositions

from cxlbench import _native
from cxlbench.benchmarks import family, storage
from cxlbench.benchmarks.base import Env, Skip
from cxlbench.benchmarks.spec import SpecError
from cxlbench.benchmarks.spec import of as spec_of
from cxlbench.memory import allocate
from cxlbench.results.schema import Case
from cxlbench.storage import (PREFIX, FileMapping, ScratchFile, StorageError, inspect_directory,
                              owner_pid, sweep_stale)
from cxlbench.topology.model import Cpu, Environment, Initiator, Machine, Node, Tier
from planning import plan

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).parent.parent
UNIT = 4096
MiB = 1 << 20


def direct_ok(path) -> bool:
    try:
        return inspect_directory(str(path)).direct
    except StorageError:
        return False


@pytest.fixture
def scratch(tmp_path):
    """A directory where O_DIRECT works (skips the test where it doesn't)."""
    if not direct_ok(tmp_path):
        pytest.skip(f"O_DIRECT does not work in {tmp_path}")
    return tmp_path


def pin_room(monkeypatch, nbytes: int) -> None:
    """Planning reads the room a test file may take from the disk's free space; pinned,
    a planning test does not pass or fail with what other jobs left on a shared disk."""
    monkeypatch.setattr("cxlbench.storage.scratch.room_for", lambda directory: nbytes)


@pytest.fixture
def roomy(scratch, monkeypatch):
    """`scratch` with 64 GiB of room for a test file (see pin_room)."""
    pin_room(monkeypatch, 64 << 30)
    return scratch


@pytest.fixture
def shm_dir():
    """A fresh directory on tmpfs (no O_DIRECT to a device there)."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    import tempfile
    d = tempfile.mkdtemp(dir="/dev/shm", prefix="cxlbench-test-")
    yield Path(d)
    for name in os.listdir(d):
        os.unlink(os.path.join(d, name))
    os.rmdir(d)


@pytest.fixture
def readonly_dir(tmp_path):
    """A read-only mount (a tmpfs mounted ro): chmod does not stop root, a mount does."""
    d = tmp_path / "ro"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(d)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {r.stderr.strip()}")
    yield d
    subprocess.run(["umount", str(d)], check=False)


def files_in(d) -> list[str]:
    return sorted(n for n in os.listdir(d) if n.startswith(PREFIX))


# ---- the native I/O loop ------------------------------------------------------------

def open_file(path, size, direct=True):
    fd = os.open(path, os.O_CREAT | os.O_RDWR | (os.O_DIRECT if direct else 0), 0o600)
    os.posix_fallocate(fd, 0, size)
    return fd


def test_stamp_pattern_carries_its_offset_and_is_checked():
    with allocate(4 * UNIT, 0) as buf:
        _native.io_stamp(buf.addr, buf.length, 40960, 7)
        assert _native.io_check(buf.addr, buf.length, 40960, 7) == 0
        words = np.frombuffer(bytes(buf.array("uint8")[:16]), dtype=np.uint64)
        assert list(words) == [40960, 7]                     # first unit: its offset, the seed
        assert _native.io_check(buf.addr, buf.length, 40960 + UNIT, 7) == 4   # wrong offset
        assert _native.io_check(buf.addr, buf.length, 40960, 8) == 4          # wrong seed
        buf.array("uint8")[2 * UNIT + 100] ^= 1                                # one bad byte
        assert _native.io_check(buf.addr, buf.length, 40960, 7) == 1


@pytest.mark.parametrize("engine,qd,block", [("psync", 1, UNIT), ("libaio", 1, UNIT),
                                             ("libaio", 4, UNIT), ("libaio", 16, 64 << 10)])
def test_writes_land_at_their_offsets_and_reads_return_them(scratch, engine, qd, block):
    size = 8 * MiB
    fd = open_file(scratch / "f", size)
    try:
        blocks = size // block
        order = np.random.default_rng(1).permutation(blocks).astype(np.uint64) * np.uint64(block)
        with allocate(block * qd, 0) as buf:
            done, _, _ = _native.io_run(fd, True, engine, buf.addr, block, qd, order, blocks,
                                        stamp=True, seed=11)
            assert done == blocks
            os.fsync(fd)
            # What is in the file, read without the loop: every unit carries its own offset.
            with open(scratch / "f", "rb") as plain:
                data = plain.read()
            assert len(data) == size
            for off in range(0, size, UNIT):
                assert int.from_bytes(data[off:off + 8], "little") == off
            # The loop's reads, checked unit by unit against the pattern of their offsets.
            lat = np.zeros(blocks, dtype=np.uint64)
            order2 = np.random.default_rng(2).permutation(blocks).astype(np.uint64) * np.uint64(block)
            done, elapsed, bad = _native.io_run(fd, False, engine, buf.addr, block, qd, order2,
                                                blocks, lat, verify=True, seed=11)
            assert (done, bad) == (blocks, 0)
            assert elapsed > 0 and (lat > 0).all()           # every I/O got its latency
            # At qd 1 the buffer holds the last read's bytes: those of its offset.
            if qd == 1:
                last = int(order2[-1])
                assert bytes(buf.array("uint8")[:block]) == data[last:last + block]
    finally:
        os.close(fd)


def test_verify_counts_units_that_are_not_what_was_written(scratch):
    size = 1 * MiB
    fd = open_file(scratch / "f", size)
    try:
        with allocate(UNIT * 4, 0) as buf:
            seq = np.arange(size // UNIT, dtype=np.uint64) * np.uint64(UNIT)
            _native.io_run(fd, True, "libaio", buf.addr, UNIT, 4, seq, len(seq), stamp=True, seed=3)
            os.fsync(fd)
            os.close(fd)
            with open(scratch / "f", "r+b") as f:             # corrupt two units, buffered
                f.seek(5 * UNIT + 17)
                f.write(b"\xff")
                f.seek(9 * UNIT)
                f.write(b"\0" * 8)
            fd = os.open(scratch / "f", os.O_RDWR | os.O_DIRECT)
            _, _, bad = _native.io_run(fd, False, "psync", buf.addr, UNIT, 1, seq, len(seq),
                                       verify=True, seed=3)
            assert bad == 2
    finally:
        os.close(fd)


def test_time_limit_and_offset_reuse(scratch):
    fd = open_file(scratch / "f", 1 * MiB)
    try:
        with allocate(UNIT * 8, 0) as buf:
            two = np.array([0, UNIT], dtype=np.uint64)       # I/O i at offsets[i % 2]
            done, _, _ = _native.io_run(fd, False, "libaio", buf.addr, UNIT, 8, two, 100)
            assert done == 100
            done, _, _ = _native.io_run(fd, False, "libaio", buf.addr, UNIT, 8, two, 10**9, max_ns=1)
            assert 1 <= done <= 8                            # stops after the first reap
            done, _, _ = _native.io_run(fd, False, "psync", buf.addr, UNIT, 1, two, 10**9, max_ns=1)
            assert done == 1
    finally:
        os.close(fd)


def test_bad_io_arguments_are_refused(scratch):
    fd = open_file(scratch / "f", 1 * MiB)
    try:
        with allocate(UNIT * 8, 0) as buf:
            off = np.zeros(1, dtype=np.uint64)
            with pytest.raises(ValueError, match="psync"):
                _native.io_run(fd, False, "psync", buf.addr, UNIT, 4, off, 1)
            with pytest.raises(ValueError, match="engine"):
                _native.io_run(fd, False, "io_uring", buf.addr, UNIT, 1, off, 1)
            with pytest.raises(ValueError, match="offsets"):
                _native.io_run(fd, False, "psync", buf.addr, UNIT, 1, b"", 1)
            with pytest.raises(ValueError, match="lat"):
                _native.io_run(fd, False, "psync", buf.addr, UNIT, 1, off, 4, np.zeros(2, np.uint64))
            closed = os.dup(fd)
            os.close(closed)
            for engine, qd in (("psync", 1), ("libaio", 2)):  # the kernel's error, with its errno
                with pytest.raises(OSError) as e:
                    _native.io_run(closed, False, engine, buf.addr, UNIT, qd, off, 1)
                assert e.value.errno == errno.EBADF
            past = np.array([1 * MiB], dtype=np.uint64)      # past the end: a short read
            for engine, qd in (("psync", 1), ("libaio", 2)):
                with pytest.raises(OSError):
                    _native.io_run(fd, False, engine, buf.addr, UNIT, qd, past, 1)
    finally:
        os.close(fd)


# ---- test files ---------------------------------------------------------------------

def test_a_test_file_is_real_data_and_loses_its_name_at_once(scratch):
    with ScratchFile.create(str(scratch), 4 * MiB, seed=5) as f:
        assert files_in(scratch) == [] and f.path is None
        st = os.fstat(f.fd)
        assert st.st_size == 4 * MiB and st.st_blocks * 512 >= 4 * MiB   # allocated, not sparse
        with allocate(UNIT * 16, 0) as buf:
            seq = np.arange(4 * MiB // UNIT, dtype=np.uint64) * np.uint64(UNIT)
            _, _, bad = _native.io_run(f.fd, False, "libaio", buf.addr, UNIT, 16, seq, len(seq),
                                       verify=True, seed=5)
            assert bad == 0                                  # every byte was written


def test_a_named_test_file_is_removed_on_close(scratch):
    f = ScratchFile.create(str(scratch), 1 * MiB, keep_name=True)
    assert files_in(scratch) == [f.name] and owner_pid(f.name) == os.getpid()
    f.close()
    assert files_in(scratch) == []


def test_a_file_that_does_not_fit_is_refused(scratch):
    with pytest.raises(StorageError, match="does not fit"):
        ScratchFile.create(str(scratch), 1 << 50)
    assert files_in(scratch) == []


def test_sweep_removes_files_of_dead_processes_only(tmp_path):
    dead = tmp_path / f"{PREFIX}999999999-abcd.dat"          # no such pid
    alive = tmp_path / f"{PREFIX}{os.getpid()}-abcd.dat"
    other = tmp_path / "keep.dat"
    for p in (dead, alive, other):
        p.write_bytes(b"x")
    assert sweep_stale(str(tmp_path)) == [dead.name]
    assert alive.exists() and other.exists()


HOLDER = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, {repo!r})
    from cxlbench.storage import ScratchFile
    if {ignore_int}:
        signal.signal(signal.SIGINT, signal.SIG_IGN)      # as the runner's workers do
    f = ScratchFile.create({dir!r}, 1 << 20, keep_name={keep})
    print("ready", flush=True)
    time.sleep(60)
""")


def holder(d, keep=True, ignore_int=False):
    src = HOLDER.format(repo=str(REPO), dir=str(d), keep=keep, ignore_int=ignore_int)
    p = subprocess.Popen([sys.executable, "-c", src], stdout=subprocess.PIPE, text=True,
                         preexec_fn=default_dispositions)
    assert p.stdout.readline().strip() == "ready"
    return p


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_removes_the_named_file(scratch, sig):
    p = holder(scratch)
    assert len(files_in(scratch)) == 1
    p.send_signal(sig)
    p.wait(10)
    assert files_in(scratch) == []
    assert p.returncode != 0                                 # it still died of the signal


def test_a_killed_worker_leaves_nothing_or_the_next_start_sweeps_it(scratch):
    p = holder(scratch, keep=False)                          # a measurement's file: unlinked
    p.kill()
    p.wait(10)
    assert files_in(scratch) == []
    p = holder(scratch, keep=True)                           # a named file: SIGKILL can't be caught
    p.kill()
    p.wait(10)
    left = files_in(scratch)
    assert len(left) == 1 and owner_pid(left[0]) == p.pid
    env = machine_env(scratch)
    plan(storage, spec(rw=["randread"]), env)                 # the next start sweeps
    assert files_in(scratch) == []


def test_an_ignored_sigint_stays_ignored(scratch):
    p = holder(scratch, ignore_int=True)
    p.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert p.poll() is None and len(files_in(scratch)) == 1  # still running, file kept
    p.terminate()
    p.wait(10)
    assert files_in(scratch) == []


# ---- directories: bad input is one clear reason -------------------------------------

def test_no_such_directory(tmp_path):
    with pytest.raises(StorageError, match="does not exist"):
        inspect_directory(str(tmp_path / "missing"))
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(StorageError, match="not a directory"):
        inspect_directory(str(f))


def test_read_only_directory(readonly_dir):
    with pytest.raises(StorageError, match="read-only"):
        inspect_directory(str(readonly_dir))


def test_directory_the_user_cannot_write(tmp_path, monkeypatch):
    """Root passes permission checks, so the kernel's answer to a non-root user is
    reproduced: creating the probe file fails with EACCES."""
    real_open = os.open

    def denied(path, flags, *a, **k):
        if str(path).startswith(str(tmp_path)) and flags & os.O_CREAT:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *a, **k)
    monkeypatch.setattr(os, "open", denied)
    with pytest.raises(StorageError, match="not writable"):
        inspect_directory(str(tmp_path))


def test_a_filesystem_that_refuses_o_direct(tmp_path, monkeypatch):
    real_open = os.open

    def no_direct(path, flags, *a, **k):                     # what such a filesystem answers
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument", str(path))
        return real_open(path, flags, *a, **k)
    monkeypatch.setattr(os, "open", no_direct)
    d = inspect_directory(str(tmp_path))
    assert not d.direct and "does not support O_DIRECT" in d.direct_reason
    with pytest.raises(StorageError, match="allow_buffered"):
        d.io_mode(allow_buffered=False)
    assert d.io_mode(allow_buffered=True) == "buffered"
    assert files_in(tmp_path) == []


def test_tmpfs_is_refused_because_its_direct_io_never_reaches_a_device(shm_dir):
    d = inspect_directory(str(shm_dir))
    assert not d.direct and "O_DIRECT" in d.direct_reason
    assert d.device is None and any("not an NVMe device" in w for w in d.warnings)
    assert files_in(shm_dir) == []


def test_the_directory_record_says_what_the_device_is(scratch):
    d = inspect_directory(str(scratch))
    assert d.direct and d.fs_type and d.mount_point
    if d.device and not d.is_nvme:                           # this machine: virtio, not NVMe
        assert any("not an NVMe device" in w for w in d.warnings)


# ---- planning -----------------------------------------------------------------------

def spec(**kw):
    return {"name": "storage", "repetitions": 3, "warmup": 1, "runtime_s": 0.05, **kw}


def machine_env(path=None, nodes=None) -> Env:
    nodes = nodes or {0: Node(0, [0, 1], 16 << 30, 12 << 30, {0: 10})}
    machine = Machine("fixture", Cpu("x", "GenuineIntel", 1, 2, 2, False, [], []), nodes,
                      Environment(None, None, None, None, None, None, None, False, None, None, "6.8"))
    tiers = {f"ddr{n}": Tier(f"ddr{n}", "ddr", node=n) for n, x in nodes.items() if x.mem_total_bytes}
    if path is not None:
        tiers["nvme0"] = Tier("nvme0", "nvme", path=str(path))
    inits = {f"cpu:node{n}": Initiator(f"cpu:node{n}", "cpu", n, x.cpus) for n, x in nodes.items() if x.cpus}
    return Env(machine, tiers, inits, {})


def test_without_an_nvme_tier_every_point_is_skipped_with_the_reason():
    planned = plan(storage, spec(rw=["randread", "read", "mmap-chase"], qd=[1, 4]), machine_env())
    assert planned and all(p.skip == storage.NO_TIER for p in planned)
    assert {p.case.target for p in planned} == {"nvme"}


def test_the_default_sweep(roomy):
    planned = plan(storage, spec(), machine_env(roomy))
    assert all(p.skip is None for p in planned), [p.skip for p in planned if p.skip]
    cases = [p.case for p in planned]
    assert len({c.case_id for c in cases}) == len(cases)
    by_rw = {}
    for c in cases:
        by_rw.setdefault(c.params["rw"], []).append(c.params)
    assert set(by_rw) == {"randread", "randwrite", "read", "write"}
    assert {p["block_bytes"] for p in by_rw["randread"]} == {4096}
    assert {p["block_bytes"] for p in by_rw["read"]} == {128 << 10, 256 << 10, 512 << 10,
                                                         1 << 20, 2 << 20, 4 << 20}
    for c in cases:
        assert c.params["io"] == "direct" and c.params["host_node"] == 0
        assert c.params["engine"] == ("psync" if c.params["qd"] == 1 else "libaio")
        assert c.initiator == "cpu:node0" and c.target == "nvme0" and c.tier_kind == "nvme"


def test_the_qd_sweep_and_the_chase(roomy):
    planned = plan(storage, spec(rw=["randread", "mmap-chase"], qd=[1, 2, 4, 8, 16, 32, 64]),
                           machine_env(roomy))
    rand = [p.case.params for p in planned if p.case.params["rw"] == "randread"]
    assert [p["qd"] for p in rand] == [1, 2, 4, 8, 16, 32, 64]
    chase = [p.case.params for p in planned if p.case.params["rw"] == "mmap-chase"]
    assert len(chase) == 1 and chase[0]["file_bytes"] == 256 * MiB and chase[0]["advice"] == "random"


def test_points_that_cannot_run_carry_their_reason(roomy):
    planned = plan(storage, spec(rw=["randread"], block=["4KiB", "6000"], qd=[1, 8], engine=["psync"]),
                   machine_env(roomy))
    reasons = {(p.case.params.get("block_bytes"), p.case.params.get("qd")): p.skip for p in planned}
    assert reasons[(4096, 1)] is None
    assert "4 KiB" in reasons[(6000, 1)]
    assert "libaio" in reasons[(4096, 8)]
    too_big = plan(storage, spec(rw=["read"], block=["1MiB"], file_size=str(1 << 50)),
                           machine_env(roomy))
    assert "does not fit" in too_big[0].skip


def test_a_nearly_full_disk_skips_the_points_whose_file_does_not_fit(scratch, monkeypatch):
    pin_room(monkeypatch, 512 * MiB)
    fits = plan(storage, spec(rw=["randread"], file_size="256MiB"), machine_env(scratch))
    assert [p.skip for p in fits] == [None]
    [default] = plan(storage, spec(rw=["randread"]), machine_env(scratch))
    assert "1024 MiB test file does not fit" in default.skip and "512 MiB may be used" in default.skip


@pytest.mark.parametrize("key, value", [("rw", ["randread", "scan"]), ("buffer_page", ["4k", "1g"]),
                                        ("engine", "io_uring"), ("block", ["4 kilos"]), ("blocks", ["4KiB"])])
def test_values_the_family_does_not_know_are_refused_naming_the_key(key, value):
    with pytest.raises(SpecError, match=f"{key}"):
        spec_of(storage, spec(**{key: value}))


@pytest.mark.parametrize("which", ["missing", "readonly", "tmpfs"])
def test_a_bad_directory_skips_every_point_with_one_reason(tmp_path, request, which):
    d = {"missing": lambda: tmp_path / "missing",
         "readonly": lambda: request.getfixturevalue("readonly_dir"),
         "tmpfs": lambda: request.getfixturevalue("shm_dir")}[which]()
    planned = plan(storage, spec(rw=["randread", "mmap-chase"]), machine_env(d))
    reasons = {p.skip for p in planned}
    assert len(reasons) == 1 and None not in reasons
    expect = {"missing": "does not exist", "readonly": "read-only", "tmpfs": "O_DIRECT"}[which]
    assert expect in reasons.pop()


def test_buffered_io_only_when_allowed_and_then_labelled(shm_dir):
    planned = plan(storage, spec(rw=["randread"], allow_buffered=True), machine_env(shm_dir))
    assert [p.skip for p in planned] == [None]
    assert planned[0].case.params["io"] == "buffered"
    refused = plan(storage, spec(rw=["read"], block=["1MiB"]), machine_env(shm_dir))
    assert "O_DIRECT" in refused[0].skip


@pytest.mark.skipif(not (FIXTURES / "two_socket_cxl").is_dir(), reason="no fixture trees")
def test_planning_on_the_two_socket_cxl_fixture(roomy):
    from cxlbench.runner.run import build_env
    env = build_env(str(FIXTURES / "two_socket_cxl"), [f"nvme={roomy}"], {})
    planned = plan(storage, spec(rw=["randread"], qd=[1, 32]), env)
    assert [p.skip for p in planned] == [None, None]
    for p in planned:
        node = env.initiator(p.case.initiator).node
        assert p.case.params["host_node"] == node and env.machine.nodes[node].mem_total_bytes


def test_the_storage_suite_plans_inside_two_minutes_here(roomy):
    from cxlbench.runner.run import build_env, plan_suite
    from cxlbench.runner.suite import load_suite
    suite = load_suite("storage")
    env = build_env("/", [f"nvme={roomy}"], suite)
    planned = plan_suite(suite, env)
    assert planned and all(p.skip is None for p in planned), [p.skip for p in planned if p.skip]
    assert all(p.case.benchmark == "storage" for p in planned)
    assert sum(p.estimate_s for p in planned) < 120


# ---- measuring ----------------------------------------------------------------------

def small_case(env, **params):
    p = {"rw": "randread", "block_bytes": 4096, "qd": 1, "engine": "psync", "buffer_page": "4k",
         "file_bytes": 8 * MiB, "runtime_s": 0.02, "io": "direct", "host_node": 0, **params}
    return Case("storage", "cpu:node0", "nvme0", "nvme", p, 2, 1)


@pytest.mark.parametrize("rw,block,qd,engine", [("randread", 4096, 1, "psync"),
                                                ("randread", 4096, 4, "libaio"),
                                                ("randwrite", 4096, 2, "libaio"),
                                                ("read", 128 << 10, 1, "psync"),
                                                ("write", 1 << 20, 2, "libaio")])
def test_measure_io_records_the_metrics_and_parameters(scratch, rw, block, qd, engine):
    env = machine_env(scratch)
    case = small_case(env, rw=rw, block_bytes=block, qd=qd, engine=engine)
    info = {}
    samples = storage.measure(case, env, info)
    metrics = {(s.metric, s.params.get("percentile")) for s in samples}
    assert metrics == {("iops", None), ("bandwidth_GBps", None), ("latency_ns", 50.0),
                       ("latency_ns", 99.0), ("latency_ns", 99.9)}
    assert {s.repetition for s in samples} == {0, 1}
    assert all(s.value > 0 and s.params["ios"] > 0 for s in samples)
    assert info["directory"]["direct"] and "fill_s" in info
    if not rw.endswith("write"):
        assert info["verified_ios"] > 0
    assert files_in(scratch) == []


def test_measure_chase_reads_every_step_from_the_device(scratch):
    env = machine_env(scratch)
    case = Case("storage", "cpu:node0", "nvme0", "nvme",
                {"rw": "mmap-chase", "file_bytes": 8 * MiB, "advice": "random", "runtime_s": 0.02,
                 "io": "direct", "host_node": 0}, 2, 1)
    samples = storage.measure(case, env, {})
    assert [s.metric for s in samples] == ["latency_ns", "latency_ns"]
    for s in samples:
        assert s.params["cached_before"] == 0                       # evicted, and checked
        assert s.params["cached_after"] >= s.params["steps"]        # each step read a new page in
        assert s.params["major_faults"] >= 1
    assert files_in(scratch) == []


def test_the_mapping_is_evicted_and_counted(scratch):
    with ScratchFile.create(str(scratch), 4 * MiB, prefill=False) as f, FileMapping.of(f) as m:
        m.populate()
        assert m.resident() == m.pages
        assert m.evict() == 0
        view = np.ctypeslib.as_array((ctypes.c_uint8 * m.length).from_address(m.addr))
        _ = int(view[0]) + int(view[5 * mmap.PAGESIZE])             # two pages read back in
        assert m.resident() >= 2


def test_measure_refuses_a_directory_that_went_bad(tmp_path):
    env = machine_env(tmp_path / "gone")
    with pytest.raises(Skip, match="does not exist"):
        storage.measure(small_case(env), env, {})


def test_a_case_through_the_runner_worker(scratch):
    from cxlbench.runner.worker import run_case
    env = machine_env(scratch)
    result = run_case(small_case(env, qd=2, engine="libaio"), "storage", env, timeout_s=60)
    assert result.status == "ok", result.reason
    assert files_in(scratch) == []


def test_the_family_is_registered():
    assert family("storage") is storage


def test_each_case_says_which_cpu_issued_it_and_which_took_the_completions(scratch):
    env = machine_env(scratch)
    info: dict = {}
    samples = storage.measure(small_case(env), env, info)
    cpu = info["cpu"]
    assert cpu in env.initiator("cpu:node0").cpus and info["cpu_why"]
    assert {s.params["issue_cpu"] for s in samples} == {cpu}
    assert set(info["completions"]) == {"irqs", "taken_by_cpu"}       # [] / {} where sysfs can't say
    env.spec = spec_of(storage, {"issue_cpu": "first"})
    info = {}
    storage.measure(small_case(env), env, info)
    assert info["cpu"] == env.initiator("cpu:node0").cpus[0] and "first CPU" in info["cpu_why"]
