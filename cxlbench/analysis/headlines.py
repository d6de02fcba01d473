"""A run's headline figures: per tier, what each family declared matters most.

The families' declarations (benchmarks.base.Headline) are read from the run's own
record (run.json "families"), never from the code that measured it, so the
terminal summary and the report's tier table show the same figures, and an old
run shows what its families declared when it was made. Figures are summarised
per repetition first (analysis.reduction), as everything else is.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from cxlbench.analysis.held import Held, by_point
from cxlbench.analysis.reduction import point_id, points, repetitions
from cxlbench.analysis.stats import sign_test_p
from cxlbench.results.schema import ABSENT_MEANS
from cxlbench.units import format_count, format_param, tier_order


@dataclass(frozen=True)
class Figure:
    """One headline figure of one tier, scaled to its headline's unit."""
    tier: str
    family: str
    label: str                 # the headline's label with the chosen case's parameters
    column: str                # its column in the report's tier table
    median: float
    lo: float                  # the median's confidence interval
    hi: float
    low: float                 # the spread: min and max over repetitions (or samples)
    high: float
    unit: str
    digits: int
    count: bool                # shown as 16.8M rather than 16777216
    case_id: str
    note: str = ""             # a trend beside it (the loss from first to last step)
    point: str = ""            # the point and metric it was picked from
    metric: str = ""
    held: Held = field(default_factory=Held)   # how its repetitions held their CPUs (analysis.held)
    verdict: str = ""          # where it stands against its floor, if it has one (against_floor)

    def text(self) -> str:
        """"123.4 ns [120.1-130.2]" (median [min-max]), and when a repetition's CPU was
        shared, "  ! CPU shared: held 49% (5 of 5 repetitions < 90%)"."""
        shared = f"  ! {self.held.mark()}" if self.held.shared else ""
        verdict = f"  {self.verdict}" if self.verdict else ""
        if self.count:
            return f"{format_count(self.median, ' ')} {self.unit}".rstrip() + self.note + verdict + shared
        f = f"{{:.{self.digits}f}}"
        return (f"{f.format(self.median)} {self.unit} [{f.format(self.low)}-{f.format(self.high)}]"
                + self.note + verdict + shared)


def figures(samples: pd.DataFrame, meta: dict[str, Any], pts: pd.DataFrame | None = None) -> list[Figure]:
    """Every headline figure of a run, tier by tier in the reader's order, and within
    a tier in the order the families and their headlines were declared; `pts`: the
    run's points, when the caller has them already."""
    families = meta.get("families") or {}
    if samples.empty or not families:
        return []
    reps = repetitions(samples)
    pts = points(reps) if pts is None else pts
    held, per_rep = by_point(reps), _by_repetition(reps)
    out = [replace(f, held=held.get((f.point, f.metric), Held()))
           for name, fam in families.items() for h in fam.get("headlines") or []
           for f in _headline(pts, samples, name, h, per_rep)]
    rank = {t: i for i, t in enumerate(sorted({f.tier for f in out}, key=tier_order))}
    return sorted(out, key=lambda f: rank[f.tier])          # stable: declaration order kept


def _headline(pts: pd.DataFrame, samples: pd.DataFrame, family: str, h: dict,
              per_rep: dict[tuple[str, str], pd.Series]) -> list[Figure]:
    rows = pts[(pts["benchmark"] == family) & (pts["metric"] == h["metric"])]
    rows = rows[_matches(rows, h.get("where") or {}, ABSENT_MEANS.get(family, {}))]
    out = []
    for _, tier_rows in rows.groupby("target", sort=False):
        per = [c for c in h.get("per") or () if c in tier_rows.columns]
        groups = tier_rows.groupby(per, sort=False, dropna=False) if per else [((), tier_rows)]
        for _, group in groups:
            out += [_figure(row, samples, family, h, per_rep) for _, row in _pick(group, h.get("pick", "best"))]
    return out


def _matches(rows: pd.DataFrame, where: dict[str, Any], absent: dict[str, Any] | None = None) -> pd.Series:
    """Rows whose parameters have the values asked (a list: any of them; None: no
    value). A parameter the run has no column for constrains nothing, unless its
    family gives its absence a meaning (`absent`, from ABSENT_MEANS): a run with no
    DPU case is not one whose every case ran with DPU (the 3b GPU run's summary
    said so, twice)."""
    absent = absent or {}
    keep = pd.Series(True, index=rows.index)
    for key, wanted in where.items():
        values = wanted if isinstance(wanted, (list, tuple)) else [wanted]
        if key in absent:
            default = absent[key]
            values = [default if v is None else v for v in values]
            col = rows[key].astype(object).where(rows[key].notna(), default) if key in rows.columns \
                else pd.Series(default, index=rows.index, dtype=object)
            keep &= col.isin(values)
            continue
        if key not in rows.columns:
            continue
        col = rows[key]
        hit = col.isin([v for v in values if v is not None])
        if any(v is None for v in values):
            hit |= col.isna()
        keep &= hit
    return keep


