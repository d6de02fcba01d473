"""What a run's machine is, split three ways, from run.json alone.

- identity: what must match for two runs to be compared by the gate (CPU model,
  sockets, cores, the NUMA node and tier layout with capacities, GPU models,
  kernel). A mismatch makes the gate's inputs unusable (exit 2).
- context: settings that move figures and are shown next to a comparison, but
  may differ (THP, governor, NUMA balancing, SMT, hypervisor, drivers, versions
  of the software that measured).
- info: everything else worth showing (hostname, DMI product, CPU MHz, ...).

Capacities are compared with a tolerance (firmware and kernel reservations move
MemTotal by a few hundred MiB between boots) and shown rounded.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cxlbench.units import natural_key

GiB = 2**30
CAPACITY_TOLERANCE = 0.10   # relative; capacities closer than this are the same


@dataclass
class Profile:
    identity: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Difference:
    field: str
    kind: str                  # identity / context / info
    values: list[Any]          # one per run, in order

    def __str__(self) -> str:
        return f"{self.field}: " + " vs ".join(_show(v) for v in self.values)


def _show(v: Any) -> str:
    if v is None:
        return "unknown"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_show(x) for x in v) + "]" if v else "none"
    return str(v)


def gib(n: Any) -> float | None:
    """Bytes as GiB, 3 significant figures."""
    try:
        n = float(n)
    except (TypeError, ValueError):
        return None
    if n <= 0:
        return 0.0
    return float(f"{n / GiB:.3g}")


def machine_record(meta: dict[str, Any]) -> dict[str, Any]:
    m = meta.get("machine")
    return m if isinstance(m, dict) else {}


def environment(meta: dict[str, Any]) -> dict[str, Any]:
    env = meta.get("environment")
    if isinstance(env, dict) and env:
        return env
    env = machine_record(meta).get("environment")
    return env if isinstance(env, dict) else {}


def tiers(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's tiers (as recorded), else what its cases targeted."""
    recorded = meta.get("tiers")
    if isinstance(recorded, list) and recorded:
        return [t for t in recorded if isinstance(t, dict) and t.get("name")]
    seen: dict[str, dict] = {}
    for c in meta.get("cases", []) or []:
        if c.get("target") and c["target"] not in seen:
            seen[c["target"]] = {"name": c["target"], "kind": c.get("tier_kind")}
    return list(seen.values())


def profile(meta: dict[str, Any]) -> Profile:
    m = machine_record(meta)
    cpu = m.get("cpu") or {}
    env = environment(meta)
    versions = meta.get("versions") or {}
    nodes = m.get("nodes") or {}
    node_list = sorted(nodes.values(), key=lambda n: n.get("id", 0)) if isinstance(nodes, dict) else []
    gpus = sorted(m.get("gpus") or [], key=lambda g: g.get("index", 0))
    tier_list = sorted(tiers(meta), key=lambda t: (str(t.get("kind")), natural_key(t.get("name", ""))))

    identity = {
        "cpu_model": cpu.get("model"),
        "sockets": cpu.get("sockets"),
        "cores": cpu.get("cores"),
        "numa_nodes": [("cpu" if n.get("cpus") else "cpu-less", gib(n.get("mem_total_bytes")))
                       for n in node_list] or None,
        "tiers": [(t.get("kind"), gib(t.get("capacity_bytes")) if t.get("kind") != "nvme" else None)
                  for t in tier_list] or None,
        "gpus": [g.get("name") for g in gpus],
        "kernel": env.get("kernel") or versions.get("kernel"),
    }
    hp = sorted({int(size) for n in node_list for size, pool in (n.get("hugepages") or {}).items()
                 if (pool or {}).get("total")})
    context = {
        "thp_enabled": env.get("thp_enabled"),
        "thp_defrag": env.get("thp_defrag"),
        "numa_balancing": env.get("numa_balancing"),
        "demotion_enabled": env.get("demotion_enabled"),
        "governor": env.get("governor"),
        "smt_control": env.get("smt_control"),
        "threads": cpu.get("threads"),
        "hypervisor": env.get("hypervisor"),
        "hugetlb_reserved": [f"{s >> 20} MiB" if s < GiB else f"{s >> 30} GiB" for s in hp],
        "ecc": sorted({e.get("mode") or "unknown" for e in (m.get("edac") or [])}) or None,
        "gpu_driver": sorted({g.get("driver") for g in gpus if g.get("driver")}) or None,
        "gpu_ecc": [g.get("ecc_enabled") for g in gpus] or None,
        "cxlbench": versions.get("cxlbench"),
        "compiler": versions.get("compiler"),
        "python": versions.get("python"),
        "numpy": versions.get("numpy"),
        "torch": versions.get("torch"),
        "tier_declarations": sorted(t["declared"] for t in tier_list if t.get("declared")) or None,
    }
    info = {
        "hostname": meta.get("hostname") or m.get("hostname"),
        "machine_name": meta.get("machine_name"),
        "dmi_product": env.get("dmi_product"),
        "cpu_mhz": env.get("cpu_mhz"),
        "prefetcher_readable": env.get("prefetcher_readable"),
        "label": meta.get("label"),
        "suite": (meta.get("suite") or {}).get("name") if isinstance(meta.get("suite"), dict)
        else meta.get("suite"),
    }
    return Profile(identity, context, info)


