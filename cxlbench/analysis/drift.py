"""A run's drift trace, from its sentinel rows; and its cases relative to the sentinels.

The sentinel family's rows (benchmarks.sentinel) are a reference, not a result:
`cases_only` is what headlines, compare and the gate see. `trace` turns them into
one value per probe per visit, each relative to the probe's median over the run,
against t_s: the drift the report draws and the summary states in one line.

`normalize` divides each case by its sentinel at the case's time: value ×
S_ref / S(t), with S(t) interpolated between the visits around t (the nearest
visit before the first and after the last) and S_ref a constant (the baseline's
median, so figures keep their units). Which sentinel stands for a case is the
case's family's declaration (`drift` in run.json: latency → a chase, nearest in
working set on a log scale; bandwidth → triad). Dividing by a reference helps
only where the drift the two share dominates: var(log X/S) < var(log X) exactly
when corr(log X, log S) > sd(log S) / (2 sd(log X)); elsewhere it adds the
sentinel's own noise. So it is an opt-in, and docs/gating.md records where A/A
runs on a machine showed it quieter (`evidence`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from cxlbench.analysis.reduction import per_repetition

NAME = "sentinel"
LABELS = {"l1_chase": "L1 chase", "dram_chase": "DRAM chase", "triad": "triad"}
#: Which probes stand for each kind a family names in its DRIFT declaration.
KINDS = {"chase": ("l1_chase", "dram_chase"), "triad": ("triad",)}


def sentinel_families(meta: dict[str, Any]) -> set[str]:
    """The run's families that are drift references (the sentinel family)."""
    fams = meta.get("families") or {}
    return {name for name, f in fams.items() if f.get("sentinel")} | {NAME}


def is_sentinel(samples: pd.DataFrame, meta: dict[str, Any]) -> pd.Series:
    return samples["benchmark"].isin(sentinel_families(meta))


def cases_only(samples: pd.DataFrame, meta: dict[str, Any]) -> pd.DataFrame:
    """The run's rows without its sentinels: what headlines, compare and gate judge."""
    if samples.empty:
        return samples
    keep = ~is_sentinel(samples, meta)
    return samples if keep.all() else samples[keep].reset_index(drop=True)


def sentinels_only(samples: pd.DataFrame, meta: dict[str, Any]) -> pd.DataFrame:
    if samples.empty or "probe" not in samples.columns:
        return samples.iloc[0:0]
    return samples[is_sentinel(samples, meta)]


# ------------------------------------------------------------------ the trace

def trace(samples: pd.DataFrame, meta: dict[str, Any]) -> pd.DataFrame:
    """One row per probe per visit: probe, label, visit, t_s, value (the median of
    the visit's samples), relative (value ÷ the probe's median over the run),
    metric, unit, better, working_set_bytes (a chase's) and array_bytes (triad's).
    Empty without sentinel rows."""
    cols = ["probe", "label", "visit", "t_s", "value", "relative", "metric", "unit", "better",
            "working_set_bytes", "array_bytes"]
    sent = sentinels_only(samples, meta)
    if sent.empty:
        return pd.DataFrame(columns=cols)
    sent = sent.copy()
    for col in ("working_set_bytes", "array_bytes", "t_s"):
        if col not in sent.columns:
            sent[col] = np.nan
    reps = per_repetition(sent, ["probe", "metric", "unit", "better"])
    when = sent.groupby(["probe", "repetition"])["t_s"].min()
    reps["t_s"] = [when.get((p, r), math.nan) for p, r in zip(reps["probe"], reps["repetition"])]
    for col in ("working_set_bytes", "array_bytes"):
        size = sent.groupby("probe")[col].first()
        reps[col] = [size.get(p, math.nan) for p in reps["probe"]]
    reps["relative"] = reps["value"] / reps.groupby("probe")["value"].transform("median")
    reps["label"] = [LABELS.get(p, p) for p in reps["probe"]]
    reps = reps.rename(columns={"repetition": "visit"})
    order = {p: i for i, p in enumerate(LABELS)}
    reps = reps.sort_values(["probe", "visit"], key=lambda c: c.map(order).fillna(9) if c.name == "probe" else c)
    return reps[cols].reset_index(drop=True)


@dataclass(frozen=True)
class ProbeDrift:
    """How far one probe moved over the run, relative to its median."""
    probe: str
    label: str
    visits: int
    low: float             # least value ÷ median − 1
    high: float            # greatest value ÷ median − 1
    median: float
    unit: str

    def text(self) -> str:
        return f"{self.label} {self.low * 100:+.1f}…{self.high * 100:+.1f}%"


def drift(samples: pd.DataFrame, meta: dict[str, Any]) -> list[ProbeDrift]:
    t = trace(samples, meta)
    out = []
    for probe, g in t.groupby("probe", sort=False):
        med = float(g["value"].median())
        out.append(ProbeDrift(str(probe), str(g["label"].iloc[0]), len(g), float(g["relative"].min() - 1),
                              float(g["relative"].max() - 1), med, str(g["unit"].iloc[0])))
    return out


