"""A machine's hardware configuration, named from what it is.

Machines of one configuration should measure alike: the fleet report groups them
and looks for the odd one out. When nobody names the configuration (`--config`),
its name is derived from the machine's identity as the gate reads it (CPU model,
sockets, cores, NUMA layout, tiers with their capacities, GPUs; the kernel left
out, as history does): a readable stem, then a digest of the whole identity so
two configurations that read alike in the stem still differ.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

from cxlbench.analysis.machine import profile


def derive(meta: dict[str, Any]) -> str:
    """`<cpu>-<sockets>s-<tier kinds and counts>-<digest>`, e.g.
    `xeon-8480-2s-cxl1-ddr2-3f2a9c` (the run.json record, or as much of it as is known)."""
    ident = dict(profile(meta).identity)
    ident.pop("kernel", None)
    for key in ("numa_nodes", "tiers"):
        ident[key] = [(kind, _octave(gib)) for kind, gib in ident.get(key) or []]
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:6]
    kinds: dict[str, int] = {}
    for kind, _ in ident.get("tiers") or []:
        kinds[str(kind)] = kinds.get(str(kind), 0) + 1
    stem = [_cpu_stem(ident.get("cpu_model")), f"{ident.get('sockets') or 1}s",
            *(f"{k}{n}" for k, n in sorted(kinds.items()))]
    return "-".join(p for p in stem if p) + f"-{digest}"


def _octave(gib: float | None) -> float | None:
    """A capacity to the nearest half power of two (…, 5.7, 8, 11.3, 16, 22.6, 32 GiB):
    a balloon or a firmware reservation moves MemTotal by a few percent between runs
    (8.09 and 8.21 GiB on one VM, minutes apart), which must not make a machine a new
    configuration, while a memory twice the size still does."""
    if not gib:
        return gib
    return round(2 ** (round(2 * math.log2(gib)) / 2), 1)


_NOISE = re.compile(r"\(r\)|\(tm\)|\bcpu\b|\bprocessor\b|@.*$|\bgen\w*\b|\bcore\b|\d+-core|intel|amd", re.I)


def _cpu_stem(model: Any) -> str:
    """The model's distinctive words: 'Intel(R) Xeon(R) Platinum 8480+ @ 2.0GHz' -> 'xeon-platinum-8480'."""
    text = _NOISE.sub(" ", str(model or "cpu"))
    words = [w for w in re.split(r"[^A-Za-z0-9]+", text.lower()) if w]
    return "-".join(words[:3]) or "cpu"
