"""Host suites: the line kernels compute what they say, loaded latency
runs through its one code path, every family plans the full initiator × target
matrix on the two-socket CXL fixture and records skip reasons here, the ECC
snapshot turns a moved count into a run warning.

Behaviour only: no assertion depends on how fast anything ran.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from cxlbench import _native
from cxlbench.benchmarks import interleave, loaded_latency, page_size, tails, write_penalty, zerocopy
from cxlbench.benchmarks.base import Env
from cxlbench.benchmarks.spec import Spec
from cxlbench.results.schema import Case
from cxlbench.runner.run import build_env
from cxlbench.runner.suite import DEFAULTS, families, load_suite
from planning import plan

FIXTURES = Path(__file__).parent / "fixtures"
TWO_SOCKET = str(FIXTURES / "two_socket_cxl")
CPUS = sorted(os.sched_getaffinity(0))
LINE = 64


@pytest.fixture
def buf():
    """buf(n_lines) -> (addr, uint64 view) of a fresh 64-byte aligned mapping."""
    maps = []

    def make(lines: int):
        length = lines * LINE
        addr = _native.map_anonymous(length)
        maps.append((addr, length))
        import ctypes
        view = np.ctypeslib.as_array((ctypes.c_uint64 * (length // 8)).from_address(addr))
        return addr, length, view

    yield make
    for addr, length in maps:
        _native.unmap(addr, length)


def spec(**kw):
    return {**DEFAULTS, **kw}


# ---- the line kernels ----------------------------------------------------------------

@pytest.mark.parametrize("threads", [1, 2])
def test_read_sums_exactly_the_read_lines(buf, threads):
    addr, length, a = buf(3000)
    a[:] = np.arange(a.size, dtype=np.uint64)
    cpus = (CPUS * 2)[:threads]
    assert _native.lines_check(addr, length, cpus) == int(a.sum())
    # 3:1 — of every 4 lines the first 3 are read, the 4th written (with 7 per word)
    per_line = a.reshape(-1, 8).copy()
    read = per_line[np.arange(per_line.shape[0]) % 4 < 3]
    assert _native.lines_check(addr, length, cpus, reads=3, writes=1, value=7) == int(read.sum())
    written = a.reshape(-1, 8)[np.arange(per_line.shape[0]) % 4 == 3]
    assert (written == 7).all()
    assert (a.reshape(-1, 8)[np.arange(per_line.shape[0]) % 4 < 3] == read).all()


@pytest.mark.parametrize("nt", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_full_line_writes_write_every_word(buf, nt, threads):
    addr, length, a = buf(1000)
    a[:] = 1
    _native.lines(addr, length, (CPUS * 2)[:threads], reads=0, writes=1, nt=nt,
                  value=0xABCD, iterations=2)
    assert (a == 0xABCD).all()


@pytest.mark.parametrize("nt", [False, True])
@pytest.mark.parametrize("nbytes", [4, 8, 12, 32, 60])
def test_partial_line_writes_write_exactly_those_bytes(buf, nt, nbytes):
    addr, length, a = buf(513)
    raw = a.view(np.uint8)
    raw[:] = 0xEE
    value = 0x1122334455667788
    _native.lines(addr, length, CPUS[:2], reads=0, writes=1, write_bytes=nbytes, nt=nt,
                  value=value, iterations=1)
    lines = raw.reshape(-1, LINE)
    pattern = np.frombuffer(value.to_bytes(8, "little") * 8, dtype=np.uint8)[:nbytes]
    assert (lines[:, :nbytes] == pattern).all()
    assert (lines[:, nbytes:] == 0xEE).all()          # the rest of every line untouched


@pytest.mark.parametrize("nt", [False, True])
def test_read_modify_write_adds_to_every_word(buf, nt):
    addr, length, a = buf(777)
    a[:] = np.arange(a.size, dtype=np.uint64)
    start = a.copy()
    _native.lines(addr, length, CPUS[:2], reads=0, writes=1, rmw=True, nt=nt, value=3,
                  iterations=4)
    assert (a == start + 12).all()
    # 1:1 rmw: every other line modified, the others read
    before = a.copy().reshape(-1, 8)
    _native.lines(addr, length, CPUS[:1], reads=1, writes=1, rmw=True, value=1, iterations=1)
    after = a.reshape(-1, 8)
    odd = np.arange(after.shape[0]) % 2 == 1
    assert (after[odd] == before[odd] + 1).all() and (after[~odd] == before[~odd]).all()


def test_bytes_per_line_are_counted_as_stream_counts():
    assert _native.line_op_bytes(reads=1, writes=0) == 64
    assert _native.line_op_bytes(reads=0, writes=1) == 64
    assert _native.line_op_bytes(reads=0, writes=1, write_bytes=8) == 8
    assert _native.line_op_bytes(reads=0, writes=1, rmw=True) == 128
    assert _native.line_op_bytes(reads=3, writes=1) == 64
    for name, p in [("write", {"op": "write", "store": "nt", "write_bytes": 64}),
                    ("partial", {"op": "partial", "store": "regular", "write_bytes": 8}),
                    ("rmw", {"op": "rmw", "store": "regular", "write_bytes": 64})]:
        op = write_penalty.line_op(p)
        assert write_penalty.bytes_per_line(p) == _native.line_op_bytes(
            **{k: v for k, v in op.items() if k != "nt"}), name


@pytest.mark.parametrize("kw", [
    {"reads": 0, "writes": 0},
    {"reads": 0, "writes": 1, "write_bytes": 3},
    {"reads": 0, "writes": 1, "write_bytes": 0},
    {"reads": 0, "writes": 1, "write_bytes": 65},
    {"reads": 0, "writes": 1, "write_bytes": 8, "rmw": True},
])
def test_line_ops_that_are_not_refused(buf, kw):
    addr, length, _ = buf(16)
    with pytest.raises(ValueError):
        _native.lines(addr, length, CPUS[:1], **kw)


def test_lines_refuses_unaligned_buffers_and_no_cpus(buf):
    addr, length, _ = buf(16)
    with pytest.raises(ValueError):
        _native.lines(addr + 8, length - 64, CPUS[:1])
    with pytest.raises(ValueError):
        _native.lines(addr, length - 8, CPUS[:1])
    with pytest.raises(ValueError):
        _native.lines(addr, length, [])


# ---- loaded latency ----------------------------------------------------------------------

def test_idle_point_chases_and_loads_nothing(buf):
    addr, length, _ = buf(1 << 14)
    heads = _native.chase_init(addr, length, 64, 0, 1, 3)
    r = _native.loaded_latency(heads, CPUS[0], 0, 0, [], duration_ns=20_000_000,
                               warmup_ns=1_000_000)
    assert r["windows"] >= 1 and r["all_chase_steps"] > 0
    assert r["load_lines"] == r["all_load_lines"] == 0 and r["load_bytes"] == 0
    assert r["windows_kept"] <= r["windows"] and r["chase_steps"] <= r["all_chase_steps"]


@pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs: one chases, one loads")
@pytest.mark.parametrize("mix", [(1, 0), (2, 1)])
def test_a_load_thread_moves_lines_while_the_chase_runs(buf, mix):
    addr, length, _ = buf(1 << 14)
    laddr, llength, la = buf(1 << 14)
    heads = _native.chase_init(addr, length, 64, 0, 1, 3)
    r = _native.loaded_latency(heads, CPUS[0], laddr, llength, [CPUS[1]], reads=mix[0],
                               writes=mix[1], delay=10, duration_ns=20_000_000,
                               warmup_ns=1_000_000)
    assert r["all_chase_steps"] > 0 and r["all_load_lines"] > 0
    assert r["load_bytes"] == r["load_lines"] * 64
    assert r["chase_cpu_ns"] > 0 and r["load_cpu_ns"] > 0


def test_loaded_latency_refuses_sharing_the_chase_cpu(buf):
    addr, length, _ = buf(64)
    heads = _native.chase_init(addr, length, 64, 0, 1, 3)
    with pytest.raises(ValueError, match="chase thread"):
        _native.loaded_latency(heads, CPUS[0], addr, length, [CPUS[0]])


def test_delay_unit_is_calibrated():
    assert 0 < _native.delay_ns_per_unit() < 100


def test_move_pages_to_this_node_reports_every_page(buf):
    addr, length, a = buf(256)
    a[:] = 1                                   # fault in
    elapsed, status = _native.move_pages(addr, length, 0)
    nodes = np.frombuffer(status, dtype=np.int32)
    assert len(nodes) == length // 4096 and (nodes == 0).all() and elapsed >= 0


def test_mix_and_delay_parsing():
    assert loaded_latency.parse_mix("read") == (1, 0)
    assert loaded_latency.parse_mix("3:1") == (3, 1)
    assert loaded_latency.parse_delays("mlc") == list(loaded_latency.MLC_DELAYS)
    assert len(loaded_latency.MLC_DELAYS) == 19 and loaded_latency.MLC_DELAYS[-1] == 20000
    assert loaded_latency.delays_param([0, 100]) == "0,100"
    for bad in ("fast", "0:0", "-1:2"):
        with pytest.raises(ValueError):
            loaded_latency.parse_mix(bad)


# ---- planning on the two-socket CXL fixture ------------------------------------------

@pytest.fixture(scope="module")
def cxl_env() -> Env:
    return build_env(TWO_SOCKET, [], {})


def pairs(planned):
    return {(p.case.initiator, p.case.target) for p in planned}


@pytest.mark.parametrize("family", [loaded_latency, write_penalty, page_size])
def test_mlc_matrix_covers_every_initiator_and_target(cxl_env, family):
    planned = plan(family, spec(initiators="all"), cxl_env)
    cpus = {i for i, x in cxl_env.initiators.items() if x.kind == "cpu"}
    tiers = {t for t, x in cxl_env.tiers.items() if x.is_host_memory}
    assert cpus == {"cpu:node0", "cpu:node1"} and tiers == {"ddr0", "ddr1", "cxl2"}
    assert pairs(planned) == {(i, t) for i in cpus for t in tiers}
    assert len({p.case.case_id for p in planned}) == len(planned)


def test_loaded_latency_plans_read_and_mixed_load_with_mlc_delays(cxl_env):
    planned = plan(loaded_latency, spec(), cxl_env)
    assert {p.case.params["mix"] for p in planned} == {"read", "2:1"}
    assert all(p.case.params["delays"] == "mlc" and p.skip is None for p in planned)
    # every tier from its nearest CPU node by default; the fixture's nodes have 16+ CPUs
    assert {p.case.params["load_threads"] for p in planned} == \
        {len(cxl_env.initiators["cpu:node0"].cpus) - 1}


def test_write_penalty_plans_every_op_store_and_partial_size(cxl_env):
    planned = plan(write_penalty, spec(partial_bytes=[4, 8]), cxl_env)
    on_ddr0 = {(p.case.params["op"], p.case.params["store"], p.case.params["write_bytes"])
               for p in planned if p.case.target == "ddr0"}
    assert ("read", "nt", 64) not in on_ddr0
    assert {("partial", s, b) for s in ("regular", "nt") for b in (4, 8)} <= on_ddr0
    assert {(m, "regular", 64) for m in ("read", "3:1", "2:1", "1:1", "write", "rmw")} <= on_ddr0


def test_write_penalty_sweeps_page_sizes_like_the_other_families(cxl_env):
    """page = ["4k", "thp"] is two sweeps, not one case asking for a list."""
    planned = plan(write_penalty, spec(op=["write"], store=["regular"], page=["4k", "thp"]), cxl_env)
    pages = [p.case.params["page"] for p in planned if p.case.target == "ddr0"]
    assert sorted(set(pages)) == ["4k", "thp"]
    assert not any(p.skip and "page policy" in p.skip for p in planned)


def test_page_size_skips_hugetlb_sizes_not_reserved_with_the_reason(cxl_env):
    planned = plan(page_size, spec(working_set=["64KiB", "1GiB"]), cxl_env)
    skipped = [p for p in planned if p.skip]
    # the pool is root's to fill: the line says so, and by how many
    assert skipped and all(": as root, raise " in p.skip and "/nr_hugepages by " in p.skip for p in skipped)
    assert {p.case.params["page"] for p in skipped} <= {"hugetlb-2m", "hugetlb-1g"}
    windows = [p for p in planned if p.case.params.get("pattern") == "window"]
    assert all(p.case.params["working_set_bytes"] > p.case.params["window_bytes"] for p in windows)


def test_zerocopy_plans_every_initiator_with_every_far_tier(cxl_env):
    planned = plan(zerocopy, spec(), cxl_env)
    assert pairs(planned) == {("cpu:node0", "ddr1"), ("cpu:node0", "cxl2"),
                              ("cpu:node1", "ddr0"), ("cpu:node1", "cxl2")}
    assert all(p.skip is None for p in planned)
    local = {(p.case.initiator, p.case.params["local"]) for p in planned}
    assert local == {("cpu:node0", "ddr0"), ("cpu:node1", "ddr1")}
    assert {p.case.params["strategy"] for p in planned} == set(zerocopy.STRATEGIES)


def test_interleave_plans_ddr_with_cxl_at_every_weight(cxl_env):
    planned = plan(interleave, spec(), cxl_env)
    assert {p.case.target for p in planned} == {"ddr0+cxl2"}         # nearest CPU node's DDR
    assert {p.case.params["ddr_weight"] for p in planned} == {100, 75, 50, 25, 0}
    assert {p.case.params["probe"] for p in planned} == {"bandwidth", "loaded_latency"}
    every = plan(interleave, spec(initiators="all"), cxl_env)
    assert {(p.case.initiator, p.case.target) for p in every} == \
        {("cpu:node0", "ddr0+cxl2"), ("cpu:node1", "ddr1+cxl2")}
    sockets = plan(interleave, spec(**{"with": ["ddr"]}), cxl_env)
    assert {p.case.target for p in sockets} == {"ddr1+ddr0", "ddr0+ddr1"}


# ---- this machine ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def here() -> Env:
    return quick_env()


def quick_env() -> Env:
    """This machine, with timed runs of 20 ms."""
    env = build_env("/", [], {"min_sample_s": 0.02})
    env.spec = Spec(name="test", min_sample_s=0.02)
    return env


def test_one_node_machine_records_why_nothing_far_was_measured():
    env = build_env(TWO_SOCKET, [], {})
    one = Env(env.machine, {"ddr0": env.tiers["ddr0"]},
              {"cpu:node0": env.initiators["cpu:node0"]}, {}, TWO_SOCKET)
    [zc] = plan(zerocopy, spec(), one)
    assert zc.skip and "no far tier" in zc.skip and zc.case.target == "ddr0"
    [il] = plan(interleave, spec(), one)
    assert il.skip and "second node" in il.skip


def measure(family, planned, env, info=None):
    info = {} if info is None else info
    [p] = planned
    assert p.skip is None, p.skip
    return family.measure(p.case, env, info), info


@pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs")
def test_loaded_latency_on_this_machine_stores_a_curve_with_its_idle_point(here):
    planned = plan(loaded_latency, spec(repetitions=1, working_set="8MiB", load_bytes="8MiB",
                                       delays=[0, 5000], mix=["read"]), here)
    samples, info = measure(loaded_latency, [p for p in planned if p.case.target == "ddr0"], here)
    metrics = {"latency_ns", "bandwidth_GBps"} | {m.name for m in tails.TAIL_METRICS}
    by = {(s.metric, s.params["load_threads"], s.params["delay"]) for s in samples}
    assert by <= {(m, n, d) for m in metrics for n, d in [(0, 0), (1, 0), (1, 5000)]}
    idle = [s for s in samples if s.params["load_threads"] == 0]
    if idle:                                   # dropped only when the machine is too busy
        assert {s.metric for s in idle} == metrics
        assert [s.value for s in idle if s.metric == "bandwidth_GBps"] == [0.0]
    assert info["delay_ns_per_unit"] > 0 and set(info["kept_fraction"]) == {"idle", "0", "5000"}
    assert len(samples) + len(metrics) * len(info.get("warnings", [])) == 3 * len(metrics)
    # every point kept has its histogram, named by the point
    kept = {str(s.params["delay"]) if s.params["load_threads"] else "idle" for s in samples}
    assert {h["point"] for h in info.get(tails.HISTOGRAMS, [])} == kept


def test_write_penalty_on_this_machine_annotates_the_ecc_state(here):
    planned = plan(write_penalty, spec(repetitions=1, array_bytes="4MiB", iterations=2,
                                      op=["partial"], store=["nt"]), here)
    samples, info = measure(write_penalty, planned, here)
    assert {s.metric for s in samples} == {"bandwidth_GBps", "ns_per_line"}
    assert sorted({s.params["iteration"] for s in samples}) == [0, 1]
    assert "ECC" in info["ecc"]


def test_mlp_chains_add_ns_per_load(here):
    from cxlbench.benchmarks import latency
    planned = plan(latency, spec(repetitions=1, working_set=["4MiB"], chains=[2]), here)
    samples, _ = measure(latency, planned, here)
    one = {s.metric: s.value for s in samples}
    assert set(one) == {"latency_ns", "ns_per_load"}
    assert one["ns_per_load"] == pytest.approx(one["latency_ns"] / 2)


def test_one_chain_latency_has_its_distribution_floor_and_mean_check_here(here):
    from cxlbench.benchmarks import latency
    planned = plan(latency, spec(repetitions=2, working_set=["4MiB"]), here)
    samples, info = measure(latency, planned, here)
    by_rep = {}
    for s in samples:
        by_rep.setdefault(s.repetition, {})[s.metric] = s.value
    assert set(by_rep) == {0, 1}
    for one in by_rep.values():
        assert set(one) == {"latency_ns"} | {m.name for m in tails.TAIL_METRICS + tails.FLOOR_METRICS}
        ordered = [one[n] for n in ("p50_ns", "p90_ns", "p99_ns", "p99_9_ns", "p99_99_ns", "max_ns")]
        assert ordered == sorted(ordered)
    assert [(h["repetition"], h["kind"]) for h in info[tails.HISTOGRAMS]] == \
        [(0, "chase"), (0, "floor"), (1, "chase"), (1, "floor")]
    checks = info["distribution"]
    assert [c["repetition"] for c in checks] == [0, 1]
    assert all(c["timer_overhead_ns"] > 0 and c["k"] >= tails.K_MIN for c in checks)


def test_a_latency_case_that_kept_no_window_is_skipped_with_why_not_ok_and_empty(here, monkeypatch):
    from cxlbench.benchmarks import latency
    from cxlbench.benchmarks.base import Skip
    lost = tails.Distribution(8, 19.0, [], [], [], 0, 0, 0, lost_blocks=640, lost_ns=10**6)
    monkeypatch.setattr(tails, "timed_distribution", lambda *a: (None, lost))
    planned = plan(latency, spec(repetitions=2, working_set=["4MiB"]), here)
    with pytest.raises(Skip, match="no repetition kept a window"):
        measure(latency, planned, here)


def test_page_size_measures_both_probes_here(here):
    planned = plan(page_size, spec(repetitions=1, page=["thp"], working_set=["4MiB"],
                                  array_bytes="8MiB", iterations=2), here)
    for p in planned:
        samples, _ = page_size.measure(p.case, here, {}), None
        assert all(s.params["page_bytes"] == 2 << 20 for s in samples)
        assert all(s.params["huge_coverage"] >= 0.9 for s in samples)


HUGE_2M = "/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages"


@pytest.fixture
def reserved_2m():
    """Reserve a few 2 MiB hugetlb pages on node 0 for a test, and give them back."""
    if os.geteuid() != 0 or not os.access(HUGE_2M, os.W_OK):
        pytest.skip("reserving hugetlb pages needs root")
    before = int(Path(HUGE_2M).read_text())
    Path(HUGE_2M).write_text(str(before + 4))
    try:
        if int(Path(HUGE_2M).read_text()) < before + 4:
            pytest.skip("the kernel could not reserve 4 more 2 MiB pages (memory fragmented)")
        yield
    finally:
        Path(HUGE_2M).write_text(str(before))


def test_hugetlb_chase_runs_once_pages_are_reserved(reserved_2m):
    env = quick_env()
    planned = plan(page_size, spec(repetitions=1, page=["hugetlb-2m"], working_set=["4MiB"],
                                  probe=["latency"]), env)
    samples, _ = measure(page_size, [p for p in planned if p.case.target == "ddr0"], env)
    assert samples and all(s.params["page_bytes"] == 2 << 20 and s.params["huge_coverage"] == 1.0
                           for s in samples)


# ---- ECC ------------------------------------------------------------------------------------

def copy_fixture(tmp_path) -> Path:
    dst = tmp_path / "two_socket_cxl"
    shutil.copytree(TWO_SOCKET, dst, symlinks=True)
    return dst


def test_ecc_snapshot_reads_the_fixture_edac_tree():
    from cxlbench.topology import ecc
    snap = ecc.snapshot(TWO_SOCKET)
    mc = {c["name"]: c for c in snap["edac"]}
    assert mc["mc0"]["mode"] == "SECDED" and mc["mc0"]["ce"] == 3 and mc["mc0"]["ue"] == 0
    assert mc["mc0"]["dimms"]["dimm0"] == {"ce": 3, "ue": 0}
    assert mc["mc1"]["dimms"]["rank0"] == {"ce": 0, "ue": 0}
    assert [m["name"] for m in snap["cxl"]] == ["mem0"] and snap["cxl"][0]["health"] is None
    assert "SECDED" in ecc.describe(snap) and "3 corrected" in ecc.describe(snap)
    assert ecc.changes(snap, ecc.snapshot(TWO_SOCKET)) == []
    json.dumps(snap)                           # it goes into run.json as it is


def test_a_moved_ecc_count_becomes_a_run_warning(tmp_path):
    from cxlbench.results.store import RunWriter, load_run
    from cxlbench.runner import ecc
    root = copy_fixture(tmp_path)
    before = ecc.start(str(root))
    mc0 = root / "sys/devices/system/edac/mc/mc0"
    (mc0 / "ce_count").write_text("5\n")
    (mc0 / "dimm0/dimm_ce_count").write_text("5\n")
    (root / "sys/devices/system/edac/mc/mc1/ue_count").write_text("1\n")
    writer = RunWriter(tmp_path / "results", "m", {"warnings": ["already here"]})
    moved = ecc.finish(writer, before, str(root))
    writer.finish()
    meta = load_run(writer.path).meta
    assert len(moved) == 2 and any("mc0" in m and "3 to 5" in m and "dimm0 3→5" in m for m in moved)
    assert any("mc1" in m and "uncorrected" in m for m in moved)
    assert meta["warnings"] == ["already here"] + moved
    assert meta["ecc"]["changes"] == moved and meta["ecc"]["before"]["edac"][0]["ce"] == 3


def test_a_count_that_cannot_be_read_is_said_so_not_taken_for_zero(tmp_path):
    """A ce_count of garbage after a run that began at 3 is no 'errors went from 3 to 0';
    a controller that left EDAC during the run is named."""
    import shutil
    from cxlbench.topology import ecc
    root = copy_fixture(tmp_path)
    before = ecc.snapshot(str(root))
    edac = root / "sys/devices/system/edac/mc"
    (edac / "mc0" / "ce_count").write_text("garbage\n")
    shutil.rmtree(edac / "mc1")
    moved = ecc.changes(before, ecc.snapshot(str(root)))
    assert not any("went from 3 to 0" in m for m in moved)
    assert any("mc0: its corrected count could not be read after the run (3 before, None after)" in m
               for m in moved)
    assert any("mc1: the controller left EDAC during the run" in m for m in moved)
    assert "could not be read" in ecc.describe(ecc.snapshot(str(root)))


def test_an_unmoved_run_has_no_ecc_warning(tmp_path):
    from cxlbench.results.store import RunWriter
    from cxlbench.runner import ecc
    writer = RunWriter(tmp_path / "results", "m", {"warnings": []})
    assert ecc.finish(writer, ecc.start(TWO_SOCKET), TWO_SOCKET) == []
    assert writer.meta["warnings"] == [] and "ecc" in writer.meta


def test_cxl_memdev_health_from_the_cxl_tool():
    from cxlbench.topology import ecc
    health = {"memdev": "mem0", "health": {"maintenance_needed": False, "volatile_errors": 2,
                                           "pmem_errors": 0, "dirty_shutdowns": 1}}
    later = {**health, "health": {**health["health"], "volatile_errors": 4,
                                  "performance_degraded": True}}
    a = ecc.snapshot(TWO_SOCKET, cxl_tool=lambda names: json.dumps([health]))
    b = ecc.snapshot(TWO_SOCKET, cxl_tool=lambda names: json.dumps(later))
    assert a["cxl"][0]["health"]["volatile_errors"] == 2
    moved = ecc.changes(a, b)
    assert any("mem0" in m and "volatile errors went from 2 to 4" in m for m in moved)
    assert any("performance degraded" in m for m in moved)
    env = build_env(TWO_SOCKET, [], {})
    line = ecc.describe(b, env.tiers["cxl2"], env.machine)
    assert "CXL mem0" in line and "volatile errors 4" in line
    assert ecc.parse_cxl_list("not json") == {}


def test_no_edac_says_the_ecc_state_is_unknown(tmp_path):
    from cxlbench.topology import ecc
    snap = ecc.snapshot(str(tmp_path))
    assert snap["edac"] == [] and "unknown" in ecc.describe(snap)


# ---- suites ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["standard", "full"])
def test_suites_plan_on_the_fixture_and_here(name):
    from cxlbench.runner.run import plan_suite
    suite = load_suite(name)
    for root in (TWO_SOCKET, "/"):
        env = build_env(root, [], suite)
        planned = plan_suite(suite, env)
        measured = {p.case.benchmark for p in planned}
        assert {"latency", "bandwidth", "loaded_latency", "write_penalty", "page_size",
                "zerocopy", "interleave"} <= measured
        assert all(p.skip or p.estimate_s > 0 for p in planned)
    assert families(suite)


# ---- the two-node families' code paths, degenerate on this machine's one node ---------

def test_interleave_measures_both_probes_on_one_node(here):
    """ddr and far on the same node: every weight is the whole buffer on node 0."""
    params = {"probe": "bandwidth", "kernel": "read", "threads": 1, "ddr_weight": 50,
              "array_bytes": 4 << 20, "iterations": 2, "ddr": "ddr0", "far": "ddr0",
              "page": "4k", "method": "auto"}
    case = Case("interleave", "cpu:node0", "ddr0+ddr0", "interleave", params, 1, 0)
    info: dict = {}
    samples = interleave.measure(case, here, info)
    assert [s.metric for s in samples] == ["bandwidth_GBps"] * 2
    assert info["interleave"]["interleave_method"] == "bind" and \
        info["interleave"]["node0_fraction"] == 1.0
    if len(CPUS) >= 2:
        loaded = {**params, "probe": "loaded_latency", "mix": "read", "load_threads": 1,
                  "working_set_bytes": 4 << 20, "load_bytes": 4 << 20, "delays": "0",
                  "nt": False, "line_bytes": 64}
        case = Case("interleave", "cpu:node0", "ddr0+ddr0", "interleave", loaded, 1, 0)
        samples = interleave.measure(case, here, {})
        assert {s.metric for s in samples} <= {"latency_ns", "bandwidth_GBps"}


def test_zerocopy_strategies_run_on_one_node(here):
    """Far = local (node 0): the copy and both migrations run, and every K is stored."""
    for strategy in zerocopy.STRATEGIES:
        params = {"strategy": strategy, "threads": 1, "data_bytes": 4 << 20, "max_uses": 3,
                  "page": "4k", "local": "ddr0"}
        info: dict = {}
        samples = zerocopy.measure(Case("zerocopy", "cpu:node0", "ddr0", "ddr", params, 2, 1),
                                   here, info)
        assert [s.params["uses"] for s in samples] == [0, 1, 2, 3] * 2
        for rep in (0, 1):
            t = [s.value for s in samples if s.repetition == rep]
            assert t == sorted(t)                      # cumulative: preparation + K passes
            assert (t[0] == 0) == (strategy == "in_place")
        if strategy.startswith("migrate"):
            assert info["moved_fraction"] == [1.0, 1.0] and "warnings" not in info


def test_lines_times_by_either_clock(buf):
    addr, length, _ = buf(1 << 12)
    for clock in ("wall", "cpu"):
        times = _native.lines(addr, length, CPUS[:2], iterations=3, clock=clock)
        assert len(times) == 3 and all(t > 0 for t in times)
    with pytest.raises(ValueError, match="clock"):
        _native.lines(addr, length, CPUS[:1], clock="tsc")
