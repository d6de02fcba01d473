"""Classifying a machine into tiers and initiators, and the user's declarations."""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from cxlbench.topology import (TierDeclaration, classify_tiers, initiators, parse_tier_declaration,
                               read_machine)

FIXTURES = Path(__file__).parent / "fixtures"
GiB = 1 << 30


@pytest.fixture(scope="module")
def cxl():
    return read_machine(str(FIXTURES / "two_socket_cxl"))


@pytest.fixture(scope="module")
def gpu_node():
    return read_machine(str(FIXTURES / "gpu_node"))


def by_name(tiers):
    return {t.name: t for t in tiers}


# --- discovery --------------------------------------------------------------

def test_two_sockets_and_a_cxl_node(cxl):
    tiers = classify_tiers(cxl)
    assert [(t.name, t.kind, t.node) for t in tiers] == [("ddr0", "ddr", 0), ("ddr1", "ddr", 1),
                                                         ("cxl2", "cxl", 2)]
    cxl2 = by_name(tiers)["cxl2"]
    assert "region0" in cxl2.evidence and "mem0" in cxl2.evidence
    assert (cxl2.capacity_bytes, cxl2.free_bytes) == (64 * GiB, 63 * GiB)
    assert all(t.declared is None and t.is_host_memory for t in tiers)


def test_cpu_less_node_without_cxl_evidence_stays_a_host_tier(tmp_path):
    """No region onlines node 2: it is memory all the same, taken as DRAM and saying why."""
    root = tmp_path / "no_cxl"
    shutil.copytree(FIXTURES / "two_socket_cxl", root, symlinks=True)
    shutil.rmtree(root / "sys/bus/cxl")
    tiers = by_name(classify_tiers(read_machine(str(root))))
    assert "cxl2" not in tiers
    ddr2 = tiers["ddr2"]
    assert ddr2.kind == "ddr" and "CPU-less" in ddr2.evidence
    assert "cxl=node:2" in ddr2.evidence                     # tells the user how to override
    assert "memory_tier22" in ddr2.evidence                  # and that the kernel ranks it slower


def test_node_without_memory_holds_no_tier(cxl):
    nodes = dict(cxl.nodes)
    nodes[1] = dataclasses.replace(nodes[1], mem_total_bytes=0, mem_free_bytes=0)
    tiers = classify_tiers(dataclasses.replace(cxl, nodes=nodes))
    assert [t.name for t in tiers] == ["ddr0", "cxl2"]


def test_gpu_becomes_an_hbm_tier(gpu_node):
    tiers = classify_tiers(gpu_node)
    assert [(t.name, t.kind) for t in tiers] == [("ddr0", "ddr"), ("hbm0", "hbm")]
    hbm0 = tiers[1]
    assert hbm0.gpu == 0 and not hbm0.is_host_memory
    assert "capacity unknown" in hbm0.evidence               # sysfs can't tell the memory size


def test_initiators(cxl, gpu_node):
    assert [(i.name, i.kind, i.node) for i in initiators(cxl)] == [("cpu:node0", "cpu", 0),
                                                                   ("cpu:node1", "cpu", 1)]
    assert initiators(cxl)[1].cpus == cxl.nodes[1].cpus
    gpu = initiators(gpu_node)[-1]
    assert (gpu.name, gpu.kind, gpu.gpu, gpu.node) == ("gpu:0", "gpu", 0, 0)


# --- declarations -----------------------------------------------------------

def test_parse_valid_declarations(tmp_path):
    assert parse_tier_declaration("cxl=node:1") == TierDeclaration("cxl=node:1", "cxl", node=1)
    assert parse_tier_declaration("ddr=node:0").node == 0
    assert parse_tier_declaration(" CXL = node:1 ").kind == "cxl"
    nvme = parse_tier_declaration(f"nvme={tmp_path}")
    assert (nvme.kind, nvme.path, nvme.node) == ("nvme", str(tmp_path), None)


@pytest.mark.parametrize("text, words", [
    ("hbm=node:0", "unknown tier kind 'hbm'"),
    ("pmem=node:0", "unknown tier kind"),
    ("cxl", "KIND=SPEC"),
    ("cxl=", "KIND=SPEC"),
    ("=node:1", "KIND=SPEC"),
    ("cxl=1", "cxl=node:N"),
    ("ddr=node:x", "ddr=node:N"),
    ("cxl=/mnt/scratch", "cxl=node:N"),
    ("nvme=/no/such/dir/here", "not one"),
])
def test_parse_rejects_with_one_sentence(text, words):
    with pytest.raises(ValueError) as err:
        parse_tier_declaration(text)
    message = str(err.value)
    assert words in message and "\n" not in message


def test_nvme_path_must_be_a_directory(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ValueError, match="must be an existing directory"):
        parse_tier_declaration(f"nvme={f}")


def test_declared_node_replaces_the_discovered_kind(cxl):
    tiers = classify_tiers(cxl, ["cxl=node:1"])
    assert [t.name for t in tiers] == ["ddr0", "cxl1", "cxl2"]
    cxl1 = tiers[1]
    assert (cxl1.kind, cxl1.node, cxl1.declared) == ("cxl", 1, "cxl=node:1")
    assert "discovery said ddr1" in cxl1.evidence
    ddr2 = by_name(classify_tiers(cxl, [TierDeclaration("ddr=node:2", "ddr", node=2)]))["ddr2"]
    assert ddr2.declared == "ddr=node:2" and "region0" in ddr2.evidence


def test_declared_nvme_directory(cxl, tmp_path):
    (nvme0,) = [t for t in classify_tiers(cxl, [f"nvme={tmp_path}"]) if t.kind == "nvme"]
    assert (nvme0.name, nvme0.path, nvme0.declared) == ("nvme0", str(tmp_path), f"nvme={tmp_path}")
    assert nvme0.capacity_bytes > 0 and 0 <= nvme0.free_bytes <= nvme0.capacity_bytes
    assert nvme0.evidence.startswith(f"declared nvme={tmp_path}; on ")   # says what it sits on


@pytest.mark.parametrize("declarations, words", [
    (["cxl=node:7"], "node 7 in 'cxl=node:7' does not exist: this machine has nodes 0, 1, 2"),
    (["cxl=node:1", "ddr=node:1"], "declares again"),
])
def test_classify_rejects_what_this_machine_cannot_hold(cxl, declarations, words):
    with pytest.raises(ValueError) as err:
        classify_tiers(cxl, declarations)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_declaring_a_memoryless_node_is_refused(cxl):
    nodes = dict(cxl.nodes)
    nodes[1] = dataclasses.replace(nodes[1], mem_total_bytes=0)
    with pytest.raises(ValueError, match="has no memory"):
        classify_tiers(dataclasses.replace(cxl, nodes=nodes), ["cxl=node:1"])
