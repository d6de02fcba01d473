"""Is a case quieter relative to its drift sentinel than raw? Measured on A/A runs.

Dividing by an in-run reference removes the drift the two share and adds the
reference's own noise: var(log X/S) = var(log X) + var(log S) − 2·cov, lower than
var(log X) only when corr(log X, log S) > sd(log S) / (2·sd(log X)). Projects
that divided by a reference without measuring have doubled their error. So for
each case of several runs of one suite on one machine (A/A: nothing changed) this
measures both, the way the gate sees them:

    between   the run-to-run noise: sd over runs of the log of the run's median
    within    the pooled sd of log repetitions about their run's mean
    corr      corr(log X, log S(t)) over every repetition of every run
    needed    sd(log S) / (2·sd(log X)): the correlation the division needs

A case is *quieter* relative to its sentinel when its run-to-run noise is lower
by more than `margin` (what the gate's verdicts across runs depend on).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from cxlbench.analysis import drift
from cxlbench.analysis.compare import RunLike, as_run
from cxlbench.analysis.reduction import repetitions


@dataclass(frozen=True)
class Evidence:
    """One case's noise raw and relative to its sentinel, over A/A runs."""
    case_id: str
    metric: str
    sentinel: str
    runs: int
    raw_between: float
    ratio_between: float
    raw_within: float
    ratio_within: float
    corr: float
    needed: float
    quieter: bool


def _log_reps(samples: pd.DataFrame) -> pd.DataFrame:
    reps = repetitions(samples)
    return reps.assign(log=np.log(reps["value"].to_numpy(float)))[["case_id", "metric", "repetition", "log"]]


def evidence(runs: Sequence[RunLike], margin: float = 0.10) -> list[Evidence]:
    """Per case (case id and metric) that has a sentinel in every run."""
    loaded = [as_run(r) for r in runs]
    ref = drift.references(loaded[0].samples, loaded[0].meta)     # one S_ref for every run
    frames = []
    for i, run in enumerate(loaded):
        norm = drift.normalize(run.samples, run.meta, ref)
        probe = norm.groupby(["case_id", "metric"])["sentinel"].first()
        raw = _log_reps(norm.drop(columns="sentinel").assign(value=drift.cases_only(run.samples, run.meta)["value"]))
        rel = _log_reps(norm.drop(columns="sentinel"))
        both = raw.merge(rel, on=["case_id", "metric", "repetition"], suffixes=("_x", "_y"))
        both["run"] = i
        both["sentinel"] = [probe.get((c, m)) for c, m in zip(both["case_id"], both["metric"])]
        frames.append(both)
    data = pd.concat(frames, ignore_index=True)
    data = data[data["sentinel"].notna()]
    out = []
    for (case_id, metric), g in data.groupby(["case_id", "metric"], sort=False):
        if g["run"].nunique() < len(loaded) or g["sentinel"].nunique() != 1:
            continue
        x, y = g["log_x"].to_numpy(), g["log_y"].to_numpy()
        s = x - y                                         # log S(t)/S_ref at each repetition
        mx = g.groupby("run")["log_x"].median()
        my = g.groupby("run")["log_y"].median()
        rb, nb = float(np.std(mx, ddof=1)), float(np.std(my, ddof=1))
        rw, nw = _pooled(g, "log_x"), _pooled(g, "log_y")
        sx, ss = float(np.std(x, ddof=1)), float(np.std(s, ddof=1))
        corr = float(np.corrcoef(x, s)[0, 1]) if sx > 0 and ss > 0 else math.nan
        out.append(Evidence(str(case_id), str(metric), str(g["sentinel"].iloc[0]), int(g["run"].nunique()),
                            rb, nb, rw, nw, corr, ss / (2 * sx) if sx > 0 else math.nan,
                            bool(nb < (1 - margin) * rb)))
    return out


def _pooled(g: pd.DataFrame, col: str) -> float:
    dev = g[col] - g.groupby("run")[col].transform("mean")
    dof = len(g) - g["run"].nunique()
    return float(math.sqrt((dev ** 2).sum() / dof)) if dof > 0 else math.nan


def markdown(rows: Sequence[Evidence], labels: dict[str, str] | None = None) -> str:
    """The table docs/gating.md records (noise as % of the value: sd of logs x 100)."""
    out = ["| case | sentinel | raw, run to run | ratio, run to run | raw, within | ratio, within "
           "| corr | needed | adopted |", "|---|---|--:|--:|--:|--:|--:|--:|---|"]
    for e in rows:
        name = (labels or {}).get(e.case_id, e.case_id)
        out.append(f"| {name} | {drift.LABELS.get(e.sentinel, e.sentinel)} | {e.raw_between:.1%} "
                   f"| {e.ratio_between:.1%} | {e.raw_within:.1%} | {e.ratio_within:.1%} | {e.corr:+.2f} "
                   f"| {e.needed:.2f} | {'yes' if e.quieter else 'no'} |")
    return "\n".join(out) + "\n"
