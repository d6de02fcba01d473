"""The latency and bandwidth families: what they plan on a machine, what they measure."""
from pathlib import Path

import pytest

from cxlbench.benchmarks import bandwidth, latency
from cxlbench.benchmarks.sizes import latency_sweep
from cxlbench.benchmarks.spec import Spec
from cxlbench.results.schema import Case
from cxlbench.runner.run import build_env
from planning import plan

FIXTURES = Path(__file__).parent / "fixtures"
SUITE = {"repetitions": 2, "warmup": 1, "min_sample_s": 0.01}


@pytest.fixture(scope="module")
def two_socket():
    return build_env(str(FIXTURES / "two_socket_cxl"), [])


@pytest.fixture(scope="module")
def here():
    env = build_env("/", [])
    env.suite = dict(SUITE)
    env.spec = Spec(name="test", **SUITE)
    return env


def test_all_initiators_give_mlcs_matrix(two_socket):
    planned = plan(latency, {**SUITE, "initiators": "all", "working_set": ["1MiB"]}, two_socket)
    pairs = {(p.case.initiator, p.case.target) for p in planned}
    assert pairs == {(i, t) for i in ("cpu:node0", "cpu:node1") for t in ("ddr0", "ddr1", "cxl2")}


def test_local_initiators_reach_cpu_less_tiers_from_the_nearest_node(two_socket):
    planned = plan(latency, {**SUITE, "working_set": ["1MiB"]}, two_socket)
    assert {(p.case.initiator, p.case.target) for p in planned} == {
        ("cpu:node0", "ddr0"), ("cpu:node1", "ddr1"), ("cpu:node0", "cxl2")}


def test_cases_that_cannot_run_are_planned_with_a_reason(two_socket):
    spec = {**SUITE, "page": ["hugetlb-1g", "4k"], "working_set": ["8GiB", "100TiB"]}
    skips = {(p.case.params["page"], p.case.params["working_set_bytes"]): p.skip
             for p in plan(latency, spec, two_socket) if p.case.target == "ddr0"}
    assert "hugetlb-1g pages on node 0" in skips[("hugetlb-1g", 8 << 30)] or skips[("hugetlb-1g", 8 << 30)] is None
    assert "free memory" in skips[("4k", 100 << 40)]
    assert skips[("4k", 8 << 30)] is None


def test_sweep_is_finer_around_the_caches(two_socket):
    sizes = latency_sweep(two_socket.machine, 16 << 10, 1 << 30)
    assert sizes[0] == 16 << 10 and sizes[-1] == 1 << 30 and sizes == sorted(sizes)
    assert any(s & (s - 1) for s in sizes)          # midpoints exist (not powers of two)
    assert all(s & (s - 1) == 0 for s in sizes if s < 64 << 10)


def test_bandwidth_threads_go_up_to_the_initiator_and_skip_nt_reads(two_socket):
    planned = plan(bandwidth, {**SUITE, "kernel": ["read", "triad"], "nt": [False, True],
                              "tiers": ["ddr0"]}, two_socket)
    threads = sorted({p.case.params["threads"] for p in planned})
    ncpus = len(two_socket.initiators["cpu:node0"].cpus)
    assert threads[0] == 1 and threads[-1] == ncpus
    assert not [p for p in planned if p.case.params["kernel"] == "read" and p.case.params["nt"]]


def test_latency_measures_exactly_the_working_set_asked(here, monkeypatch):
    from cxlbench import _native
    seen = []
    real = _native.chase_init
    monkeypatch.setattr(_native, "chase_init", lambda addr, length, *a: seen.append(length) or real(addr, length, *a))
    case = Case("latency", "cpu:node0", "ddr0", "ddr",
                {"working_set_bytes": 64 << 10, "page": "thp", "pattern": "random", "chains": 1,
                 "line_bytes": 64}, repetitions=2, warmup=1)
    samples = latency.measure(case, here, {})
    from cxlbench.benchmarks import tails
    # not the 2 MiB the THP buffer was rounded to (the L1 floor's chains aside)
    assert [n for n in seen if n != tails.FLOOR_BYTES] == [64 << 10, 64 << 10]
    samples = [s for s in samples if s.metric == "latency_ns"]
    assert [s.repetition for s in samples] == [0, 1]
    assert all(s.value > 0 for s in samples)
    assert all(s.params["page_bytes"] == 2 << 20 for s in samples)
    assert all(0 < s.params["cpu_held"] <= 1 for s in samples)


