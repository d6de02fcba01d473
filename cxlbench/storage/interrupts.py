"""Which CPUs take a block device's completion interrupts.

A QD1 read's latency includes its completion: the interrupt lands on one CPU,
and when that is not the CPU the reader waits on, the wake-up crosses CPUs. On a
virtio disk with one request queue the difference is large (fio on this VM: 62-69
us pinned to the CPU taking the queue's interrupts, 94-98 us pinned to the other),
so a storage figure says which CPU issued it and which took the completions, and
the family issues from a completion CPU unless told otherwise.

The device's MSI/MSI-X vectors are the entries of msi_irqs in its PCI function
(found by walking up from /sys/block/<disk>/device); /proc/interrupts counts each
vector per CPU, /proc/irq/<n>/effective_affinity_list says where it may land.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass
class Irq:
    number: int
    name: str                                  # the action, e.g. virtio1-req.0, nvme0q3
    affinity: list[int] = field(default_factory=list)
    counts: dict[int, int] = field(default_factory=dict)     # CPU -> interrupts so far


def completion_irqs(disk: str | None, root: str = "/") -> list[Irq]:
    """The device's interrupt vectors with their affinity and counts; [] when sysfs
    does not say (no disk, no PCI function, no MSI)."""
    if not disk:
        return []
    where = os.path.realpath(os.path.join(root, "sys/block", disk, "device"))
    while where.startswith(os.path.join(root, "sys/devices")) and not os.path.isdir(
            os.path.join(where, "msi_irqs")):
        where = os.path.dirname(where)
    try:
        numbers = sorted(int(n) for n in os.listdir(os.path.join(where, "msi_irqs")))
    except (OSError, ValueError):
        return []
    table = interrupt_counts(root)
    out = []
    for n in numbers:
        name, counts = table.get(n, ("", {}))
        if name.endswith(("-config",)):         # virtio's configuration-change vector
            continue
        out.append(Irq(n, name, _affinity(n, root), counts))
    return out


def interrupt_counts(root: str = "/") -> dict[int, tuple[str, dict[int, int]]]:
    """/proc/interrupts: irq -> (its action's name, CPU -> count)."""
    try:
        with open(os.path.join(root, "proc/interrupts")) as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    if not lines:
        return {}
    cpus = [int(c[3:]) for c in lines[0].split() if c.startswith("CPU")]
    out = {}
    for line in lines[1:]:
        head, _, rest = line.partition(":")
        if not head.strip().isdigit():
            continue
        fields = rest.split()
        counts = {cpu: int(v) for cpu, v in zip(cpus, fields) if v.isdigit()}
        out[int(head)] = (fields[-1] if len(fields) > len(cpus) else "", counts)
    return out


def _affinity(irq: int, root: str) -> list[int]:
    from cxlbench.topology.sysfs import parse_cpulist
    for name in ("effective_affinity_list", "smp_affinity_list"):
        try:
            with open(os.path.join(root, "proc/irq", str(irq), name)) as f:
                return parse_cpulist(f.read().strip())
        except OSError:
            continue
    return []


def taken(before: list[Irq], after: list[Irq]) -> dict[int, int]:
    """CPU -> completions it took between two readings, over all the device's vectors."""
    prior = {i.number: i.counts for i in before}
    out: dict[int, int] = {}
    for i in after:
        for cpu, n in i.counts.items():
            d = n - prior.get(i.number, {}).get(cpu, 0)
            if d:
                out[cpu] = out.get(cpu, 0) + d
    return out


def issuing_cpu(cpus: list[int], irqs: list[Irq]) -> tuple[int, str]:
    """The CPU to issue I/O from, of `cpus`, and why: the one that has taken most of
    the device's completions so far (where its queue's interrupts land), else the first."""
    load = {c: sum(i.counts.get(c, 0) for i in irqs) for c in cpus}
    best = max(cpus, key=lambda c: (load[c], -cpus.index(c)))
    if load[best] > 0:
        return best, f"CPU {best} takes the device's completions ({load[best]} so far)"
    return cpus[0], "no completion counts for this device: the initiator's first CPU"
