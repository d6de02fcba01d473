"""The table `cxlbench run` ends with: per tier, each family's headline figures
(idle latency at the largest working set, peak read and triad bandwidth, the QD1
read latency of a disk, tokens/s of a training placement ...), each with its spread.

The figures are the ones the run's families declared (analysis.headlines), so a
new family's headline appears here without a line of this file changing.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from cxlbench.analysis.headlines import figures
from cxlbench.units import tier_order


def tier_summary(samples: pd.DataFrame, meta: dict[str, Any]) -> str:
    if samples.empty:
        return "no samples were measured"
    found = figures(samples, meta)
    lines = []
    for tier in sorted(set(samples["target"]), key=tier_order):
        lines.append(tier)
        mine = [f for f in found if f.tier == tier]
        lines += [f"  {f.label:<44}: {f.text()}" for f in mine]
        if not mine:
            lines.append("  (no summary figure for what ran here; the report has every figure)")
    steps = any(h.get("spread") == "samples" for fam in (meta.get("families") or {}).values()
                for h in fam.get("headlines") or [] if fam["name"] in set(samples["benchmark"]))
    over = "repetitions (training: steady steps)" if steps else "repetitions"
    lines.append(f"median [min-max] over {over}; GB/s = 10^9 bytes/s")
    return "\n".join(lines)
