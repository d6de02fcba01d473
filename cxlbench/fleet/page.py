"""The fleet report: what each node did, the configuration x tier matrix of
headline figures, the spread within each configuration, outlier machines, two
configurations compared, and training's scaling table; as text for a terminal
and as one self-contained HTML page (the report's templates, inline SVG)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from cxlbench.version import __version__
from cxlbench.analysis.compare import fmt_change, fmt_ci_change, text_table
from cxlbench.fleet import record as records
from cxlbench.fleet.matrix import Contrast, FleetFigures, contrast, gather
from cxlbench.fleet.outcome import NodeOutcome, outcomes
from cxlbench.fleet.record import FleetRecord
from cxlbench.fleet.scaling import ScalingRow, table as scaling_table
from cxlbench.report import TEMPLATES, environment
from cxlbench.report.plots import PALETTE, Chart, Series, render as svg
from cxlbench.results.store import ResultsError, Run, atomic_write, find_runs, load_run
from cxlbench.units import format_number as fmt_num


@dataclass
class FleetReport:
    store: str
    record: FleetRecord | None
    nodes: list[NodeOutcome]
    figures: FleetFigures
    scaling: list[ScalingRow]
    compared: tuple[str, str] | None = None
    contrasts: list[Contrast] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)


def build(store: str, fleet_id: str | None = None, threshold: float = 0.10,
          compare: tuple[str, str] | None = None, compare_threshold: float = 0.05) -> FleetReport:
    runs: list[Run] = []
    left: list[str] = []
    for path in find_runs(store):
        try:
            runs.append(load_run(path))
        except ResultsError as e:
            left.append(str(e))
    return of_runs(store, runs, records.load(store, fleet_id), threshold, compare, compare_threshold, left)


def of_runs(store: str, runs: list[Run], record: FleetRecord | None, threshold: float = 0.10,
            compare: tuple[str, str] | None = None, compare_threshold: float = 0.05,
            left: list[str] | None = None) -> FleetReport:
    """The report over runs already read (a published site reads its stores once)."""
    fig = gather([r for r in runs if "training_scaling" not in (r.meta.get("families") or {})], threshold)
    rep = FleetReport(store, record, outcomes(record, runs), fig, scaling_table(runs), left_out=list(left or []))
    if compare:
        try:
            rep.contrasts = contrast(fig, compare[0], compare[1], compare_threshold)
        except KeyError as e:
            raise ResultsError(str(e.args[0])) from None
        rep.compared = compare
    return rep


def _num(v: float, digits: int = 3) -> str:
    return fmt_num(v) if v is not None and math.isfinite(v) else "—"


def text(rep: FleetReport) -> str:
    out = [f"fleet store: {rep.store}"]
    if rep.record:
        out.append(f"fleet {rep.record.fleet_id} ({rep.record.engine}, suite {rep.record.suite}, "
                   f"submitted {rep.record.submitted})")
    out += ["", "what each node did:"]
    out += text_table(["node", "configuration", "job", "outcome", "why"],
                      [[n.node, n.configuration, n.job_id, n.status, n.reason] for n in rep.nodes], set())
    f = rep.figures
    for conf, members in f.machines.items():
        out += ["", f"configuration {conf}: {len(members)} machine(s): " + ", ".join(m.name for m in members)]
    if f.cells:
        confs = list(f.machines)
        out += ["", "headline figures, configuration x tier (median over machines; spread: (max-min)/median):"]
        for column in f.columns:
            rows = []
            for tier in f.tiers:
                cells = [f.cell(c, tier, column) for c in confs]
                if any(cells):
                    rows.append([tier] + [f"{_num(c.median)} {c.unit} {spread_text(c)}" if c else "—"
                                          for c in cells])
            out += [f"  {column}"] + ["  " + line for line in text_table(["tier", *confs], rows,
                                                                             set(range(1, len(confs) + 1)))]
    if f.outliers:
        out += ["", f"outlier machines (whole interval more than {f.threshold:.0%} off their configuration's median):"]
        out += [f"  {o.configuration}/{o.machine} {o.tier} {o.column}: {_num(o.value)} {o.unit} "
                f"[{_num(o.lo)}, {_num(o.hi)}] vs median {_num(o.median)} ({o.deviation:+.1%})" for o in f.outliers]
    else:
        out += ["", "no outlier machines" + ("" if any(len(m) >= 3 for m in f.machines.values())
                                             else " (a configuration needs 3 machines to name one)")]
    if rep.compared:
        a, b = rep.compared
        out += ["", f"{b} against {a} (ratio {b}/{a} with its 90% interval):"]
        out += text_table(["tier", "figure", a, b, "change", "interval", "verdict", "over"],
                          [[c.tier, c.column, _num(c.a), _num(c.b), fmt_change(c.ratio), fmt_ci_change(c.lo, c.hi),
                            c.verdict, c.units] for c in rep.contrasts], {2, 3, 4})
    if rep.scaling:
        out += ["", "training across ranks (FSDP2; efficiency = total(W) / (W x total(1))):"]
        out += text_table(["configuration", "model", "world size", "nodes", "tokens/s total", "per rank",
                           "efficiency"],
                          [[r.configuration, r.model, str(r.world_size), str(r.nodes), _num(r.total),
                            _num(r.per_rank), f"{r.efficiency:.0%}" if math.isfinite(r.efficiency) else "—"]
                           for r in rep.scaling], {2, 3, 4, 5, 6})
    if rep.left_out:
        out += ["", "left out: " + "; ".join(rep.left_out)]
    return "\n".join(out)


def _charts(rep: FleetReport) -> list[str]:
    """One bar chart per headline: every machine's figure, coloured by configuration."""
    f, charts = rep.figures, []
    colours = {c: PALETTE[i % len(PALETTE)] for i, c in enumerate(f.machines)}
    for column in f.columns:
        for tier in f.tiers:
            cells = [c for c in f.cells if c.tier == tier and c.column == column]
            if not cells:
                continue
            names = [f"{c.configuration}/{m}" for c in cells for m in c.machines]
            values = [v for c in cells for v in c.machines.values()]
            chart = Chart(f"{tier}: {column}", cells[0].unit, "", [Series(
                "machines", names, values, color="|".join(colours[c.configuration] for c in cells
                                                            for _ in c.machines))], bars=True)
            charts.append(svg(chart, f"fleet-{tier}-{column}"))
    return charts


def html(rep: FleetReport, nav: list[tuple[str, str]] | None = None) -> str:
    """`nav`: the bar of links a published site puts above each page."""
    f = rep.figures
    return environment().get_template("fleet.html").render(
        version=__version__, title=f"fleet · {rep.store}", css=(TEMPLATES / "style.css").read_text(encoding="utf-8"),
        site_nav=nav or [],
        rep=rep, confs=list(f.machines), tiers=f.tiers, columns=f.columns, cell=f.cell, spread_text=spread_text,
        charts=_charts(rep), num=_num, change=fmt_change, ci=fmt_ci_change,
        isfinite=math.isfinite)


def render(rep: FleetReport, out: str | Path | None = None) -> Path:
    stamp = rep.record.fleet_id if rep.record else "store"
    path = Path(out) if out else Path("reports") / f"fleet-{stamp}.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, html(rep).encode("utf-8"))
    return path


def spread_text(c) -> str:
    """A cell's spread over its machines, (highest - lowest) / median: a range, not a
    ± half-width, and none for one machine (whose "±0.0%" read as a measured spread)."""
    n = len(c.machines)
    return f"(spread {c.spread:.1%}, {n} machines)" if n > 1 else "(1 machine)"