def test_bandwidth_keeps_every_iteration_of_every_repetition(here):
    case = Case("bandwidth", "cpu:node0", "ddr0", "ddr",
                {"kernel": "triad", "threads": 1, "nt": False, "page": "4k",
                 "array_bytes": 4 << 20, "iterations": 3}, repetitions=2, warmup=1)
    info = {}
    samples = bandwidth.measure(case, here, info)
    assert [(s.repetition, s.params["iteration"]) for s in samples] == [(r, i) for r in range(2) for i in range(3)]
    assert len(info["place_s"]) == 2 and all(t > 0 for t in info["place_s"])   # setup's cost, per repetition
    assert all(s.params["page_bytes"] == 4096 and s.value > 0 for s in samples)
    assert all(0 < s.params["cpu_held"] <= 1 for s in samples)
    assert all("phys_contiguity" in s.params for s in samples)


def test_a_case_records_its_least_contiguous_buffer_or_none_where_frames_are_hidden():
    import types

    from cxlbench.benchmarks.base import placement_found

    def buf(contiguity, page=4096):
        return types.SimpleNamespace(page_bytes_found=page, huge_coverage=0.0, phys_contiguity=contiguity)
    found = placement_found(buf(0.99), buf(0.36312), buf(0.97))
    assert found == {"page_bytes": 4096, "huge_coverage": 0.0, "phys_contiguity": 0.3631}
    assert placement_found(buf(0.99), buf(None))["phys_contiguity"] is None


@pytest.mark.parametrize("kernel", sorted(bandwidth.ROLES))
def test_every_array_a_kernel_uses_is_a_buffer_of_its_own(kernel):
    """copy once got (A, B, A): c = a copied A onto itself and read twice likwid's copy."""
    import types
    bufs = [types.SimpleNamespace(addr=0x1000 * (i + 1)) for i in range(bandwidth.KERNELS[kernel][0])]
    used = [x for x in bandwidth.addresses(kernel, bufs) if x]
    assert sorted(used) == sorted(b.addr for b in bufs)           # each once, none shared


def test_copy_is_measured_from_one_buffer_into_another(here, monkeypatch):
    from cxlbench import _native
    calls = []
    real = _native.stream
    monkeypatch.setattr(_native, "stream", lambda k, a, b, c, *rest, **kw: calls.append((k, a, b, c))
                        or real(k, a, b, c, *rest, **kw))
    case = Case("bandwidth", "cpu:node0", "ddr0", "ddr",
                {"kernel": "copy", "threads": 1, "nt": False, "page": "4k",
                 "array_bytes": 1 << 20, "iterations": 1}, repetitions=1, warmup=1)
    bandwidth.measure(case, here, {})
    assert calls and all(k == "copy" and a and c and a != c and b == 0 for k, a, b, c in calls)


def test_bandwidth_records_cpu_held_with_several_threads(here):
    case = Case("bandwidth", "cpu:node0", "ddr0", "ddr",
                {"kernel": "copy", "threads": 2, "nt": False, "page": "4k",
                 "array_bytes": 4 << 20, "iterations": 3}, repetitions=2, warmup=1)
    info: dict = {}
    samples = bandwidth.measure(case, here, info)
    assert len(samples) == 6
    assert all(0 < s.params["cpu_held"] <= 1 for s in samples)       # barrier waits are not "lost"
    for rep in (0, 1):      # one figure per repetition: its least iteration's
        assert len({s.params["cpu_held"] for s in samples if s.repetition == rep}) == 1


def test_cpu_held_counts_waiting_as_not_held():
    import time
    from cxlbench.benchmarks.base import cpu_held
    result, held = cpu_held(1, lambda: time.sleep(0.05) or "done")
    assert result == "done" and held < 0.2          # asleep: someone else's time, as far as we know


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 1e308])
def test_a_value_that_is_no_figure_fails_its_case_not_the_run(value):
    """A division by a zero elapsed time gives inf: the case fails where it was measured,
    before the run's files hold a value every reader would refuse as damage."""
    from cxlbench.benchmarks.base import UndeclaredMetric, check_metrics
    from cxlbench.results.schema import Sample
    from fakes import family as fake
    with pytest.raises(UndeclaredMetric, match="not a figure"):
        check_metrics([Sample("latency_ns", value, 0, {})], fake)
