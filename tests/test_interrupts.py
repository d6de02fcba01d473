"""Which CPUs take a disk's completions, read from a fixture sysfs/procfs tree (a
virtio disk whose request queue's interrupts all land on CPU 1, as on our VMs),
and the CPU the storage family issues from because of it."""
import os

from cxlbench.storage.interrupts import completion_irqs, issuing_cpu, taken

PCI = "sys/devices/pci0000:00/0000:00:02.0"


def tree(tmp_path, req_counts=(0, 770905)):
    root = tmp_path / "root"
    (root / PCI / "virtio1").mkdir(parents=True)
    (root / PCI / "msi_irqs").mkdir()
    for n in ("35", "36"):
        (root / PCI / "msi_irqs" / n).write_text("msix\n")
    (root / "sys/block/vda").mkdir(parents=True)
    os.symlink(root / PCI / "virtio1", root / "sys/block/vda/device")
    (root / "proc/irq/36").mkdir(parents=True)
    (root / "proc/irq/36/effective_affinity_list").write_text("1\n")
    (root / "proc/interrupts").write_text(
        "           CPU0       CPU1\n"
        " 35:          0          1 PCI-MSIX-0000:00:02.0   0-edge      virtio1-config\n"
        f" 36:   {req_counts[0]:8d}   {req_counts[1]:8d} PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0\n"
        "NMI:          0          0   Non-maskable interrupts\n")
    return str(root)


def test_the_disks_request_queue_and_where_its_interrupts_land(tmp_path):
    [irq] = completion_irqs("vda", tree(tmp_path))          # the config vector is not a completion
    assert (irq.number, irq.name, irq.affinity, irq.counts) == (36, "virtio1-req.0", [1], {0: 0, 1: 770905})


def test_io_is_issued_from_the_cpu_that_takes_the_completions(tmp_path):
    irqs = completion_irqs("vda", tree(tmp_path))
    cpu, why = issuing_cpu([0, 1], irqs)
    assert cpu == 1 and "takes the device's completions" in why
    assert issuing_cpu([0], irqs)[0] == 0                    # not among the initiator's CPUs: its own


def test_without_counts_the_first_cpu_and_says_so(tmp_path):
    assert issuing_cpu([2, 3], []) == (2, "no completion counts for this device: the initiator's first CPU")
    assert completion_irqs("vdz", tree(tmp_path)) == [] and completion_irqs(None) == []


def test_completions_taken_during_a_case_per_cpu(tmp_path):
    before = completion_irqs("vda", tree(tmp_path / "a", (5, 100)))
    after = completion_irqs("vda", tree(tmp_path / "b", (5, 2100)))
    assert taken(before, after) == {1: 2000}
