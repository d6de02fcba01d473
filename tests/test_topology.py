"""Reading machines: this one as it is, and two fixture trees of machines we don't have."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from cxlbench.topology import (block_device_for, classify_tiers, format_topology, machine_from_dict,
                               machine_to_dict, read_machine, read_nodes)
from cxlbench.topology.gpu import normal_bus_id, read_gpus
from cxlbench.topology.block_devices import disk_for_devnum, read_block_devices
from cxlbench.topology.sysfs import parse_cpulist, parse_size, selected
from cxlbench.units import format_cpulist

FIXTURES = Path(__file__).parent / "fixtures"
TWO_SOCKET = str(FIXTURES / "two_socket_cxl")
GPU_NODE = str(FIXTURES / "gpu_node")
GiB = 1 << 30


def copy_tree(name: str, tmp_path: Path) -> Path:
    """A writable copy of a fixture, links kept as links so they still resolve inside it."""
    dst = tmp_path / name
    shutil.copytree(FIXTURES / name, dst, symlinks=True)
    return dst


# --- parsing helpers --------------------------------------------------------

def test_cpulist_round_trip():
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("") == [] and parse_cpulist(None) == []
    assert format_cpulist([5, 0, 1, 2, 8, 9]) == "0-2,5,8-9"


def test_sizes_and_selectors():
    assert parse_size("32K") == 32 << 10 and parse_size("36M") == 36 << 20 and parse_size("x") is None
    assert selected("always [madvise] never") == "madvise"
    assert normal_bus_id(b"00000000:17:00.0") == "0000:17:00.0"


# --- this machine -----------------------------------------------------------

@pytest.fixture(scope="module")
def here():
    return read_machine(probe_gpus=False)


def online_cpus() -> set[int]:
    with open("/sys/devices/system/cpu/online") as f:
        return set(parse_cpulist(f.read()))


def test_this_machine_nodes_cover_the_cpus(here):
    assert 0 in here.nodes
    node_cpus = [c for n in here.nodes.values() for c in n.cpus]
    assert len(node_cpus) == len(set(node_cpus)), "a CPU listed on two nodes"
    assert set(node_cpus) == online_cpus()
    assert set(os.sched_getaffinity(0)) <= set(node_cpus)
    assert here.cpu.threads == len(online_cpus())
    assert 1 <= here.cpu.sockets <= here.cpu.cores <= here.cpu.threads


def test_this_machine_memory_and_distances(here):
    for node in here.nodes.values():
        assert node.distances[node.id] == 10          # SLIT: local is always 10
        if node.has_memory:
            assert 0 < node.mem_free_bytes <= node.mem_total_bytes


def test_this_machine_caches(here):
    levels = {c.level for c in here.cpu.caches}
    assert 1 in levels
    assert all(c.size_bytes > 0 and c.line_bytes > 0 and c.shared_cpus for c in here.cpu.caches)
    assert here.llc_bytes() == max(c.size_bytes for c in here.cpu.caches)


def test_this_machine_classifies_its_cpu_nodes_as_ddr(here):
    tiers = {t.name: t for t in classify_tiers(here)}
    for node in here.nodes.values():
        if node.has_cpu and node.has_memory:
            assert tiers[f"ddr{node.id}"].kind == "ddr"
            assert tiers[f"ddr{node.id}"].capacity_bytes == node.mem_total_bytes


def test_this_machine_environment_is_readable(here):
    env = here.environment
    assert env.kernel == os.uname().release
    if os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"):
        assert env.thp_enabled in ("always", "madvise", "never")
        assert env.thp_defrag in ("always", "defer", "defer+madvise", "madvise", "never")
    if os.path.exists("/proc/sys/kernel/numa_balancing"):
        assert env.numa_balancing in (0, 1, 2, 3)
    assert isinstance(env.prefetcher_readable, bool)
    assert env.hypervisor_flag == ("hypervisor" in here.cpu.flags)
    assert (env.hypervisor is not None) == env.hypervisor_flag or env.hypervisor == "Xen"


def test_this_machine_memory_tiers_name_real_nodes(here):
    for nodes in here.memory_tiers.values():
        assert set(nodes) <= set(here.nodes)


def test_this_machine_directory_to_block_device():
    device = block_device_for(str(Path(__file__).parent))
    if device is None:                      # overlay/tmpfs checkout: nothing to map
        pytest.skip("the checkout is not on a block device")
    assert os.path.exists(f"/sys/block/{device.name}")
    assert device.size_bytes > 0


def test_gpu_probe_never_fails_here():
    gpus = read_gpus("/", probe=True)       # NVML, torch or sysfs: whichever this machine has
    assert all(g.source in ("nvml", "torch", "sysfs") for g in gpus)
    assert [g.index for g in gpus] == list(range(len(gpus)))


def test_this_machine_round_trips_through_json(here):
    data = json.loads(json.dumps(machine_to_dict(here)))
    assert machine_from_dict(data) == here


# --- two sockets + CXL ------------------------------------------------------

@pytest.fixture(scope="module")
def cxl():
    return read_machine(TWO_SOCKET)


def test_fixture_cpu(cxl):
    cpu = cxl.cpu
    assert (cpu.model, cpu.vendor) == ("Intel(R) Xeon(R) Gold 5415+", "GenuineIntel")
    assert (cpu.sockets, cpu.cores, cpu.threads, cpu.smt_active) == (2, 16, 32, True)
    assert "avx512f" in cpu.flags and "amx_tile" in cpu.flags
    caches = {(c.level, c.kind): c for c in cpu.caches}
    assert set(caches) == {(1, "Data"), (1, "Instruction"), (2, "Unified"), (3, "Unified")}
    assert caches[(1, "Data")].size_bytes == 48 << 10 and caches[(1, "Data")].shared_cpus == [0, 16]
    assert caches[(3, "Unified")].size_bytes == 22528 << 10
    assert len(caches[(3, "Unified")].shared_cpus) == 16
    assert cxl.llc_bytes() == 22528 << 10


def test_fixture_nodes(cxl):
    assert sorted(cxl.nodes) == [0, 1, 2]
    n0, n1, n2 = (cxl.nodes[i] for i in range(3))
    assert n0.cpus == list(range(0, 8)) + list(range(16, 24))
    assert n1.cpus == list(range(8, 16)) + list(range(24, 32))
    assert n2.cpus == [] and not n2.has_cpu and n2.has_memory
    assert (n0.mem_total_bytes, n0.mem_free_bytes) == (256 * GiB, 200 * GiB)
    assert (n2.mem_total_bytes, n2.mem_free_bytes) == (64 * GiB, 63 * GiB)
    assert n0.distances == {0: 10, 1: 21, 2: 24}
    assert n2.distances == {0: 24, 1: 34, 2: 10}
    assert read_nodes(TWO_SOCKET) == cxl.nodes


def test_fixture_memory_tiers(cxl):
    assert cxl.memory_tiers == {4: [0, 1], 22: [2]}
    assert [cxl.nodes[i].memory_tier for i in range(3)] == [4, 4, 22]


def test_fixture_hugepages_per_size_and_node(cxl):
    assert {s: (p.total, p.free) for s, p in cxl.hugepages.items()} == {2 << 20: (1024, 1012), GiB: (4, 4)}
    assert cxl.nodes[0].hugepages[2 << 20].total == 512 and cxl.nodes[0].hugepages[2 << 20].free == 500
    assert cxl.nodes[0].hugepages[GiB].total == 4
    assert cxl.nodes[1].hugepages[GiB].total == 0
    assert cxl.nodes[2].hugepages[2 << 20].total == 0


def test_fixture_hmat(cxl):
    far = cxl.nodes[2].hmat
    assert [a.access_class for a in far] == [0, 1]
    a0 = far[0]
    assert a0.initiators == [0]
    assert (a0.read_latency_ns, a0.write_latency_ns) == (271, 285)
    assert (a0.read_bandwidth_MBps, a0.write_bandwidth_MBps) == (28672, 24576)
    assert cxl.nodes[1].hmat[1].initiators == [1] and cxl.nodes[1].hmat[1].read_latency_ns == 110


def test_fixture_cxl_memdev(cxl):
    (mem,) = cxl.cxl_memdevs
    assert mem.name == "mem0"
    assert (mem.ram_bytes, mem.pmem_bytes) == (64 * GiB, 0)
    assert (mem.serial, mem.numa_node, mem.firmware) == ("0x5a3c00e1", 0, "2.1.4")


def test_fixture_cxl_region_and_its_node(cxl):
    (region,) = cxl.cxl_regions
    assert (region.name, region.size_bytes, region.mode) == ("region0", 64 * GiB, "ram")
    assert (region.interleave_ways, region.interleave_granularity) == (1, 256)
    assert region.targets == ["decoder2.0"]
    assert region.memdevs == ["mem0"]
    assert region.numa_node == 2
    assert region.dax_devices == {"dax0.0": "kmem"}


def test_region_node_found_through_the_dax_bus(tmp_path):
    """Without the dax device under regionZ/dax_regionZ, /sys/bus/dax/devices still leads to it."""
    root = copy_tree("two_socket_cxl", tmp_path)
    region = root / "sys/devices/platform/ACPI0017:00/root0/decoder0.0/region0"
    (region / "dax_region0").rename(region / "dax_moved")
    bus_link = root / "sys/bus/dax/devices/dax0.0"
    bus_link.unlink()
    bus_link.symlink_to(os.path.relpath(region / "dax_moved/dax0.0", bus_link.parent))
    (moved,) = read_machine(str(root)).cxl_regions
    assert moved.numa_node == 2 and moved.dax_devices == {"dax0.0": "kmem"}


def test_region_left_as_devdax_onlines_no_node(tmp_path):
    root = copy_tree("two_socket_cxl", tmp_path)
    driver = root / "sys/devices/platform/ACPI0017:00/root0/decoder0.0/region0/dax_region0/dax0.0/driver"
    driver.unlink()
    (root / "sys/bus/dax/drivers/device_dax").mkdir()
    driver.symlink_to(os.path.relpath(root / "sys/bus/dax/drivers/device_dax", driver.parent))
    (region,) = read_machine(str(root)).cxl_regions
    assert region.numa_node is None and region.dax_devices == {"dax0.0": "device_dax"}


def test_fixture_edac(cxl):
    mc0, mc1 = cxl.edac
    assert (mc0.name, mc0.mode, mc0.ce_count, mc0.ue_count) == ("mc0", "SECDED", 3, 0)
    assert mc0.dimms == {"dimm0": (3, 0), "dimm1": (0, 0)}
    assert mc1.dimms == {"rank0": (0, 0)} and mc1.ce_count == mc1.ue_count == 0


def test_fixture_environment(cxl):
    env = cxl.environment
    assert (env.thp_enabled, env.thp_defrag) == ("always", "defer")
    assert (env.numa_balancing, env.demotion_enabled) == (1, True)
    assert (env.governor, env.cpu_mhz, env.smt_control) == ("performance", 2900.0, "on")
    assert env.prefetcher_readable is True
    assert env.hypervisor is None and env.hypervisor_flag is False
    assert (env.dmi_vendor, env.dmi_product) == ("Dell Inc.", "PowerEdge R760")
    assert (env.bios_version, env.bios_date, env.microcode) == ("2.1.5", "03/14/2025", "0x2b000590")
    assert env.kernel == "6.8.0-cxl" and cxl.hostname == "cxl-host"


def test_fixture_block_devices(cxl):
    (nvme,) = cxl.block_devices                 # loop0 has no device behind it: left out
    assert nvme.name == "nvme0n1" and nvme.is_nvme and not nvme.rotational
    assert nvme.model == "SAMSUNG MZQL23T8HCLS-00A07"
    assert nvme.size_bytes == 7501476528 * 512 and nvme.numa_node == 0


def test_devnum_to_disk_through_partitions():
    assert disk_for_devnum(259, 0, TWO_SOCKET) == "nvme0n1"
    assert disk_for_devnum(259, 1, TWO_SOCKET) == "nvme0n1"      # a partition maps to its disk
    assert disk_for_devnum(8, 0, TWO_SOCKET) is None


def test_fixture_without_pci_has_no_gpu(cxl):
    assert cxl.gpus == []


def test_fixture_round_trips_through_json(cxl):
    text = json.dumps(machine_to_dict(cxl))
    data = json.loads(text)
    assert data["nodes"]["2"]["memory_tier"] == 22           # keys are strings in JSON
    assert data["edac"][0]["dimms"]["dimm0"] == [3, 0]
    assert machine_from_dict(data) == cxl


def test_fixture_topology_view(cxl):
    text = format_topology(cxl, classify_tiers(cxl))
    for expected in ("Xeon(R) Gold 5415+", "region0", "mem0", "node 2", "cxl2", "ddr1", "nvme0n1",
                     "271 ns", "mc0"):
        assert expected in text


# --- one GPU node -----------------------------------------------------------

@pytest.fixture(scope="module")
def gpu_node():
    return read_machine(GPU_NODE)


def test_gpu_fixture_cpu_and_node(gpu_node):
    cpu = gpu_node.cpu
    assert (cpu.sockets, cpu.cores, cpu.threads, cpu.smt_active) == (1, 16, 16, False)
    assert list(gpu_node.nodes) == [0] and gpu_node.nodes[0].cpus == list(range(16))
    assert gpu_node.cxl_memdevs == [] and gpu_node.cxl_regions == [] and gpu_node.edac == []
    assert gpu_node.nodes[0].hmat == []
    assert gpu_node.environment.prefetcher_readable is False
    assert gpu_node.environment.dmi_product is None


def test_gpu_fixture_gpu_from_pci_sysfs(gpu_node):
    """NVML can't be faked: the fixture's GPU comes from PCI sysfs, and says what it doesn't know."""
    (gpu,) = gpu_node.gpus                     # the NVSwitch and the NIC are not GPUs
    assert gpu.source == "sysfs" and gpu.index == 0
    assert gpu.name.startswith("unknown") and "10de:2335" in gpu.name
    assert gpu.memory_bytes == 0 and gpu.ecc_enabled is None and gpu.pcie_gen is None
    assert (gpu.pci_bus_id, gpu.numa_node) == ("0000:17:00.0", 0)


def test_fixture_roots_never_ask_nvml_or_torch():
    """They describe the live machine, not the tree."""
    assert [g.source for g in read_gpus(GPU_NODE, probe=True)] == ["sysfs"]


def test_gpu_fixture_block_device(gpu_node):
    (sda,) = read_block_devices(GPU_NODE)
    assert sda.name == "sda" and not sda.is_nvme and not sda.rotational and sda.model == "MTFDDAK960TDS"
    assert gpu_node.block_devices == [sda]


def test_missing_root_reads_as_an_empty_machine(tmp_path):
    """A kernel (or container) that exposes nothing yields empty records, not exceptions;
    the runner refuses a plan left empty (test_topology_machine_view.py)."""
    m = read_machine(str(tmp_path))
    assert m.nodes == {} and m.cpu.threads == 0 and m.gpus == [] and m.block_devices == []
    assert m.environment.thp_enabled is None and m.environment.kernel == "unknown"
