"""From tidy samples to one value per process repetition, and to one summary per point.

A *point* is one metric of one case at one value of each sample-level axis (a
benchmark may store several samples per repetition that differ by a parameter,
such as loaded latency's delay). Several samples of a point in one repetition
are inner iterations of one process: they are reduced to their median, so the
statistics that follow see one value per repetition and never pool.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from cxlbench.analysis.stats import median_interpolation
from cxlbench.results.schema import CORE_COLUMNS

BASE_KEY = ["run_id", "case_id", "metric"]
DESCRIPTIVE = ["benchmark", "initiator", "target", "tier_kind", "unit", "better"]
#: Sample parameters that number inner iterations of one process: never an axis.
INNER_INDEX = frozenset({"iteration", "iter", "inner", "sample_index", "step_index"})
#: What a benchmark found while measuring (page size obtained, steps timed) and when
#: (t_s, seconds since the run started): never an axis.
FOUND = frozenset({"page_bytes", "huge_coverage", "phys_contiguity", "steps", "elapsed_ns", "clock_mhz",
                   "cpu_held", "t_s"})


def param_columns(frame: pd.DataFrame) -> list[str]:
    """Parameter columns: every column that is not a core column."""
    return [c for c in frame.columns if c not in CORE_COLUMNS and c not in ("n_inner",)]


def axis_columns(frame: pd.DataFrame) -> list[str]:
    """Parameters that take several values within one repetition of one metric of
    one case: they tell points apart (loaded latency's delay, say). Inner-iteration
    numbers (`iteration`) and values found while measuring are not axes."""
    if "axes" in frame.attrs:
        return list(frame.attrs["axes"])
    params = [c for c in param_columns(frame) if c not in INNER_INDEX and c not in FOUND]
    keys = BASE_KEY + ["repetition"]
    if not params or frame.empty:
        return []
    dup = frame.duplicated(keys, keep=False)
    if not dup.any():
        return []
    sub = frame.loc[dup, keys + params]
    n = sub.groupby(keys, sort=False, dropna=False, observed=True)[params].nunique(dropna=False)
    return [c for c in params if (n[c] > 1).any()]


def repetitions(samples: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, case, metric, axis values, repetition): the median of that
    repetition's samples, with `n_inner` the number of samples it had, and the
    other columns as the repetition's first sample has them."""
    frame = samples[np.isfinite(samples["value"].to_numpy(dtype=float))]
    axes = axis_columns(frame)
    reps = _reduce(frame, BASE_KEY + axes, keep=True)
    reps = reps[[c for c in samples.columns if c in reps.columns and c not in INNER_INDEX] + ["n_inner"]]
    reps.attrs["axes"] = axes
    return reps


def per_repetition(samples: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One value per repetition of each group of `keys` (per run): the median of the
    repetition's samples, `n_inner` their count. Every figure cxlbench shows starts
    here: a repetition is an independent trial (its own process, buffer and seed),
    its inner iterations are not, and pooling them makes identical code look
    different. Columns: keys, run_id, repetition, value, n_inner."""
    frame = samples[np.isfinite(samples["value"].to_numpy(dtype=float))]
    keys = [k for k in keys if k in frame.columns]
    return _reduce(frame, keys + [k for k in ("run_id",) if k in frame.columns and k not in keys],
                   keep=False)


def _reduce(frame: pd.DataFrame, keys: list[str], keep: bool) -> pd.DataFrame:
    """The median of each (keys, repetition) group; `keep`: the other columns too."""
    keys = keys + ["repetition"]
    others = [c for c in frame.columns if c not in keys and c != "value" and c not in INNER_INDEX] \
        if keep else []
    if frame.empty or not frame.duplicated(keys).any():
        reps = frame[keys + others + ["value"]].copy()
        reps["n_inner"] = 1
        return reps
    g = frame.groupby(keys, sort=False, dropna=False, observed=True)
    reps = g[others].first() if others else g.size().to_frame("_").drop(columns="_")
    reps["value"] = g["value"].median()
    reps["n_inner"] = g.size()
    return reps.reset_index()


def point_id(case_id: str, axes: dict) -> str:
    """case_id, plus the axis values when a case has several points."""
    parts = [f"{k}={_fmt_axis(v)}" for k, v in axes.items() if not _isnull(v)]
    return case_id + ("|" + ",".join(parts) if parts else "")


def _isnull(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA


def _fmt_axis(v) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def points(reps: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """One row per point: n (repetitions), median, its interval (lo, hi, coverage:
    stats.median_ci's interpolated order statistics), min, max, rcv
    (1.4826·MAD/median) and the point's parameters (first value seen; a found page
    size, for instance)."""
    axes = axis_columns(reps)
    key = BASE_KEY + axes
    cols = ["point"] + key + [c for c in DESCRIPTIVE if c in reps.columns] + \
        [c for c in param_columns(reps) if c not in axes] + \
        ["n", "median", "lo", "hi", "coverage", "min", "max", "rcv", "n_inner"]
    if reps.empty:
        out = pd.DataFrame(columns=cols)
        out.attrs["axes"] = axes
        return out
    g = reps.groupby(key, sort=False, dropna=False, observed=True)
    gid = g.ngroup().to_numpy()
    others = [c for c in reps.columns if c not in key and c not in ("value", "repetition", "n_inner")]
    out = g[others].first() if others else g.size().to_frame("_n").drop(columns="_n")
    out = out.reset_index()

    vals = reps["value"].to_numpy(dtype=float)
    order = np.lexsort((vals, gid))
    gs, vs = gid[order], vals[order]
    counts = np.bincount(gid, minlength=len(out))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    med = (vs[starts + (counts - 1) // 2] + vs[starts + counts // 2]) / 2
    steps = {n: median_interpolation(int(n), confidence) for n in np.unique(counts)}
    d = np.array([steps[n][0] for n in counts])
    lam = np.array([steps[n][1] for n in counts])
    dev = np.abs(vs - med[gs])
    dsorted = dev[np.lexsort((dev, gs))]
    mad = (dsorted[starts + (counts - 1) // 2] + dsorted[starts + counts // 2]) / 2

    out["n"] = counts
    out["median"] = med
    inner = np.minimum(d, counts - 1)           # one value: d = 1, and no step inward
    out["lo"] = lam * vs[starts + inner] + (1 - lam) * vs[starts + d - 1]
    out["hi"] = lam * vs[starts + counts - inner - 1] + (1 - lam) * vs[starts + counts - d]
    out["coverage"] = [steps[n][2] for n in counts]
    out["min"] = vs[starts]
    out["max"] = vs[starts + counts - 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        out["rcv"] = np.where((counts > 1) & (med != 0), 1.4826 * mad / np.abs(med), np.nan)
    out["n_inner"] = g["n_inner"].median().to_numpy() if "n_inner" in reps.columns else 1
    if axes:
        ax = out[axes].to_dict("records")
        out["point"] = [point_id(c, a) for c, a in zip(out["case_id"], ax)]
    else:
        out["point"] = out["case_id"]
    out = out[[c for c in cols if c in out.columns]]
    out.attrs["axes"] = axes
    return out


def rep_values(reps: pd.DataFrame) -> dict[tuple, np.ndarray]:
    """Per-repetition values keyed by (run_id, point)."""
    axes = axis_columns(reps)
    if reps.empty:
        return {}
    if axes:
        ids = [point_id(c, a) for c, a in zip(reps["case_id"], reps[axes].to_dict("records"))]
    else:
        ids = reps["case_id"].tolist()
    frame = pd.DataFrame({"run_id": reps["run_id"].to_numpy(), "point": ids,
                          "metric": reps["metric"].to_numpy(), "value": reps["value"].to_numpy(float)})
    return {(r, p, m): grp["value"].to_numpy() for (r, p, m), grp in
            frame.groupby(["run_id", "point", "metric"], sort=False)}


def precision(pts: pd.DataFrame) -> pd.Series:
    """Each point's precision: the half-width of its median's confidence interval
    relative to the median (NaN with fewer than 2 repetitions, or a median of 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        p = (pts["hi"] - pts["lo"]) / 2 / pts["median"].abs()
    return p.where((pts["n"] >= 2) & np.isfinite(p))


def case_precision(result: Any, skip: frozenset[str] = frozenset()) -> float:
    """How precise a case's figures are so far (a CaseResult's samples): the worst
    of its points' precisions; NaN when no point can say yet. The runner asks it to
    decide whether a case needs another process (adaptive repetitions).

    skip: metrics not judged. A distribution's far tail (a p99.99 or a max is one
    interrupt in one process) moves 2-20x between processes where its mean moves a
    few percent; judged here it would be the worst of every latency case, so the
    line `cxlbench run` prints would speak of it alone and a precision target would
    spend the whole cap chasing it. Tails are judged by compare and gate with their
    own noise instead."""
    rows = [{"run_id": "", "case_id": "", "metric": s.metric, "value": s.value,
             "repetition": s.repetition, **s.params} for s in result.samples if s.metric not in skip]
    if not rows:
        return math.nan
    p = precision(points(repetitions(pd.DataFrame(rows))))
    return float(p.max()) if p.notna().any() else math.nan
