"""format_topology: the machine and its tiers as a terminal page (`cxlbench topology`)."""
from __future__ import annotations

from .model import Cache, Machine, Node, Tier
from cxlbench.units import format_cpulist


def human(n: int | None) -> str:
    """Binary-unit size for people: 34359738368 -> "32 GiB"."""
    if n is None:
        return "?"
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} B"


def table(rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def cache_name(c: Cache) -> str:
    suffix = {"Data": "d", "Instruction": "i"}.get(c.kind, "")
    shared = f" x{len(c.shared_cpus)} CPUs" if len(c.shared_cpus) > 1 else ""
    return f"L{c.level}{suffix} {human(c.size_bytes)}{shared}"


def header(m: Machine) -> list[str]:
    env, cpu = m.environment, m.cpu
    vm = f"VM ({env.hypervisor} hypervisor)" if env.hypervisor else "bare metal"
    where = "" if m.root == "/" else f" [read from {m.root}]"
    line = cpu.caches[0].line_bytes if cpu.caches else 64
    return [
        f"Machine  {m.hostname}: Linux {env.kernel}, {vm}{where}",
        f"CPU      {cpu.model} ({cpu.vendor}): {cpu.sockets} socket(s), {cpu.cores} cores, "
        f"{cpu.threads} threads, SMT {'on' if cpu.smt_active else 'off'}",
        f"Caches   {', '.join(cache_name(c) for c in cpu.caches) or 'not exposed'}; line {line} B",
    ]


def node_row(n: Node, ids: list[int]) -> list[str]:
    return [str(n.id), format_cpulist(n.cpus) or "-", human(n.mem_total_bytes), human(n.mem_free_bytes),
            str(n.memory_tier) if n.memory_tier is not None else "-",
            " ".join(str(n.distances.get(i, "-")) for i in ids)]


def nodes_section(m: Machine) -> list[str]:
    ids = sorted(m.nodes)
    rows = [["node", "cpus", "memory", "free", "tier", "distance to " + " ".join(map(str, ids))]]
    return ["NUMA nodes"] + table(rows + [node_row(m.nodes[i], ids) for i in ids])


def hmat_section(m: Machine) -> list[str]:
    lines = []
    for n in (m.nodes[i] for i in sorted(m.nodes)):
        for a in n.hmat:
            lines.append(f"  node {n.id} access{a.access_class} from node(s) {format_cpulist(a.initiators) or '?'}: "
                         f"read {a.read_latency_ns} ns {a.read_bandwidth_MBps} MB/s, "
                         f"write {a.write_latency_ns} ns {a.write_bandwidth_MBps} MB/s")
    return ["Firmware-advertised (HMAT)"] + lines if lines else []


def cxl_section(m: Machine) -> list[str]:
    if not (m.cxl_memdevs or m.cxl_regions):
        return []
    lines = ["CXL"]
    for d in m.cxl_memdevs:
        lines.append(f"  {d.name}: {human(d.ram_bytes)} ram, {human(d.pmem_bytes)} pmem, serial {d.serial}, "
                     f"firmware {d.firmware}, host bridge on node {d.numa_node}")
    for r in m.cxl_regions:
        dax = ", ".join(f"{k}: {v or 'unbound'}" for k, v in r.dax_devices.items()) or "no dax device"
        node = f"node {r.numa_node}" if r.numa_node is not None else "no node"
        lines.append(f"  {r.name}: {human(r.size_bytes)} {r.mode}, {r.interleave_ways}-way x "
                     f"{r.interleave_granularity} B over {', '.join(r.memdevs) or '?'} -> {node} ({dax})")
    return lines


def memory_section(m: Machine) -> list[str]:
    env = m.environment
    pools = []
    for size, pool in m.hugepages.items():
        per_node = ", ".join(f"node{n.id} {n.hugepages[size].total}/{n.hugepages[size].free}"
                             for n in m.nodes.values() if size in n.hugepages)
        pools.append(f"{human(size)}: {pool.total} reserved, {pool.free} free ({per_node})")
    return [f"Huge pages  {'; '.join(pools) or 'no hugetlb pools'}",
            f"THP         {env.thp_enabled}, defrag {env.thp_defrag}"]


def edac_section(m: Machine) -> list[str]:
    if not m.edac:
        return ["ECC         no EDAC memory controllers"]
    def count(v: int | None) -> str:
        return "?" if v is None else str(v)          # a count the driver's file did not give
    return ["ECC         " + "; ".join(f"{c.name} {c.mode or ''} CE {count(c.ce_count)} UE {count(c.ue_count)}"
                                      .replace("  ", " ") for c in m.edac)]


def devices_section(m: Machine) -> list[str]:
    lines = []
    for g in m.gpus:
        link = f"PCIe gen{g.pcie_gen} x{g.pcie_width}" if g.pcie_gen else "PCIe link ?"
        ecc = {True: "ECC on", False: "ECC off", None: "ECC ?"}[g.ecc_enabled]
        lines.append(f"  gpu {g.index}: {g.name}, {human(g.memory_bytes) if g.memory_bytes else 'memory ?'}, "
                     f"{ecc}, {link}, node {g.numa_node}, via {g.source}")
    for b in m.block_devices:
        kind = "NVMe" if b.is_nvme else "rotational" if b.rotational else "non-rotational"
        lines.append(f"  {b.name}: {b.model or 'model ?'}, {human(b.size_bytes)}, {kind}, node {b.numa_node}")
    return ["Devices"] + lines if lines else []


def environment_section(m: Machine) -> list[str]:
    env = m.environment
    mhz = f" {env.cpu_mhz:.0f} MHz" if env.cpu_mhz else ""
    demotion = {True: "on", False: "off", None: "?"}[env.demotion_enabled]
    return [f"Settings    numa_balancing {env.numa_balancing}, demotion {demotion}, "
            f"governor {env.governor or 'none'}{mhz}, smt {env.smt_control}, "
            f"prefetcher MSRs {'readable' if env.prefetcher_readable else 'unreadable'}"]


def tiers_section(tiers: list[Tier]) -> list[str]:
    rows = [["tier", "kind", "where", "capacity", "free", "why"]]
    for t in tiers:
        where = (f"node {t.node}" if t.node is not None else f"gpu {t.gpu}" if t.gpu is not None
                 else t.path or "?")
        # 0 bytes on a tier means "not known" (a GPU seen only on the PCI bus), not empty.
        size = [human(n) if n or t.kind != "hbm" else "?" for n in (t.capacity_bytes, t.free_bytes)]
        rows.append([t.name, t.kind, where, *size, t.evidence])
    return ["Tiers"] + table(rows)


def format_topology(machine: Machine, tiers: list[Tier]) -> str:
    sections = [header(machine), nodes_section(machine), hmat_section(machine), cxl_section(machine),
                memory_section(machine) + edac_section(machine) + environment_section(machine),
                devices_section(machine), tiers_section(tiers)]
    return "\n\n".join("\n".join(s) for s in sections if s)