def _same(field_name: str, a: Any, b: Any) -> bool:
    if field_name in ("numa_nodes", "tiers") and isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return False
        for x, y in zip(a, b):
            if x[0] != y[0]:
                return False
            if x[1] is not None and y[1] is not None and x[1] != y[1]:
                big = max(x[1], y[1])
                if big and abs(x[1] - y[1]) / big > CAPACITY_TOLERANCE:
                    return False
        return True
    return a == b


def differences(profiles: list[Profile], ignore: tuple[str, ...] | list[str] = ()) -> list[Difference]:
    """Fields whose value differs between the first profile and any other."""
    out: list[Difference] = []
    if len(profiles) < 2:
        return out
    for kind in ("identity", "context", "info"):
        first = getattr(profiles[0], kind)
        for key in first:
            if kind == "identity" and key in ignore:
                continue
            values = [getattr(p, kind).get(key) for p in profiles]
            if not all(_same(key, values[0], v) for v in values[1:]):
                out.append(Difference(key, kind, values))
    return out


IDENTITY_FIELDS = ("cpu_model", "sockets", "cores", "numa_nodes", "tiers", "gpus", "kernel")


def restricted(allowed: str) -> str:
    """What a narrowed CPU affinity does to a run, for the report and the terminal alike."""
    return (f"This process could run only on CPUs {allowed} (its affinity: taskset, a cpuset or a scheduler's "
            f"binding): each node is measured from its allowed CPUs alone; thread counts above them, and a node "
            f"with none, are left out of the plan.")


def warnings(meta: dict[str, Any]) -> list[str]:
    """Environment warnings for a report: what makes this machine's figures
    differ from a quiet bare-metal machine, plus the run's own warnings."""
    env = environment(meta)
    out: list[str] = []
    if env.get("hypervisor"):
        out.append(f"Virtual machine ({env['hypervisor']}): TLB misses go through nested page tables; "
                   "latency at large working sets reads higher than on bare metal.")
    thp = env.get("thp_enabled")
    if thp and thp != "always":
        out.append(f"Transparent huge pages: {thp} — only buffers that ask (madvise) get huge pages.")
    if env.get("governor") and env["governor"] != "performance":
        out.append(f"CPU frequency governor is {env['governor']!s}, not performance: clocks may move between runs.")
    if env.get("allowed_cpus"):
        out.append(restricted(env["allowed_cpus"]))
    if env.get("memory_limit_bytes"):
        out.append(f"This process's memory is limited to {env['memory_limit_bytes'] / 2**30:.1f} GiB by its cgroup "
                   f"(a container's, a pod's, a job's; {(env.get('memory_limit_free_bytes') or 0) / 2**30:.1f} GiB "
                   f"free when the machine was read): cases sized past it were skipped, not measured.")
    if env.get("numa_balancing"):
        out.append("Automatic NUMA balancing is on: the kernel may migrate pages during a case.")
    if env.get("demotion_enabled"):
        out.append("Memory demotion is enabled: pages may move to a lower tier under pressure.")
    if env.get("prefetcher_readable") is False:
        out.append("Hardware prefetcher state cannot be read (no MSR access).")
    for e in machine_record(meta).get("edac") or []:
        if e.get("ue_count"):
            out.append(f"EDAC {e.get('name')}: {e['ue_count']} uncorrectable memory errors recorded.")
    for w in meta.get("warnings") or []:
        out.append(str(w))
    return out
