"""The placement advice as one self-contained HTML page (`cxlbench advise -o FILE`).

    render_advice(advice, out) -> Path
    render_whatif(whatif, out) -> Path     a server's tiers as shares of all-HBM (--host, --gpus)

What it shows is report.placements' section: the chart of every placement's
throughput relative to the best, the step's breakdown, the inputs with their
provenance, the rule that names a placement.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from cxlbench.version import __version__
from cxlbench.analysis.advisor import Advice
from cxlbench.analysis.whatif import LEFT_OUT, TERMS, WhatIf, held_text, term_label
from cxlbench.report import _css, build, environment
from cxlbench.report.placements import _bare, advice_section, tier_key
from cxlbench.results.store import atomic_write
from cxlbench.units import format_number, gib, tier_order


def advice_context(a: Advice) -> dict[str, Any]:
    tiers = sorted({tier_key(p.tier) for p in a.placements}, key=tier_order)
    return {"css": _css(), "version": __version__,
            "title": f"Where the optimizer state should live: {a.model} on {a.gpu_name}",
            "advice": advice_section(a, build.ChartMaker("a", tiers))}


def render_advice(a: Advice, out: str | Path) -> Path:
    return _write(environment().get_template("advice.html").render(**advice_context(a)), out)


def _share_chart(w: WhatIf, maker: build.ChartMaker):
    """The seed chart's form: each tier's tokens/s as a share of all-HBM's, a bar per
    tier and composition, coloured by tier."""
    bars = [("all-HBM", "hbm0", 1.0, w.hbm.tokens_per_s, "")]
    for r in w.rows[1:]:
        bars += [(f"{r.tier}, without DPU", r.tier, r.share, r.tokens_per_s, ""),
                 (f"{r.tier}, with DPU", r.tier, r.dpu_share, r.dpu_tokens_per_s, "")]
    return build.relative_bars(maker, f"{w.model} on {w.cluster.gpus} × {w.gpu.label.split(' (')[0]}: "
                                      "tokens/s as a share of all-HBM (modelled)",
                               "tokens/s relative to all-HBM (1 = the state in HBM)", bars)


def _accumulation_chart(w: WhatIf, maker: build.ChartMaker):
    """Each tier's share of all-HBM against batches per optimizer step (gradient
    accumulation; all-HBM accumulating as many): the batch's lever beside the tier's.
    Solid without DPU, dashed with it; the target as a dotted line, the count the page
    was priced at as a mark."""
    from cxlbench.report.plots import Chart, Series
    series = []
    for r in w.rows[1:]:
        counts = [k for k, _, _ in r.curve]
        series += [Series(f"{r.tier}, without DPU", counts, [p * 100 for _, p, _ in r.curve],
                          color=maker.color(f"{r.tier}|")),
                   Series(f"{r.tier}, with DPU", counts, [d * 100 for _, _, d in r.curve],
                          color=maker.color(f"{r.tier}|"), style="--", marker="s")]
    counts = [k for k, _, _ in w.rows[1].curve]
    series.append(Series(f"target {w.target * 100:g}%", [counts[0], counts[-1]], [w.target * 100] * 2,
                         color="#888888", style=":", marker=""))
    return Chart(f"{w.model} on {w.cluster.gpus} × {w.gpu.label.split(' (')[0]}: share of all-HBM against "
                 "batches per optimizer step (modelled)", "batches per GPU per optimizer step (gradient accumulation)",
                 "% of all-HBM tokens/s", series, logx=True, y_from_zero=True,
                 marks=[(w.micro_steps, f"priced at {w.micro_steps}")])


def _published_rows() -> dict[str, Any]:
    from cxlbench.analysis.published import check_all, tally
    results, _ = check_all()
    rows = [{"case": r.case.title, "label": p.label, "model": f"{p.model:.3g}", "paper": f"{p.paper:.3g}",
             "ratio": p.shown if p.kind == "relative" else f"{p.shown} (model − paper)", "holds": p.holds, "why": p.misses_on,
             "tolerance": f"±{p.tolerance * 100:g}%" if p.kind == "relative" else f"±{p.tolerance:g}"}
            for r in results for p in r.points]
    return {"rows": rows, "summary": f"{tally(results)}."}


def whatif_context(w: WhatIf) -> dict[str, Any]:
    maker = build.ChartMaker("w", ["hbm0", *(r.tier for r in w.rows[1:])])
    rows = [{"label": r.label, "tier": r.tier, "need": gib(r.device_bytes),
             "fits": r.device_bytes <= w.capacity_bytes, "tokens": format_number(r.tokens_per_s),
             "share": f"{r.share * 100:.3g}%", "dpu_tokens": format_number(r.dpu_tokens_per_s),
             "dpu_share": f"{r.dpu_share * 100:.3g}%", "terms": [format_number(r.plain.terms.get(t)) for t in TERMS],
             "needs": [str(n) for n in r.needs]} for r in w.rows]
    hbm_note = "" if w.hbm.device_bytes <= w.capacity_bytes else (
        f"All-HBM does not fit {gib(w.capacity_bytes)} a GPU (it needs "
        f"{gib(w.hbm.device_bytes)}): it is the reference each share is taken of, as if it did.")
    inputs = [{"kind": f.source.kind, "name": f.name, "value": f.shown, "detail": f.detail,
               "source": f.source.text, "where": _bare(f.source.url)} for f in w.figures()]
    return {"css": _css(), "version": __version__, "w": {"headline": w.headline, "gpus": w.cluster.gpus},
            "title": f"{w.model} on {w.cluster.gpus} GPUs: what each tier leaves of all-HBM",
            "svg": maker.svg(_share_chart(w, maker), wide=True),
            "accumulation_svg": maker.svg(_accumulation_chart(w, maker), wide=True), "rows": rows, "terms": [term_label(t) for t in TERMS],
            "combine": w.combine, "hbm_note": hbm_note, "held": held_text(w), "target": f"{w.target * 100:g}%",
            "inputs": inputs,
            "left_out": LEFT_OUT, "published": _published_rows()}


def render_whatif(w: WhatIf, out: str | Path) -> Path:
    return _write(environment().get_template("whatif.html").render(**whatif_context(w)), out)


def _write(html: str, out: str | Path) -> Path:
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, html.encode("utf-8"))
    return path
