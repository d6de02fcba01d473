"""The trend report of a machine's history: one self-contained HTML page.

Each headline figure over the runs (oldest first), with the run's own interval
as a band, change points marked where the level stepped (with the step's size),
and the environment changes (kernel, firmware, THP, cxlbench) and accepted
changes marked where they happened — so a step beside a kernel upgrade reads as
one. Every point's trend is in a table below; the data is a CSV download.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from cxlbench.version import __version__
from cxlbench.analysis.history import History, PointChange, trends
from cxlbench.report import _css, build, environment
from cxlbench.report.plots import Chart, Series
from cxlbench.results.store import atomic_write


def _chart(s: pd.DataFrame, title: str, cps: list[PointChange], marks: list[tuple[float, str]],
           color: str) -> Chart:
    x = (s["position"] + 1).tolist()
    series = Series("", x, s["median"].tolist(), s["lo"].tolist(), s["hi"].tolist(), color)
    steps = [(c.position + 0.5, f"{c.change.magnitude * 100:+.1f}%") for c in cps]   # between runs, as x
    unit = s["unit"].iloc[0]
    better = "lower" if s["better"].iloc[0] == "lower" else "higher"
    return Chart(title, "run (oldest first)", f"{unit} ({better} is better)", [series],
                 marks=steps + marks)


def trend_context(h: History, changes: list[PointChange],
                  run_links: dict[str, str] | None = None) -> dict[str, Any]:
    """`run_links`: run id -> a link to its report (a published site has one per run)."""
    maker = build.ChartMaker("t", sorted(set(h.rows["target"])))
    env_marks = [(c.position + 0.5, c.field) for c in h.changes]
    pos = dict(zip(h.runs["run_id"], h.runs["position"]))
    env_marks += [(pos[m.run_id] + 0.5, "accepted") for m in h.markers]
    charts, listed = [], trends(h, changes)
    names = {t.point: t.name for t in listed}
    table = [[t.name, f"{build.num(t.median)} {t.unit}", f"±{t.noise * 100:.1f}%" if math.isfinite(t.noise)
              else "—", build.num(t.latest), t.steps] for t in listed]
    for point, s in h.rows.groupby("point", sort=False):
        s = s.sort_values("position")
        cps = [c for c in changes if c.point == point]
        if s["headline"].iloc[0] or cps or s["benchmark"].iloc[0] == "sentinel":
            chart = _chart(s, names[point], cps, env_marks, maker.color(s["target"].iloc[0] + "|"))
            charts.append({"svg": maker.svg(chart), "wide": False})
    runs = [{"n": int(r.position) + 1, "run_id": r.run_id, "href": (run_links or {}).get(r.run_id, ""), "started": f"{r.started:%Y-%m-%d %H:%M}",
             "label": r.run_label or "", "kernel": r.kernel, "bios": r.bios or "—", "thp": r.thp,
             "cxlbench": r.cxlbench} for r in h.runs.itertuples()]
    first, last = h.runs["started"].iloc[0], h.runs["started"].iloc[-1]
    csv = h.rows.drop(columns=["case_id"]).merge(h.runs[["run_id", "started"]], on="run_id")
    return {"title": f"{h.machine} · {h.suite}: {len(h.runs)} runs", "version": __version__,
            "css": _css(), "span": f"{first:%Y-%m-%d %H:%M} to {last:%Y-%m-%d %H:%M} UTC",
            "identity": h.identity, "trend_charts": charts,
            "relative": (f"Cases are judged relative to their drift sentinels ({h.normalize}): each divided "
                         f"by its sentinel at its time and scaled to the sentinel's median over the history. "
                         f"The sentinels are drawn raw: they are the machine's own drift.") if h.normalize else "", "changes": [
                {"run": c.position + 1, "run_id": c.run_id, "text": str(c)} for c in h.changes],
            "markers": h.markers, "steps": sum(1 for _ in changes),
            "table": {"title": "Every figure over the history", "numeric": {1, 2, 3},
                      "headers": ["figure", "median", "run-to-run", "latest", "change points"],
                      "rows": table, "more": 0},
            "runs": runs, "left_out": h.left_out,
            "data": build.data_link(csv, None, pd.DataFrame(), f"history-{h.machine}-{h.suite}",
                                    "one row per run × figure: median, interval, repetitions, precision")}


def render_trend(h: History, changes: list[PointChange], out: str | Path) -> Path:
    html = environment().get_template("trend.html").render(**trend_context(h, changes))
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, html.encode("utf-8"))
    return path