def _pick(group: pd.DataFrame, pick: str) -> list[tuple[Any, pd.Series]]:
    if group.empty:
        return []
    if pick == "each":
        return list(group.iterrows())
    if pick.startswith("largest:"):
        param = pick.split(":", 1)[1]
        if param in group.columns and group[param].notna().any():
            group = group[group[param] == group[param].max()]
        pick = "best"
    higher = group["better"].iloc[0] == "higher"
    best = group["median"].idxmax() if higher == (pick == "best") else group["median"].idxmin()
    return [(best, group.loc[best])]


def _figure(row: pd.Series, samples: pd.DataFrame, family: str, h: dict,
            per_rep: dict[tuple[str, str], pd.Series]) -> Figure:
    scale = h.get("scale", 1.0)
    median, lo, hi, low, high = (row[k] * scale for k in ("median", "lo", "hi", "min", "max"))
    if h.get("spread") == "samples":          # inner iterations, e.g. the steady steps of one run
        values = _values(samples, row) * scale
        if values.size:
            median, low, high = float(np.median(values)), float(values.min()), float(values.max())
    note = _trend(samples, row["case_id"], h["trend"]) if h.get("trend") else ""
    label = re.sub(r"\b1 threads\b", "1 thread", h["label"].format_map(_Params(row)))
    empty = pd.Series(dtype=float)
    point = str(row.get("point", ""))
    verdict = against_floor(per_rep.get((point, row["metric"]), empty) * scale,
                            per_rep.get((point, h["floor"]), empty) * scale,
                            h.get("unit") or str(row["unit"])) if h.get("floor") else ""
    return Figure(row["target"], family, label, h.get("column") or h["label"],
                  median, lo, hi, low, high, h.get("unit") or str(row["unit"]), h.get("digits", 2),
                  bool(h.get("count")), row["case_id"], note, str(row.get("point", "")), str(row["metric"]),
                  verdict=verdict)


#: The sign test's level for calling a tail above (or at) its floor: at five
#: repetitions only five of five passes (1/32), at four or fewer nothing does.
FLOOR_TEST_P = 0.05


def against_floor(tail: pd.Series, floor: pd.Series, unit: str) -> str:
    """Where a tail stands against its floor, repetition by repetition (each
    repetition measured both, on the same CPU in the same seconds). Above it in
    enough repetitions to pass a one-sided sign test: the memory adds to the
    machine's tail, by the median excess (not that the whole tail is the memory's).
    Under it in enough: the machine's tail (clock, interrupts, hypervisor). Else
    not told apart. Ties and repetitions missing either figure are left out.
    Paired, so it can differ from the two figures' medians side by side."""
    both = pd.concat([tail.rename("t"), floor.rename("f")], axis=1, join="inner")
    excess = (both["t"] - both["f"]).to_numpy(float)
    excess = excess[np.isfinite(excess) & (excess != 0)]
    n = len(excess)
    if n == 0:
        return ""
    above, by = int((excess > 0).sum()), float(np.median(excess))
    counted = f"{above} of {n} repetitions above its L1 floor (median {by:+.0f} {unit})"
    if sign_test_p(n, n) >= FLOOR_TEST_P:
        return f"{counted}: too few repetitions to tell it from the machine's (a sign test needs 5)"
    if sign_test_p(above, n) < FLOOR_TEST_P:
        return f"{counted}: the memory adds to the machine's tail"
    if sign_test_p(n - above, n) < FLOOR_TEST_P:
        return f"{counted}: the machine's tail (clock, interrupts, hypervisor), not the memory's"
    return f"{counted}: not told apart from the machine's"


def _by_repetition(reps: pd.DataFrame) -> dict[tuple[str, str], pd.Series]:
    """{(point, metric): its values indexed by repetition}, the pairs a floor needs."""
    if reps.empty or "repetition" not in reps.columns:
        return {}
    axes = list(reps.attrs.get("axes", []))
    ids = ([point_id(c, a) for c, a in zip(reps["case_id"], reps[axes].to_dict("records"))]
           if axes else reps["case_id"].tolist())
    frame = pd.DataFrame({"point": ids, "metric": reps["metric"].to_numpy(),
                          "repetition": reps["repetition"].to_numpy(),
                          "value": pd.to_numeric(reps["value"], errors="coerce").to_numpy(float)})
    return {(p, m): g.groupby("repetition")["value"].median()
            for (p, m), g in frame.groupby(["point", "metric"], sort=False)}


def _values(samples: pd.DataFrame, row: pd.Series) -> np.ndarray:
    sel = (samples["case_id"] == row["case_id"]) & (samples["metric"] == row["metric"])
    return samples.loc[sel, "value"].to_numpy(float)


def _trend(samples: pd.DataFrame, case_id: str, metric: str) -> str:
    """", loss 10.41 -> 9.87": the metric from the case's first sample to its last."""
    sel = samples[(samples["case_id"] == case_id) & (samples["metric"] == metric)]
    order = [c for c in ("repetition", "iteration") if c in sel.columns]
    values = sel.sort_values(order)["value"].to_numpy(float) if order else sel["value"].to_numpy(float)
    return f", {metric} {values[0]:.2f} -> {values[-1]:.2f}" if values.size > 1 else ""


class _Params(dict):
    """A row's parameters for str.format_map, each as a table shows it."""

    def __init__(self, row: pd.Series):
        super().__init__()
        self.row = row

    def __missing__(self, key: str) -> str:
        return format_param(key, self.row.get(key))        # "—" for a parameter the row lacks
