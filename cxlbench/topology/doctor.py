"""`doctor`: is this machine in a state to give trustworthy figures?

Modelled on `pyperf system show`: a list of checks, each a verdict and one
line, and an exit code from the worst verdict. Verdicts: ok; info (worth
knowing, changes nothing); warning (figures may move, or cases will be
skipped); error (figures from this machine are suspect).
"""
from __future__ import annotations

from dataclasses import dataclass

from .model import Machine
from .nodes import NO_NODES

VERDICTS = ("ok", "info", "warning", "error")
LOW_FREE_FRACTION = 0.10          # below this share of a node free, reclaim runs during measurement
LOW_FREE_BYTES = 1 << 30          # or below 1 GiB: large working sets won't fit


@dataclass
class Check:
    name: str
    verdict: str               # one of VERDICTS
    message: str

    def show(self) -> str:
        return f"{self.verdict.upper():8} {self.name}: {self.message}"


def gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def check_vm(m: Machine) -> Check:
    env = m.environment
    if env.hypervisor is None:
        return Check("virtualisation", "ok", "bare metal (no hypervisor flag)")
    return Check("virtualisation", "warning",
                 f"running under a hypervisor ({env.hypervisor}): nested paging inflates TLB-miss "
                 "latency; compare only with runs on the same kind of VM")


def check_thp(m: Machine) -> Check:
    mode = m.environment.thp_enabled
    if mode == "madvise":
        return Check("thp", "ok", "THP madvise: only buffers that ask get huge pages")
    if mode == "always":
        return Check("thp", "warning", "THP always: 4 KiB cases rely on MADV_NOHUGEPAGE being honoured "
                     "(each sample records the page size found)")
    if mode == "never":
        return Check("thp", "warning", "THP never: the 2 MiB THP cases will be skipped")
    return Check("thp", "info", "THP mode not exposed by this kernel")


def check_thp_defrag(m: Machine) -> Check:
    mode = m.environment.thp_defrag
    if mode in ("madvise", "defer+madvise"):
        return Check("thp defrag", "ok", f"THP defrag {mode}: buffers that ask compact on fault")
    if mode == "always":
        return Check("thp defrag", "warning", "THP defrag always: every fault may stall for compaction, "
                     "slowing set-up and other processes")
    if mode in ("defer", "never"):
        return Check("thp defrag", "info", f"THP defrag {mode}: faults don't compact, so huge-page "
                     "coverage may be partial on fragmented memory (coverage is verified per case)")
    return Check("thp defrag", "info", "THP defrag mode not exposed by this kernel")


def check_numa_balancing(m: Machine) -> Check:
    value = m.environment.numa_balancing
    if value is None:
        return Check("numa balancing", "ok", "not built into this kernel")
    if value == 0:
        return Check("numa balancing", "ok", "off")
    mode = "memory tiering (promotes hot pages)" if value & 2 else "on"
    return Check("numa balancing", "warning", f"{mode}: migrates pages under a benchmark, so placement "
                 "verified before timing may not hold; sysctl kernel.numa_balancing=0")


def check_demotion(m: Machine) -> Check:
    if not m.environment.demotion_enabled:
        state = "off" if m.environment.demotion_enabled is False else "not exposed by this kernel"
        return Check("demotion", "ok", state)
    if len(m.memory_tiers) < 2:
        return Check("demotion", "info", "on, but all memory is in one tier, so there is nowhere to demote to")
    return Check("demotion", "warning", "on: under memory pressure reclaim moves pages to slower tiers; "
                 "echo false > /sys/kernel/mm/numa/demotion_enabled")


def check_governor(m: Machine) -> Check:
    env = m.environment
    clock = f" at {env.cpu_mhz:.0f} MHz" if env.cpu_mhz else ""
    if env.governor is None:
        return Check("cpu governor", "info", f"no cpufreq governor exposed (VM or firmware-managed clocks){clock}")
    if env.governor == "performance":
        return Check("cpu governor", "ok", f"performance{clock}")
    return Check("cpu governor", "warning", f"{env.governor}{clock}: clocks ramp with load, so early samples "
                 "run slower; cpupower frequency-set -g performance")


