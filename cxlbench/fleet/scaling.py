"""Scaling across ranks: the training_scaling runs of a store (one per world size,
from cxlbench.training.distributed under torchrun) as one table: total tokens/s per
world size, per rank, and the efficiency against world size 1,
total(W) / (W x total(1)) — 1.0 is perfect weak scaling."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cxlbench.results.store import Run, configuration_of, measured_whole

NAME = "training_scaling"


@dataclass
class ScalingRow:
    configuration: str
    model: str
    world_size: int
    nodes: int
    total: float            # tokens/s, the median over timed steps
    per_rank: float         # tokens/s, the median over ranks and steps
    efficiency: float       # against world size 1 of the same configuration and model (nan without it)
    run_id: str


def table(runs: list[Run]) -> list[ScalingRow]:
    rows = []
    for run in runs:
        s = measured_whole(run.samples, run.meta)      # a case that failed part-way has no figure
        if s.empty or NAME not in set(s["benchmark"]):
            continue
        s = s[s["benchmark"] == NAME]
        total = float(np.median(s.loc[s["metric"] == "tokens_per_s_total", "value"]))
        per = float(np.median(s.loc[s["metric"] == "tokens_per_s", "value"]))
        first = s.iloc[0]
        rows.append(ScalingRow(configuration_of(run.meta), str(first.get("model", "")),
                               int(first["world_size"]), int(first.get("nodes", 1)), total, per, math.nan,
                               run.run_id))
    newest: dict[tuple, ScalingRow] = {}
    for r in rows:               # the newest run of each world size (run ids begin with a timestamp)
        key = (r.configuration, r.model, r.world_size, r.nodes)
        if key not in newest or r.run_id > newest[key].run_id:
            newest[key] = r
    out = sorted(newest.values(), key=lambda r: (r.configuration, r.model, r.world_size, r.nodes))
    for r in out:
        base = next((b for b in out if (b.configuration, b.model, b.world_size) == (r.configuration, r.model, 1)),
                    None)
        if base is not None and base.total > 0:
            r.efficiency = r.total / (r.world_size * base.total)
    return out