def drift_line(samples: pd.DataFrame, meta: dict[str, Any]) -> str:
    """The summary's one line: how far each sentinel moved over the run, or why
    the run has none."""
    found = drift(samples, meta)
    record = meta.get("sentinels") or {}
    if not found:
        why = record.get("off") or record.get("stopped") or next(
            (c.get("reason") for c in meta.get("cases") or []
             if c.get("benchmark") in sentinel_families(meta) and c.get("reason")), "")
        return f"drift: no sentinels ({why})" if why else ""
    t = trace(samples, meta)
    span = float(t["t_s"].max() - t["t_s"].min()) if t["t_s"].notna().any() else math.nan
    visits = max(d.visits for d in found)
    noun = "visit" if visits == 1 else "visits"
    over = f"{visits} {noun} over {span / 60:.1f} min" if math.isfinite(span) else f"{visits} {noun}"
    return f"drift ({over}, each ÷ its run median): " + ", ".join(d.text() for d in found)


# ------------------------------------------------------------------ relative to the sentinels

def probe_for(kind: str, params: dict[str, Any], sizes: dict[str, float]) -> str | None:
    """The probe that stands for a case: for a chase, the one whose working set is
    nearest the case's on a log scale (`sizes`: probe -> working set); for triad,
    triad. None when the run has no probe of that kind."""
    have = [p for p in KINDS.get(kind, ()) if p in sizes]
    if not have:
        return None
    ws = params.get("working_set_bytes")
    if kind != "chase" or len(have) == 1 or not _finite(ws):
        return have[-1]
    return min(have, key=lambda p: abs(math.log(float(ws)) - math.log(float(sizes[p]))))


def _finite(v: Any) -> bool:
    try:
        return v is not None and math.isfinite(float(v)) and float(v) > 0
    except (TypeError, ValueError):
        return False


def at(t: pd.DataFrame, probe: str, t_s: np.ndarray) -> np.ndarray:
    """The probe's value at each time: linear between the visits around it, the
    nearest visit outside them; NaN where the probe has no visit."""
    g = t[(t["probe"] == probe) & t["t_s"].notna()].sort_values("t_s")
    if g.empty:
        return np.full(len(t_s), math.nan)
    return np.interp(np.asarray(t_s, float), g["t_s"].to_numpy(float), g["value"].to_numpy(float))


def references(samples: pd.DataFrame, meta: dict[str, Any]) -> dict[str, float]:
    """Each probe's median over the run: the S_ref a comparison holds constant."""
    return {d.probe: d.median for d in drift(samples, meta)}


def probes_asked(normalize: str) -> set[str] | None:
    """`--normalize`: "sentinel" (every probe: None) or probes by name, "dram_chase,triad"."""
    if normalize == "sentinel":
        return None
    asked = {p.strip() for p in normalize.split(",") if p.strip()}
    if not asked or asked - set(LABELS):
        raise ValueError(f"normalize {normalize!r}: 'sentinel' (every probe) or probes by name, "
                         f"from {', '.join(LABELS)}")
    return asked


def normalize(samples: pd.DataFrame, meta: dict[str, Any],
              reference: dict[str, float] | None = None, probes: set[str] | None = None) -> pd.DataFrame:
    """The run's case rows, each value × S_ref / S(t_s) for the sentinel its family
    declares (see the module's docstring), when that probe is among `probes` (None:
    any); other rows (no declaration, no t_s, no such probe) unchanged. A
    `sentinel` column names the probe each row was divided by."""
    cases = cases_only(samples, meta).copy()
    cases["sentinel"] = None
    t = trace(samples, meta)
    if t.empty or cases.empty or "t_s" not in cases.columns:
        return cases
    sizes = t.groupby("probe")["working_set_bytes"].first().fillna(0).to_dict()
    ref = reference or references(samples, meta)
    declared = {name: f.get("drift") or {} for name, f in (meta.get("families") or {}).items()}
    kinds = [declared.get(b, {}).get(m) for b, m in zip(cases["benchmark"], cases["metric"])]
    ws = cases["working_set_bytes"] if "working_set_bytes" in cases.columns else pd.Series(math.nan, cases.index)
    chosen = [probe_for(k, {"working_set_bytes": w}, sizes) if k else None for k, w in zip(kinds, ws)]
    values = cases["value"].to_numpy(float).copy()
    times = cases["t_s"].to_numpy(float)
    used: list[str | None] = [None] * len(cases)
    for probe in {p for p in chosen if p and p in ref and (probes is None or p in probes)}:
        rows = np.array([i for i, p in enumerate(chosen) if p == probe and np.isfinite(times[i])], int)
        if rows.size:
            values[rows] = values[rows] * ref[probe] / at(t, probe, times[rows])
            for i in rows:
                used[i] = probe
    cases["sentinel"] = used
    cases["value"] = values
    return cases


def between(base: pd.DataFrame, base_meta: dict, cur: pd.DataFrame, cur_meta: dict) -> list[tuple[str, float]]:
    """How each sentinel moved from one run to another: (label, ratio of run medians)."""
    a, b = references(base, base_meta), references(cur, cur_meta)
    return [(LABELS.get(p, p), b[p] / a[p]) for p in a if p in b and a[p]]
