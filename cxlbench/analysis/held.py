"""A figure from a shared CPU says so where it is read.

Each repetition records `cpu_held` (benchmarks.base.cpu_held): the share of its
wall time its timed threads held a CPU. Below stats.HELD_MIN something else ran on
those CPUs — another run pinned to the same CPU, a stress test, the hypervisor — and
the wall-clock figure counts that time as memory time: two runs sharing a chase's
CPU each print twice the latency. compare, gate and history already refuse to call
a change such repetitions can explain; this module tells the reader of one run, in
the terminal summary, the report's tier table and its points tables: the lowest
share held among a figure's repetitions, and how many were below the line.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cxlbench.analysis.reduction import point_id
from cxlbench.analysis.stats import HELD_MIN


@dataclass(frozen=True)
class Held:
    """How a point's repetitions held their CPUs."""
    least: float = math.nan          # the lowest share among them (NaN: not recorded)
    shared: int = 0                  # how many held less than HELD_MIN
    n: int = 0                       # how many recorded it

    def mark(self) -> str:
        """"CPU shared: held 49% (5 of 5 repetitions < 90%)", or "" for a clean figure."""
        if not self.shared:
            return ""
        return (f"CPU shared: held {self.least:.0%} ({self.shared} of {self.n} "
                f"repetition{'s' if self.n != 1 else ''} < {HELD_MIN:.0%})")

    def cell(self) -> str:
        """The points table's "CPU held" cell: "49% ⚠" when shared, else the share."""
        if self.n == 0 or math.isnan(self.least):
            return "—"
        return f"{self.least:.0%}" + (" ⚠" if self.shared else "")


def by_point(reps: pd.DataFrame) -> dict[tuple[str, str], Held]:
    """{(point, metric): Held} for every point whose repetitions recorded cpu_held."""
    if "cpu_held" not in reps.columns or reps.empty:
        return {}
    held = pd.to_numeric(reps["cpu_held"], errors="coerce")
    frame = reps.loc[held.notna(), ["case_id", "metric"] + list(reps.attrs.get("axes", []))]
    if frame.empty:
        return {}
    axes = list(reps.attrs.get("axes", []))
    points = [point_id(c, a) for c, a in zip(frame["case_id"], frame[axes].to_dict("records"))] if axes \
        else frame["case_id"].tolist()
    grouped = pd.DataFrame({"point": points, "metric": frame["metric"].to_numpy(),
                            "held": held[held.notna()].to_numpy(float)}).groupby(["point", "metric"])["held"]
    return {key: Held(float(g.min()), int(np.sum(g.to_numpy() < HELD_MIN)), int(g.size))
            for key, g in grouped}
