"""The latency section's lead: one CDF per tier and page size, from the run's
histograms (histograms.parquet), drawn as the share of blocks slower than x on a
log axis, so 10%, 1%, 0.1%, 0.01% are evenly spaced and the tail is as visible
as the median. The chase at the largest working set (the headline's case) is the
solid line; the L1 floor measured beside it, dashed: where the two meet, the
tail is the machine's (clock, interrupts, hypervisor), not the memory's.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from cxlbench.report.plots import Chart, Series

FLOOR_COLOR = "#888888"


def per_load(hist: pd.DataFrame) -> pd.DataFrame:
    """Bucket middles as ns per load ((block ns - the clock's cost) / k), with counts."""
    mid = hist["lower_ns"] + (hist["width_ns"] - 1) / 2
    ns = ((mid - hist["overhead_ns"]).clip(lower=0) / hist["k"]).to_numpy(float)
    return pd.DataFrame({"ns": ns, "count": hist["count"].to_numpy(float)})


def exceedance(hist: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(ns per load, share of blocks slower) over every repetition's buckets together."""
    d = per_load(hist).groupby("ns", sort=True)["count"].sum()
    total = d.sum()
    above = 1.0 - d.cumsum().to_numpy() / total
    keep = above > 0                              # the last bucket's 0 has no place on a log axis
    return d.index.to_numpy()[keep], above[keep]


def latency_cdfs(hists: pd.DataFrame, maker) -> list[dict]:
    """One chart per tier and page size: the largest working set's chase and floor."""
    lat = hists[(hists["benchmark"] == "latency")] if not hists.empty else hists
    if lat.empty or "working_set_bytes" not in lat.columns:
        return []
    out = []
    for (target, page), g in sorted(lat.groupby(["target", "page"], sort=True), key=lambda kv: kv[0]):
        g = g[g["working_set_bytes"] == g["working_set_bytes"].max()]
        series = []
        for kind, style in (("chase", "-"), ("floor", "--")):
            part = g[g["kind"] == kind]
            if part.empty:
                continue
            x, y = exceedance(part)
            color = maker.color(f"{target}|") if kind == "chase" else FLOOR_COLOR
            label = f"{target}, {page}" if kind == "chase" else "L1 floor (same block length)"
            series.append(Series(label, list(x), list(y), color=color, style=style, marker=""))
        if not series:
            continue
        from cxlbench.units import format_size
        title = (f"Latency distribution · {target} · {page} pages · "
                 f"{format_size(float(g['working_set_bytes'].iloc[0]))}")
        chart = Chart(title, "ns per load (block of k loads; log)", "share of blocks slower (log)",
                      series, logx=True, logx_base=10, logy=True)
        out.append({"svg": maker.svg(chart), "title": title, "wide": False})
    return out


def run_histograms(run_path) -> pd.DataFrame:
    """The run's side table, or an empty frame (a stored run at a URL, an old run)."""
    import sys
    from cxlbench.results.store import ResultsError, load_histograms
    if not Path(str(run_path)).is_dir():
        return pd.DataFrame()
    try:
        return load_histograms(run_path)
    except ResultsError as e:  # a report is still drawn without its CDFs, and says so
        print(f"cxlbench: note: {e}: the report leaves the distributions out", file=sys.stderr)
        return pd.DataFrame()
