"""The placement advice as one self-contained HTML page (`cxlbench advise -o FILE`).

    render_advice(advice, out) -> Path

What it shows is report.placements' section: the chart of every placement's
throughput relative to the best, the step's breakdown, the inputs with their
provenance, the rule that names a placement.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from cxlbench.version import __version__
from cxlbench.analysis.advisor import Advice
from cxlbench.report import _css, build, environment
from cxlbench.report.placements import advice_section, tier_key
from cxlbench.results.store import atomic_write
from cxlbench.units import tier_order


def advice_context(a: Advice) -> dict[str, Any]:
    tiers = sorted({tier_key(p.tier) for p in a.placements}, key=tier_order)
    return {"css": _css(), "version": __version__,
            "title": f"Where the optimizer state should live: {a.model} on {a.gpu_name}",
            "advice": advice_section(a, build.ChartMaker("a", tiers))}


def render_advice(a: Advice, out: str | Path) -> Path:
    html = environment().get_template("advice.html").render(**advice_context(a))
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, html.encode("utf-8"))
    return path
