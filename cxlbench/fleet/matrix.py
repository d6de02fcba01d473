"""A fleet's figures: each machine's headline figures (the ones its run's terminal
summary shows), gathered into a configuration x tier matrix, with the spread over
the machines of one configuration, the machines off their configuration's median,
and two configurations compared with the statistics `compare` uses.

A machine counts once: its newest complete run in the store (an older run, or an
unfinished one, is left out and said so by the node outcomes). Within a
configuration, tiers are matched by name (`ddr0`, `cxl2`): machines of one
configuration have the same layout, which is what makes them one configuration.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from cxlbench.analysis.headlines import Figure, figures
from cxlbench.analysis.reduction import points, rep_values, repetitions
from cxlbench.analysis.stats import judge, median, median_ci, ratio_ci
from cxlbench.results.schema import COMPLETE
from cxlbench.results.store import Run, configuration_of, machine_of, measured_whole
from cxlbench.units import tier_order

OUTLIER_THRESHOLD = 0.10      # off the configuration's median by more than this
MIN_MACHINES_FOR_OUTLIERS = 3  # a median of two machines cannot say which one is odd


@dataclass
class Machine:
    """One machine's newest complete run and its headline figures."""
    configuration: str
    name: str
    run: Run
    figures: list[Figure]
    better: dict[tuple[str, str], str]        # (family, metric) -> lower/higher
    values: dict[tuple[str, str], np.ndarray]  # (point, metric) -> per-repetition values

    def figure(self, tier: str, column: str) -> Figure | None:
        return next((f for f in self.figures if f.tier == tier and f.column == column), None)


@dataclass
class Cell:
    """One headline of one tier across the machines of one configuration."""
    configuration: str
    tier: str
    column: str
    unit: str
    better: str
    digits: int
    median: float           # the median of the machines' medians
    lo: float               # its interval over machines (nan with too few)
    hi: float
    low: float              # the lowest and highest machine
    high: float
    machines: dict[str, float] = field(default_factory=dict)

    @property
    def spread(self) -> float:
        """(highest - lowest) / median over the machines: 0 for one machine."""
        return (self.high - self.low) / abs(self.median) if self.median else math.nan


@dataclass
class Outlier:
    configuration: str
    machine: str
    tier: str
    column: str
    value: float
    lo: float                # the machine's own interval
    hi: float
    median: float            # its configuration's median
    deviation: float         # value / median - 1
    unit: str


@dataclass
class Contrast:
    """One headline, configuration B against A: ratio B/A with its interval and verdict."""
    tier: str
    column: str
    unit: str
    a: float
    b: float
    ratio: float
    lo: float
    hi: float
    verdict: str
    units: str               # what the interval is over: machines, or one machine's repetitions
    note: str = ""


@dataclass
class FleetFigures:
    machines: dict[str, list[Machine]]        # configuration -> machines
    cells: list[Cell]
    outliers: list[Outlier]
    threshold: float

    @property
    def tiers(self) -> list[str]:
        return sorted({c.tier for c in self.cells}, key=tier_order)

    @property
    def columns(self) -> list[str]:
        return list(dict.fromkeys(c.column for c in self.cells))

    def cell(self, configuration: str, tier: str, column: str) -> Cell | None:
        return next((c for c in self.cells if (c.configuration, c.tier, c.column) == (configuration, tier, column)),
                    None)


def newest_complete(runs: list[Run]) -> dict[tuple[str, str], Run]:
    """(configuration, machine) -> its newest complete run."""
    out: dict[tuple[str, str], Run] = {}
    for run in sorted(runs, key=lambda r: (str(r.meta.get("started") or ""), r.run_id)):
        if run.status == COMPLETE and not run.samples.empty:
            out[(configuration_of(run.meta) or "unnamed", machine_of(run.meta))] = run
    return out