def check_smt(m: Machine) -> Check:
    cpu = m.cpu
    if cpu.smt_active:
        return Check("smt", "info", f"on ({cpu.threads} threads on {cpu.cores} cores): sibling threads share "
                     "a core's caches and load ports")
    control = m.environment.smt_control or "not exposed"
    return Check("smt", "ok", f"one thread per core (smt control: {control})")


def check_prefetcher(m: Machine) -> Check:
    if m.environment.prefetcher_readable:
        return Check("prefetchers", "ok", "MSRs readable: hardware prefetcher state can be recorded")
    return Check("prefetchers", "info", "state unreadable (needs the msr module and root); pointer chases "
                 "use random orders that prefetchers can't follow")


def check_hugetlb(m: Machine) -> Check:
    reserved = [p for p in m.hugepages.values() if p.total > 0]
    if not reserved:
        return Check("hugetlb", "warning", "no hugetlb pages reserved: hugetlb cases will be skipped "
                     "(echo N > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages)")
    pools = ", ".join(f"{p.total} x {size_name(p.page_bytes)} ({p.free} free)" for p in reserved)
    return Check("hugetlb", "ok", f"reserved: {pools}")


def size_name(n: int) -> str:
    return f"{n >> 30} GiB" if n >= 1 << 30 else f"{n >> 20} MiB"


def check_edac(m: Machine) -> Check:
    if not m.edac:
        return Check("ecc", "info", "no EDAC memory controllers (VM or no EDAC driver): ECC errors can't be seen")
    # a count below 0 is no count (a driver's or a fixture's -1), not failing memory
    ue = [f"{c.name}: {c.ue_count}" for c in m.edac if (c.ue_count or 0) > 0]
    ce = [f"{c.name}: {c.ce_count}" for c in m.edac if (c.ce_count or 0) > 0]
    if ue:
        return Check("ecc", "error", f"uncorrected memory errors ({', '.join(ue)}): memory is failing, "
                     "figures from this machine are suspect")
    if ce:
        return Check("ecc", "warning", f"corrected memory errors ({', '.join(ce)}): retries and scrubbing "
                     "can slow memory; watch whether they grow")
    return Check("ecc", "ok", f"no errors on {len(m.edac)} memory controller(s)")


def check_node_memory(m: Machine) -> list[Check]:
    if not m.nodes:
        return [Check("numa", "error", NO_NODES)]
    checks = []
    for node in (n for _, n in sorted(m.nodes.items()) if n.has_memory):
        free, total = node.mem_free_bytes, node.mem_total_bytes
        low = free < LOW_FREE_BYTES or free < LOW_FREE_FRACTION * total
        verdict = "warning" if low else "ok"
        note = ": large working sets will be refused and reclaim may run while timing" if low else ""
        checks.append(Check(f"memory node{node.id}", verdict, f"{gib(free)} free of {gib(total)}{note}"))
    return checks


def run_checks(machine: Machine) -> list[Check]:
    """Every check, in a stable order."""
    return [
        check_vm(machine), check_thp(machine), check_thp_defrag(machine),
        check_numa_balancing(machine), check_demotion(machine), check_governor(machine),
        check_smt(machine), check_prefetcher(machine), check_hugetlb(machine), check_edac(machine),
        *check_node_memory(machine),
    ]


def doctor_exit_code(checks: list[Check]) -> int:
    """0 when nothing needs attention (ok/info), 1 with warnings, 2 with errors."""
    verdicts = {c.verdict for c in checks}
    return 2 if "error" in verdicts else 1 if "warning" in verdicts else 0


def format_checks(checks: list[Check]) -> str:
    return "\n".join(c.show() for c in checks)
