"""The table `cxlbench run` ends with: per tier, idle latency at the largest
working set, peak read and triad bandwidth, each with its spread.

Figures are summarised per repetition first (a repetition is an independent
trial; its inner iterations are not independent), then the median and the
range across repetitions are shown.
"""
from __future__ import annotations

import pandas as pd


def per_repetition(frame: pd.DataFrame) -> pd.DataFrame:
    """One value per (case, repetition): the median of that trial's inner iterations."""
    keys = ["case_id", "target", "initiator", "benchmark", "metric", "repetition"]
    extra = [c for c in ("page", "working_set_bytes", "kernel", "threads") if c in frame.columns]
    return frame.groupby(keys + extra, dropna=False, as_index=False)["value"].median()


def _spread(values: pd.Series) -> tuple[float, float, float]:
    return float(values.median()), float(values.min()), float(values.max())


def _latency(reps: pd.DataFrame, tier: str, page: str):
    sel = reps[(reps.benchmark == "latency") & (reps.target == tier) & (reps.page == page)]
    if sel.empty:
        return None
    largest = sel.working_set_bytes.max()
    return _spread(sel[sel.working_set_bytes == largest].value), int(largest)


def _peak_bandwidth(reps: pd.DataFrame, tier: str, kernel: str):
    sel = reps[(reps.benchmark == "bandwidth") & (reps.target == tier) & (reps.kernel == kernel)]
    if sel.empty:
        return None
    medians = sel.groupby("case_id").value.median()
    best = medians.idxmax()
    threads = int(sel[sel.case_id == best].threads.iloc[0])
    return _spread(sel[sel.case_id == best].value), threads


def _fmt(stat, unit: str, digits: int) -> str:
    (med, lo, hi), _ = stat
    return f"{med:.{digits}f} {unit} [{lo:.{digits}f}-{hi:.{digits}f}]"


def tier_summary(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "no samples were measured"
    reps = per_repetition(frame)
    lines = []
    for tier in sorted(frame.target.unique()):
        lines.append(f"{tier}")
        for page in ("4k", "thp", "hugetlb-2m", "hugetlb-1g"):
            if "page" in reps.columns and (lat := _latency(reps, tier, page)):
                size = lat[1] >> 20
                lines.append(f"  latency, {size} MiB working set, {page:<4} pages : {_fmt(lat, 'ns', 1)}")
        for kernel in ("read", "triad"):
            if "kernel" in reps.columns and (bw := _peak_bandwidth(reps, tier, kernel)):
                lines.append(f"  peak {kernel:<5} bandwidth ({bw[1]} threads)"
                             f"{'':11}: {_fmt(bw, 'GB/s', 2)}")
    lines.append("median [min-max] over repetitions; GB/s = 10^9 bytes/s")
    return "\n".join(lines)