def machine(configuration: str, name: str, run: Run) -> Machine:
    samples = measured_whole(run.samples, run.meta)      # a case that failed part-way has no figure
    reps = repetitions(samples)
    pts = points(reps)
    better = {(fam, m): d.get("better", "lower") for fam, f in (run.meta.get("families") or {}).items()
              for m, d in (f.get("metrics") or {}).items()}
    values = {(p, m): v for (_, p, m), v in rep_values(reps).items()}
    return Machine(configuration, name, run, figures(samples, run.meta, pts), better, values)


def gather(runs: list[Run], threshold: float = OUTLIER_THRESHOLD) -> FleetFigures:
    grouped: dict[str, list[Machine]] = {}
    for (conf, name), run in sorted(newest_complete(runs).items()):
        grouped.setdefault(conf, []).append(machine(conf, name, run))
    cells, outliers = [], []
    for conf, members in grouped.items():
        keys = list(dict.fromkeys((f.tier, f.column) for m in members for f in m.figures))
        for tier, column in keys:
            found = {m.name: f for m in members if (f := m.figure(tier, column)) is not None}
            first = next(iter(found.values()))
            meds = np.array([f.median for f in found.values()], dtype=float)
            lo, hi, _ = median_ci(meds) if len(meds) > 1 else (math.nan, math.nan, 0.0)
            med = median(meds)
            better = next(m.better.get((first.family, first.metric), "lower") for m in members)
            cell = Cell(conf, tier, column, first.unit, better, first.digits, float(med), lo, hi,
                        float(meds.min()), float(meds.max()), {n: f.median for n, f in found.items()})
            cells.append(cell)
            if len(found) >= MIN_MACHINES_FOR_OUTLIERS:
                outliers += _outliers(cell, found, threshold)
    return FleetFigures(grouped, cells, outliers, threshold)


def _outliers(cell: Cell, found: dict[str, Figure], threshold: float) -> list[Outlier]:
    """Machines whose whole interval lies more than `threshold` off the configuration's
    median: a machine merely noisy (its interval reaching back within) is not flagged."""
    out = []
    band_lo, band_hi = cell.median * (1 - threshold), cell.median * (1 + threshold)
    for name, f in found.items():
        lo = f.lo if math.isfinite(f.lo) else f.median
        hi = f.hi if math.isfinite(f.hi) else f.median
        if lo > band_hi or hi < band_lo:
            out.append(Outlier(cell.configuration, name, cell.tier, cell.column, f.median, lo, hi,
                               cell.median, f.median / cell.median - 1, cell.unit))
    return out


def contrast(fleet: FleetFigures, a: str, b: str, threshold: float = 0.05) -> list[Contrast]:
    """Configuration b against a, headline by headline, with compare's statistics
    (ratio of medians with a t interval on log values, then faster/slower/same/
    inconclusive against the threshold). With at least two machines on each side the
    machines are the units (the spread a buyer of one more machine faces); otherwise
    the repetitions of the one machine's figure are."""
    if a not in fleet.machines or b not in fleet.machines:
        known = ", ".join(sorted(fleet.machines)) or "none"
        raise KeyError(f"no configuration {a if a not in fleet.machines else b!r} in the store (known: {known})")
    over_machines = len(fleet.machines[a]) >= 2 and len(fleet.machines[b]) >= 2
    out = []
    for cell_a in (c for c in fleet.cells if c.configuration == a):
        cell_b = fleet.cell(b, cell_a.tier, cell_a.column)
        if cell_b is None:
            continue
        if over_machines:
            va, vb, units = list(cell_a.machines.values()), list(cell_b.machines.values()), "machines"
        else:
            va, vb = _repetitions(fleet.machines[a][0], cell_a), _repetitions(fleet.machines[b][0], cell_b)
            units = "repetitions of one machine"
        r = ratio_ci(va, vb)
        change = judge(r, cell_a.better, threshold)
        out.append(Contrast(cell_a.tier, cell_a.column, cell_a.unit, cell_a.median, cell_b.median,
                            r.ratio, r.lo, r.hi, change.verdict, units, change.note))
    return out


def _repetitions(m: Machine, cell: Cell) -> np.ndarray:
    f = m.figure(cell.tier, cell.column)
    return m.values.get((f.point, f.metric), np.array([])) if f else np.array([])
