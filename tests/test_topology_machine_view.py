"""A view of the machine that cannot be trusted (no NUMA nodes, a node's files
unreadable or malformed) is refused in one line naming what is wrong: read
leniently, it planned nothing, or planned the wrong memory under a tier's name."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cxlbench.cli.main import main
from cxlbench.topology import read_machine
from cxlbench.topology.read import MachineReadError

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


# --- no NUMA nodes at all ---------------------------------------------------------------

@pytest.mark.parametrize("hide", ["removed", "emptied"])
def test_a_machine_without_numa_nodes_is_refused_not_run_as_an_empty_plan(capsys, root, tmp_path, hide):
    """A kernel without NUMA, or a container masking /sys: `run` said "run complete" with
    no cases and exit 0, and `topology` printed empty tables."""
    shutil.rmtree(root / NODES)
    if hide == "emptied":
        (root / NODES).mkdir()
    out = tmp_path / "results"
    for command in (["topology"], ["doctor"], ["run", "--suite", "ci", "--list"],
                    ["run", "--suite", "ci", "--no-report", "--out", str(out)]):
        err = refused(capsys, root, *command)
        assert "/sys/devices/system/node shows no NUMA nodes" in err and "cannot be set or verified" in err
    assert not out.exists() or not any(out.rglob("*.parquet")), "nothing is measured, nor recorded"


def test_the_library_refuses_a_machine_without_numa_nodes_naming_the_root(root):
    shutil.rmtree(root / NODES)
    with pytest.raises(MachineReadError, match=rf"under {root}: .*shows no NUMA nodes"):
        read_machine(str(root), probe_gpus=False)
