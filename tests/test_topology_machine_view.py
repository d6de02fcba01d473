"""A view of the machine that cannot be trusted (a node's files unreadable or
malformed) is refused in one line naming what is wrong, and one without NUMA nodes
has no host tiers and says so: read leniently, it planned nothing without a word, or
planned the wrong memory under a tier's name."""
from __future__ import annotations

import builtins
import shutil
from pathlib import Path

import pytest

from cxlbench.cli.main import main
from cxlbench.topology import read_machine
from cxlbench.topology import sysfs

FIXTURES = Path(__file__).parent / "fixtures"
NODES = "sys/devices/system/node"


@pytest.fixture
def root(tmp_path) -> Path:
    dst = tmp_path / "root"
    shutil.copytree(FIXTURES / "two_socket_cxl", dst, symlinks=True)
    return dst


def refused(capsys, root: Path, *command: str) -> str:
    """The command's one line on stderr, after asserting it exited 2 with nothing else."""
    code = main(["--root", str(root), *command])
    out, err = capsys.readouterr()
    assert code == 2, (command, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def unreadable(monkeypatch, name: str):
    """Opening files named `name` fails as for a non-root reader of a mode-000 file
    (root reads those regardless, so the mode cannot be used here)."""
    def fake_open(path, *args, **kwargs):
        if str(path).endswith(name):
            raise PermissionError(13, "Permission denied", str(path))
        return builtins.open(path, *args, **kwargs)
    monkeypatch.setattr(sysfs, "open", fake_open, raising=False)


# --- no NUMA nodes at all ---------------------------------------------------------------

@pytest.mark.parametrize("hide", ["removed", "emptied"])
def test_a_machine_without_numa_nodes_plans_no_host_case_and_a_run_of_nothing_is_refused(capsys, root, tmp_path,
                                                                                        hide):
    """A kernel without NUMA, or a container masking /sys: `run` said "run complete" with
    no cases and exit 0, and `topology` printed empty tables without a word."""
    shutil.rmtree(root / NODES)
    if hide == "emptied":
        (root / NODES).mkdir()
    out = tmp_path / "results"
    err = refused(capsys, root, "run", "--suite", "ci", "--no-report", "--out", str(out))
    assert "ci plans no case on this machine" in err and "shows no NUMA nodes" in err
    assert not out.exists() or not any(out.rglob("*.parquet")), "nothing is measured, nor recorded"
    assert main(["--root", str(root), "topology"]) == 0
    assert "no host tiers: /sys/devices/system/node shows no NUMA nodes" in capsys.readouterr().out
    assert main(["--root", str(root), "doctor"]) == 2
    assert "ERROR    numa: /sys/devices/system/node shows no NUMA nodes" in capsys.readouterr().out


def test_without_numa_nodes_a_gpu_and_a_storage_tier_are_still_planned(tmp_path, capsys):
    """HBM and NVMe need no host node: refusing the machine lost the GPU suite on a
    kernel without NUMA."""
    gpu = tmp_path / "gpu"
    shutil.copytree(FIXTURES / "gpu_node", gpu, symlinks=True)
    shutil.rmtree(gpu / NODES)
    assert main(["--root", str(gpu), "run", "--suite", "gpu", "--list"]) == 0
    planned = capsys.readouterr().out
    assert "/hbm0/" in planned and "/nvme0/" in planned


# --- a node's meminfo ---------------------------------------------------------------------

@pytest.mark.parametrize("text, words", [
    ("garbage\n", "node1/meminfo holds 'garbage', not the node's 'MemTotal: N kB'"),
    ("", "node1/meminfo is empty, without the node's 'MemTotal: N kB'"),
    ("Node 1 MemTotal:       268435456 kB\n", "node1/meminfo holds 'Node 1 MemTotal"),   # MemFree gone
])
def test_a_malformed_node_meminfo_is_one_line_naming_it_not_a_node_of_0_bytes(capsys, root, text, words):
    """Read as 0 B, the node's ddr tier silently left the plan."""
    (root / NODES / "node1/meminfo").write_text(text)
    for command in ("topology", "doctor"):
        assert words in refused(capsys, root, command)


def test_an_unreadable_node_meminfo_is_one_line_naming_it(capsys, root, monkeypatch):
    unreadable(monkeypatch, "node1/meminfo")
    assert "/sys/devices/system/node/node1/meminfo cannot be read: Permission denied" in \
        refused(capsys, root, "topology")


def test_a_node_that_has_no_memory_still_reads_as_one(root):
    """A memory-less node writes MemTotal: 0 kB: that is a fact, not a malformed file."""
    (root / NODES / "node1/meminfo").write_text("Node 1 MemTotal: 0 kB\nNode 1 MemFree: 0 kB\n")
    node = read_machine(str(root), probe_gpus=False).nodes[1]
    assert node.mem_total_bytes == 0 and not node.has_memory and node.has_cpu


# --- a node's cpulist ---------------------------------------------------------------------

def test_an_unreadable_cpulist_is_refused_not_read_as_a_cpu_less_node(capsys, root, monkeypatch):
    """Read as empty, node 0 became "a CPU-less node taken as DRAM", and ddr0's figures
    were measured from node 1's CPUs."""
    unreadable(monkeypatch, "node0/cpulist")
    for command in (["topology"], ["run", "--suite", "ci", "--list"]):
        err = refused(capsys, root, *command)
        assert "/sys/devices/system/node/node0/cpulist cannot be read: Permission denied" in err


@pytest.mark.parametrize("replace, reason", [("missing", "No such file or directory"),
                                             ("a directory", "Is a directory")])
def test_a_cpulist_that_is_not_a_readable_file_is_refused_naming_it(capsys, root, replace, reason):
    cpulist = root / NODES / "node0/cpulist"
    cpulist.unlink()
    if replace == "a directory":
        cpulist.mkdir()
    assert f"node0/cpulist cannot be read: {reason}" in refused(capsys, root, "topology")


def test_an_empty_cpulist_is_a_node_whose_cpus_are_offline(root):
    (root / NODES / "node1/cpulist").write_text("\n")
    node = read_machine(str(root), probe_gpus=False).nodes[1]
    assert node.cpus == [] and not node.has_cpu and node.has_memory
