"""`doctor`: a verdict per check, and the exit code of the worst."""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from cxlbench.topology import Check, doctor_exit_code, format_checks, read_machine, run_checks
from cxlbench.topology.doctor import VERDICTS
from cxlbench.topology.environment import identify_hypervisor

FIXTURES = Path(__file__).parent / "fixtures"


def copy_tree(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(FIXTURES / name, dst, symlinks=True)
    return dst


def set_file(root: Path, path: str, value: object) -> None:
    (root / path.lstrip("/")).write_text(f"{value}\n")


def verdicts(machine) -> dict[str, str]:
    return {c.name: c.verdict for c in run_checks(machine)}


def with_env(machine, **changes):
    return dataclasses.replace(machine, environment=dataclasses.replace(machine.environment, **changes))


@pytest.fixture(scope="module")
def cxl():
    return read_machine(str(FIXTURES / "two_socket_cxl"))


def test_checks_are_one_line_each_with_a_known_verdict(cxl):
    checks = run_checks(cxl)
    names = [c.name for c in checks]
    assert len(names) == len(set(names))
    for c in checks:
        assert c.verdict in VERDICTS and c.message and "\n" not in c.message
        assert c.show().startswith(c.verdict.upper()) and c.name in c.show()
    assert len(format_checks(checks).splitlines()) == len(checks)


def test_two_socket_fixture_verdicts(cxl):
    v = verdicts(cxl)
    assert v["numa balancing"] == "warning"      # numa_balancing=1 migrates pages under a benchmark
    assert v["demotion"] == "warning"            # on, and there is a slower tier to demote to
    assert v["thp"] == "warning"                 # always
    assert v["thp defrag"] == "info"             # defer
    assert v["ecc"] == "warning"                 # 3 corrected errors on mc0
    assert v["cpu governor"] == "ok" and v["virtualisation"] == "ok"
    assert v["prefetchers"] == "ok" and v["hugetlb"] == "ok" and v["smt"] == "info"
    assert v["memory node0"] == v["memory node2"] == "ok"
    assert doctor_exit_code(run_checks(cxl)) == 1


def test_uncorrected_errors_are_an_error(tmp_path):
    root = copy_tree("two_socket_cxl", tmp_path)
    set_file(root, "/sys/devices/system/edac/mc/mc1/ue_count", 1)
    checks = run_checks(read_machine(str(root)))
    (ecc,) = [c for c in checks if c.name == "ecc"]
    assert ecc.verdict == "error" and "mc1: 1" in ecc.message
    assert doctor_exit_code(checks) == 2


def test_an_edac_count_below_zero_is_no_count_not_failing_memory(tmp_path):
    root = copy_tree("two_socket_cxl", tmp_path)
    set_file(root, "/sys/devices/system/edac/mc/mc1/ue_count", -1)
    set_file(root, "/sys/devices/system/edac/mc/mc0/ce_count", 0)
    (ecc,) = [c for c in run_checks(read_machine(str(root))) if c.name == "ecc"]
    assert ecc.verdict == "ok", ecc.message


def test_a_tuned_machine_exits_zero(tmp_path):
    root = copy_tree("two_socket_cxl", tmp_path)
    set_file(root, "/proc/sys/kernel/numa_balancing", 0)
    set_file(root, "/sys/kernel/mm/numa/demotion_enabled", "false")
    set_file(root, "/sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never")
    set_file(root, "/sys/kernel/mm/transparent_hugepage/defrag", "always defer defer+madvise [madvise] never")
    set_file(root, "/sys/devices/system/edac/mc/mc0/ce_count", 0)
    checks = run_checks(read_machine(str(root)))
    assert {c.verdict for c in checks} <= {"ok", "info"}, format_checks(checks)
    assert doctor_exit_code(checks) == 0


def test_gpu_node_verdicts():
    m = read_machine(str(FIXTURES / "gpu_node"))
    v = verdicts(m)
    assert v["cpu governor"] == "warning"        # schedutil
    assert v["hugetlb"] == "warning"             # nothing reserved: hugetlb cases will be skipped
    assert v["numa balancing"] == "ok" and v["demotion"] == "ok" and v["thp"] == "ok"
    assert v["prefetchers"] == "info" and v["ecc"] == "info" and v["smt"] == "ok"


def test_vm_is_a_warning(cxl):
    (vm,) = [c for c in run_checks(with_env(cxl, hypervisor="KVM")) if c.name == "virtualisation"]
    assert vm.verdict == "warning" and "TLB" in vm.message


def test_numa_balancing_tiering_mode_is_named(cxl):
    (nb,) = [c for c in run_checks(with_env(cxl, numa_balancing=2)) if c.name == "numa balancing"]
    assert nb.verdict == "warning" and "tiering" in nb.message


def test_demotion_with_one_tier_is_only_info(cxl):
    one_tier = dataclasses.replace(cxl, memory_tiers={4: [0, 1, 2]})
    assert verdicts(one_tier)["demotion"] == "info"


def test_low_free_memory_on_a_node(cxl):
    nodes = dict(cxl.nodes)
    nodes[2] = dataclasses.replace(nodes[2], mem_free_bytes=512 << 20)
    v = verdicts(dataclasses.replace(cxl, nodes=nodes))
    assert v["memory node2"] == "warning" and v["memory node0"] == "ok"


def test_exit_codes():
    assert doctor_exit_code([]) == 0
    assert doctor_exit_code([Check("a", "ok", "."), Check("b", "info", ".")]) == 0
    assert doctor_exit_code([Check("a", "warning", "."), Check("b", "ok", ".")]) == 1
    assert doctor_exit_code([Check("a", "warning", "."), Check("b", "error", ".")]) == 2


@pytest.mark.parametrize("flag, xen, vendor, product, expected", [
    (False, None, None, None, None),
    (True, None, "QEMU", "Standard PC (Q35 + ICH9, 2009)", "KVM"),
    (True, None, "Microsoft Corporation", "Virtual Machine", "Hyper-V"),
    (True, None, None, None, "unknown"),
    (False, None, "Amazon EC2", "m7i.metal-24xl", None),    # bare-metal instance: DMI alone is no VM
    (False, "xen", None, None, "Xen"),
])
def test_identify_hypervisor(flag, xen, vendor, product, expected):
    assert identify_hypervisor(flag, xen, vendor, product) == expected


def test_this_machine():
    checks = run_checks(read_machine(probe_gpus=False))
    assert doctor_exit_code(checks) in (0, 1, 2)
    assert all(c.verdict in VERDICTS and "\n" not in c.message for c in checks)
