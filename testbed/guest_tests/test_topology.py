"""`cxlbench topology` against a real kernel's NUMA, HMAT, memory tiers and CXL stack."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from conftest import NODE_SYSFS, parse_nodelist, run_cli

MiB = 1 << 20


def test_every_node_is_read_with_its_cpus_and_memory(machine, expect, cxl_node):
    want = {n["id"]: n for n in expect["nodes"]}
    extra = {cxl_node} if cxl_node is not None else set()
    assert set(machine.nodes) == set(want) | extra
    for nid, n in want.items():
        node = machine.nodes[nid]
        assert node.cpus == n["cpus"], f"node {nid}"
        if n["mem_mib"]:
            # the kernel keeps some for itself; it never shows more than the firmware gave
            assert 0.7 * n["mem_mib"] * MiB <= node.mem_total_bytes <= n["mem_mib"] * MiB, f"node {nid}"
        else:
            assert node.mem_total_bytes == 0 and not node.has_memory, f"node {nid}"
    if cxl_node is not None:
        node = machine.nodes[cxl_node]
        assert node.cpus == [] and not node.has_cpu
        assert 0.9 * expect["cxl"]["ram_mib"] * MiB <= node.mem_total_bytes <= expect["cxl"]["ram_mib"] * MiB


def test_distances_are_the_firmware_table(machine, expect):
    for src, row in enumerate(expect["distances"]):
        for dst, val in enumerate(row):
            assert machine.nodes[src].distances[dst] == val, f"distance {src}->{dst}"


def test_tiers_classify_every_node_with_memory(tiers, expected_tiers, memoryless_nodes):
    assert set(tiers) == expected_tiers
    for name, tier in tiers.items():
        assert tier.kind == name.rstrip("0123456789") and name.endswith(str(tier.node))
        assert tier.capacity_bytes > 0 and tier.evidence
    for nid in memoryless_nodes:      # CPUs but no memory: no tier to place bytes on
        assert not any(t.node == nid for t in tiers.values())


def test_cpu_less_dram_node_is_ddr_not_guessed_cxl(tiers, machine, expect):
    """Node 2 is CPU-less and in a lower memory tier, like a CXL node, but no CXL
    region onlines it: only /sys/bus/cxl may make a node cxl."""
    cpu_less = [n["id"] for n in expect["nodes"] if n["mem_mib"] and not n["cpus"]]
    assert cpu_less
    for nid in cpu_less:
        tier = tiers[f"ddr{nid}"]
        assert tier.kind == "ddr"
        assert "CPU-less" in tier.evidence
        assert not any(r.numa_node == nid for r in machine.cxl_regions)


def test_cxl_node_is_cxl_from_its_region(tiers, cxl_node, only_cxl):
    tier = tiers[f"cxl{cxl_node}"]
    assert tier.kind == "cxl" and tier.node == cxl_node and tier.declared is None
    assert "region0" in tier.evidence and "mem0" in tier.evidence


def test_hmat_figures_are_the_firmware_ones(machine, expect):
    """access0 (any initiator) and access1 (CPU initiators) of every memory node
    carry the figures QEMU's HMAT gave the best initiator."""
    entries = expect["hmat"]
    targets = sorted({e["target"] for e in entries})
    for t in targets:
        rows = [e for e in entries if e["target"] == t]
        best = min(rows, key=lambda e: (e["latency_ns"], -e["bandwidth_MiBps"]))
        node = machine.nodes[t]
        classes = {h.access_class: h for h in node.hmat}
        assert {0, 1} <= set(classes), f"node {t} HMAT classes {sorted(classes)}"
        for h in classes.values():
            assert h.initiators == [best["initiator"]], f"node {t} access{h.access_class}"
            assert h.read_latency_ns == h.write_latency_ns == best["latency_ns"], f"node {t}"
            assert h.read_bandwidth_MBps == h.write_bandwidth_MBps == best["bandwidth_MiBps"], f"node {t}"


