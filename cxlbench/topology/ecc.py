"""The machine's ECC state at one moment, and what changed between two moments.

A snapshot holds, as plain JSON-able data:
  edac   every EDAC memory controller: its mode (SECDED, ...), corrected (ce) and
         uncorrected (ue) error counts, and per DIMM/rank the same counts;
  cxl    every CXL memory device with its health where it can be read: the
         `cxl` tool (ndctl) asks the device (`cxl list -M -H`), which
         needs root and the tool; otherwise the reason it could not be read.

`changes(before, after)` names every count that moved, one sentence each: a
run whose counts moved carries them as warnings (cxlbench.runner.ecc). `describe`
is the one-line ECC state shown next to a tier's write-penalty ratios — the
state, never a claim that ECC caused a ratio.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from datetime import datetime, timezone
from typing import Any, Callable

from .cxl import read_memdevs, read_regions
from .edac import read_edac

#: CXL health fields that count errors (ndctl's `cxl list -H`): a change is a warning.
CXL_COUNTERS = ("volatile_errors", "pmem_errors", "dirty_shutdowns")
#: CXL health flags that are bad news when true.
CXL_FLAGS = ("maintenance_needed", "performance_degraded", "hw_replacement_needed",
             "media_data_lost", "media_persistence_lost", "media_data_loss_imminent")


def snapshot(root: str = "/", cxl_tool: Callable[[list[str]], str | None] | None = None) -> dict:
    """The EDAC counts and CXL memdev health now. cxl_tool(names) -> `cxl list -H`
    JSON text (tests pass one); by default the real tool, and only on the live
    machine (root "/")."""
    edac = [{"name": c.name, "mode": c.mode, "ce": c.ce_count, "ue": c.ue_count,
             "dimms": {d: {"ce": ce, "ue": ue} for d, (ce, ue) in c.dimms.items()}}
            for c in read_edac(root)]
    names = [m.name for m in read_memdevs(root)]
    health: dict[str, dict] = {}
    reason = None
    if names:
        tool = cxl_tool or (_run_cxl_tool if root in ("/", "") else None)
        text = tool(names) if tool else None
        if text is None:
            reason = ("the `cxl` tool (ndctl) is not installed or not permitted"
                      if tool else "not read from a fixture tree")
        else:
            health = parse_cxl_list(text)
    cxl = [{"name": n, "health": health.get(n),
            "reason": None if n in health else (reason or "the device reported no health")}
           for n in names]
    return {"taken": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "edac": edac, "cxl": cxl}


def _run_cxl_tool(names: list[str]) -> str | None:
    exe = shutil.which("cxl")
    if exe is None:
        return None
    try:
        # every memdev with its health (-M: memdevs, -H: health); filtered by name after
        out = subprocess.run([exe, "list", "-M", "-H"], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def parse_cxl_list(text: str) -> dict[str, dict]:
    """memdev -> its "health" object, from `cxl list -H` JSON (a list, or one object)."""
    try:
        data = json.loads(text or "[]")
    except json.JSONDecodeError:
        return {}
    items = data if isinstance(data, list) else [data]
    out = {}
    for item in items:
        if isinstance(item, dict) and item.get("memdev") and isinstance(item.get("health"), dict):
            out[item["memdev"]] = item["health"]
    return out


def changes(before: dict, after: dict) -> list[str]:
    """One sentence per error count that moved between two snapshots (and per CXL
    health flag that turned on)."""
    out: list[str] = []
    old = {c["name"]: c for c in before.get("edac", [])}
    now = {c["name"] for c in after.get("edac", [])}
    out += [f"EDAC {name}: the controller left EDAC during the run (its counts last read "
            f"{old[name]['ce']} corrected, {old[name]['ue']} uncorrected)" for name in old if name not in now]
    for c in after.get("edac", []):
        b = old.get(c["name"])
        if b is None:
            continue
        for key, what in (("ue", "uncorrected"), ("ce", "corrected")):
            if (c[key] is None) != (b[key] is None):
                out.append(f"EDAC {c['name']}: its {what} count could not be read "
                           f"{'after' if c[key] is None else 'before'} the run ({b[key]} before, {c[key]} after)")
            elif c[key] != b[key]:
                dimms = [f"{d} {b['dimms'].get(d, {}).get(key, 0)}→{v[key]}"
                         for d, v in c.get("dimms", {}).items()
                         if v[key] != b["dimms"].get(d, {}).get(key, 0)]
                where = f" ({', '.join(dimms)})" if dimms else ""
                out.append(f"EDAC {c['name']}: {what} memory errors went from {b[key]} to "
                           f"{c[key]}{where}")
    old_cxl = {m["name"]: m.get("health") or {} for m in before.get("cxl", [])}
    for m in after.get("cxl", []):
        h, b = m.get("health") or {}, old_cxl.get(m["name"], {})
        for key in CXL_COUNTERS:
            if key in h and key in b and h[key] != b[key]:
                out.append(f"CXL {m['name']}: {key.replace('_', ' ')} went from {b[key]} to {h[key]}")
        for key in CXL_FLAGS:
            if h.get(key) and not b.get(key):
                out.append(f"CXL {m['name']}: health reports {key.replace('_', ' ')}")
    return out


def describe(snap: dict, tier: Any = None, machine: Any = None) -> str:
    """One line: the ECC state that goes beside a tier's figures. For a CXL tier,
    the health of the memdevs behind its region (when the machine says which)."""
    parts = []
    if getattr(tier, "kind", None) == "cxl":
        devs = _memdevs_of(tier, machine, snap)
        for m in snap.get("cxl", []):
            if devs and m["name"] not in devs:
                continue
            h = m.get("health")
            if h is None:
                parts.append(f"CXL {m['name']} health unknown ({m.get('reason')})")
            else:
                counts = ", ".join(f"{k.replace('_', ' ')} {h[k]}" for k in CXL_COUNTERS if k in h)
                flags = [k.replace("_", " ") for k in CXL_FLAGS if h.get(k)]
                parts.append(f"CXL {m['name']}: {counts or 'no error counts'}"
                             + (f"; {', '.join(flags)}" if flags else ""))
        if not parts:
            parts.append("CXL device health unknown (no memdev found)")
    edac = snap.get("edac", [])
    if not edac:
        parts.append("EDAC: no memory controllers (a VM or no EDAC driver): ECC state unknown")
    else:
        modes = sorted({c["mode"] for c in edac if c.get("mode")})
        ce, ue = (sum(c[k] for c in edac if c[k] is not None) for k in ("ce", "ue"))
        unread = sum(c["ce"] is None or c["ue"] is None for c in edac)
        parts.append(f"EDAC {'/'.join(modes) or 'mode unknown'} on {len(edac)} controller(s): "
                     f"{ce} corrected, {ue} uncorrected errors"
                     + (f" ({unread} controller(s) with a count that could not be read)" if unread else ""))
    return "; ".join(parts)


def _memdevs_of(tier, machine, snap) -> set[str]:
    if machine is None or getattr(tier, "node", None) is None:
        return set()
    regions = getattr(machine, "cxl_regions", None) or read_regions(getattr(machine, "root", "/"))
    return {d for r in regions if r.numa_node == tier.node for d in r.memdevs}
