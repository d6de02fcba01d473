"""Placement: buffers verified on their node with the page size asked, and
refused, with a clear sentence, where that cannot be honoured."""
import gc

import pytest

from cxlbench import _native
from cxlbench.memory import (PagePlacement, PlacementError, allocate, host, page_nodes,
                             safety_margin, sysinfo, verify_on_node)
from cxlbench.memory.verify import PAGEMAP_PRESENT, physical_contiguity, smaps_vma

MiB = 1 << 20
GiB = 1 << 30


# ---- a fixture sysfs tree: node 0 DDR, node 1 CPU-only, node 2 a small CXL node --------

def write(root, path, text):
    full = root / path.lstrip("/")
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_text(text)


def meminfo(node, total_kb, free_kb):
    return (f"Node {node} MemTotal:       {total_kb} kB\n"
            f"Node {node} MemFree:        {free_kb} kB\n"
            f"Node {node} MemUsed:        {total_kb - free_kb} kB\n")


@pytest.fixture
def sysroot(tmp_path):
    nodes = "sys/devices/system/node"
    write(tmp_path, f"{nodes}/node0/meminfo", meminfo(0, 64 << 20, 48 << 20))
    write(tmp_path, f"{nodes}/node1/meminfo", meminfo(1, 0, 0))
    write(tmp_path, f"{nodes}/node2/meminfo", meminfo(2, 4 << 20, 1 << 20))
    for n in (0, 2):
        pool = f"{nodes}/node{n}/hugepages/hugepages-2048kB"
        write(tmp_path, f"{pool}/nr_hugepages", "0\n")
        write(tmp_path, f"{pool}/free_hugepages", "0\n")
    write(tmp_path, "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "0\n")
    write(tmp_path, "sys/kernel/mm/transparent_hugepage/enabled", "always madvise [never]\n")
    write(tmp_path, "sys/kernel/mm/transparent_hugepage/defrag", "[madvise] never\n")
    return str(tmp_path)


def test_refuses_a_node_that_does_not_exist(sysroot):
    with pytest.raises(PlacementError, match=r"NUMA node 7 does not exist .*nodes: 0, 1, 2"):
        allocate(MiB, 7, root=sysroot)


def test_refuses_a_node_without_memory(sysroot):
    with pytest.raises(PlacementError, match=r"node 1 has no memory .*: 0, 2\.$"):
        allocate(MiB, 1, root=sysroot)


def test_refuses_more_than_the_node_has_free_minus_the_margin(sysroot):
    # node 2: 4 GiB total, 1 GiB free, margin max(10 %, 512 MiB) = 512 MiB
    with pytest.raises(PlacementError, match=r"at most 512\.0 MiB can be placed"):
        allocate(768 * MiB, 2, root=sysroot)
    with pytest.raises(PlacementError, match="safety margin"):
        allocate(45 * GiB, 0, root=sysroot)     # 48 GiB free - 6.4 GiB margin


def test_refuses_hugetlb_pages_not_reserved_on_the_node(sysroot):
    with pytest.raises(PlacementError,
                       match=r"needs 4 free pages on node 2 but 0 are free .*echo 4 > "
                             r"/sys/devices/system/node/node2/hugepages/hugepages-2048kB/"
                             r"nr_hugepages"):
        allocate(8 * MiB, 2, page="hugetlb-2m", root=sysroot)
    with pytest.raises(PlacementError, match=r"no 1\.0 GiB huge pages"):
        allocate(GiB, 0, page="hugetlb-1g", root=sysroot)


def test_refuses_thp_when_disabled(sysroot):
    with pytest.raises(PlacementError, match="enabled=never"):
        allocate(4 * MiB, 0, page="thp", root=sysroot)


def test_refuses_unknown_page_policy():
    with pytest.raises(PlacementError, match="unknown page policy '2m'"):
        allocate(MiB, 0, page="2m")


def test_safety_margin_is_a_tenth_or_512_mib():
    assert safety_margin(2 * GiB) == 512 * MiB
    assert safety_margin(100 * GiB) == 10 * GiB


def test_sysinfo_reads_the_fixture(sysroot):
    assert sysinfo.node_ids(sysroot) == [0, 1, 2]
    assert sysinfo.node_memory(2, sysroot) == sysinfo.NodeMemory(2, 4 * GiB, GiB)
    assert sysinfo.node_memory(9, sysroot) is None
    assert sysinfo.hugetlb_sizes(sysroot) == [2 * MiB]
    assert sysinfo.hugetlb_pool(0, 2 * MiB, sysroot) == (0, 0)
    assert sysinfo.thp_enabled(sysroot) == "never"
    assert sysinfo.thp_defrag(sysroot) == "madvise"


# ---- this machine ---------------------------------------------------------------------

def node0_free():
    return sysinfo.node_memory(0).free_bytes


def test_4k_buffer_is_on_node_0_in_4k_pages():
    with allocate(32 * MiB + 100, 0, page="4k") as buf:
        assert buf.length == 32 * MiB + 4096 and buf.length_asked == 32 * MiB + 100
        assert buf.node == 0 and buf.page_asked == "4k"
        assert buf.page_bytes_found == 4096
        assert buf.huge_coverage == 0.0
        assert buf.on_node_fraction == 1.0
        vma = smaps_vma(buf.addr)
        assert (vma["start"], vma["end"]) == (buf.addr, buf.addr + buf.length), \
            "guards keep the buffer its own mapping"
        assert vma["AnonHugePages"] == 0
        assert vma["Rss"] == buf.length, "every page faulted in"
        assert verify_on_node(buf.addr, buf.length, 0).on_node == buf.length // 4096
        a = buf.array("float64")
        a[:] = 2.0
        assert a.sum() == 2.0 * a.size
    assert buf.closed
    buf.close()   # twice is fine


def test_thp_buffer_is_covered_by_huge_pages():
    with allocate(64 * MiB, 0, page="thp") as buf:
        assert buf.addr % (2 * MiB) == 0 and buf.length == 64 * MiB
        assert buf.page_bytes_found == sysinfo.thp_page_bytes()
        assert buf.huge_coverage >= host.THP_MIN_COVERAGE
        vma = smaps_vma(buf.addr)
        assert vma["AnonHugePages"] / vma["Rss"] == buf.huge_coverage
        assert buf.on_node_fraction == 1.0
        assert buf.found()["page_bytes"] == buf.page_bytes_found


def pagemap_file(tmp_path, frames):
    """A pagemap of pages at virtual page 0.. with these frames (None: not present)."""
    import numpy as np
    entries = [0 if f is None else PAGEMAP_PRESENT | f for f in frames]
    path = tmp_path / "pagemap"
    path.write_bytes(np.array(entries, dtype=np.uint64).tobytes())
    return str(path)


def test_contiguity_counts_pages_whose_frame_is_next_to_the_previous_one(tmp_path):
    one_block = pagemap_file(tmp_path, [100, 101, 102, 103, 104])
    assert physical_contiguity(0, 5 * 4096, one_block) == 1.0
    downwards = pagemap_file(tmp_path, [104, 103, 102, 101, 100])
    assert physical_contiguity(0, 5 * 4096, downwards) == 1.0, "a block handed out downwards is one block"
    scattered = pagemap_file(tmp_path, [100, 900, 901, 40, 7000])
    assert physical_contiguity(0, 5 * 4096, scattered) == 0.25
    assert physical_contiguity(4096, 3 * 4096, scattered) == 0.5, "only the range's own pages count"


def test_contiguity_read_in_chunks_counts_the_pages_across_each_chunk_edge(tmp_path, monkeypatch):
    from cxlbench.memory import verify
    frames = [10, 11, 12, 13, 500, 501, 7, 8, 9]       # 6 of 8 neighbours adjacent
    whole = physical_contiguity(0, 9 * 4096, pagemap_file(tmp_path, frames))
    monkeypatch.setattr(verify, "PAGEMAP_CHUNK", 2)
    assert physical_contiguity(0, 9 * 4096, pagemap_file(tmp_path, frames)) == whole == 0.75


def test_contiguity_is_none_where_frames_are_hidden_or_pages_absent(tmp_path):
    hidden = pagemap_file(tmp_path, [0, 0, 0])          # what a process without CAP_SYS_ADMIN reads
    assert physical_contiguity(0, 3 * 4096, hidden) is None
    absent = pagemap_file(tmp_path, [100, None, 102])
    assert physical_contiguity(0, 3 * 4096, absent) is None
    assert physical_contiguity(0, 4 * 4096, pagemap_file(tmp_path, [1, 2, 3])) is None, "past the end"
    assert physical_contiguity(0, 4096, str(tmp_path / "nowhere")) is None


def test_a_buffer_records_its_contiguity_where_frames_are_visible():
    with allocate(16 * MiB, 0, page="4k") as buf:
        frames_visible = physical_contiguity(buf.addr, buf.length) is not None
        assert (buf.phys_contiguity is not None) == frames_visible
        assert buf.found()["phys_contiguity"] == buf.phys_contiguity
        if frames_visible:
            assert 0.0 <= buf.phys_contiguity <= 1.0


def test_refuses_node_99_and_negative_nodes():
    with pytest.raises(PlacementError, match="node 99 does not exist"):
        allocate(MiB, 99)
    with pytest.raises(PlacementError, match="node -1 does not exist"):
        allocate(MiB, -1)


def test_refuses_more_memory_than_node_0_has():
    with pytest.raises(PlacementError, match="safety margin"):
        allocate(node0_free() + GiB, 0)


def test_refuses_hugetlb_when_none_reserved():
    pool = sysinfo.hugetlb_pool(0, 2 * MiB)
    if pool is None or pool[1] >= 2:
        pytest.skip("2 MiB hugetlb pages are reserved on node 0 here")
    with pytest.raises(PlacementError, match=r"hugetlb pages needs 2 free pages on node 0"):
        allocate(4 * MiB, 0, page="hugetlb-2m")


@pytest.fixture
def reserved_2m_pages():
    """Reserve four 2 MiB hugetlb pages on node 0 for one test, then give them back."""
    path = "/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages"
    try:
        before = int(open(path).read())
        with open(path, "w") as f:
            f.write(str(before + 4))
    except OSError as e:
        pytest.skip(f"cannot reserve hugetlb pages here ({e.strerror}); needs root")
    try:
        if sysinfo.hugetlb_pool(0, 2 * MiB)[1] < 4:
            pytest.skip("the kernel could not find four free 2 MiB blocks")
        yield
    finally:
        with open(path, "w") as f:
            f.write(str(before))


def test_hugetlb_buffer_when_pages_are_reserved(reserved_2m_pages):
    with allocate(6 * MiB, 0, page="hugetlb-2m") as buf:
        assert buf.length == 6 * MiB and buf.addr % (2 * MiB) == 0
        assert buf.page_bytes_found == 2 * MiB
        assert buf.huge_coverage == 1.0
        assert smaps_vma(buf.addr)["KernelPageSize"] == 2 * MiB
        assert verify_on_node(buf.addr, buf.length, 0, page_bytes=2 * MiB).on_node == 3


def test_locked_buffer():
    with allocate(8 * MiB, 0, lock=True) as buf:
        assert buf.locked
        assert smaps_vma(buf.addr)["Locked"] == buf.length


def test_refuses_to_lock_past_rlimit_memlock(monkeypatch):
    monkeypatch.setattr(host, "_memlock_state", lambda: (8 * MiB, 4 * MiB, False))
    with pytest.raises(PlacementError, match=r"RLIMIT_MEMLOCK .*8\.0 MiB .*ulimit -l"):
        allocate(16 * MiB, 0, lock=True)
    host.check_memlock(16 * MiB, 8 * MiB, 0, has_ipc_lock=True)   # CAP_IPC_LOCK: no limit


def test_pages_off_the_node_are_an_error_never_a_fallback(monkeypatch):
    def half_elsewhere(addr, length, node, page_bytes=4096):
        pages = length // page_bytes
        return PagePlacement(node=node, pages=pages, page_bytes=page_bytes,
                             by_node={node: pages // 2, node + 1: pages - pages // 2})
    monkeypatch.setattr(host, "placement", half_elsewhere)
    with pytest.raises(PlacementError, match=r"only 50\.0% of the pages .* on node 0 "
                                             r"\(1024 on node 1\)"):
        allocate(8 * MiB, 0)


def test_thp_with_poor_coverage_is_refused_naming_coverage_and_defrag(monkeypatch):
    monkeypatch.setattr(host, "huge_coverage", lambda addr, hugetlb=False: (0.5, 4096))
    with pytest.raises(PlacementError, match=r"only 50% .*defrag="):
        allocate(8 * MiB, 0, page="thp")


def test_verify_on_node_refuses_another_node_and_absent_pages():
    with allocate(4 * MiB, 0) as buf:
        with pytest.raises(PlacementError, match=r"only 0 of the 1024 pages .* on node 1 "
                                                 r"\(1024 on node 0\)"):
            verify_on_node(buf.addr, buf.length, 1)
        # an unaligned sub-range counts the pages it touches
        found = verify_on_node(buf.addr + 100, 8192, 0)
        assert found.pages == 3 and found.fraction == 1.0
    length = 4 * 4096
    addr = _native.map_anonymous(length)
    try:
        with pytest.raises(PlacementError, match="4 not faulted in"):
            verify_on_node(addr, length, 0)
        assert list(page_nodes(addr, length)) == [-2] * 4
    finally:
        _native.unmap(addr, length)


def test_array_view_keeps_the_buffer_mapped():
    view = allocate(2 * MiB, 0).array("int64")
    gc.collect()
    view[:] = 7
    assert int(view.sum()) == 7 * view.size


def test_a_torch_tensor_can_be_verified():
    torch = pytest.importorskip("torch")
    if sysinfo.node_ids() != [0]:
        pytest.skip("on a machine with several nodes torch's allocator picks the node")
    t = torch.ones(1 << 20, dtype=torch.float32)
    found = verify_on_node(t.data_ptr(), t.numel() * t.element_size(), 0)
    assert found.fraction == 1.0


def test_resources_close_on_with_and_when_collected_never_twice():
    import gc
    from cxlbench.closing import Closeable, ClosedWhenCollected
    closed = []

    class Held(ClosedWhenCollected):
        def __init__(self, name):
            self.name, self.done = name, False
        def close(self):
            if not self.done:
                self.done = True
                closed.append(self.name)

    class Device(Closeable):
        close = Held.close
        def __init__(self):
            self.name, self.done = "device", False

    with Held("with") as h:
        pass
    del h
    Held("dropped")
    gc.collect()
    d = Device()
    del d                                      # device memory is never freed by the collector
    gc.collect()
    assert closed == ["with", "dropped"]


def test_native_missing_tells_a_built_core_from_its_source_folder(monkeypatch):
    import sys
    import types
    from cxlbench.memory import native_missing
    assert native_missing() is None                         # this checkout is built
    empty = types.ModuleType("cxlbench._native")            # what the source folder imports as
    empty.__file__ = None
    monkeypatch.setitem(sys.modules, "cxlbench._native", empty)
    assert native_missing() == "only its C sources were found"