def kernel_memory_tiers() -> dict[int, list[int]]:
    tiers = {}
    for d in Path("/sys/devices/virtual/memory_tiering").glob("memory_tier*"):
        tiers[int(d.name.removeprefix("memory_tier"))] = parse_nodelist((d / "nodelist").read_text())
    return tiers


def test_memory_tiers_are_the_kernels(machine, expect, cxl_node):
    truth = kernel_memory_tiers()
    assert {k: sorted(v) for k, v in machine.memory_tiers.items()} == {k: sorted(v) for k, v in truth.items()}
    for tier_id, nodes in truth.items():
        for nid in nodes:
            assert machine.nodes[nid].memory_tier == tier_id
    dram = {machine.nodes[n["id"]].memory_tier for n in expect["nodes"] if n["mem_mib"] and n["cpus"]}
    assert len(dram) == 1, "the CPU nodes' DRAM shares one tier"
    slower = [n["id"] for n in expect["nodes"] if n["mem_mib"] and not n["cpus"]]
    if cxl_node is not None:
        slower.append(cxl_node)
    for nid in slower:      # HMAT (node 2) and the kmem driver (CXL) rank them below DRAM
        assert machine.nodes[nid].memory_tier > max(dram), f"node {nid}"


def test_cxl_memdev_and_region_match_the_cxl_tool(machine, expect, cxl_node, only_cxl):
    (memdev,) = machine.cxl_memdevs
    assert memdev.name == "mem0"
    assert memdev.ram_bytes == expect["cxl"]["ram_mib"] * MiB and memdev.pmem_bytes == 0
    assert int(memdev.serial, 0) == 0xC0FFEE
    (region,) = machine.cxl_regions
    assert region.name == "region0" and region.mode == "ram"
    assert region.size_bytes == expect["cxl"]["ram_mib"] * MiB
    assert region.interleave_ways == 1 and region.memdevs == ["mem0"]
    assert region.numa_node == cxl_node
    # the same facts from ndctl's cxl tool
    listed = json.loads(subprocess.run(["cxl", "list", "-M", "-R"], capture_output=True, text=True,
                                       check=True).stdout)
    flat = listed if isinstance(listed, list) else [listed]
    memdevs = [x for item in flat for x in (item.get("memdevs") or ([item] if "memdev" in item else []))]
    regions = [x for item in flat for x in (item.get("regions") or ([item] if "region" in item else []))]
    assert [m["memdev"] for m in memdevs] == ["mem0"] and memdevs[0]["ram_size"] == memdev.ram_bytes
    assert [r["region"] for r in regions] == ["region0"] and regions[0]["size"] == region.size_bytes


def test_numa_configuration_has_no_cxl(machine, tiers, only_numa):
    assert machine.cxl_regions == [] and machine.cxl_memdevs == []
    assert not any(t.kind == "cxl" for t in tiers.values())


def test_initiators_are_the_nodes_with_cpus(machine, expect):
    from cxlbench.topology import initiators
    got = {i.name: i.cpus for i in initiators(machine)}
    assert got == {f"cpu:node{n['id']}": n["cpus"] for n in expect["nodes"] if n["cpus"]}


def test_topology_json_command(topology_json, tiers, cxl_node):
    assert {t["name"] for t in topology_json["tiers"]} == set(tiers)
    assert {t["name"]: t["kind"] for t in topology_json["tiers"]} == {n: t.kind for n, t in tiers.items()}
    nodes = topology_json["machine"]["nodes"]
    assert {int(k) for k in nodes} == set(int(n) for n in
                                         parse_nodelist((NODE_SYSFS / "online").read_text()))
    regions = topology_json["machine"].get("cxl_regions", [])
    assert [r["numa_node"] for r in regions] == ([cxl_node] if cxl_node is not None else [])


def test_topology_command_names_every_tier(tiers):
    out = run_cli("topology")
    assert out.returncode == 0, out.stderr
    for name in tiers:
        assert name in out.stdout
