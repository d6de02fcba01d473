"""The report's drift-sentinel section: the run's drift trace as a chart and a table.

Each probe's visits are drawn relative to the probe's own median over the run
(0% = its median), against the time since the run started, so three probes of
different units share one axis and a step or slope in any of them is visible.
A case measured during a step moved with it; the reader sees when that was.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from cxlbench.analysis import drift
from cxlbench.report.plots import MARKERS, PALETTE, STYLES, Chart, Series

COLORS = {"l1_chase": PALETTE[2], "dram_chase": PALETTE[1], "triad": PALETTE[0]}


def section(samples: pd.DataFrame, meta: dict[str, Any], maker) -> dict[str, Any]:
    """{charts, tables, line} for the sentinel family's section (empty lists when
    the run has no sentinel rows)."""
    t = drift.trace(samples, meta)
    line = drift.drift_line(samples, meta)
    if t.empty:
        return {"charts": [], "tables": [], "line": line}
    series = []
    for i, (probe, g) in enumerate(t.groupby("probe", sort=False)):
        g = g.sort_values("t_s")
        series.append(Series(f"{g['label'].iloc[0]} (median {g['value'].median():.3g} {g['unit'].iloc[0]})",
                             g["t_s"].tolist(), ((g["relative"] - 1) * 100).tolist(),
                             color=COLORS.get(str(probe), PALETTE[i % len(PALETTE)]),
                             style=STYLES[i % len(STYLES)], marker=MARKERS[i % len(MARKERS)]))
    chart = Chart("Drift sentinels over the run", "time since the run started (s)",
                  "% from the probe's run median", series)
    return {"charts": [{"svg": maker.svg(chart, wide=True), "title": chart.title, "wide": True}],
            "tables": [_table(t)], "line": line}


def _table(t: pd.DataFrame) -> dict[str, Any]:
    headers = ["probe", "working set", "visits", "median", "unit", "least", "greatest", "first → last"]
    rows = []
    for probe, g in t.groupby("probe", sort=False):
        g = g.sort_values("t_s")
        rel = g["relative"] - 1
        ws, arrays = g["working_set_bytes"].iloc[0], g["array_bytes"].iloc[0]
        rows.append([g["label"].iloc[0], _size(ws) if _size(ws) != "—" else f"3 × {_size(arrays)}", str(len(g)), f"{g['value'].median():.3g}",
                     g["unit"].iloc[0], f"{rel.min() * 100:+.1f}%", f"{rel.max() * 100:+.1f}%",
                     f"{rel.iloc[0] * 100:+.1f}% → {rel.iloc[-1] * 100:+.1f}%"])
    return {"metric": "drift", "title": "Each probe over the run, relative to its median",
            "headers": headers, "numeric": [2, 3, 5, 6, 7], "rows": rows, "more": 0}


def _size(ws) -> str:
    from cxlbench.units import format_size
    try:
        return format_size(int(ws)) if ws == ws and ws else "—"
    except (TypeError, ValueError):
        return "—"
