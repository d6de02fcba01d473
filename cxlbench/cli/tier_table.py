"""The table `cxlbench run` ends with: per tier, each family's headline figures
(idle latency at the largest working set, peak read and triad bandwidth, the QD1
read latency of a disk, tokens/s of a training placement ...), each with its spread.

The figures are the ones the run's families declared (analysis.headlines), so a
new family's headline appears here without a line of this file changing.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from cxlbench.analysis.drift import drift_line
from cxlbench.analysis.headlines import figures
from cxlbench.benchmarks.tails import BLOCK_NS, K_MIN, TAIL_METRICS
from cxlbench.results.schema import case_warnings
from cxlbench.results.store import measured_whole
from cxlbench.units import tier_order


def tier_summary(samples: pd.DataFrame, meta: dict[str, Any]) -> str:
    """The run's headline figures per tier, from the cases measured whole: a case that
    failed part-way keeps its samples in the run, but its first repetitions are not
    its figure."""
    if samples.empty:
        return "no samples were measured"
    samples = measured_whole(samples, meta)
    if samples.empty:
        return "no case was measured whole (those that failed part-way keep their samples in the run)"
    found = figures(samples, meta)
    width = max([44] + [len(f.label) for f in found])      # the colons in one column
    lines = []
    for tier in sorted(set(samples["target"]), key=tier_order):
        lines.append(tier)
        mine = [f for f in found if f.tier == tier]
        lines += [f"  {f.label:<{width}}: {f.text()}" for f in mine]
        if not mine:
            lines.append("  (no summary figure for what ran here; the report has every figure)")
    steps = any(h.get("spread") == "samples" for fam in (meta.get("families") or {}).values()
                for h in fam.get("headlines") or [] if fam["name"] in set(samples["benchmark"]))
    over = "repetitions (training: steady steps)" if steps else "repetitions"
    lines.append(f"median [min-max] over {over}; GB/s = 10^9 bytes/s")
    if samples["metric"].isin([m.name for m in TAIL_METRICS]).any():
        lines.append(BLOCKS_LEGEND)
    lines.extend(precision_lines(meta))
    lines.extend([d] if (d := drift_line(samples, meta)) else [])
    return "\n".join(lines)


#: What a tail of the chase is: the time of a block of loads, not of one load (tails.py says why)
BLOCKS_LEGEND = (f"p50 … p99.9: ns per load of blocks of k dependent loads (k = {K_MIN} on memory, more where "
                 f"loads are so fast a block would last under {BLOCK_NS} ns), each a block's mean: a load that "
                 f"stalls 1 µs moves its block of {K_MIN} by {1000 / K_MIN:g} ns a load")

#: a worst precision past this (±50%) says why it can be so loose
LOOSE = 0.5


def precision_lines(meta: dict[str, Any]) -> list[str]:
    """How precise the run's medians came out (each case's worst point: the half-width
    of the median's 95% interval relative to it), and, where a target was asked,
    how many cases reached it and why the others stopped."""
    found = [(c["case_id"], c["info"]["precision"]) for c in meta.get("cases") or []
             if isinstance((c.get("info") or {}).get("precision"), dict)]
    known = [(cid, p) for cid, p in found if p.get("achieved") is not None]
    if not known:
        return []
    worst_id, worst = max(known, key=lambda kp: kp[1]["achieved"])
    values = sorted(p["achieved"] for _, p in known)
    line = (f"precision of the medians (95% interval): median ±{values[len(values) // 2]:.1%}, "
            f"worst ±{worst['achieved']:.1%} ({worst_id})")
    if worst["achieved"] > LOOSE:        # alarming without a word: the repetitions disagree, not the tool
        line += ("; a median that loose is repetitions that disagree (a working set at a cache's edge, which "
                 "some repetitions hold and others spill, or a busy machine): the report shows each")
    targets = [p for _, p in found if "target" in p]
    if not targets:
        return [line]
    stops: dict[str, int] = {}
    for p in targets:
        stops[p["stop"]] = stops.get(p["stop"], 0) + 1
    reached = stops.pop("reached", 0)
    why = "; ".join(f"{n} stopped at {s}" for s, n in sorted(stops.items()))
    return [line, f"target ±{targets[0]['target'] * 100:g}%: {reached} of {len(targets)} cases reached it"
            + (f"; {why}" if why else "")]


def warning_lines(meta: dict[str, Any], most: int = 5) -> list[str]:
    """The warnings the measured cases recorded, each text once with the cases that
    gave it: a figure stands with its warning, so the terminal says there is one."""
    by_text: dict[str, list[str]] = {}
    for case_id, text in case_warnings(meta):
        by_text.setdefault(text, []).append(case_id)
    lines = [f"warning: {text} ({ids[0] if len(ids) == 1 else f'{len(ids)} cases'})"
             for text, ids in list(by_text.items())[:most]]
    if len(by_text) > most:
        lines.append(f"... and {len(by_text) - most} more warnings; the report lists each with its case")
    return lines
